//! `import`: an operator adds the endpoints of a file the CLI wrote (one URL a line).

use super::Op;
use crate::config::DEFAULT_POOL;
use crate::endpoint::ProxyUrl;
use crate::pool::engine::initial_state;
use crate::protocol::{ImportMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;
use crate::store::{NewEndpoint, Numbered, OnExisting};

/// Largest import file accepted.
const MAX_IMPORT: u64 = 256 << 20;

impl Op for ImportMessage {
    /// It reads a file of the daemon's: only for local clients.
    const UNIX_ONLY: bool = true;

    /// Streaming: the file is parsed line by line on the store thread inside the one
    /// transaction, so a million lines are never held in memory, and a bad line anywhere
    /// rolls everything back.
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let ImportMessage {
            path,
            pool,
            label,
            skip_existing,
            tags,
        } = self;
        let tags = tags.unwrap_or_default();
        let on_existing = match skip_existing {
            Some(true) => OnExisting::Skip,
            _ => OnExisting::Refuse,
        };
        let file = tokio::task::spawn_blocking(move || open_import(&path))
            .await
            .map_err(|e| OpError::internal(format!("import: {e}")))??;
        let pool = pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
        let state = initial_state(cx.live().config.pool(&pool));
        let lines = std::io::BufRead::lines(std::io::BufReader::with_capacity(1 << 16, file));
        let eps = lines.enumerate().filter_map(move |(i, line)| {
            let n = i + 1;
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    return Some(Err(OpError::bad(format!(
                        "import file line {n}: {e}; nothing was added"
                    ))))
                }
            };
            // Text read from a file is not repeated back: it could be anything.
            Some(
                ProxyUrl::parse_line(&line)?
                    .map(|url| Numbered {
                        line: n,
                        endpoint: NewEndpoint {
                            url,
                            pool: pool.clone(),
                            label: label.clone(),
                            source: Some("cli".into()),
                            state,
                            tags: tags.clone(),
                        },
                    })
                    .map_err(|_| {
                        OpError::bad(format!("line {n} is not a proxy URL; nothing was added"))
                    }),
            )
        });
        let (ids, skipped) = cx.engine.add_from(eps, on_existing).await?;
        Ok(Payload::Added {
            ids,
            skipped: (on_existing == OnExisting::Skip).then_some(skipped),
        })
    }
}

/// Open a file the CLI wrote for `import`: a regular file of ours that nobody else can
/// read, of bounded size. The checks are made on the opened file itself (no symlink
/// followed), and a spill file is deleted at once: it holds passwords, and the open file
/// stays readable. Reading stops at the size checked.
fn open_import(path: &str) -> Result<std::io::Take<std::fs::File>, OpError> {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let bad = |m: &str| OpError::bad(format!("import file {path}: {m}"));
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused below).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| bad(&e.to_string()))?;
    let meta = file.metadata().map_err(|e| bad(&e.to_string()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(bad("must be a regular file of this user with mode 0600"));
    }
    if meta.len() > MAX_IMPORT {
        return Err(bad("too large"));
    }
    if path.contains(".import-") {
        let _ = std::fs::remove_file(path);
    }
    Ok(file.take(meta.len()))
}
