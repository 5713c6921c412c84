//! SQLite storage of per-destination health (docs/destinations.md, "Pairs"): the
//! non-available (endpoint, destination) pairs and their events. Each write is atomic with
//! its event.

use std::time::SystemTime;

use rusqlite::{params, Connection, ErrorCode, Row, TransactionBehavior};

use super::endpoints::{deadline_of, read_cooldown, read_names};
use super::events::insert_event_on;
use super::Sqlite;
use crate::endpoint::EndpointId;
use crate::health::{Phase, Reason, State};
use crate::store::pairs::{PairRecord, PairRow, PairWrite};
use crate::store::{fmt_time, StoreError, StoredHealth};

/// Apply one pair write inside the caller's transaction (for group commit).
pub(crate) fn apply(tx: &Connection, w: &PairWrite) -> Result<(), StoreError> {
    match w {
        PairWrite::Upsert(r, ev) => upsert(tx, r, ev),
        PairWrite::Delete {
            endpoint,
            destination,
            event,
            ..
        } => {
            // Idempotent: the end state (no row) is what matters; a row already gone with
            // its endpoint (ON DELETE CASCADE) is not an error.
            tx.prepare_cached(
                "DELETE FROM destination_pairs WHERE endpoint=?1 AND destination=?2",
            )?
            .execute(params![endpoint, destination])?;
            insert_event_on(tx, Some(*endpoint), Some(destination), None, event)
        }
        PairWrite::Event {
            destination,
            status,
            event,
        } => {
            // Events about a target (`target_down`) have no endpoint.
            insert_event_on(tx, event.endpoint, Some(destination), *status, event)
        }
        // One daemon: a claim in memory is the claim; only its event is stored.
        PairWrite::Claim(c) => claim_event(tx, &c.on, &c.event),
        PairWrite::Unclaim(u) => claim_event(tx, &u.on, &u.event),
    }
}

/// The event of a trial's claim or hand-back on `on`.
fn claim_event(
    tx: &Connection,
    on: &crate::store::ClaimOn,
    event: &crate::store::NewEvent,
) -> Result<(), StoreError> {
    let dest = match on {
        crate::store::ClaimOn::Pair(_, d) => Some(d.as_str()),
        crate::store::ClaimOn::Endpoint(_) => None,
    };
    insert_event_on(tx, Some(on.endpoint()), dest, None, event)
}

/// A pair's row, inserted or replaced, and the event of its change.
fn upsert(tx: &Connection, r: &PairRecord, ev: &crate::store::NewEvent) -> Result<(), StoreError> {
    debug_assert_ne!(
        r.health.state,
        State::Available,
        "available pairs have no row"
    );
    // A transition without a detail (a deadline passing) keeps the one that
    // explains the ban: pairs hold no detail in memory.
    let res = tx
        .prepare_cached(
            "INSERT INTO destination_pairs (endpoint, destination, state, reason, phase, status, \
             detail, streak, reason_streak, cooldown_ms, cooldown_until, state_changed_at) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12) \
             ON CONFLICT (endpoint, destination) DO UPDATE SET state=excluded.state, \
             reason=excluded.reason, phase=excluded.phase, status=excluded.status, \
             detail=COALESCE(excluded.detail, destination_pairs.detail), streak=excluded.streak, reason_streak=excluded.reason_streak, \
             cooldown_ms=excluded.cooldown_ms, cooldown_until=excluded.cooldown_until, \
             state_changed_at=excluded.state_changed_at",
        )?
        .execute(params![
            r.endpoint,
            r.destination,
            r.health.state.as_str(),
            r.health.reason.map(Reason::as_str),
            r.health.phase.map(Phase::as_str),
            r.status,
            super::text(&r.health.detail),
            r.health.streak,
            r.health.reason_streak,
            r.health.cooldown_ms.map(|v| v as i64),
            deadline_of(r.health.cooldown_left).map(fmt_time),
            fmt_time(SystemTime::now()),
        ]);
    match res {
        Ok(_) => {}
        // The endpoint is gone (removed while the report was in flight).
        Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == ErrorCode::ConstraintViolation => {
            return Err(StoreError::NotFound(format!("with id {}", r.endpoint)));
        }
        Err(e) => return Err(e.into()),
    }
    insert_event_on(tx, Some(r.endpoint), Some(&r.destination), r.status, ev)
}

const PAIR_COLS: &str = "e.pool, p.endpoint, p.destination, p.state, p.reason, p.phase, p.status, \
     p.detail, p.streak, p.reason_streak, p.cooldown_ms, p.cooldown_until, p.state_changed_at";

fn read_pair(r: &Row<'_>) -> rusqlite::Result<Result<PairRow, StoreError>> {
    let endpoint: EndpointId = r.get(1)?;
    let destination: String = r.get(2)?;
    let corrupt =
        |what: &str| StoreError::Corrupt(format!("pair ({endpoint}, {destination}): {what}"));
    let build = || -> Result<PairRow, StoreError> {
        let (state, reason, phase) = read_names(r, 3, corrupt)?;
        let (cooldown_ms, cooldown_until, cooldown_left) = read_cooldown(r, 10, state)?;
        Ok(PairRow {
            pool: r.get(0)?,
            cooldown_until,
            claim: None,
            rev: 0,
            record: PairRecord {
                endpoint,
                destination: destination.clone(),
                from: state,
                trial: None,
                health: StoredHealth {
                    state,
                    reason,
                    phase,
                    detail: r.get(7)?,
                    streak: r.get(8)?,
                    reason_streak: r.get(9)?,
                    cooldown_ms,
                    cooldown_left,
                },
                status: r.get(6)?,
            },
            state_changed_at: r.get(12)?,
        })
    };
    Ok(build())
}

impl Sqlite {
    /// Apply pair writes in one transaction, all or nothing.
    pub fn write_pairs(&mut self, writes: &[PairWrite]) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for w in writes {
            apply(&tx, w)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Every stored pair (to restore on start), in (endpoint, destination) order.
    pub fn pairs(&self) -> Result<Vec<PairRow>, StoreError> {
        self.query_pairs("", params![])
    }

    /// The pairs of one endpoint (`show ID`).
    pub fn pairs_of(&self, endpoint: EndpointId) -> Result<Vec<PairRow>, StoreError> {
        self.query_pairs("WHERE p.endpoint=?1", params![endpoint])
    }

    /// The stored rows of these pairs (those that have one), in the order asked.
    pub fn pairs_at(&self, keys: &[(EndpointId, String)]) -> Result<Vec<PairRow>, StoreError> {
        let mut out = Vec::new();
        for (endpoint, destination) in keys {
            out.extend(self.query_pairs(
                "WHERE p.endpoint=?1 AND p.destination=?2",
                params![endpoint, destination],
            )?);
        }
        Ok(out)
    }

    /// The pairs of one destination (`list --destination D`).
    pub fn pairs_for(&self, destination: &str) -> Result<Vec<PairRow>, StoreError> {
        self.query_pairs("WHERE p.destination=?1", params![destination])
    }

    fn query_pairs(
        &self,
        filter: &str,
        args: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<PairRow>, StoreError> {
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT {PAIR_COLS} FROM destination_pairs p JOIN endpoints e ON e.id = p.endpoint \
             {filter} ORDER BY p.endpoint, p.destination"
        ))?;
        let rows = st.query_map(args, read_pair)?;
        rows.map(|r| r?).collect()
    }
}

#[cfg(test)]
mod tests;
