//! One function per op of the lease socket (SPEC §7).

use std::time::Duration;

use super::error::OpError;
use super::handler::Handler;
use super::DEFAULT_TTL;
use crate::config::DEFAULT_POOL;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Failure, Input, Phase, Reason, State};
use crate::pool::destinations::normalize;
use crate::pool::engine::initial_state;
use crate::pool::scoped::WantError;
use crate::pool::{Outcome, PoolError, ReportOn, Want};
use crate::protocol::{Body, Dur, EndpointRef, ReportOutcome, RetryAfter};
use crate::store::NewEndpoint;

pub(super) fn ping() -> Body {
    Body::Ping {
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

pub(super) async fn lease(
    h: &Handler,
    pool: Option<String>,
    ttl: Option<Dur>,
    wait: Option<Dur>,
    session: Option<String>,
    want: Want,
) -> Result<Body, OpError> {
    let pool = pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
    let ttl = ttl.map(|d| d.0).unwrap_or(DEFAULT_TTL);
    if ttl.is_zero() {
        return Err(OpError::bad("ttl must be greater than 0"));
    }
    let wait = wait.map(|d| d.0).unwrap_or(Duration::ZERO);
    let g = h
        .engine
        .lease_with(&pool, ttl, session.as_deref(), wait, &want)
        .await?;
    Ok(Body::Lease(g))
}

/// A lease's `destination` and `schemes`, checked (bad input names the field).
pub(super) fn want(
    destination: Option<String>,
    schemes: Option<Vec<String>>,
) -> Result<Want, OpError> {
    Want::parse(destination.as_deref(), schemes.as_deref()).map_err(|e| match e {
        WantError::Destination(d) => OpError::bad(format!("destination: {d}")),
        e => OpError::bad(e.to_string()),
    })
}

/// What a report is about: a lease, or the endpoint bound to a sticky session.
pub(super) enum ReportTarget {
    Lease(String),
    Session { pool: String, session: String },
}

impl ReportTarget {
    pub(super) fn new(
        lease: Option<String>,
        pool: Option<String>,
        session: Option<String>,
    ) -> Result<ReportTarget, OpError> {
        match (lease, session) {
            (Some(l), None) if pool.is_none() => Ok(ReportTarget::Lease(l)),
            (None, Some(session)) => Ok(ReportTarget::Session {
                pool: pool.unwrap_or_else(|| DEFAULT_POOL.to_string()),
                session,
            }),
            (Some(_), _) => Err(OpError::bad(
                "report takes either `lease`, or `pool` and `session`, not both",
            )),
            (None, None) => Err(OpError::bad(
                "report needs `lease`, or `session` (with `pool`, default \"default\")",
            )),
        }
    }
}

/// The fields of a `report` besides its lease.
pub(super) struct Report {
    pub outcome: ReportOutcome,
    pub reason: Option<String>,
    pub phase: Option<String>,
    pub status: Option<u16>,
    pub retry_after: Option<RetryAfter>,
    pub detail: Option<String>,
    pub destination: Option<String>,
    pub duration_ms: Option<f64>,
}

pub(super) async fn report(h: &Handler, target: ReportTarget, r: Report) -> Result<Body, OpError> {
    // The protocol bounds it: finite, >= 0, at most MAX_DURATION.
    let took = r.duration_ms.map(|ms| Duration::from_secs_f64(ms / 1000.0));
    let destination = r
        .destination
        .as_deref()
        .map(normalize)
        .transpose()
        .map_err(|e| OpError::bad(format!("destination: {e}")))?;
    let on = ReportOn {
        destination,
        duration: took,
    };
    let outcome = match r.outcome {
        ReportOutcome::Success => Outcome::Success,
        ReportOutcome::Failure => {
            let reason: Reason = r
                .reason
                .ok_or_else(|| OpError::from(PoolError::MissingReason))?
                .parse()
                .map_err(|e: crate::health::UnknownName| OpError::bad(e.to_string()))?;
            // An unknown phase is stored as null rather than refused (SPEC §7).
            let phase = r.phase.and_then(|p| p.parse::<Phase>().ok());
            let detail = match &r.retry_after {
                Some(RetryAfter::Unparsable(v)) => {
                    let note = format!("retry_after {v:?} ignored: not seconds or an HTTP date");
                    Some(match r.detail {
                        Some(d) => format!("{}; {note}", truncate(&d, 900)),
                        None => note,
                    })
                }
                _ => r.detail,
            };
            Outcome::Failure(Failure {
                reason: Some(reason),
                phase,
                status: r.status,
                retry_after: r.retry_after.as_ref().and_then(RetryAfter::duration),
                detail: detail.map(|d| truncate(&d, 1000)),
            })
        }
    };
    let state = match target {
        ReportTarget::Lease(lease) => h.engine.report_on(&lease, outcome, &on).await?,
        ReportTarget::Session { pool, session } => {
            h.engine
                .report_session(&pool, &session, outcome, &on)
                .await?
        }
    };
    Ok(Body::State {
        endpoint: None,
        state,
    })
}

pub(super) async fn release(h: &Handler, lease: &str) -> Result<Body, OpError> {
    h.engine.release(lease).await?;
    Ok(Body::Empty {})
}

pub(super) fn status(h: &Handler, pool: Option<String>) -> Result<Body, OpError> {
    Ok(Body::Status {
        pools: h.engine.status(pool.as_deref())?,
    })
}

pub(super) async fn endpoints(
    h: &Handler,
    pool: Option<String>,
    state: Option<String>,
    endpoint: Option<EndpointId>,
) -> Result<Body, OpError> {
    let state = state
        .map(|s| s.parse::<State>())
        .transpose()
        .map_err(|e| OpError::bad(e.to_string()))?;
    check_pool(h, pool.as_deref())?;
    let rows = match endpoint {
        Some(id) => h
            .engine
            .row(id)
            .await?
            .into_iter()
            .filter(|r| pool.as_ref().is_none_or(|p| *p == r.pool))
            .filter(|r| state.is_none_or(|s| s == r.state))
            .collect(),
        None => h.engine.rows(pool, state).await?,
    };
    Ok(Body::Endpoints {
        endpoints: h.engine.views_with_stats(&rows),
    })
}

pub(super) async fn disable(
    h: &Handler,
    endpoint: &EndpointRef,
    reason: Option<String>,
) -> Result<Body, OpError> {
    let id = resolve(h, endpoint).await?;
    let (_, state) = h
        .engine
        .input(id, Input::Disable { detail: reason }, None, None)
        .await?;
    Ok(Body::State {
        endpoint: Some(id),
        state,
    })
}

pub(super) async fn enable(
    h: &Handler,
    endpoint: &EndpointRef,
    now: Option<bool>,
) -> Result<Body, OpError> {
    let id = resolve(h, endpoint).await?;
    let input = Input::Enable {
        now: now.unwrap_or(false),
    };
    let detail = Some("enabled by operator".into());
    let (_, state) = h.engine.input(id, input, None, detail).await?;
    Ok(Body::State {
        endpoint: Some(id),
        state,
    })
}

pub(super) async fn enable_pair(
    h: &Handler,
    endpoint: &EndpointRef,
    now: Option<bool>,
    destination: &str,
) -> Result<Body, OpError> {
    if now.is_some() {
        return Err(OpError::bad(
            "enable takes `now` or `destination`, not both: a pair is cleared at once",
        ));
    }
    let d = normalize(destination).map_err(|e| OpError::bad(format!("destination: {e}")))?;
    let id = resolve(h, endpoint).await?;
    let state = h.engine.enable_pair(id, &d).await?;
    Ok(Body::State {
        endpoint: Some(id),
        state,
    })
}

pub(super) async fn add(
    h: &Handler,
    urls: &[String],
    pool: Option<String>,
    label: Option<String>,
    source: Option<String>,
) -> Result<Body, OpError> {
    add_urls(
        h,
        urls.iter().map(String::as_str),
        pool,
        label,
        source,
        true,
    )
    .await
}

/// Add the endpoints of a file the CLI wrote (one URL a line), streaming: the file is
/// parsed line by line on the store thread inside the one transaction, so a million lines
/// are never held in memory, and a bad line anywhere rolls everything back.
pub(super) async fn import(
    h: &Handler,
    path: &str,
    pool: Option<String>,
    label: Option<String>,
) -> Result<Body, OpError> {
    let owned = path.to_string();
    let file = tokio::task::spawn_blocking(move || open_import(&owned))
        .await
        .map_err(|e| OpError::internal(format!("import: {e}")))??;
    let pool = pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
    let state = initial_state(h.live().config.pool(&pool));
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
                .map(|url| NewEndpoint {
                    url,
                    pool: pool.clone(),
                    label: label.clone(),
                    source: Some("cli".into()),
                    state,
                })
                .map_err(|_| {
                    OpError::bad(format!("line {n} is not a proxy URL; nothing was added"))
                }),
        )
    });
    let ids = h.engine.add_from(eps).await?;
    Ok(Body::Added { ids })
}

pub(super) async fn probe(
    h: &Handler,
    endpoints: &[EndpointRef],
    pool: Option<String>,
    all: bool,
    concurrency: Option<usize>,
) -> Result<Body, OpError> {
    check_pool(h, pool.as_deref())?;
    let ids = if endpoints.is_empty() {
        if !all && pool.is_none() {
            return Err(OpError::bad("name endpoints, or set all or pool"));
        }
        h.engine.ids(pool.as_deref())
    } else {
        resolve_all(h, endpoints).await?
    };
    let every_pool = endpoints.is_empty() && pool.is_none();
    let probers = h.live().probers;
    let ids = crate::probe_run::probe_targets(&h.engine, &probers, ids, every_pool)
        .map_err(OpError::bad)?;
    let concurrency = concurrency.unwrap_or(64).max(1);
    let results =
        crate::probe_run::probe_many(&h.engine, &probers, ids, concurrency, |_| {}).await?;
    Ok(Body::Probes { results })
}

pub(super) async fn remove(h: &Handler, endpoints: &[EndpointRef]) -> Result<Body, OpError> {
    let ids = resolve_all(h, endpoints).await?;
    h.engine.remove(ids).await?;
    Ok(Body::Empty {})
}

pub(super) async fn edit(
    h: &Handler,
    endpoint: &EndpointRef,
    url: Option<String>,
    label: Option<String>,
) -> Result<Body, OpError> {
    let (url, label) = edit_fields(url, label).map_err(OpError::bad)?;
    let id = resolve(h, endpoint).await?;
    let row = h.engine.edit(id, url, label).await?;
    Ok(Body::Endpoints {
        endpoints: vec![row.view(false)],
    })
}

/// Check an edit's fields: at least one, the URL parsed (the message never repeats a
/// password), an empty label meaning "clear it".
pub fn edit_fields(
    url: Option<String>,
    label: Option<String>,
) -> Result<(Option<ProxyUrl>, Option<Option<String>>), String> {
    if url.is_none() && label.is_none() {
        return Err("nothing to edit: give a new url and/or label".into());
    }
    let url = url
        .map(|u| ProxyUrl::parse(&u).map_err(|e| format!("url: {e}")))
        .transpose()?;
    let label = label.map(|l| Some(l).filter(|l| !l.is_empty()));
    Ok((url, label))
}

fn check_pool(h: &Handler, pool: Option<&str>) -> Result<(), OpError> {
    match pool {
        Some(p) if !h.engine.has_pool(p) => Err(PoolError::UnknownPool(p.to_string()).into()),
        _ => Ok(()),
    }
}

/// Add endpoints, all or nothing.
async fn add_urls<'a>(
    h: &Handler,
    urls: impl Iterator<Item = &'a str>,
    pool: Option<String>,
    label: Option<String>,
    source: Option<String>,
    echo: bool,
) -> Result<Body, OpError> {
    let pool = pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
    let config = h.live().config;
    let cfg = config.pool(&pool);
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
    let ids = h.engine.add(eps).await?;
    Ok(Body::Added { ids })
}

async fn resolve(h: &Handler, r: &EndpointRef) -> Result<EndpointId, OpError> {
    Ok(h.engine.resolve(r.as_arg()).await?)
}

async fn resolve_all(h: &Handler, refs: &[EndpointRef]) -> Result<Vec<EndpointId>, OpError> {
    let mut ids = Vec::with_capacity(refs.len());
    for r in refs {
        ids.push(resolve(h, r).await?);
    }
    Ok(ids)
}

/// Largest import file accepted.
const MAX_IMPORT: u64 = 256 << 20;

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

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}
