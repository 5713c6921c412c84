//! SQLite queries for observability: filtered event reads, retention pruning, the status page's
//! endpoint sample and transition times.

use std::time::SystemTime;

use rusqlite::params_from_iter;
use rusqlite::types::Value;

use super::endpoints::{read_endpoint, ENDPOINT_COLS};
use super::events::{read_event, EVENT_COLS};
use super::Sqlite;
use crate::store::EventFilter;
use crate::store::{fmt_time, parse_time, EndpointRow, EventRow, StoreError};

/// The WHERE clause (after `id > ?1`) of `f` and its parameters.
fn clause(f: &EventFilter) -> (String, Vec<Value>) {
    let mut sql = String::new();
    let mut args = Vec::new();
    if let Some(e) = f.endpoint {
        sql.push_str(" AND endpoint = ?");
        args.push(Value::Integer(e));
    }
    if !f.kinds.is_empty() {
        sql.push_str(" AND kind IN (");
        sql.push_str(&vec!["?"; f.kinds.len()].join(","));
        sql.push(')');
        args.extend(f.kinds.iter().map(|k| Value::Text(k.clone())));
    }
    if let Some(t) = f.since {
        // `at` is fixed-width RFC 3339 UTC, so text order is time order.
        sql.push_str(" AND at >= ?");
        args.push(Value::Text(fmt_time(t)));
    }
    (sql, args)
}

impl Sqlite {
    /// Events matching `f` with id > `after`, oldest first.
    pub fn events_matching(
        &self,
        f: &EventFilter,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let (clause, mut args) = clause(f);
        let sql =
            format!("SELECT {EVENT_COLS} FROM events WHERE id > ?{clause} ORDER BY id LIMIT ?");
        args.insert(0, Value::Integer(after));
        args.push(Value::Integer(limit as i64));
        let mut st = self.conn.prepare(&sql)?;
        let rows = st.query_map(params_from_iter(args), read_event)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The last `n` events matching `f`, oldest first.
    pub fn last_events_matching(
        &self,
        f: &EventFilter,
        n: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let (clause, mut args) = clause(f);
        let sql = format!(
            "SELECT {EVENT_COLS} FROM events WHERE id > ?{clause} ORDER BY id DESC LIMIT ?"
        );
        args.insert(0, Value::Integer(0));
        args.push(Value::Integer(n as i64));
        let mut st = self.conn.prepare(&sql)?;
        let rows = st.query_map(params_from_iter(args), read_event)?;
        let mut v: Vec<EventRow> = rows.collect::<Result<_, _>>()?;
        v.reverse();
        Ok(v)
    }

    /// Delete up to `batch` of the oldest events that happened before `before`; returns
    /// how many went. Only the `batch` lowest ids are looked at, so one call costs
    /// O(batch) whatever the table's size; ids follow time, so the oldest come first.
    /// Endpoint rows are never touched.
    pub fn prune_events(&mut self, before: SystemTime, batch: usize) -> Result<usize, StoreError> {
        // New ids continue after the highest id in `endpoints` and in `events`
        // (`insert::NEXT_ID`). When the highest endpoint id belongs to a removed endpoint,
        // its newest event stays, however old: else its id would be handed out again.
        let n = self.conn.execute(
            "DELETE FROM events WHERE id IN (SELECT id FROM ( \
               SELECT id, at FROM events WHERE id IS NOT ( \
                 SELECT MAX(e.id) FROM events e \
                 WHERE e.endpoint = (SELECT MAX(endpoint) FROM events) \
                   AND NOT EXISTS (SELECT 1 FROM endpoints n WHERE n.id = e.endpoint)) \
               ORDER BY id LIMIT ?2) WHERE at < ?1)",
            rusqlite::params![fmt_time(before), batch as i64],
        )?;
        Ok(n)
    }

    /// `state_changed` times since `since`, with the endpoint's pool (endpoints removed
    /// since are left out), newest first; at most `cap` rows are read.
    pub fn transition_times(
        &self,
        since: SystemTime,
        cap: usize,
    ) -> Result<Vec<(String, SystemTime)>, StoreError> {
        // Walks the newest events backwards and stops at the first one older than
        // `since`: the cost is the last hour's events, not the table.
        let mut st = self.conn.prepare_cached(
            "SELECT e.at, e.kind, n.pool FROM events e LEFT JOIN endpoints n ON n.id = e.endpoint \
             ORDER BY e.id DESC LIMIT ?1",
        )?;
        let cutoff = fmt_time(since);
        let mut rows = st.query(rusqlite::params![cap as i64])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let at: String = r.get(0)?;
            if at < cutoff {
                break;
            }
            let kind: String = r.get(1)?;
            let pool: Option<String> = r.get(2)?;
            if let (true, Some(pool), Some(t)) = (kind == "state_changed", pool, parse_time(&at)) {
                out.push((pool, t));
            }
        }
        Ok(out)
    }

    /// Up to `limit` endpoints of a pool for the status page, those that need attention
    /// (not available) first, then by id.
    pub fn page_rows(&self, pool: &str, limit: usize) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE pool = ?1 \
             ORDER BY state = 'available', id LIMIT ?2"
        );
        let mut st = self.conn.prepare_cached(&sql)?;
        let rows = st.query_map(rusqlite::params![pool, limit as i64], read_endpoint)?;
        rows.map(|r| r?).collect()
    }
}
