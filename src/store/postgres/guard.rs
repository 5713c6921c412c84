//! The guarded statement of each write of a batch, and what it found: a transition applies
//! only while the row is still in the state it starts from (and, when it decides a trial,
//! only while that trial's claim is current); a claim only when nobody holds the slot
//! (docs/fleet.md, "Ownership"). Sent at once: tokio-postgres pipelines statements whose
//! futures are polled together.

use std::time::Duration;

use futures_util::future::join_all;
use tokio_postgres::{Client, Row};

use super::statements::Stmts;
use crate::endpoint::EndpointId;
use crate::health::{Phase, Reason, State};
use crate::store::pairs::{PairRecord, PairWrite};
use crate::store::{Claim, ClaimOn, HealthRecord, Unclaim, Write};

/// What the guarded statement of one write found.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Found {
    /// Nothing to guard (events, sources).
    Plain,
    /// It happened; for an endpoint's row, the change the row carried before it
    /// (`prev_rev`): memory that has not seen that one reads the row again.
    Applied(Option<i64>),
    /// The row was no longer in the state the write starts from.
    Conflict,
    /// A trial's result under a claim that is not the current one.
    Stale,
    /// A remove named an endpoint that is gone.
    Missing(EndpointId),
    /// The claim's epoch, and the change the endpoint's row carried before it.
    Won {
        epoch: i64,
        before: Option<i64>,
    },
    Lost(Duration),
}

pub(super) fn ms(d: Option<Duration>) -> Option<i64> {
    d.map(|d| d.as_millis().min(i64::MAX as u128) as i64)
}

/// A cooldown's length as the database stores it.
pub(super) fn cooldown_ms(v: Option<u64>) -> Option<i64> {
    v.map(|v| v.min(i64::MAX as u64) as i64)
}

pub(super) fn opt_i32(v: Option<u16>) -> Option<i32> {
    v.map(i32::from)
}

/// The first row a write locks: endpoints before pairs, each by key. Every daemon sends
/// its guarded statements in this order, so two batches that touch the same rows wait for
/// one another instead of deadlocking (PostgreSQL would abort one after a second).
fn lock_order(w: &Write) -> (u8, EndpointId, &str) {
    match w {
        Write::Transition(h, _) => (0, h.id, ""),
        Write::Exit { id, .. } => (0, *id, ""),
        Write::Claim(c) | Write::Pair(PairWrite::Claim(c)) => on_order(&c.on),
        Write::Unclaim(u) | Write::Pair(PairWrite::Unclaim(u)) => on_order(&u.on),
        Write::Remove(ids) => (0, ids.iter().copied().min().unwrap_or(0), ""),
        Write::Pair(PairWrite::Upsert(r, _)) => (1, r.endpoint, &r.destination),
        Write::Pair(PairWrite::Delete {
            endpoint,
            destination,
            ..
        }) => (1, *endpoint, destination),
        Write::Event(_)
        | Write::EventStatus(..)
        | Write::Pair(PairWrite::Event { .. })
        | Write::SourceResult { .. } => (2, 0, ""),
    }
}

fn on_order(on: &ClaimOn) -> (u8, EndpointId, &str) {
    match on {
        ClaimOn::Endpoint(id) => (0, *id, ""),
        ClaimOn::Pair(id, d) => (1, *id, d),
    }
}

/// The guarded statements of `writes`, sent at once in lock order; one `Found` per write,
/// in the order of `writes`. Their rows are locked in that order unless `out_of_order`
/// says otherwise: then the caller locks them first (`lock_rows`).
pub(super) async fn guard_all(
    c: &Client,
    st: &Stmts,
    writes: &[&Write],
    hold: Duration,
) -> Result<Vec<Found>, tokio_postgres::Error> {
    let mut order: Vec<usize> = (0..writes.len()).collect();
    order.sort_by(|&a, &b| lock_order(writes[a]).cmp(&lock_order(writes[b])));
    let futs = order.iter().map(|&i| guard(c, st, writes[i], hold));
    let sent = join_all(futs).await;
    let mut found = vec![Found::Plain; writes.len()];
    for (i, r) in order.into_iter().zip(sent) {
        found[i] = r?;
    }
    Ok(found)
}

/// Whether the guarded statements of `writes` in lock order would not lock their rows in
/// that order: a removal takes several endpoints, and their pairs, at once, where its
/// first one stands.
pub(super) fn out_of_order(writes: &[&Write]) -> bool {
    let guarded = writes.iter().filter(|w| lock_order(w).0 < 2).count();
    guarded > 1
        && writes
            .iter()
            .any(|w| matches!(w, Write::Remove(ids) if ids.iter().any(|&id| id != ids[0])))
}

/// Lock every row `writes` may change, in lock order, before any of them is written: for
/// a group commit whose statements would not (`out_of_order`), and for one redone batch
/// by batch (`write::one_by_one`, whose batches write one after another). A pair's endpoint is
/// locked with the endpoints: a new pair's row checks that its endpoint exists.
pub(super) async fn lock_rows(
    c: &Client,
    st: &Stmts,
    writes: &[&Write],
) -> Result<(), tokio_postgres::Error> {
    let (mut ids, mut pairs, mut removed) = (Vec::new(), Vec::new(), Vec::new());
    for w in writes {
        match (w, lock_order(w)) {
            (Write::Remove(v), _) => removed.extend(v.iter().copied()),
            (_, (0, id, _)) => ids.push(id),
            (_, (1, id, d)) => {
                ids.push(id);
                pairs.push((id, d.to_string()));
            }
            _ => {}
        }
    }
    if ids.is_empty() && pairs.is_empty() && removed.is_empty() {
        return Ok(());
    }
    ids.extend(&removed);
    ids.sort_unstable();
    ids.dedup();
    let (pids, dests): (Vec<EndpointId>, Vec<String>) = pairs.into_iter().unzip();
    c.query_one(&st.lock_rows, &[&ids, &pids, &dests, &removed])
        .await?;
    Ok(())
}

fn hold_ms(c: &Claim, hold: Duration) -> i64 {
    c.hold.min(hold).as_millis().max(1).min(i64::MAX as u128) as i64
}

/// A pair's guarded result: (rows applied, the slot's claim epoch before).
fn judged(row: &Row, trial: Option<i64>) -> Found {
    let n: i64 = row.get(0);
    verdict(n > 0, None, row.get(1), trial)
}

/// An endpoint's guarded result: (the change the row carried before, when the write
/// applied; the slot's claim epoch before).
fn judged_endpoint(row: &Row, trial: Option<i64>) -> Found {
    let before: Option<i64> = row.get(0);
    verdict(before.is_some(), before, row.get(1), trial)
}

/// Applied (with the endpoint row's change before, `before`), a trial's result under a
/// claim that is not the slot's `epoch`, or a row found changed.
fn verdict(applied: bool, before: Option<i64>, epoch: Option<i64>, trial: Option<i64>) -> Found {
    match (applied, trial) {
        (true, _) => Found::Applied(before),
        (false, Some(t)) if epoch.is_some_and(|e| e != t) => Found::Stale,
        _ => Found::Conflict,
    }
}

/// A claim's result: (the epoch won, the time left of the claim that holds it), and
/// `before`, the change an endpoint's row carried before (a pair's claim tells none).
fn claimed(row: &Row, before: Option<i64>) -> Found {
    let won: Option<i64> = row.get(0);
    let left: Option<i64> = row.get(1);
    match won {
        Some(epoch) => Found::Won { epoch, before },
        None => Found::Lost(Duration::from_millis(left.unwrap_or(0).max(0) as u64)),
    }
}

async fn guard(
    c: &Client,
    st: &Stmts,
    w: &Write,
    hold: Duration,
) -> Result<Found, tokio_postgres::Error> {
    Ok(match w {
        Write::Transition(h, _) => transition(c, st, h).await?,
        Write::Exit { id, ip } => {
            let ip = ip.map(|ip| ip.to_string());
            match c.query_opt(super::statements::EXIT, &[id, &ip]).await? {
                None => Found::Conflict,
                Some(row) => Found::Applied(row.get(0)),
            }
        }
        Write::Claim(cl) | Write::Pair(PairWrite::Claim(cl)) => claim(c, st, cl, hold).await?,
        Write::Unclaim(u) | Write::Pair(PairWrite::Unclaim(u)) => unclaim(c, st, u).await?,
        Write::Remove(ids) => remove(c, st, ids).await?,
        Write::Pair(PairWrite::Upsert(r, _)) => pair_upsert(c, st, r).await?,
        Write::Pair(PairWrite::Delete {
            endpoint,
            destination,
            from,
            trial,
            ..
        }) => {
            let row = c
                .query_one(
                    &st.pair_delete,
                    &[endpoint, destination, &from.as_str(), trial],
                )
                .await?;
            judged(&row, *trial)
        }
        Write::Event(_)
        | Write::EventStatus(..)
        | Write::Pair(PairWrite::Event { .. })
        | Write::SourceResult { .. } => Found::Plain,
    })
}

/// An endpoint's transition, applied only from the state it was decided from (and, for a
/// trial's outcome, only while its claim is the current one).
async fn transition(
    c: &Client,
    st: &Stmts,
    h: &HealthRecord,
) -> Result<Found, tokio_postgres::Error> {
    let row = c
        .query_one(
            &st.transition,
            &[
                &h.id,
                &h.health.state.as_str(),
                &h.health.reason.map(Reason::as_str),
                &h.health.phase.map(Phase::as_str),
                &super::text(&h.health.detail),
                &(h.health.streak as i32),
                &(h.health.reason_streak as i32),
                &cooldown_ms(h.health.cooldown_ms),
                &ms(h.health.cooldown_left),
                &h.from.as_str(),
                &h.trial,
            ],
        )
        .await?;
    Ok(judged_endpoint(&row, h.trial))
}

/// Endpoints removed: every one of them, or the first that was not there.
async fn remove(
    c: &Client,
    st: &Stmts,
    ids: &[EndpointId],
) -> Result<Found, tokio_postgres::Error> {
    let mut distinct = ids.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let rows = c.query(&st.remove, &[&distinct]).await?;
    let gone: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    Ok(match distinct.iter().find(|id| !gone.contains(id)) {
        Some(&missing) => Found::Missing(missing),
        None => Found::Applied(None),
    })
}

/// A pair's new row: inserted when it leaves `available` (no row yet), else updated from
/// the state it was decided from.
async fn pair_upsert(
    c: &Client,
    st: &Stmts,
    r: &PairRecord,
) -> Result<Found, tokio_postgres::Error> {
    // The row's values, in the order both statements take them.
    let (state, reason, phase) = (
        r.health.state.as_str(),
        r.health.reason.map(Reason::as_str),
        r.health.phase.map(Phase::as_str),
    );
    let (status, detail) = (opt_i32(r.status), super::text(&r.health.detail));
    let (streak, reason_streak) = (r.health.streak as i32, r.health.reason_streak as i32);
    let cooldown_ms = cooldown_ms(r.health.cooldown_ms);
    let left = ms(r.health.cooldown_left);
    let from = r.from.as_str();
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![
        &r.endpoint,
        &r.destination,
        &state,
        &reason,
        &phase,
        &status,
        &detail,
        &streak,
        &reason_streak,
        &cooldown_ms,
        &left,
    ];
    if r.from == State::Available {
        let n = c.execute(&st.pair_insert, &params).await?;
        return Ok(if n > 0 {
            Found::Applied(None)
        } else {
            Found::Conflict
        });
    }
    params.extend([
        &from as &(dyn tokio_postgres::types::ToSql + Sync),
        &r.trial,
    ]);
    let row = c.query_one(&st.pair_update, &params).await?;
    Ok(judged(&row, r.trial))
}

async fn claim(
    c: &Client,
    st: &Stmts,
    cl: &Claim,
    hold: Duration,
) -> Result<Found, tokio_postgres::Error> {
    let ms = hold_ms(cl, hold);
    Ok(match &cl.on {
        ClaimOn::Endpoint(id) => {
            let row = c.query_one(&st.claim, &[id, &ms]).await?;
            claimed(&row, row.get(2))
        }
        ClaimOn::Pair(id, d) => claimed(&c.query_one(&st.pair_claim, &[id, d, &ms]).await?, None),
    })
}

async fn unclaim(c: &Client, st: &Stmts, u: &Unclaim) -> Result<Found, tokio_postgres::Error> {
    let applied = match &u.on {
        ClaimOn::Endpoint(id) => c
            .query_opt(&st.unclaim, &[id, &u.epoch])
            .await?
            .map(|row| row.get(0)),
        ClaimOn::Pair(id, d) => {
            (c.execute(&st.pair_unclaim, &[id, d, &u.epoch]).await? > 0).then_some(None)
        }
    };
    // A claim given back after the slot was claimed again: nothing to give back.
    Ok(match applied {
        Some(before) => Found::Applied(before),
        None => Found::Conflict,
    })
}

/// Whether a batch must not apply: a trial's result under a stale claim, or a removal of
/// an endpoint that is gone.
pub(super) fn bad_group(founds: &[Found]) -> bool {
    founds
        .iter()
        .any(|f| matches!(f, Found::Stale | Found::Missing(_)))
}
