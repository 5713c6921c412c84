//! `add` and `import`: parse, then hand to the daemon or write to the store.

use std::io::{BufRead, IsTerminal, Write as _};
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};

use super::{call, unexpected, CliError, Context};
use crate::endpoint::{EndpointId, ProxyUrl, Scheme};
use crate::pool::engine::initial_state;
use crate::protocol::{AddMessage, ImportMessage, Payload, Request};
use crate::store::{NewEndpoint, Numbered, OnExisting, StoreError};
use crate::tags::Tags;

pub(super) fn parse_urls<'a>(
    lines: impl Iterator<Item = (usize, &'a str)>,
    pool: &str,
    label: &Option<String>,
    tags: &Tags,
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
            tags: tags.clone(),
        });
    }
    Ok(out)
}

/// `add`: the URLs checked, then added through the daemon or to the store; prints the
/// new ids.
pub(super) async fn add(
    ctx: &Context,
    urls: &[String],
    pool: &str,
    label: &Option<String>,
    tags: &Tags,
) -> Result<(), CliError> {
    ctx.check_pool(pool)?;
    let eps = parse_urls(
        urls.iter().map(|u| (0, u.as_str())),
        pool,
        label,
        tags,
        ctx,
        false,
    )?;
    for id in add_endpoints(ctx, eps).await? {
        outln!("{id}");
    }
    Ok(())
}

async fn add_endpoints(ctx: &Context, eps: Vec<NewEndpoint>) -> Result<Vec<EndpointId>, CliError> {
    if let Some(mut c) = ctx.daemon().await? {
        let pool = eps.first().map(|e| e.pool.clone());
        let label = eps.first().and_then(|e| e.label.clone());
        let tags = eps
            .first()
            .map(|e| e.tags.clone())
            .filter(|t| !t.is_empty());
        let urls: Vec<String> = eps.iter().map(|e| e.url.to_secret_string()).collect();
        let add = AddMessage {
            urls,
            pool,
            label,
            source: None,
            tags,
        };
        let req = Request::Add(add);
        let line_len = serde_json::to_string(&req).map_or(usize::MAX, |l| l.len());
        let body = if line_len < crate::limits::MAX_LINE - 1024 {
            call(&mut c, &req).await?
        } else if c.is_tcp() {
            // The daemon reads a spill file only from its own host.
            return Err(CliError::usage(format!(
                "{} URLs do not fit in one request to {} ({} bytes, at most {}); nothing was added: add fewer at a time, or import on the daemon's host",
                eps.len(),
                c.address(),
                line_len,
                crate::limits::MAX_LINE - 1024
            )));
        } else {
            let Request::Add(AddMessage {
                urls,
                pool,
                label,
                tags,
                ..
            }) = req
            else {
                unreachable!("built as an add above")
            };
            // Too big for one request line: hand the daemon a private file instead,
            // so a large import stays one all-or-nothing batch.
            let mut file = spill(&ctx.db, &urls)?;
            let req = Request::Import(ImportMessage {
                path: file.finish()?,
                pool,
                label,
                skip_existing: None,
                tags,
            });
            let r = call(&mut c, &req).await;
            drop(file);
            r?
        };
        return match body {
            Payload::Added { ids, .. } => Ok(ids),
            _ => Err(unexpected("add")),
        };
    }
    Ok(ctx.store()?.add_endpoints(&eps)?)
}

/// A new file only this user can read, next to the database, for URLs with their
/// passwords: how a large batch reaches the daemon. Removed when dropped (the daemon
/// deletes it as soon as it has opened it).
struct Spill {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
}

impl Spill {
    fn create(db: &std::path::Path) -> Result<Spill, CliError> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut name = db.as_os_str().to_owned();
        name.push(format!(
            ".import-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let path = PathBuf::from(name);
        let path = std::path::absolute(&path).unwrap_or(path);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
        Ok(Spill {
            path,
            out: std::io::BufWriter::with_capacity(1 << 16, f),
        })
    }

    fn line(&mut self, url: &str) -> Result<(), CliError> {
        writeln!(self.out, "{url}").map_err(|e| self.failed(e))
    }

    /// Flush; the file is complete.
    fn finish(&mut self) -> Result<String, CliError> {
        self.out.flush().map_err(|e| self.failed(e))?;
        Ok(self.path.display().to_string())
    }

    fn failed(&self, e: std::io::Error) -> CliError {
        CliError::failed(format!("cannot write {}: {e}", self.path.display()))
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Write URLs (with their passwords) to a spill file.
fn spill(db: &std::path::Path, urls: &[String]) -> Result<Spill, CliError> {
    let mut s = Spill::create(db)?;
    for u in urls {
        s.line(u)?;
    }
    s.finish()?;
    Ok(s)
}

/// What `import` was asked to do besides reading the file.
pub(super) struct ImportOptions {
    pub(super) pool: String,
    pub(super) label: Option<String>,
    /// The scheme of provider lines without one (`host:port:user:pass`, ...).
    pub(super) scheme: Scheme,
    pub(super) on_existing: OnExisting,
    /// Tags of every endpoint imported.
    pub(super) tags: Tags,
}

impl ImportOptions {
    fn endpoint(&self, ctx: &Context, url: ProxyUrl) -> NewEndpoint {
        NewEndpoint {
            url,
            pool: self.pool.clone(),
            label: self.label.clone(),
            source: Some("cli".into()),
            state: initial_state(ctx.config.pool(&self.pool)),
            tags: self.tags.clone(),
        }
    }

    /// What the command says when it is done.
    fn done(&self, added: usize, skipped: u64) {
        match self.on_existing {
            OnExisting::Skip => eprintln!(
                "added {added}, skipped {skipped} (already in pool {:?})",
                self.pool
            ),
            OnExisting::Refuse => {
                eprintln!("imported {added} endpoints into pool {:?}", self.pool)
            }
        }
    }
}

/// A bad line: its number, what is wrong (never its password), and that nothing changed.
fn line_error(n: usize, e: impl std::fmt::Display) -> CliError {
    CliError::usage(format!("line {n}: {e}; nothing was imported"))
}

/// A refusal of the store (an endpoint already there, a line listed twice), which names
/// its line already: nothing changed either.
fn refused(e: StoreError) -> CliError {
    match e.is_input() {
        true => CliError::usage(format!("{e}; nothing was imported")),
        false => e.into(),
    }
}

pub(super) async fn import(
    ctx: &Context,
    file: &str,
    opts: &ImportOptions,
) -> Result<(), CliError> {
    ctx.local("import")?;
    ctx.check_pool(&opts.pool)?;
    match ctx.daemon().await? {
        None => return import_direct(ctx, file, opts),
        // Through the daemon (which holds every endpoint in memory anyway).
        Some(c) => drop(c),
    }
    // Every line is checked here first, so an error names the line and its problem; the
    // URLs stream into a spill file the daemon then reads line by line (a blank line for
    // each one without an endpoint, so its line numbers are the file's). Neither side
    // holds the list in memory.
    let reader = open_input(file)?;
    let bar = progress(file);
    let mut out = Spill::create(&ctx.db)?;
    let by_bytes = file != "-";
    let (mut n, mut bytes) = (0u64, 0u64);
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| CliError::usage(format!("{file}: {e}")))?;
        bytes += line.len() as u64 + 1;
        if i % 4096 == 0 {
            bar.set_position(if by_bytes { bytes } else { n });
        }
        let Some(url) = super::lines::parse(&line, opts.scheme) else {
            out.line("")?;
            continue;
        };
        let url = url.map_err(|e| line_error(i + 1, e))?;
        out.line(&url.to_secret_string())?;
        n += 1;
    }
    let path = out.finish()?;
    bar.set_message(format!("saving {n} endpoints"));
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let Some(mut c) = ctx.daemon().await? else {
        // The daemon stopped meanwhile: the checked lines go in directly.
        bar.finish_and_clear();
        return import_direct(ctx, &path, opts);
    };
    // A slow machine may take minutes for millions: wait for the answer (the commit)
    // rather than give up while the daemon still writes.
    c.set_timeout(super::client::DEFAULT_TIMEOUT + std::time::Duration::from_millis(n / 10));
    let req = Request::Import(ImportMessage {
        path,
        pool: Some(opts.pool.clone()),
        label: opts.label.clone(),
        skip_existing: (opts.on_existing == OnExisting::Skip).then_some(true),
        tags: (!opts.tags.is_empty()).then(|| opts.tags.clone()),
    });
    // The daemon's refusal names the line; that nothing changed is said here, as for a
    // refusal of the store.
    let body = call(&mut c, &req).await.map_err(|mut e| {
        if e.code == 2 && !e.message.contains("nothing was") {
            e.message.push_str("; nothing was imported");
        }
        e
    });
    drop(out);
    bar.finish_and_clear();
    match body? {
        Payload::Added { ids, skipped } => {
            opts.done(ids.len(), skipped.unwrap_or(0));
            Ok(())
        }
        _ => Err(unexpected("import")),
    }
}

fn open_input(file: &str) -> Result<Box<dyn BufRead>, CliError> {
    Ok(if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(file)
            .map_err(|e| CliError::usage(format!("cannot read {file}: {e}")))?;
        Box::new(std::io::BufReader::with_capacity(1 << 16, f))
    })
}

/// Progress of the check, on a terminal only: a bar over the file's bytes, or a line
/// counter for stdin.
fn progress(file: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let size = (file != "-")
        .then(|| std::fs::metadata(file).ok())
        .flatten()
        .map(|m| m.len());
    let (b, template) = match size {
        Some(len) => (
            ProgressBar::new(len),
            "{spinner} {msg} [{bar:30}] {percent}%",
        ),
        None => (ProgressBar::new_spinner(), "{spinner} {msg} {pos} lines"),
    };
    b.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message("checking");
    b
}

/// Without a daemon: parse and insert line by line in one transaction, so a million lines
/// take neither a copy of the file nor a list of parsed endpoints in memory. A bad line
/// rolls everything back.
fn import_direct(ctx: &Context, file: &str, opts: &ImportOptions) -> Result<(), CliError> {
    let reader = open_input(file)?;
    let mut store = ctx.store()?;
    let eps = reader.lines().enumerate().filter_map(|(i, line)| {
        let line = match line {
            Ok(l) => l,
            Err(e) => return Some(Err(CliError::usage(format!("{file}: {e}")))),
        };
        Some(
            super::lines::parse(&line, opts.scheme)?
                .map(|url| Numbered {
                    line: i + 1,
                    endpoint: opts.endpoint(ctx, url),
                })
                .map_err(|e| line_error(i + 1, e)),
        )
    });
    let mut n = 0usize;
    let skipped = store
        .add_endpoints_from(
            eps.map(|r| r.map_err(Refusal::Cli)),
            opts.on_existing,
            |_| n += 1,
        )
        .map_err(|e| match e {
            Refusal::Cli(c) => c,
            Refusal::Store(s) => refused(s),
        })?;
    opts.done(n, skipped);
    Ok(())
}

/// The two ways a direct import stops: a bad line (already the CLI's error) or the store.
enum Refusal {
    Cli(CliError),
    Store(StoreError),
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        Refusal::Store(e)
    }
}
