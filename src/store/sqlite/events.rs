//! SQLite's events table: appending an event row, reading events in order.

use std::time::SystemTime;

use rusqlite::{params, Connection, Row};

use super::{text, Sqlite};
use crate::endpoint::EndpointId;
use crate::health::blame::Blame;
use crate::health::{Phase, Reason, State};
use crate::store::{fmt_time, EventRow, NewEvent, StoreError};

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
    tx.prepare_cached(
        "INSERT INTO events (at, endpoint, kind, from_state, to_state, reason, phase, detail, lease, \
         destination, status, blame) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
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

impl Sqlite {
    /// Events in order, optionally for one endpoint, with id > `after`.
    pub fn events(
        &self,
        endpoint: Option<EndpointId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT {EVENT_COLS} FROM events \
                 WHERE id > ?1 AND (?2 IS NULL OR endpoint=?2) ORDER BY id LIMIT ?3"
        ))?;
        let rows = st.query_map(params![after, endpoint, limit as i64], read_event)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The most recent events of an endpoint, newest first.
    pub fn recent_events(
        &self,
        endpoint: Option<EndpointId>,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT {EVENT_COLS} FROM events \
                 WHERE (?1 IS NULL OR endpoint=?1) ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = st.query_map(params![endpoint, limit as i64], read_event)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
