//! `proxypool serve`: the engine, its timer, the prober loops, sources and the socket.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::{Config, PoolConfig};
use crate::endpoint::EndpointId;
use crate::health::{Phase, Reason, State};
use crate::pool::engine::{Engine, EngineError};
use crate::pool::Outcome;
use crate::probe::{ProbeError, ProbeResult, Prober};
use crate::server::{self, Handler, ServerError};
use crate::sources;

/// Errors starting or running the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Socket setup.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// Engine / store.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Probe configuration.
    #[error(transparent)]
    Probe(#[from] ProbeError),
}

/// How `serve` listens.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Unix socket path.
    pub socket: PathBuf,
    /// Optional TCP listener.
    pub listen_tcp: Option<SocketAddr>,
    /// Token required on TCP.
    pub token: Option<String>,
    /// The database lock this daemon holds: its socket is published there once bound.
    pub lock: Option<Arc<crate::lock::Held>>,
}

/// One probe's outcome, as `probe` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ProbeReport {
    /// Endpoint id.
    pub id: EndpointId,
    /// Redacted URL.
    pub url: String,
    /// Pool.
    pub pool: String,
    /// Passed.
    pub ok: bool,
    /// Not run (e.g. its single attempt is already claimed).
    pub skipped: Option<String>,
    /// Failure reason.
    pub reason: Option<Reason>,
    /// Failure phase.
    pub phase: Option<Phase>,
    /// HTTP status seen.
    pub status: Option<u16>,
    /// Failure detail.
    pub detail: Option<String>,
    /// Milliseconds per phase.
    pub phases_ms: Vec<(Phase, f64)>,
    /// Total milliseconds.
    pub total_ms: f64,
    /// State after the result was applied.
    pub state: Option<State>,
    /// This probe was the endpoint's single recovery attempt.
    pub trial: bool,
}

impl ProbeReport {
    /// A report for a probe not run yet: the single recovery attempt, already claimed.
    fn claimed(id: EndpointId, url: &crate::endpoint::ProxyUrl, pool: &str) -> Self {
        ProbeReport {
            id,
            url: url.to_redacted_string(),
            pool: pool.to_string(),
            ok: false,
            skipped: None,
            reason: None,
            phase: None,
            status: None,
            detail: None,
            phases_ms: Vec::new(),
            total_ms: 0.0,
            state: Some(State::ProbeAllowed),
            trial: true,
        }
    }
}

/// Probers for every configured pool.
pub fn probers(cfg: &Config) -> Result<HashMap<String, Prober>, ProbeError> {
    cfg.pools
        .values()
        .map(|p| Ok((p.name.clone(), Prober::new(&p.probe)?)))
        .collect()
}

/// Probe one endpoint and feed the result to the engine. A `probe_allowed` endpoint is
/// probed only if this call wins its single claim.
pub async fn probe_one(
    engine: &Engine,
    prober: &Prober,
    id: EndpointId,
) -> Result<ProbeReport, EngineError> {
    let (url, pool, state) = {
        let p = engine.pools();
        match (p.url(id), p.pool_of(id), p.health(id)) {
            (Some(u), Some(pool), Some(h)) => (u.clone(), pool.to_string(), h.state),
            _ => return Err(crate::pool::PoolError::UnknownEndpoint(id).into()),
        }
    };
    let mut report = ProbeReport::claimed(id, &url, &pool);
    report.state = Some(state);
    report.trial = false;
    if state == State::ProbeAllowed {
        if !engine.try_claim(id).await? {
            report.skipped = Some("its single recovery attempt is already in flight".into());
            return Ok(report);
        }
        report.trial = true;
    }
    run_and_record(engine, prober, &url, report).await
}

/// Run the probe of `report`'s endpoint (claimed already when `report.trial`) and feed the
/// result to the engine. A probe task that dies gives its claim back.
async fn run_and_record(
    engine: &Engine,
    prober: &Prober,
    url: &crate::endpoint::ProxyUrl,
    mut report: ProbeReport,
) -> Result<ProbeReport, EngineError> {
    let id = report.id;
    let r: ProbeResult = match run_probe(prober, url).await {
        Some(r) => r,
        None => {
            if report.trial {
                engine.abandon(id, "probe task failed").await?;
            }
            report.skipped = Some("the probe task failed".into());
            return Ok(report);
        }
    };
    report.ok = r.ok;
    report.status = r.status;
    report.phases_ms = r
        .phases
        .iter()
        .map(|(p, d)| (*p, d.as_secs_f64() * 1000.0))
        .collect();
    report.total_ms = r.total.as_secs_f64() * 1000.0;
    // A probe result has a failure exactly when it did not pass.
    let outcome = match r.failure {
        None => Outcome::Success,
        Some(f) => {
            report.reason = f.reason;
            report.phase = f.phase;
            report.detail = f.detail.clone();
            Outcome::Failure(f)
        }
    };
    let detail = report.status.map(|s| format!("status {s}"));
    report.state = Some(
        engine
            .probe_result(id, outcome, report.trial, detail)
            .await?,
    );
    Ok(report)
}

/// Probe many endpoints, at most `concurrency` at a time; `on_done` sees each result as
/// it arrives. Results come back sorted by id.
pub async fn probe_many(
    engine: &Arc<Engine>,
    probers: &HashMap<String, Prober>,
    ids: Vec<EndpointId>,
    concurrency: usize,
    mut on_done: impl FnMut(&ProbeReport),
) -> Result<Vec<ProbeReport>, EngineError> {
    // Only endpoints of pools missing from the config need the built-in probe target.
    let fallback = std::sync::OnceLock::new();
    let sem = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for id in ids {
        let pool = engine.pools().pool_of(id).map(str::to_string);
        let Some(prober) = pool.and_then(|p| probers.get(&p).cloned()).or_else(|| {
            fallback
                .get_or_init(|| Prober::new(&crate::config::ProbeConfig::default()).ok())
                .clone()
        }) else {
            continue;
        };
        let (engine, sem) = (engine.clone(), sem.clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            probe_one(&engine, &prober, id).await
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(rep)) => {
                on_done(&rep);
                out.push(rep);
            }
            // One endpoint's error (e.g. removed mid-probe) must not abort the others:
            // dropping the set would cancel probes that hold a claim.
            Ok(Err(e)) => warn!(error = %e, "probe result not recorded"),
            Err(e) => warn!(error = %join_error(&e), "probe task failed"),
        }
    }
    out.sort_by_key(|r| r.id);
    Ok(out)
}

/// Run a probe in its own task, so that a panic in it cannot leave a claim taken.
async fn run_probe(prober: &Prober, url: &crate::endpoint::ProxyUrl) -> Option<ProbeResult> {
    let (prober, url) = (prober.clone(), url.clone());
    match tokio::spawn(async move { prober.probe(&url).await }).await {
        Ok(r) => Some(r),
        Err(e) => {
            warn!(error = %join_error(&e), "probe task failed");
            None
        }
    }
}

fn join_error(e: &tokio::task::JoinError) -> String {
    if e.is_panic() {
        "panicked".into()
    } else {
        "cancelled".into()
    }
}

/// Recovery probes and periodic checks of one pool, until `shutdown`.
async fn prober_loop(
    engine: Arc<Engine>,
    pool: PoolConfig,
    prober: Prober,
    shutdown: CancellationToken,
) {
    // Recovery probes are never queued behind a periodic sweep of a large pool: a quarter
    // of the pool's concurrency (at least one) is theirs alone.
    let total = pool.probe.concurrency.max(1);
    let recovery_cap = (total / 4).max(1);
    let sweep_cap = total.saturating_sub(recovery_cap).max(1);
    let sem = Arc::new(Semaphore::new(recovery_cap));
    let tracker = TaskTracker::new();
    if !pool.probe.interval.is_zero() {
        tracker.spawn(sweep_loop(
            engine.clone(),
            pool.clone(),
            prober.clone(),
            sweep_cap,
            shutdown.clone(),
        ));
    }
    loop {
        // Recovery attempts: claim as many as the cap allows.
        while let Ok(permit) = sem.clone().try_acquire_owned() {
            match engine.claim_next(&pool.name).await {
                Ok(Some((id, url))) => {
                    let (engine, prober) = (engine.clone(), prober.clone());
                    let report = ProbeReport::claimed(id, &url, &pool.name);
                    tracker.spawn(async move {
                        if let Err(e) = run_and_record(&engine, &prober, &url, report).await {
                            warn!(endpoint = id, error = %e, "could not record probe result");
                        }
                        drop(permit);
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(pool = %pool.name, error = %e, "claim failed");
                    break;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = engine.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    tracker.close();
    // In-flight probes are dropped: claims are never persisted, so a restart simply
    // admits the attempt again.
}

/// Periodic checks of a pool's available endpoints every `probe.interval` (jittered).
async fn sweep_loop(
    engine: Arc<Engine>,
    pool: PoolConfig,
    prober: Prober,
    cap: usize,
    shutdown: CancellationToken,
) {
    let sem = Arc::new(Semaphore::new(cap));
    let tracker = TaskTracker::new();
    let jittered = |d: Duration| d.mul_f64(0.9 + fastrand::f64() * 0.2);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(jittered(pool.probe.interval)) => {}
        }
        let ids = engine.pools().available_ids(&pool.name);
        debug!(pool = %pool.name, n = ids.len(), "periodic check");
        for id in ids {
            let permit = tokio::select! {
                p = sem.clone().acquire_owned() => p,
                _ = shutdown.cancelled() => break,
            };
            let Ok(permit) = permit else { break };
            let (engine, prober) = (engine.clone(), prober.clone());
            tracker.spawn(async move {
                if let Err(e) = probe_one(&engine, &prober, id).await {
                    debug!(endpoint = id, error = %e, "periodic probe not recorded");
                }
                drop(permit);
            });
        }
    }
    tracker.close();
}

/// Run the daemon until `shutdown` is cancelled.
pub async fn serve(
    config: Arc<Config>,
    engine: Arc<Engine>,
    opts: ServeOptions,
    shutdown: CancellationToken,
) -> Result<(), DaemonError> {
    let listener = server::bind_unix(&opts.socket).await?;
    if let Some(held) = &opts.lock {
        crate::lock::publish(held, &opts.socket).map_err(|source| ServerError::Bind {
            path: "the database lock file".into(),
            source,
        })?;
    }
    let tcp = match opts.listen_tcp {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind {
                    path: addr.to_string(),
                    source,
                })?,
        ),
        None => None,
    };
    let probers = probers(&config)?;
    let tracker = TaskTracker::new();
    tracker.spawn(engine.clone().run_timer(shutdown.clone().cancelled_owned()));
    for pool in config.pools.values() {
        if !pool.sources.is_empty() {
            // Sniff on startup before the first lease is answered, so that the first
            // lease already sees the sniffed list; and before the prober starts, so the
            // startup sniff's events (`sniff_on_startup` ... `sniff_success`) are one
            // uninterrupted run in the event log.
            tokio::select! {
                // A signal during a slow provider fetch stops the start-up at once.
                _ = shutdown.cancelled() => break,
                r = sources::sniff(&engine, pool, sources::Trigger::Startup) => {
                    if let Err(e) = r {
                        warn!(pool = %pool.name, error = %e, "startup sniff could not be recorded");
                    }
                }
            }
            tracker.spawn(sources::run_after_startup(
                engine.clone(),
                pool.clone(),
                shutdown.clone(),
            ));
        }
    }
    for pool in config.pools.values() {
        if pool.mode.prober_recovers() {
            tracker.spawn(prober_loop(
                engine.clone(),
                pool.clone(),
                probers[&pool.name].clone(),
                shutdown.clone(),
            ));
        }
    }
    let handler = Arc::new(
        Handler::new(engine.clone(), config.clone(), opts.token.clone())
            .with_probers(probers.clone()),
    );
    if let Some(l) = tcp {
        info!(addr = %l.local_addr().map(|a| a.to_string()).unwrap_or_default(), "listening on TCP (token required)");
        tracker.spawn(server::run_tcp(l, handler.clone(), shutdown.clone()));
    }
    info!(socket = %opts.socket.display(), endpoints = engine.pools().len(), "serving");
    server::run(listener, handler, shutdown.clone()).await;
    tracker.close();
    tracker.wait().await;
    engine.flush().await?;
    crate::socket_file::remove_own(&opts.socket);
    info!("stopped");
    Ok(())
}
