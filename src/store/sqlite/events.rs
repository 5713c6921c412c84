//! SQLite's events table: appending an event row, reading events in order.

use std::time::SystemTime;

use rusqlite::types::Value;
use rusqlite::{params, Connection, Row};

use super::{text, Sqlite};
use crate::endpoint::EndpointId;
use crate::health::blame::Blame;
use crate::health::{Phase, Reason, State};
use crate::store::{fmt_time, EventFilter, EventRow, NewEvent, StoreError};

pub(super) fn insert_event(tx: &Connection, ev: &NewEvent) -> Result<(), StoreError> {
    insert_event_on(tx, ev.endpoint, None, None, ev)
}

/// Append `ev` as about `endpoint` (a pair write names its pair's endpoint), with the
/// pair's `destination` and the report's HTTP `status` (docs/destinations.md, "Events").
pub(super) fn insert_event_on(
    tx: &Connection,
    endpoint: Option<EndpointId>,
    destination: Option<&str>,
    status: Option<u16>,
    ev: &NewEvent,
) -> Result<(), StoreError> {
    // `prev`: the endpoint's newest event so far, the head of its chain (migration 09),
    // kept in its row or, once it is removed, in `removed_endpoints`.
    tx.prepare_cached(
        "INSERT INTO events (at, endpoint, kind, from_state, to_state, reason, phase, detail, lease, \
         destination, status, blame, prev) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12, \
         CASE WHEN ?2 IS NOT NULL THEN COALESCE((SELECT last_event FROM endpoints WHERE id = ?2), \
         (SELECT last_event FROM removed_endpoints WHERE id = ?2)) END)",
    )?
    .execute(params![
        fmt_time(SystemTime::now()),
        endpoint,
        ev.kind.as_str(),
        ev.from.map(State::as_str),
        ev.to.map(State::as_str),
        ev.reason.map(Reason::as_str),
        ev.phase.map(Phase::as_str),
        text(&ev.detail),
        text(&ev.lease),
        destination.map(crate::redact::printable),
        status,
        ev.blame.map(Blame::as_str),
    ])?;
    if let Some(e) = endpoint {
        let id = tx.last_insert_rowid();
        let moved = tx
            .prepare_cached("UPDATE endpoints SET last_event = ?1 WHERE id = ?2")?
            .execute(params![id, e])?;
        if moved == 0 {
            tx.prepare_cached("UPDATE removed_endpoints SET last_event = ?1 WHERE id = ?2")?
                .execute(params![id, e])?;
        }
    }
    Ok(())
}

/// The columns `read_event` reads, in its order.
pub(crate) const EVENT_COLS: &str =
    "id, at, kind, endpoint, from_state, to_state, reason, phase, detail, lease, destination, status, blame";

pub(super) fn read_event(r: &Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        id: r.get(0)?,
        at: r.get(1)?,
        kind: r.get(2)?,
        endpoint: r.get(3)?,
        from: r.get(4)?,
        to: r.get(5)?,
        reason: r.get(6)?,
        phase: r.get(7)?,
        detail: r.get(8)?,
        lease: r.get(9)?,
        destination: r.get(10)?,
        status: r.get(11)?,
        blame: r.get(12)?,
    })
}

/// A `WITH` clause naming `chain(id)`: the ids of one endpoint's events, walked from its
/// newest (the head in its row, or in `removed_endpoints` once it is removed) through each
/// event's `prev` (migration 09), down to a given id and at most a given number of them.
/// Each step goes to a lower id, so a walk ends whatever the rows hold.
/// Its parameters come first, from [`chain_args`].
pub(super) const CHAIN: &str = "WITH RECURSIVE chain(id, n) AS (SELECT COALESCE(\
    (SELECT last_event FROM endpoints WHERE id = ?), \
    (SELECT last_event FROM removed_endpoints WHERE id = ?)), 1 \
    UNION ALL SELECT e.prev, c.n + 1 FROM events e JOIN chain c ON e.id = c.id \
    WHERE e.prev > ? AND e.prev < e.id AND c.n < ?) ";

/// [`CHAIN`]'s parameters: `endpoint`'s events with ids above `after`, at most `most`.
pub(super) fn chain_args(endpoint: EndpointId, after: i64, most: Option<usize>) -> Vec<Value> {
    let most = most.map_or(i64::MAX, |m| m as i64);
    vec![
        Value::Integer(endpoint),
        Value::Integer(endpoint),
        Value::Integer(after),
        Value::Integer(most),
    ]
}

impl Sqlite {
    /// Events in order, optionally for one endpoint, with id > `after`.
    pub fn events(
        &self,
        endpoint: Option<EndpointId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let f = EventFilter {
            endpoint,
            ..EventFilter::default()
        };
        self.events_matching(&f, after, limit)
    }

    /// The most recent events of an endpoint, newest first.
    pub fn recent_events(
        &self,
        endpoint: Option<EndpointId>,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let f = EventFilter {
            endpoint,
            ..EventFilter::default()
        };
        let mut v = self.last_events_matching(&f, limit)?;
        v.reverse();
        Ok(v)
    }
}

#[cfg(test)]
mod tests;
