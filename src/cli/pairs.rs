//! Per-destination views and acts of the CLI (docs/destinations.md, "CLI"): `list
//! --destination D`, the pairs in `show`, `enable ID --destination D`.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::table::{s, table};
use super::{call, parse_state, unexpected, CliError, Context, Named};
use crate::endpoint::EndpointId;
use crate::health::State;
use crate::pool::destinations::normalize;
use crate::protocol::SlowedView;
use crate::protocol::{EnableMessage, EndpointsMessage, Payload, Request};
use crate::store::fmt_time;
use crate::store::pairs::PairRow;
use crate::tags::Tags;

/// A destination typed by an operator, normalised; a bad one is a usage error (exit 2).
pub(super) fn destination(raw: &str) -> Result<String, CliError> {
    normalize(raw).map_err(|e| CliError::usage(format!("--destination: {e}")))
}

/// A pair as JSON (never a password: pairs hold none).
pub(super) fn pair_json(p: &PairRow) -> Value {
    let r = &p.record;
    json!({
        "destination": r.destination,
        "state": r.health.state,
        "reason": r.health.reason,
        "phase": r.health.phase,
        "status": r.status,
        "detail": r.health.detail,
        "rule": pair_rule(p),
        "streak": r.health.streak,
        "cooldown_ms": r.health.cooldown_ms,
        "cooldown_until": p.cooldown_until.map(fmt_time),
        "state_changed_at": p.state_changed_at,
    })
}

/// The `[[ban]]` rule a pair's last failure matched, as its detail names it.
fn pair_rule(p: &PairRow) -> Option<&str> {
    p.record
        .health
        .detail
        .as_deref()
        .and_then(crate::ban::rule_in_detail)
}

/// `list --destination D`: every endpoint with its state for D. An endpoint that is not
/// available is not leased for anyone, so its own state is its state for D.
pub(super) async fn list_for(
    ctx: &Context,
    pool: Option<String>,
    state: Option<String>,
    tags: &Tags,
    raw: &str,
    json_out: bool,
) -> Result<(), CliError> {
    let d = destination(raw)?;
    let state = parse_state(state.as_deref())?;
    let store = ctx.store_to_read()?;
    let slowed = slowed_by_daemon(ctx, pool.as_deref(), &d).await?;
    let mut rows = store.list(pool.as_deref(), state)?;
    rows.retain(|r| r.tags.contains_all(tags));
    let pairs: HashMap<_, _> = store
        .pairs_for(&d)?
        .into_iter()
        .map(|p| (p.record.endpoint, p))
        .collect();
    let for_d = |st: State, p: Option<&PairRow>| match (st, p) {
        (State::Available, Some(p)) => p.record.health.state,
        (st, _) => st,
    };
    if json_out {
        let v: Vec<Value> = rows
            .iter()
            .map(|r| {
                let p = pairs.get(&r.id);
                let mut v = serde_json::to_value(r.view(false)).unwrap_or_default();
                v["destination"] = json!(d);
                v["destination_state"] = json!(for_d(r.state, p));
                v["pair"] = p.map(pair_json).unwrap_or(Value::Null);
                v["slowed"] = json!(slowed.get(&r.id));
                v
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    let head = format!("FOR {d}");
    let mut t = table([
        "ID",
        "POOL",
        "URL",
        "STATE",
        &head,
        "PAIR REASON",
        "STATUS",
        "RULE",
        "SLOWED",
    ]);
    for r in &rows {
        let p = pairs.get(&r.id);
        t.add_row([
            r.id.to_string(),
            r.pool.clone(),
            r.url.to_redacted_string(),
            r.state.to_string(),
            for_d(r.state, p).to_string(),
            p.and_then(|p| p.record.health.reason)
                .map(|x| x.to_string())
                .unwrap_or("-".into()),
            s(&json!(p.and_then(|p| p.record.status))),
            p.and_then(pair_rule).unwrap_or("-").to_string(),
            slowed.get(&r.id).map_or("-".into(), slowed_text),
        ]);
    }
    outln!("{t}");
    Ok(())
}

/// Each endpoint's slow-down for host `d`, as the running daemon's pacing holds it (it
/// lives in the daemon's memory): none without a daemon.
async fn slowed_by_daemon(
    ctx: &Context,
    pool: Option<&str>,
    d: &str,
) -> Result<HashMap<EndpointId, SlowedView>, CliError> {
    let Some(mut c) = ctx.daemon().await? else {
        return Ok(HashMap::new());
    };
    let req = Request::Endpoints(EndpointsMessage {
        pool: pool.map(str::to_string),
        destination: Some(d.to_string()),
        ..EndpointsMessage::default()
    });
    match call(&mut c, &req).await? {
        Payload::Endpoints { endpoints, .. } => Ok(endpoints
            .into_iter()
            .filter_map(|v| Some((v.id, v.slowed?)))
            .collect()),
        _ => Err(unexpected("endpoints")),
    }
}

/// A slow-down as the table shows it: `every 8s, next in 4m 10s`.
pub(super) fn slowed_text(s: &SlowedView) -> String {
    let d = |ms: u64| humantime::format_duration(std::time::Duration::from_millis(ms));
    format!(
        "every {}, next in {}",
        d(s.spacing_ms),
        d(s.next_use_in_ms / 1000 * 1000)
    )
}

/// The pairs block of `show`.
pub(super) fn print_pairs(pairs: &[PairRow]) {
    if pairs.is_empty() {
        outln!("\npairs: none (available for every destination)");
        return;
    }
    outln!("\npairs (not available for these destinations):");
    for p in pairs {
        let r = &p.record;
        let mut line = format!("  {} {}", r.destination, r.health.state);
        if let Some(x) = r.health.reason {
            line.push_str(&format!(" reason={x}"));
        }
        if let Some(x) = r.status {
            line.push_str(&format!(" status={x}"));
        }
        if let Some(x) = pair_rule(p) {
            line.push_str(&format!(" rule={x}"));
        }
        if let Some(u) = p.cooldown_until {
            // As the daemon counts it: at most the cooldown's length from now.
            let now = std::time::SystemTime::now();
            let len = std::time::Duration::from_millis(r.health.cooldown_ms.unwrap_or(0));
            let kept = now + crate::health::restored_remaining(u, now, len);
            if u > kept + std::time::Duration::from_secs(1) {
                line.push_str(&format!(
                    " until={} (stored {}, beyond its cooldown: clamped)",
                    fmt_time(kept),
                    fmt_time(u)
                ));
            } else {
                line.push_str(&format!(" until={}", fmt_time(u)));
            }
        }
        outln!("{line}");
    }
}

/// `enable ID... --destination D`: clear one pair per endpoint, through the daemon when
/// one runs, else on the store directly.
pub(super) async fn enable_pair(
    ctx: &Context,
    targets: &Named<'_>,
    raw: &str,
) -> Result<(), CliError> {
    let d = destination(raw)?;
    let refs = ctx.endpoint_refs(targets)?;
    if let Some(mut c) = ctx.daemon().await? {
        for r in refs {
            let req = Request::Enable(EnableMessage {
                endpoint: Some(r.clone()),
                pool: targets.pool.map(str::to_string),
                now: None,
                destination: Some(d.clone()),
                target: None,
            });
            match call(&mut c, &req).await? {
                Payload::State {
                    state, endpoint, ..
                } => outln!("{}\t{d}\t{state}", super::table::shown_id(endpoint, &r)),
                _ => return Err(unexpected("enable --destination")),
            }
        }
        return Ok(());
    }
    let ids = ctx.resolve_ids(targets)?;
    let engine = ctx.engine()?;
    for id in ids {
        let state = engine.enable_pair(id, &d).await?;
        outln!("{id}\t{d}\t{state}");
    }
    engine.flush().await?;
    Ok(())
}
