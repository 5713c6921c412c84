//! `add` and `import`: parse, then hand to the daemon or write to the store.

use std::io::{BufRead, IsTerminal, Write as _};
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};

use super::{call, unexpected, CliError, Context};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::pool::engine::initial_state;
use crate::protocol::{Body, Request};
use crate::store::NewEndpoint;

pub(super) fn parse_urls<'a>(
    lines: impl Iterator<Item = (usize, &'a str)>,
    pool: &str,
    label: &Option<String>,
    ctx: &Context,
    numbered: bool,
) -> Result<Vec<NewEndpoint>, CliError> {
    let state = initial_state(ctx.config.pool(pool));
    let mut out = Vec::new();
    for (n, line) in lines {
        let url = ProxyUrl::parse(line).map_err(|e| {
            if numbered {
                CliError::usage(format!("line {n}: {e}; nothing was imported"))
            } else {
                CliError::usage(format!("{e}; nothing was added"))
            }
        })?;
        out.push(NewEndpoint {
            url,
            pool: pool.to_string(),
            label: label.clone(),
            source: Some("cli".into()),
            state,
        });
    }
    Ok(out)
}

pub(super) async fn add(
    ctx: &Context,
    eps: Vec<NewEndpoint>,
    _raw: &[String],
) -> Result<Vec<EndpointId>, CliError> {
    if let Some(mut c) = ctx.daemon().await? {
        let pool = eps.first().map(|e| e.pool.clone());
        let label = eps.first().and_then(|e| e.label.clone());
        let urls: Vec<String> = eps.iter().map(|e| e.url.to_secret_string()).collect();
        let req = Request::Add {
            urls,
            pool,
            label,
            source: None,
        };
        let line_len = serde_json::to_string(&req).map_or(usize::MAX, |l| l.len());
        let body = if line_len < crate::limits::MAX_LINE - 1024 {
            call(&mut c, &req).await?
        } else {
            let Request::Add {
                urls, pool, label, ..
            } = req
            else {
                unreachable!("built as an add above")
            };
            // Too big for one request line: hand the daemon a private file instead,
            // so a large import stays one all-or-nothing batch.
            let path = spill(&ctx.db, &urls)?;
            let req = Request::Import {
                path: path.display().to_string(),
                pool,
                label,
            };
            let r = call(&mut c, &req).await;
            let _ = std::fs::remove_file(&path);
            r?
        };
        return match body {
            Body::Added { ids } => Ok(ids),
            _ => Err(unexpected("add")),
        };
    }
    Ok(ctx.store()?.add_endpoints(&eps)?)
}

/// Write URLs (with their passwords) to a new file only this user can read.
pub(super) fn spill(db: &std::path::Path, urls: &[String]) -> Result<PathBuf, CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = db.as_os_str().to_owned();
    name.push(format!(
        ".import-{}-{:x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let path = PathBuf::from(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
    let mut text = urls.join("\n");
    text.push('\n');
    if let Err(e) = f.write_all(text.as_bytes()) {
        let _ = std::fs::remove_file(&path);
        return Err(CliError::failed(format!(
            "cannot write {}: {e}",
            path.display()
        )));
    }
    Ok(std::path::absolute(&path).unwrap_or(path))
}

pub(super) async fn import(
    ctx: &Context,
    file: &str,
    pool: &str,
    label: &Option<String>,
) -> Result<(), CliError> {
    ctx.check_pool(pool)?;
    match ctx.daemon().await? {
        None => return import_direct(ctx, file, pool, label),
        // Through the daemon (which holds every endpoint in memory anyway).
        Some(c) => drop(c),
    }
    let text = if file == "-" {
        let mut buf = String::new();
        for line in std::io::stdin().lock().lines() {
            buf.push_str(&line.map_err(|e| CliError::usage(format!("stdin: {e}")))?);
            buf.push('\n');
        }
        buf
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| CliError::usage(format!("cannot read {file}: {e}")))?
    };
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let bar = if std::io::stderr().is_terminal() {
        let b = ProgressBar::new(lines.len() as u64);
        b.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_message("checking");
        b
    } else {
        ProgressBar::hidden()
    };
    let mut eps = Vec::with_capacity(lines.len());
    for chunk in lines.chunks(1000) {
        eps.extend(parse_urls(chunk.iter().copied(), pool, label, ctx, true)?);
        bar.inc(chunk.len() as u64);
    }
    bar.set_message("saving");
    let ids = add(ctx, eps, &[]).await?;
    bar.finish_and_clear();
    eprintln!("imported {} endpoints into pool {pool:?}", ids.len());
    Ok(())
}

/// Without a daemon: parse and insert line by line in one transaction, so a million lines
/// take neither a copy of the file nor a list of parsed endpoints in memory. A bad line
/// rolls everything back.
fn import_direct(
    ctx: &Context,
    file: &str,
    pool: &str,
    label: &Option<String>,
) -> Result<(), CliError> {
    let reader: Box<dyn BufRead> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file)
            .map_err(|e| CliError::usage(format!("cannot read {file}: {e}")))?;
        Box::new(std::io::BufReader::with_capacity(1 << 16, f))
    };
    let state = initial_state(ctx.config.pool(pool));
    let mut store = ctx.store()?;
    let eps = reader.lines().enumerate().filter_map(|(i, line)| {
        let line = match line {
            Ok(l) => l,
            Err(e) => return Some(Err(CliError::usage(format!("{file}: {e}")))),
        };
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            return None;
        }
        Some(
            ProxyUrl::parse(l)
                .map(|url| NewEndpoint {
                    url,
                    pool: pool.to_string(),
                    label: label.clone(),
                    source: Some("cli".into()),
                    state,
                })
                .map_err(|e| CliError::usage(format!("line {}: {e}; nothing was imported", i + 1))),
        )
    });
    let mut n = 0usize;
    store.add_endpoints_from(eps, |_| n += 1)?;
    eprintln!("imported {n} endpoints into pool {pool:?}");
    Ok(())
}
