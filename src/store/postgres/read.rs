//! Reading PostgreSQL rows into the store's row types. What is left of a cooldown and of
//! a claim is computed by the database against its own `now()`: the daemon never compares
//! its clock with a stored time (docs/fleet.md, "Time").

use std::time::{Duration, SystemTime};

use futures_util::future::join_all;
use tokio_postgres::{Client, Row, Statement};

use crate::endpoint::{EndpointId, ProxyUrl, Scheme};
use crate::health::State;
use crate::store::pairs::{PairRecord, PairRow};
use crate::store::{
    fmt_time, parse_col, EndpointRow, EventRow, RowClaim, RowNow, StoreError, StoredHealth,
};

/// Milliseconds left until the timestamp column `col`, by the database's clock, at least 0.
macro_rules! left_ms {
    ($col:literal) => {
        concat!(
            "GREATEST(0, CEIL(COALESCE(EXTRACT(EPOCH FROM (",
            $col,
            " - now())), 0) * 1000))::bigint"
        )
    };
}

/// The columns `endpoint_row` reads, in its order.
pub(crate) const ENDPOINT_COLS: &str = concat!(
    "id, pool, scheme, host, port, \"user\", password, label, source, state, reason, phase, \
     detail, streak, reason_streak, cooldown_ms, cooldown_until, state_changed_at, created_at, \
     rev, claim_epoch, ",
    left_ms!("claim_until"),
    ", LEAST(COALESCE(cooldown_ms, 0), ",
    left_ms!("cooldown_until"),
    "), tags, exit_ip, exit_seen_at"
);

/// The columns `pair_row` reads (`p` the pair, `e` its endpoint).
pub(crate) const PAIR_COLS: &str = concat!(
    "e.pool, p.endpoint, p.destination, p.state, p.reason, p.phase, p.status, p.detail, \
     p.streak, p.reason_streak, p.cooldown_ms, p.cooldown_until, p.state_changed_at, \
     p.rev, p.claim_epoch, ",
    left_ms!("p.claim_until"),
    ", LEAST(COALESCE(p.cooldown_ms, 0), ",
    left_ms!("p.cooldown_until"),
    ")"
);

/// The columns `event_row` reads.
pub(crate) const EVENT_COLS: &str = "id, at, kind, endpoint, from_state, to_state, reason, phase, \
     detail, lease, destination, status, blame";

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(what)
}

/// A claim as read: none until the slot was ever claimed.
fn claim(epoch: i64, left_ms: i64) -> Option<RowClaim> {
    (epoch > 0).then(|| RowClaim {
        epoch,
        left: Duration::from_millis(left_ms.max(0) as u64),
    })
}

/// An endpoint row of `ENDPOINT_COLS`.
pub(crate) fn endpoint_row(r: &Row) -> Result<EndpointRow, StoreError> {
    let id: i64 = r.get(0);
    let bad = |what: &str| corrupt(format!("endpoint {id}: {what}"));
    let scheme: String = r.get(2);
    let scheme: Scheme = scheme.parse().map_err(|_| bad("scheme"))?;
    let state: String = r.get(9);
    let state: State = state.parse().map_err(|_| bad("state"))?;
    let reason: Option<String> = r.get(10);
    let phase: Option<String> = r.get(11);
    let port: i32 = r.get(4);
    let user: String = r.get(5);
    let cooldown_ms: Option<i64> = r.get(15);
    let cooldown_ms = cooldown_ms.map(|v| v.max(0) as u64);
    let streak: i32 = r.get(13);
    let reason_streak: i32 = r.get(14);
    let left: i64 = r.get(22);
    Ok(EndpointRow {
        id,
        url: ProxyUrl {
            scheme,
            host: r.get(3),
            port: u16::try_from(port).map_err(|_| bad("port"))?,
            user: (!user.is_empty()).then_some(user),
            password: r.get(6),
        },
        pool: r.get(1),
        label: r.get(7),
        source: r.get(8),
        state,
        reason: parse_col(reason.as_deref()).map_err(|_| bad("reason"))?,
        phase: parse_col(phase.as_deref()).map_err(|_| bad("phase"))?,
        detail: r.get(12),
        streak: streak.max(0) as u32,
        reason_streak: reason_streak.max(0) as u32,
        cooldown_ms,
        cooldown_until: r.get(16),
        cooldown_left: (state == State::Cooling).then(|| Duration::from_millis(left.max(0) as u64)),
        claim: claim(r.get(20), r.get(21)),
        rev: r.get(19),
        state_changed_at: fmt_time(r.get::<_, SystemTime>(17)),
        created_at: fmt_time(r.get::<_, SystemTime>(18)),
        tags: crate::tags::Tags::from_column(r.get::<_, Option<String>>(23).as_deref())
            .map_err(|e| bad(&e.to_string()))?,
        exit_ip: crate::store::rows::read_exit_ip(r.get(24)).map_err(|_| bad("exit_ip"))?,
        exit_seen_at: r.get::<_, Option<SystemTime>>(25).map(fmt_time),
    })
}

/// A pair row of `PAIR_COLS`.
pub(crate) fn pair_row(r: &Row) -> Result<PairRow, StoreError> {
    let endpoint: i64 = r.get(1);
    let destination: String = r.get(2);
    let bad = |what: &str| corrupt(format!("pair ({endpoint}, {destination}): {what}"));
    let state: String = r.get(3);
    let state: State = state.parse().map_err(|_| bad("state"))?;
    let reason: Option<String> = r.get(4);
    let phase: Option<String> = r.get(5);
    let status: Option<i32> = r.get(6);
    let cooldown_ms: Option<i64> = r.get(10);
    let streak: i32 = r.get(8);
    let reason_streak: i32 = r.get(9);
    let left: i64 = r.get(16);
    Ok(PairRow {
        pool: r.get(0),
        cooldown_until: r.get(11),
        claim: claim(r.get(14), r.get(15)),
        rev: r.get(13),
        state_changed_at: fmt_time(r.get::<_, SystemTime>(12)),
        record: PairRecord {
            endpoint,
            destination: destination.clone(),
            from: state,
            trial: None,
            health: StoredHealth {
                state,
                reason: parse_col(reason.as_deref()).map_err(|_| bad("reason"))?,
                phase: parse_col(phase.as_deref()).map_err(|_| bad("phase"))?,
                detail: r.get(7),
                streak: streak.max(0) as u32,
                reason_streak: reason_streak.max(0) as u32,
                cooldown_ms: cooldown_ms.map(|v| v.max(0) as u64),
                cooldown_left: (state == State::Cooling)
                    .then(|| Duration::from_millis(left.max(0) as u64)),
            },
            status: status.and_then(|s| u16::try_from(s).ok()),
        },
    })
}

/// An event row of `EVENT_COLS`.
pub(crate) fn event_row(r: &Row) -> EventRow {
    let status: Option<i32> = r.get(11);
    EventRow {
        id: r.get(0),
        at: fmt_time(r.get::<_, SystemTime>(1)),
        kind: r.get(2),
        endpoint: r.get(3),
        from: r.get(4),
        to: r.get(5),
        reason: r.get(6),
        phase: r.get(7),
        detail: r.get(8),
        lease: r.get(9),
        destination: r.get(10),
        status: status.and_then(|s| u16::try_from(s).ok()),
        blame: r.get(12),
    }
}

/// The rows of these endpoints and pairs as they are now (none: an endpoint removed, a
/// pair with no row), in their order: one key a statement (`statements::FRESH_ENDPOINTS`
/// and `FRESH_PAIRS`, prepared on `c`), all sent when first polled. The outer error is the
/// connection's; the inner, a row that does not read.
pub(super) async fn rows_now(
    c: &Client,
    (endpoints_st, endpoints): (&Statement, &[EndpointId]),
    (pairs_st, pairs): (&Statement, &[(EndpointId, String)]),
) -> Result<Result<Vec<RowNow>, StoreError>, tokio_postgres::Error> {
    let found_endpoints = join_all(
        endpoints
            .iter()
            .map(|id| async move { c.query_opt(endpoints_st, &[id]).await }),
    );
    let found_pairs = join_all(
        pairs
            .iter()
            .map(|(id, d)| async move { c.query_opt(pairs_st, &[id, d]).await }),
    );
    let (found_endpoints, found_pairs) = futures_util::join!(found_endpoints, found_pairs);
    let mut v = Vec::new();
    for (&id, r) in endpoints.iter().zip(found_endpoints) {
        let row = match r?.as_ref().map(endpoint_row).transpose() {
            Ok(row) => row.map(Box::new),
            Err(e) => return Ok(Err(e)),
        };
        v.push(RowNow::Endpoint(id, row));
    }
    for ((id, d), r) in pairs.iter().zip(found_pairs) {
        let row = match r?.as_ref().map(pair_row).transpose() {
            Ok(row) => row.map(Box::new),
            Err(e) => return Ok(Err(e)),
        };
        v.push(RowNow::Pair(*id, d.clone(), row));
    }
    Ok(Ok(v))
}
