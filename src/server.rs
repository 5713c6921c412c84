//! The lease socket: accepts connections and answers JSON-lines requests in order.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, Framed};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use std::collections::HashMap;

use crate::config::{Config, DEFAULT_POOL};
use crate::daemon;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Failure, Input, Phase, Reason, State};
use crate::pool::engine::{initial_state, Engine, EngineError};
use crate::pool::{Outcome, PoolError};
use crate::probe::Prober;
use crate::protocol::{
    parse_line, Body, EndpointRef, ErrorCode, ReportOutcome, Request, Response, MAX_LINE,
};
use crate::store::{NewEndpoint, ResolveError};

/// Errors setting up the socket.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Another daemon answers on the socket.
    #[error("another proxypool daemon is already serving on {0}")]
    AlreadyRunning(PathBuf),
    /// The socket path is taken by something that must not be replaced.
    #[error(transparent)]
    Socket(crate::socket_file::SocketFileError),
    /// Binding or preparing the socket failed.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// Socket path or address.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
}

/// How long requests in flight may still run once shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Default lease lifetime.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// Answers requests; shared by every connection.
pub struct Handler {
    engine: Arc<Engine>,
    config: Arc<Config>,
    token: Option<String>,
    probers: HashMap<String, Prober>,
}

impl Handler {
    /// A handler over a running engine.
    pub fn new(engine: Arc<Engine>, config: Arc<Config>, token: Option<String>) -> Self {
        Handler {
            engine,
            config,
            token,
            probers: HashMap::new(),
        }
    }

    /// Probers per pool, for the `probe` op.
    pub fn with_probers(mut self, probers: HashMap<String, Prober>) -> Self {
        self.probers = probers;
        self
    }

    /// Answer one request line.
    pub async fn handle_line(&self, line: &str, tcp: bool) -> Response {
        let (id, req, token) = match parse_line(line) {
            Ok(v) => v,
            Err(resp) => return *resp,
        };
        if tcp {
            let ok = match (&self.token, &token) {
                (Some(want), Some(got)) => constant_time_eq(want.as_bytes(), got.as_bytes()),
                _ => false,
            };
            if !ok {
                return Response::err(id, ErrorCode::BadRequest, "missing or wrong token");
            }
        }
        if tcp && matches!(req, Request::Import { .. }) {
            // It reads a file of the daemon's: only for local clients.
            return Response::err(
                id,
                ErrorCode::BadRequest,
                "import is only accepted on the Unix socket",
            );
        }
        match self.dispatch(req).await {
            Ok(body) => Response::ok(id, body),
            Err(e) => {
                let mut r = Response::err(id, e.code, e.message);
                if e.code == ErrorCode::PoolExhausted {
                    r.retry_after_ms = Some(e.retry_after_ms);
                    if let Some(err) = r.error.as_mut() {
                        err.retry_after_ms = Some(e.retry_after_ms);
                    }
                }
                r
            }
        }
    }

    /// The one place each verb is handled.
    async fn dispatch(&self, req: Request) -> Result<Body, OpError> {
        match req {
            Request::Ping => Ok(Body::Ping {
                version: env!("CARGO_PKG_VERSION"),
            }),
            Request::Lease {
                pool,
                ttl,
                wait,
                session,
            } => {
                let pool = pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
                let ttl = ttl.map(|d| d.0).unwrap_or(DEFAULT_TTL);
                if ttl.is_zero() {
                    return Err(OpError::bad("ttl must be greater than 0"));
                }
                let wait = wait.map(|d| d.0).unwrap_or(Duration::ZERO);
                let g = self
                    .engine
                    .lease(&pool, ttl, session.as_deref(), wait)
                    .await?;
                Ok(Body::Lease(g))
            }
            Request::Report {
                lease,
                outcome,
                reason,
                phase,
                status,
                retry_after,
                detail,
            } => {
                let outcome = match outcome {
                    ReportOutcome::Success => Outcome::Success,
                    ReportOutcome::Failure => {
                        let reason: Reason = reason
                            .ok_or_else(|| OpError::from(PoolError::MissingReason))?
                            .parse()
                            .map_err(|e: crate::health::UnknownName| OpError::bad(e.to_string()))?;
                        // An unknown phase is stored as null rather than refused (SPEC §7).
                        let phase = phase.and_then(|p| p.parse::<Phase>().ok());
                        Outcome::Failure(Failure {
                            reason: Some(reason),
                            phase,
                            status,
                            retry_after: retry_after.map(|d| d.0),
                            detail: detail.map(|d| truncate(&d, 1000)),
                        })
                    }
                };
                let state = self.engine.report(&lease, outcome).await?;
                Ok(Body::State {
                    endpoint: None,
                    state,
                })
            }
            Request::Release { lease } => {
                self.engine.release(&lease).await?;
                Ok(Body::Empty {})
            }
            Request::Status { pool } => Ok(Body::Status {
                pools: self.engine.status(pool.as_deref())?,
            }),
            Request::Endpoints { pool, state } => {
                let state = state
                    .map(|s| s.parse::<State>())
                    .transpose()
                    .map_err(|e| OpError::bad(e.to_string()))?;
                if let Some(p) = &pool {
                    if self.engine.pools().pool_config(p).is_none() {
                        return Err(PoolError::UnknownPool(p.clone()).into());
                    }
                }
                let rows = self
                    .engine
                    .writer()
                    .call(move |s| s.list(pool.as_deref(), state))
                    .await?
                    .map_err(EngineError::from)?;
                Ok(Body::Endpoints {
                    endpoints: rows.iter().map(|r| r.view(false)).collect(),
                })
            }
            Request::Disable { endpoint, reason } => {
                let id = self.resolve(&endpoint).await?;
                let (_, state) = self
                    .engine
                    .input(id, Input::Disable { detail: reason }, "", None)
                    .await?;
                Ok(Body::State {
                    endpoint: Some(id),
                    state,
                })
            }
            Request::Enable { endpoint, now } => {
                let id = self.resolve(&endpoint).await?;
                let (_, state) = self
                    .engine
                    .input(
                        id,
                        Input::Enable {
                            now: now.unwrap_or(false),
                        },
                        "",
                        Some("enabled by operator".into()),
                    )
                    .await?;
                Ok(Body::State {
                    endpoint: Some(id),
                    state,
                })
            }
            Request::Add {
                urls,
                pool,
                label,
                source,
            } => {
                self.add_urls(urls.iter().map(String::as_str), pool, label, source, true)
                    .await
            }
            Request::Import { path, pool, label } => {
                let text = read_spill(&path).await?;
                let urls = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'));
                self.add_urls(urls, pool, label, None, false).await
            }
            Request::Probe {
                endpoints,
                pool,
                all,
                concurrency,
            } => {
                if let Some(p) = &pool {
                    if self.engine.pools().pool_config(p).is_none() {
                        return Err(PoolError::UnknownPool(p.clone()).into());
                    }
                }
                let ids = if endpoints.is_empty() {
                    if !all && pool.is_none() {
                        return Err(OpError::bad("name endpoints, or set all or pool"));
                    }
                    self.engine.pools().ids(pool.as_deref())
                } else {
                    let mut ids = Vec::new();
                    for e in &endpoints {
                        ids.push(self.resolve(e).await?);
                    }
                    ids
                };
                let concurrency = concurrency.unwrap_or(64).max(1);
                let results =
                    daemon::probe_many(&self.engine, &self.probers, ids, concurrency, |_| {})
                        .await?;
                Ok(Body::Probes { results })
            }
            Request::Remove { endpoints } => {
                let mut ids = Vec::new();
                for e in &endpoints {
                    ids.push(self.resolve(e).await?);
                }
                self.engine.remove(ids).await?;
                Ok(Body::Empty {})
            }
        }
    }

    /// Add endpoints, all or nothing.
    async fn add_urls<'a>(
        &self,
        urls: impl Iterator<Item = &'a str>,
        pool: Option<String>,
        label: Option<String>,
        source: Option<String>,
        echo: bool,
    ) -> Result<Body, OpError> {
        let pool = pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
        let cfg = self.config.pool(&pool);
        let mut eps = Vec::new();
        for (i, u) in urls.enumerate() {
            let url = ProxyUrl::parse(u).map_err(|e| {
                // Text read from a file is not repeated back: it could be anything.
                if echo {
                    OpError::bad(format!("entry {}: {e}; nothing was added", i + 1))
                } else {
                    OpError::bad(format!(
                        "entry {} is not a proxy URL; nothing was added",
                        i + 1
                    ))
                }
            })?;
            eps.push(NewEndpoint {
                url,
                pool: pool.clone(),
                label: label.clone(),
                source: Some(source.clone().unwrap_or_else(|| "cli".into())),
                state: initial_state(cfg),
            });
        }
        let ids = self.engine.add(eps).await.map_err(|e| match e {
            EngineError::Store(m) => OpError::bad(m),
            other => other.into(),
        })?;
        Ok(Body::Added { ids })
    }

    async fn resolve(&self, r: &EndpointRef) -> Result<EndpointId, OpError> {
        let arg = r.as_arg();
        self.engine
            .writer()
            .call(move |s| s.resolve(&arg).map(|row| row.id))
            .await?
            .map_err(|e: ResolveError| OpError::bad(e.to_string()))
    }
}

/// Largest import file accepted.
const MAX_IMPORT: u64 = 256 << 20;

/// Read (and delete) a file the CLI wrote for `import`: a regular file of ours that
/// nobody else can read, of bounded size.
async fn read_spill(path: &str) -> Result<String, OpError> {
    use std::os::unix::fs::MetadataExt;
    let bad = |m: &str| OpError::bad(format!("import file {path}: {m}"));
    let meta = tokio::fs::symlink_metadata(path)
        .await
        .map_err(|e| bad(&e.to_string()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(bad("must be a regular file of this user with mode 0600"));
    }
    if meta.len() > MAX_IMPORT {
        return Err(bad("too large"));
    }
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| bad(&e.to_string()))?;
    if path.contains(".import-") {
        // It holds passwords: gone as soon as it is read.
        let _ = tokio::fs::remove_file(path).await;
    }
    Ok(text)
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

struct OpError {
    code: ErrorCode,
    message: String,
    retry_after_ms: Option<u64>,
}

impl OpError {
    fn bad(m: impl Into<String>) -> Self {
        OpError {
            code: ErrorCode::BadRequest,
            message: m.into(),
            retry_after_ms: None,
        }
    }
}

impl From<PoolError> for OpError {
    fn from(e: PoolError) -> Self {
        let code = match &e {
            PoolError::UnknownPool(_) => ErrorCode::UnknownPool,
            PoolError::Exhausted { .. } => ErrorCode::PoolExhausted,
            PoolError::UnknownLease(_) => ErrorCode::UnknownLease,
            PoolError::LeaseExpired(_) => ErrorCode::LeaseExpired,
            PoolError::UnknownEndpoint(_) | PoolError::MissingReason | PoolError::InvalidTtl(_) => {
                ErrorCode::BadRequest
            }
        };
        let retry_after_ms = match &e {
            PoolError::Exhausted { retry_after, .. } => retry_after.map(|d| d.as_millis() as u64),
            _ => None,
        };
        OpError {
            code,
            message: e.to_string(),
            retry_after_ms,
        }
    }
}

impl From<EngineError> for OpError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Pool(p) => p.into(),
            EngineError::Store(m) => OpError {
                code: ErrorCode::Internal,
                message: m,
                retry_after_ms: None,
            },
        }
    }
}

/// Serve one connection until it closes or the server shuts down.
pub async fn serve_conn<S>(stream: S, handler: Arc<Handler>, tcp: bool, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Framed on bytes, not `LinesCodec`: a line that is not UTF-8 must get `bad_request`
    // and leave the connection usable, not end it.
    let codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), b"\n".to_vec(), MAX_LINE);
    let mut framed = Framed::new(stream, codec);
    loop {
        let next = tokio::select! {
            _ = shutdown.cancelled() => break,
            n = framed.next() => n,
        };
        let resp = match next {
            None => break,
            Some(Ok(bytes)) => match std::str::from_utf8(&bytes) {
                Ok(line) => {
                    let line = line.strip_suffix('\r').unwrap_or(line);
                    if line.trim().is_empty() {
                        continue;
                    }
                    // Requests in flight finish on shutdown, but one that could wait long
                    // (a `lease` with `wait`) is cut short after a grace period.
                    tokio::select! {
                        r = handler.handle_line(line, tcp) => r,
                        _ = async {
                            shutdown.cancelled().await;
                            tokio::time::sleep(SHUTDOWN_GRACE).await;
                        } => Response::err(None, ErrorCode::Internal, "the daemon is shutting down"),
                    }
                }
                Err(e) => Response::err(
                    None,
                    ErrorCode::BadRequest,
                    format!("request line is not UTF-8: {e}"),
                ),
            },
            Some(Err(AnyDelimiterCodecError::MaxChunkLengthExceeded)) => {
                let r = Response::err(
                    None,
                    ErrorCode::TooLarge,
                    format!("request line longer than {MAX_LINE} bytes; closing"),
                );
                let _ = framed.send(r.to_json()).await;
                break;
            }
            Some(Err(AnyDelimiterCodecError::Io(e))) => {
                debug!(error = %e, "connection error");
                break;
            }
        };
        if framed.send(resp.to_json()).await.is_err() {
            break;
        }
    }
}

/// Bind the Unix socket at `path` with mode 0600, replacing a stale file from a crashed
/// daemon and refusing when a live daemon answers there.
pub async fn bind_unix(path: &Path) -> Result<UnixListener, ServerError> {
    let bind_err = |source| ServerError::Bind {
        path: path.display().to_string(),
        source,
    };
    crate::socket_file::prepare(path)
        .await
        .map_err(ServerError::Socket)?;
    // Created under a restrictive umask so no other user can connect, even briefly.
    let old = unsafe_umask(0o177);
    let l = UnixListener::bind(path);
    unsafe_umask(old);
    let l = l.map_err(bind_err)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
    Ok(l)
}

fn unsafe_umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask only swaps the process file-mode mask; no memory is touched.
    unsafe { libc::umask(mask) }
}

/// Accept on a Unix socket until `shutdown`, then wait for connections to finish.
pub async fn run(listener: UnixListener, handler: Arc<Handler>, shutdown: CancellationToken) {
    accept_loop(
        || async { listener.accept().await.map(|(s, _)| s) },
        false,
        handler,
        shutdown,
    )
    .await
}

/// Accept on a TCP listener (token required) until `shutdown`.
pub async fn run_tcp(listener: TcpListener, handler: Arc<Handler>, shutdown: CancellationToken) {
    accept_loop(
        || async {
            let (s, _) = listener.accept().await?;
            let _ = s.set_nodelay(true);
            Ok(s)
        },
        true,
        handler,
        shutdown,
    )
    .await
}

/// The accept loop shared by both listeners: one task per connection, and on shutdown
/// wait for them to finish their replies.
async fn accept_loop<S, F, Fut>(
    mut accept: F,
    tcp: bool,
    handler: Arc<Handler>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<S>>,
{
    let tracker = TaskTracker::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            a = accept() => match a {
                Ok(stream) => {
                    tracker.spawn(serve_conn(stream, handler.clone(), tcp, shutdown.clone()));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    tracker.close();
    tracker.wait().await;
}
