//! Probe endpoints and feed each result to the engine: shared by `proxypool probe`, the
//! socket's `probe` op and the daemon's prober loops.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tracing::warn;

use super::prober::{ProbeError, ProbeResult, Prober};
use crate::config::Config;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::State;
use crate::pool::engine::{Engine, EngineError};
use crate::pool::{Outcome, PoolError, ProbeRole};
use crate::protocol::ProbeReport;

/// Probers for every configured pool.
/// Probers for every configured pool that names a probe target; a pool without one is
/// never probed (docs/probe.md).
pub fn probers(cfg: &Config) -> Result<HashMap<String, Prober>, ProbeError> {
    cfg.pools
        .values()
        .filter(|p| p.probe.url.is_some())
        .map(|p| Ok((p.name.clone(), Prober::new(&p.probe)?)))
        .collect()
}

/// The endpoints an operator's probe may run on. Named endpoints and a named pool must all
/// have a probe target (else the message saying which pool has none); a sweep of every
/// pool (`all`) passes over the pools without one.
pub fn probe_targets(
    engine: &Engine,
    probers: &HashMap<String, Prober>,
    ids: Vec<EndpointId>,
    all_pools: bool,
) -> Result<Vec<EndpointId>, String> {
    let mut out = Vec::with_capacity(ids.len());
    let mut without = None;
    for id in ids {
        match engine.pool_of(id) {
            Some(p) if probers.contains_key(&p) => out.push(id),
            Some(p) => {
                if !all_pools {
                    return Err(no_target(&p));
                }
                without.get_or_insert(p);
            }
            // Removed meanwhile: probe_one says so in its report.
            None => out.push(id),
        }
    }
    match without {
        Some(p) if out.is_empty() => Err(no_target(&p)),
        _ => Ok(out),
    }
}

/// Why `pool`'s endpoints cannot be probed (exit 2 on the CLI).
pub fn no_target(pool: &str) -> String {
    format!(
        "pool {pool:?} has no [pool.probe] url, so its endpoints are never probed; \
         set one to probe them"
    )
}

/// Probe one endpoint and feed the result to the engine. A `probe_allowed` endpoint is
/// probed only if this call wins its single claim.
pub async fn probe_one(
    engine: &Engine,
    prober: &Prober,
    id: EndpointId,
) -> Result<ProbeReport, EngineError> {
    probe_as(engine, prober, id, false).await
}

/// `probe_one` for an operator: a success ends a cooldown (docs/probe.md).
pub async fn probe_operator(
    engine: &Engine,
    prober: &Prober,
    id: EndpointId,
) -> Result<ProbeReport, EngineError> {
    probe_as(engine, prober, id, true).await
}

async fn probe_as(
    engine: &Engine,
    prober: &Prober,
    id: EndpointId,
    operator: bool,
) -> Result<ProbeReport, EngineError> {
    let Some(now) = engine.endpoint(id) else {
        return Err(PoolError::UnknownEndpoint(id).into());
    };
    let (url, pool, state) = (now.url, now.pool, now.health.state);
    let mut report = ProbeReport::claimed(id, &url, &pool);
    report.state = Some(state);
    report.trial = false;
    // While the probe target is down only its one trial is probed (an operator's probe
    // always runs, and is judged the same way).
    if !operator {
        if let Err(retry_after) = engine.probe_admit(id) {
            report.skipped = Some(format!(
                "the probe target is down (every endpoint that tried it failed to reach it); its next trial in {} ms",
                retry_after.as_millis()
            ));
            return Ok(report);
        }
    }
    if state == State::ProbeAllowed {
        if !engine.try_claim(id).await? {
            engine.probe_cancel(id);
            report.skipped = Some("its single recovery attempt is already in flight".into());
            return Ok(report);
        }
        report.trial = true;
    }
    record_as(engine, prober, &url, report, operator).await
}

/// Run the probe of `report`'s endpoint (claimed already when `report.trial`) and feed the
/// result to the engine. A probe task that dies gives its claim back.
pub(crate) async fn run_and_record(
    engine: &Engine,
    prober: &Prober,
    url: &ProxyUrl,
    report: ProbeReport,
) -> Result<ProbeReport, EngineError> {
    record_as(engine, prober, url, report, false).await
}

async fn record_as(
    engine: &Engine,
    prober: &Prober,
    url: &ProxyUrl,
    mut report: ProbeReport,
    operator: bool,
) -> Result<ProbeReport, EngineError> {
    let id = report.id;
    let r: ProbeResult = match run_probe(prober, url).await {
        Some(r) if r.local => {
            // This machine is short of descriptors or memory: nothing is known of the
            // endpoint, so nothing is recorded against it (docs/probe.md).
            let why = r.failure.and_then(|f| f.detail).unwrap_or_default();
            give_back(engine, id, report.trial, "probe failed on this machine").await?;
            report.skipped = Some(format!(
                "the probe could not run on this machine: {why}; nothing was recorded against the endpoint"
            ));
            return Ok(report);
        }
        Some(r) => r,
        None => {
            give_back(engine, id, report.trial, "probe task failed").await?;
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
    engine.observe_probe(id, r.ok, r.total);
    let detail = report.status.map(|s| format!("status {s}"));
    let role = match (report.trial, operator) {
        // The probe holds the endpoint's single recovery attempt (an operator's probe of a
        // `probe_allowed` endpoint claims it too): its result is that attempt's, so a
        // failure cools the endpoint again, longer, and the claim never outlives it.
        (true, _) => ProbeRole::Trial,
        (false, true) => ProbeRole::Operator,
        (false, false) => ProbeRole::Check,
    };
    report.state = Some(engine.probe_result_as(id, outcome, role, detail).await?);
    Ok(report)
}

/// A probe that ended without a result gives back what it held: the single recovery
/// attempt (`trial`), or its probe admission.
async fn give_back(
    engine: &Engine,
    id: EndpointId,
    trial: bool,
    why: &str,
) -> Result<(), EngineError> {
    if trial {
        engine.abandon(id, why).await?;
    } else {
        engine.probe_cancel(id);
    }
    Ok(())
}

/// An operator's probe of many endpoints (see `probe_targets`), at most `concurrency` at
/// a time; `on_done` sees each result as it arrives. Results come back sorted by id.
pub async fn probe_many(
    engine: &Arc<Engine>,
    probers: &HashMap<String, Prober>,
    ids: Vec<EndpointId>,
    concurrency: usize,
    mut on_done: impl FnMut(&ProbeReport),
) -> Result<Vec<ProbeReport>, EngineError> {
    let sem = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for id in ids {
        let pool = engine.pool_of(id);
        // `probe_targets` kept only endpoints of pools with a probe target.
        let Some(prober) = pool.and_then(|p| probers.get(&p).cloned()) else {
            continue;
        };
        let (engine, sem) = (engine.clone(), sem.clone());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            probe_operator(&engine, &prober, id).await
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
async fn run_probe(prober: &Prober, url: &ProxyUrl) -> Option<ProbeResult> {
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
