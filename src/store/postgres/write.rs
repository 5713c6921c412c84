//! Group commit on PostgreSQL: the writes of many callers in one transaction.
//!
//! A fleet shares the rows, so a write that builds on what this daemon believes is
//! guarded by it: a transition applies only while the row is still in the state it starts
//! from (and, when it decides a trial, only while that trial's claim is current); a claim
//! applies only when nobody holds the slot. A guard that finds the row changed makes the
//! write (and its `state_changed` event) not happen, and the row as it is goes back to the
//! caller for memory to follow (docs/fleet.md, "Ownership").
//!
//! The fast path sends every guarded statement of the batch at once (pipelined), then the
//! events in one statement. A trial result under a stale claim, or an error, must leave
//! nothing of its own batch behind: then the transaction is redone batch by batch, each
//! in a savepoint.

use std::time::Duration;

use futures_util::future::join_all;
use tokio_postgres::{Statement, Transaction};

use super::read::{endpoint_row, pair_row, ENDPOINT_COLS, PAIR_COLS};
use super::Postgres;
use crate::endpoint::EndpointId;
use crate::health::blame::Blame;
use crate::health::{Phase, Reason, State};
use crate::store::pairs::PairWrite;
use crate::store::{
    Applied, Claim, ClaimOn, ClaimResult, Fresh, NewEvent, StoreError, Unclaim, Write,
};

/// The channel every daemon listens on; the payload is the change number.
pub(crate) const CHANNEL: &str = "proxypool_changes";

const TRANSITION: &str = "WITH cur AS (SELECT claim_epoch FROM endpoints WHERE id = $1), \
     u AS (UPDATE endpoints SET state = $2, reason = $3, phase = $4, detail = $5, streak = $6, \
       reason_streak = $7, cooldown_ms = $8, \
       cooldown_until = now() + $9::bigint * interval '1 millisecond', \
       state_changed_at = now(), rev = $10, claim_until = NULL \
     WHERE id = $1 AND state = $11::text AND ($12::bigint IS NULL OR claim_epoch = $12) \
       AND NOT ($11::text = 'cooling' AND $2::text = 'probe_allowed' \
                AND COALESCE(cooldown_until > now(), false)) \
     RETURNING 1) \
     SELECT (SELECT count(*) FROM u), (SELECT claim_epoch FROM cur)";

const CLAIM: &str = "WITH cur AS (SELECT claim_until FROM endpoints WHERE id = $1), \
     u AS (UPDATE endpoints SET claim_epoch = $3, \
       claim_until = now() + $2::bigint * interval '1 millisecond', rev = $3 \
     WHERE id = $1 AND state = 'probe_allowed' AND (claim_until IS NULL OR claim_until <= now()) \
     RETURNING claim_epoch) \
     SELECT (SELECT claim_epoch FROM u), (SELECT GREATEST(0, CEIL(COALESCE(EXTRACT(EPOCH FROM \
       (claim_until - now())), 0) * 1000))::bigint FROM cur)";

const UNCLAIM: &str = "UPDATE endpoints SET claim_until = NULL, rev = $3 \
     WHERE id = $1 AND claim_epoch = $2 AND claim_until IS NOT NULL RETURNING 1";

const PAIR_CLAIM: &str = "WITH cur AS (SELECT claim_until FROM destination_pairs \
       WHERE endpoint = $1 AND destination = $2), \
     u AS (UPDATE destination_pairs SET claim_epoch = $4, \
       claim_until = now() + $3::bigint * interval '1 millisecond', rev = $4 \
     WHERE endpoint = $1 AND destination = $2 AND state = 'probe_allowed' \
       AND (claim_until IS NULL OR claim_until <= now()) RETURNING claim_epoch) \
     SELECT (SELECT claim_epoch FROM u), (SELECT GREATEST(0, CEIL(COALESCE(EXTRACT(EPOCH FROM \
       (claim_until - now())), 0) * 1000))::bigint FROM cur)";

const PAIR_UNCLAIM: &str = "UPDATE destination_pairs SET claim_until = NULL, rev = $4 \
     WHERE endpoint = $1 AND destination = $2 AND claim_epoch = $3 AND claim_until IS NOT NULL \
     RETURNING 1";

const PAIR_INSERT: &str = "INSERT INTO destination_pairs (endpoint, destination, state, reason, \
       phase, status, detail, streak, reason_streak, cooldown_ms, cooldown_until, \
       state_changed_at, rev) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
       now() + $11::bigint * interval '1 millisecond', now(), $12 \
     WHERE EXISTS (SELECT 1 FROM endpoints WHERE id = $1) \
     ON CONFLICT (endpoint, destination) DO NOTHING RETURNING 1";

const PAIR_UPDATE: &str = "WITH cur AS (SELECT claim_epoch FROM destination_pairs \
       WHERE endpoint = $1 AND destination = $2), \
     u AS (UPDATE destination_pairs SET state = $3, reason = $4, phase = $5, status = $6, \
       detail = COALESCE($7, detail), streak = $8, reason_streak = $9, cooldown_ms = $10, \
       cooldown_until = now() + $11::bigint * interval '1 millisecond', \
       state_changed_at = now(), rev = $12, claim_until = NULL \
     WHERE endpoint = $1 AND destination = $2 AND state = $13::text \
       AND ($14::bigint IS NULL OR claim_epoch = $14) \
       AND NOT ($13::text = 'cooling' AND $3::text = 'probe_allowed' \
                AND COALESCE(cooldown_until > now(), false)) \
     RETURNING 1) \
     SELECT (SELECT count(*) FROM u), (SELECT claim_epoch FROM cur)";

const PAIR_DELETE: &str = "WITH cur AS (SELECT claim_epoch FROM destination_pairs \
       WHERE endpoint = $1 AND destination = $2), \
     d AS (DELETE FROM destination_pairs WHERE endpoint = $1 AND destination = $2 \
       AND state = $3::text AND ($4::bigint IS NULL OR claim_epoch = $4) RETURNING 1) \
     SELECT (SELECT count(*) FROM d), (SELECT claim_epoch FROM cur)";

const REMOVE: &str = "DELETE FROM endpoints WHERE id = ANY($1::bigint[]) RETURNING id";

pub(super) const EVENTS: &str =
    "INSERT INTO events (endpoint, kind, from_state, to_state, reason, \
       phase, detail, lease, destination, status, blame) \
     SELECT e, k, f, t, r, p, d, l, ds, s, b FROM UNNEST($1::bigint[], $2::text[], $3::text[], \
       $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::int[], \
       $11::text[]) WITH ORDINALITY AS v(e, k, f, t, r, p, d, l, ds, s, b, o) ORDER BY o";

pub(super) const TOMBSTONES: &str = "INSERT INTO fleet_removals (rev, endpoint, destination) \
     SELECT $1, e, d FROM UNNEST($2::bigint[], $3::text[]) AS v(e, d)";

const SOURCE: &str = "INSERT INTO sources (pool, name, last_at, last_ok, last_detail, last_count) \
     VALUES ($1, $2, now(), $3, $4, $5) ON CONFLICT (pool, name) DO UPDATE SET \
     last_at = excluded.last_at, last_ok = excluded.last_ok, \
     last_detail = excluded.last_detail, last_count = excluded.last_count";

pub(super) const LOCK: &str =
    "UPDATE fleet_sequence SET change_seq = change_seq + 1 WHERE id = 1 RETURNING change_seq";

/// The statements of a batch, prepared once per connection (the pool's cache keeps them).
pub(super) struct Stmts {
    transition: Statement,
    claim: Statement,
    unclaim: Statement,
    pair_claim: Statement,
    pair_unclaim: Statement,
    pair_insert: Statement,
    pair_update: Statement,
    pair_delete: Statement,
    remove: Statement,
    events: Statement,
    tombstones: Statement,
    source: Statement,
}

impl Stmts {
    pub(super) async fn prepare(
        c: &deadpool_postgres::Object,
    ) -> Result<Stmts, tokio_postgres::Error> {
        let all = join_all(
            [
                TRANSITION,
                CLAIM,
                UNCLAIM,
                PAIR_CLAIM,
                PAIR_UNCLAIM,
                PAIR_INSERT,
                PAIR_UPDATE,
                PAIR_DELETE,
                REMOVE,
                EVENTS,
                TOMBSTONES,
                SOURCE,
            ]
            .map(|sql| c.prepare_cached(sql)),
        )
        .await;
        let mut it = all.into_iter();
        let mut next = || it.next().expect("one per statement");
        Ok(Stmts {
            transition: next()?,
            claim: next()?,
            unclaim: next()?,
            pair_claim: next()?,
            pair_unclaim: next()?,
            pair_insert: next()?,
            pair_update: next()?,
            pair_delete: next()?,
            remove: next()?,
            events: next()?,
            tombstones: next()?,
            source: next()?,
        })
    }
}

/// What the guarded statement of one write found.
#[derive(Debug, Clone, PartialEq)]
enum Found {
    /// Nothing to guard (events, sources).
    Plain,
    Applied,
    /// The row was no longer in the state the write starts from.
    Conflict,
    /// A trial's result under a claim that is not the current one.
    Stale,
    /// A remove named an endpoint that is gone.
    Missing(EndpointId),
    Won(i64),
    Lost(Duration),
}

fn ms(d: Option<Duration>) -> Option<i64> {
    d.map(|d| d.as_millis().min(i64::MAX as u128) as i64)
}

fn opt_i32(v: Option<u16>) -> Option<i32> {
    v.map(i32::from)
}

/// One row of `fleet_removals`.
type Tombstone = (EndpointId, Option<String>);

/// The guarded statements of `writes`, sent at once; one `Found` per write.
async fn guard_all(
    tx: &Transaction<'_>,
    st: &Stmts,
    writes: &[&Write],
    seq: i64,
    hold: Duration,
) -> Result<Vec<Found>, tokio_postgres::Error> {
    let futs = writes.iter().map(|w| guard(tx, st, w, seq, hold));
    join_all(futs).await.into_iter().collect()
}

fn hold_ms(c: &Claim, hold: Duration) -> i64 {
    c.hold.min(hold).as_millis().max(1).min(i64::MAX as u128) as i64
}

/// A guarded result: (rows applied, the slot's claim epoch before).
fn judged(row: &tokio_postgres::Row, trial: Option<i64>) -> Found {
    let n: i64 = row.get(0);
    let epoch: Option<i64> = row.get(1);
    match (n, trial) {
        (1.., _) => Found::Applied,
        (_, Some(t)) if epoch.is_some_and(|e| e != t) => Found::Stale,
        _ => Found::Conflict,
    }
}

fn claimed(row: &tokio_postgres::Row) -> Found {
    let won: Option<i64> = row.get(0);
    let left: Option<i64> = row.get(1);
    match won {
        Some(e) => Found::Won(e),
        None => Found::Lost(Duration::from_millis(left.unwrap_or(0).max(0) as u64)),
    }
}

async fn guard(
    tx: &Transaction<'_>,
    st: &Stmts,
    w: &Write,
    seq: i64,
    hold: Duration,
) -> Result<Found, tokio_postgres::Error> {
    Ok(match w {
        Write::Transition(h, _) => {
            let row = tx
                .query_one(
                    &st.transition,
                    &[
                        &h.id,
                        &h.state.as_str(),
                        &h.reason.map(Reason::as_str),
                        &h.phase.map(Phase::as_str),
                        &super::text(&h.detail),
                        &(h.streak as i32),
                        &(h.reason_streak as i32),
                        &h.cooldown_ms.map(|v| v.min(i64::MAX as u64) as i64),
                        &ms(h.cooldown_left),
                        &seq,
                        &h.from.as_str(),
                        &h.trial,
                    ],
                )
                .await?;
            judged(&row, h.trial)
        }
        Write::Claim(c) | Write::Pair(PairWrite::Claim(c)) => claim(tx, st, c, seq, hold).await?,
        Write::Unclaim(u) | Write::Pair(PairWrite::Unclaim(u)) => unclaim(tx, st, u, seq).await?,
        Write::Remove(ids) => {
            let mut distinct = ids.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let rows = tx.query(&st.remove, &[&distinct]).await?;
            let gone: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
            match distinct.iter().find(|id| !gone.contains(id)) {
                Some(&missing) => Found::Missing(missing),
                None => Found::Applied,
            }
        }
        Write::Pair(PairWrite::Upsert(r, _)) if r.from == State::Available => {
            let n = tx
                .execute(
                    &st.pair_insert,
                    &[
                        &r.endpoint,
                        &r.destination,
                        &r.state.as_str(),
                        &r.reason.map(Reason::as_str),
                        &r.phase.map(Phase::as_str),
                        &opt_i32(r.status),
                        &super::text(&r.detail),
                        &(r.streak as i32),
                        &(r.reason_streak as i32),
                        &r.cooldown_ms.map(|v| v.min(i64::MAX as u64) as i64),
                        &ms(r.cooldown_left),
                        &seq,
                    ],
                )
                .await?;
            if n > 0 {
                Found::Applied
            } else {
                Found::Conflict
            }
        }
        Write::Pair(PairWrite::Upsert(r, _)) => {
            let row = tx
                .query_one(
                    &st.pair_update,
                    &[
                        &r.endpoint,
                        &r.destination,
                        &r.state.as_str(),
                        &r.reason.map(Reason::as_str),
                        &r.phase.map(Phase::as_str),
                        &opt_i32(r.status),
                        &super::text(&r.detail),
                        &(r.streak as i32),
                        &(r.reason_streak as i32),
                        &r.cooldown_ms.map(|v| v.min(i64::MAX as u64) as i64),
                        &ms(r.cooldown_left),
                        &seq,
                        &r.from.as_str(),
                        &r.trial,
                    ],
                )
                .await?;
            judged(&row, r.trial)
        }
        Write::Pair(PairWrite::Delete {
            endpoint,
            destination,
            from,
            trial,
            ..
        }) => {
            let row = tx
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

async fn claim(
    tx: &Transaction<'_>,
    st: &Stmts,
    c: &Claim,
    seq: i64,
    hold: Duration,
) -> Result<Found, tokio_postgres::Error> {
    let ms = hold_ms(c, hold);
    let row = match &c.on {
        ClaimOn::Endpoint(id) => tx.query_one(&st.claim, &[id, &ms, &seq]).await?,
        ClaimOn::Pair(id, d) => tx.query_one(&st.pair_claim, &[id, d, &ms, &seq]).await?,
    };
    Ok(claimed(&row))
}

async fn unclaim(
    tx: &Transaction<'_>,
    st: &Stmts,
    u: &Unclaim,
    seq: i64,
) -> Result<Found, tokio_postgres::Error> {
    let n = match &u.on {
        ClaimOn::Endpoint(id) => tx.execute(&st.unclaim, &[id, &u.epoch, &seq]).await?,
        ClaimOn::Pair(id, d) => {
            tx.execute(&st.pair_unclaim, &[id, d, &u.epoch, &seq])
                .await?
        }
    };
    // A claim given back after the slot was claimed again: nothing to give back.
    Ok(if n > 0 {
        Found::Applied
    } else {
        Found::Conflict
    })
}

/// The columns of `EVENTS`, one vector each.
#[derive(Default)]
struct EventCols {
    endpoint: Vec<Option<i64>>,
    kind: Vec<String>,
    from: Vec<Option<String>>,
    to: Vec<Option<String>>,
    reason: Vec<Option<String>>,
    phase: Vec<Option<String>>,
    detail: Vec<Option<String>>,
    lease: Vec<Option<String>>,
    destination: Vec<Option<String>>,
    status: Vec<Option<i32>>,
    blame: Vec<Option<String>>,
}

impl EventCols {
    fn push(
        &mut self,
        ev: &NewEvent,
        endpoint: Option<EndpointId>,
        destination: Option<&str>,
        status: Option<u16>,
    ) {
        self.endpoint.push(endpoint);
        self.kind.push(ev.kind.as_str().to_string());
        self.from.push(ev.from.map(|s| s.as_str().to_string()));
        self.to.push(ev.to.map(|s| s.as_str().to_string()));
        self.reason.push(ev.reason.map(|r| r.as_str().to_string()));
        self.phase.push(ev.phase.map(|p| p.as_str().to_string()));
        self.detail.push(super::text(&ev.detail));
        self.lease.push(super::text(&ev.lease));
        self.destination
            .push(destination.map(|d| crate::redact::printable(d).into_owned()));
        self.status.push(opt_i32(status));
        self.blame
            .push(ev.blame.map(|b: Blame| b.as_str().to_string()));
    }

    fn is_empty(&self) -> bool {
        self.kind.is_empty()
    }
}

fn pair_dest(on: &ClaimOn) -> Option<&str> {
    match on {
        ClaimOn::Pair(_, d) => Some(d),
        ClaimOn::Endpoint(_) => None,
    }
}

/// What a batch leaves besides its guarded rows: its events (those of writes that
/// happened), tombstones, source rows; and what its caller learns.
#[derive(Default)]
struct Outcome {
    events: EventCols,
    tombstones: Vec<Tombstone>,
    changed: bool,
    claims: Vec<ClaimResult>,
    /// Keys whose rows go back to the caller.
    fresh_endpoints: Vec<EndpointId>,
    fresh_pairs: Vec<(EndpointId, String)>,
}

impl Outcome {
    fn add(&mut self, w: &Write, f: &Found) {
        let applied = matches!(f, Found::Applied | Found::Plain | Found::Won(_));
        self.changed |=
            matches!(f, Found::Applied | Found::Won(_)) && !matches!(w, Write::Event(_));
        match (w, f) {
            (Write::Transition(h, ev), _) => {
                if applied {
                    self.events.push(ev, ev.endpoint, None, None);
                } else {
                    self.fresh_endpoints.push(h.id);
                }
            }
            (Write::Event(ev), _) => self.events.push(ev, ev.endpoint, None, None),
            (Write::EventStatus(ev, s), _) => self.events.push(ev, ev.endpoint, None, *s),
            (Write::Remove(ids), _) => {
                let mut seen = std::collections::HashSet::new();
                for &id in ids.iter().filter(|id| seen.insert(**id)) {
                    let ev = NewEvent {
                        endpoint: Some(id),
                        ..NewEvent::new(crate::event_kind::EventKind::Removed)
                    };
                    self.events.push(&ev, Some(id), None, None);
                    self.tombstones.push((id, None));
                }
            }
            (Write::Claim(c) | Write::Pair(PairWrite::Claim(c)), Found::Won(epoch)) => {
                self.events
                    .push(&c.event, Some(c.on.endpoint()), pair_dest(&c.on), None);
                self.claims.push(ClaimResult::Won {
                    on: c.on.clone(),
                    epoch: *epoch,
                });
            }
            (Write::Claim(c) | Write::Pair(PairWrite::Claim(c)), f) => {
                let left = match f {
                    Found::Lost(d) => *d,
                    _ => Duration::ZERO,
                };
                self.claims.push(ClaimResult::Lost {
                    on: c.on.clone(),
                    left,
                });
                self.fresh_key(&c.on);
            }
            (Write::Unclaim(u) | Write::Pair(PairWrite::Unclaim(u)), _) => {
                if applied {
                    self.events
                        .push(&u.event, Some(u.on.endpoint()), pair_dest(&u.on), None);
                } else {
                    self.fresh_key(&u.on);
                }
            }
            (Write::Pair(PairWrite::Upsert(r, ev)), _) => {
                if applied {
                    self.events
                        .push(ev, Some(r.endpoint), Some(&r.destination), r.status);
                } else {
                    self.fresh_pairs.push((r.endpoint, r.destination.clone()));
                }
            }
            (
                Write::Pair(PairWrite::Delete {
                    endpoint,
                    destination,
                    event,
                    ..
                }),
                _,
            ) => {
                if applied {
                    self.events
                        .push(event, Some(*endpoint), Some(destination), None);
                    self.tombstones.push((*endpoint, Some(destination.clone())));
                } else {
                    self.fresh_pairs.push((*endpoint, destination.clone()));
                }
            }
            (
                Write::Pair(PairWrite::Event {
                    destination,
                    status,
                    event,
                }),
                _,
            ) => self
                .events
                .push(event, event.endpoint, Some(destination), *status),
            (Write::SourceResult { .. }, _) => {}
        }
    }

    fn fresh_key(&mut self, on: &ClaimOn) {
        match on {
            ClaimOn::Endpoint(id) => self.fresh_endpoints.push(*id),
            ClaimOn::Pair(id, d) => self.fresh_pairs.push((*id, d.clone())),
        }
    }
}

/// Write what `out` holds besides the guarded rows, and the batch's source results.
async fn finish(
    tx: &Transaction<'_>,
    st: &Stmts,
    writes: &[&Write],
    out: &Outcome,
    seq: i64,
) -> Result<(), tokio_postgres::Error> {
    let e = &out.events;
    let events = async {
        if e.is_empty() {
            return Ok(0);
        }
        tx.execute(
            &st.events,
            &[
                &e.endpoint,
                &e.kind,
                &e.from,
                &e.to,
                &e.reason,
                &e.phase,
                &e.detail,
                &e.lease,
                &e.destination,
                &e.status,
                &e.blame,
            ],
        )
        .await
    };
    let (ids, dests): (Vec<i64>, Vec<Option<String>>) = out.tombstones.iter().cloned().unzip();
    let tombstones = async {
        if ids.is_empty() {
            return Ok(0);
        }
        tx.execute(&st.tombstones, &[&seq, &ids, &dests]).await
    };
    let sources = join_all(writes.iter().filter_map(|w| match w {
        Write::SourceResult {
            pool,
            name,
            ok,
            detail,
            count,
        } => Some(async move {
            let count = count.map(|c| c as i64);
            tx.execute(&st.source, &[pool, name, ok, detail, &count])
                .await
        }),
        _ => None,
    }));
    let (a, b, c) = futures_util::join!(events, tombstones, sources);
    a?;
    b?;
    c.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(())
}

/// The rows of `out`'s fresh keys, as they are now.
async fn fresh(
    tx: &Transaction<'_>,
    out: &Outcome,
) -> Result<Result<Vec<Fresh>, StoreError>, tokio_postgres::Error> {
    let mut v = Vec::new();
    if !out.fresh_endpoints.is_empty() {
        let sql = format!("SELECT {ENDPOINT_COLS} FROM endpoints WHERE id = ANY($1::bigint[])");
        let rows = tx.query(&sql, &[&out.fresh_endpoints]).await?;
        let mut found = Vec::new();
        for r in &rows {
            match endpoint_row(r) {
                Ok(row) => found.push(row),
                Err(e) => return Ok(Err(e)),
            }
        }
        for &id in &out.fresh_endpoints {
            let row = found.iter().find(|r| r.id == id).cloned().map(Box::new);
            v.push(Fresh::Endpoint(id, row));
        }
    }
    if !out.fresh_pairs.is_empty() {
        let (ids, dests): (Vec<i64>, Vec<String>) = out.fresh_pairs.iter().cloned().unzip();
        let sql = format!(
            "SELECT {PAIR_COLS} FROM destination_pairs p JOIN endpoints e ON e.id = p.endpoint \
             WHERE (p.endpoint, p.destination) IN \
               (SELECT * FROM UNNEST($1::bigint[], $2::text[]))"
        );
        let rows = tx.query(&sql, &[&ids, &dests]).await?;
        let mut found = Vec::new();
        for r in &rows {
            match pair_row(r) {
                Ok(row) => found.push(row),
                Err(e) => return Ok(Err(e)),
            }
        }
        for (id, d) in &out.fresh_pairs {
            let row = found
                .iter()
                .find(|p| p.record.endpoint == *id && &p.record.destination == d)
                .cloned()
                .map(Box::new);
            v.push(Fresh::Pair(*id, d.clone(), row));
        }
    }
    Ok(Ok(v))
}

fn bad_group(founds: &[Found]) -> bool {
    founds
        .iter()
        .any(|f| matches!(f, Found::Stale | Found::Missing(_)))
}

/// The error a batch that must not apply answers with.
fn group_error(writes: &[&Write], founds: &[Found], fresh: Vec<Fresh>) -> StoreError {
    for (w, f) in writes.iter().zip(founds) {
        match f {
            Found::Missing(id) => return StoreError::NotFound(format!("with id {id}")),
            Found::Stale => {
                let what = match w {
                    Write::Transition(h, _) => format!("endpoint {}", h.id),
                    Write::Pair(PairWrite::Upsert(r, _)) => {
                        format!("endpoint {} for {}", r.endpoint, r.destination)
                    }
                    Write::Pair(PairWrite::Delete {
                        endpoint,
                        destination,
                        ..
                    }) => format!("endpoint {endpoint} for {destination}"),
                    _ => "a trial".to_string(),
                };
                return StoreError::StaleClaim { what, fresh };
            }
            _ => {}
        }
    }
    StoreError::Corrupt("a batch refused without a reason".into())
}

impl Postgres {
    /// Group commit: see the module documentation. The outer error is a failure of the
    /// whole commit (the database unreachable: nothing was committed).
    pub fn write_groups(
        &mut self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let hold = self.claim_hold();
        self.block(async {
            let mut c = self.client().await?;
            let st = Stmts::prepare(&c).await.map_err(|e| self.err(e))?;
            match self.fast(&mut c, &st, groups, hold).await {
                Ok(Some(done)) => return Ok(done),
                Ok(None) => {}
                Err(e) if super::is_connection_error(&e) => return Err(self.err(e)),
                // A statement the server refused: find out whose, batch by batch.
                Err(_) => {}
            }
            self.one_by_one(&mut c, &st, groups, hold)
                .await
                .map_err(|e| self.err(e))
        })
    }

    /// Every batch at once; `None` when one of them must not apply (then nothing did).
    async fn fast(
        &self,
        c: &mut deadpool_postgres::Object,
        st: &Stmts,
        groups: &[Vec<Write>],
        hold: Duration,
    ) -> Result<Option<Vec<Result<Applied, StoreError>>>, tokio_postgres::Error> {
        let tx = c.transaction().await?;
        let seq: i64 = tx.query_one(LOCK, &[]).await?.get(0);
        let all: Vec<&Write> = groups.iter().flatten().collect();
        let founds = guard_all(&tx, st, &all, seq, hold).await?;
        if bad_group(&founds) {
            tx.rollback().await?;
            return Ok(None);
        }
        let mut outs = Vec::with_capacity(groups.len());
        let mut total = Outcome::default();
        let mut at = 0;
        for g in groups {
            let mut out = Outcome::default();
            for (w, f) in g.iter().zip(&founds[at..at + g.len()]) {
                out.add(w, f);
                total.add(w, f);
            }
            at += g.len();
            outs.push(out);
        }
        finish(&tx, st, &all, &total, seq).await?;
        if total.changed || !total.tombstones.is_empty() {
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &seq.to_string()])
                .await?;
        }
        let mut results = Vec::with_capacity(outs.len());
        for out in outs {
            results.push(fresh(&tx, &out).await?.map(|fresh| Applied {
                claims: out.claims,
                fresh,
                seq,
            }));
        }
        tx.commit().await?;
        Ok(Some(results))
    }

    /// Batch by batch, each in a savepoint: one that must not apply leaves nothing.
    async fn one_by_one(
        &self,
        c: &mut deadpool_postgres::Object,
        st: &Stmts,
        groups: &[Vec<Write>],
        hold: Duration,
    ) -> Result<Vec<Result<Applied, StoreError>>, tokio_postgres::Error> {
        let mut tx = c.transaction().await?;
        let seq: i64 = tx.query_one(LOCK, &[]).await?.get(0);
        let mut results = Vec::with_capacity(groups.len());
        let mut changed = false;
        for g in groups {
            let writes: Vec<&Write> = g.iter().collect();
            let sp = tx.savepoint("batch").await?;
            let founds = match guard_all(&sp, st, &writes, seq, hold).await {
                Ok(f) => f,
                Err(e) if super::is_connection_error(&e) => return Err(e),
                Err(e) => {
                    sp.rollback().await?;
                    results.push(Err(StoreError::Postgres(e)));
                    continue;
                }
            };
            let mut out = Outcome::default();
            for (w, f) in writes.iter().zip(&founds) {
                out.add(w, f);
            }
            if bad_group(&founds) {
                sp.rollback().await?;
                let rows = fresh(&tx, &out).await?.unwrap_or_default();
                results.push(Err(group_error(&writes, &founds, rows)));
                continue;
            }
            if let Err(e) = finish(&sp, st, &writes, &out, seq).await {
                if super::is_connection_error(&e) {
                    return Err(e);
                }
                sp.rollback().await?;
                results.push(Err(StoreError::Postgres(e)));
                continue;
            }
            sp.commit().await?;
            changed |= out.changed || !out.tombstones.is_empty();
            results.push(fresh(&tx, &out).await?.map(|fresh| Applied {
                claims: out.claims,
                fresh,
                seq,
            }));
        }
        if changed {
            tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &seq.to_string()])
                .await?;
        }
        tx.commit().await?;
        Ok(results)
    }
}
