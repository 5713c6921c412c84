//! SQLite queries for observability: filtered event reads, retention pruning, the status page's
//! endpoint sample and transition times.

use std::time::SystemTime;

use rusqlite::params_from_iter;
use rusqlite::types::Value;

use super::endpoints::{read_endpoint, ENDPOINT_COLS};
use super::events::{chain_args, read_event, CHAIN, EVENT_COLS};
use super::Sqlite;
use crate::store::EventFilter;
use crate::store::{fmt_time, parse_time, EndpointRow, EventRow, StoreError};

/// The WHERE clause (after `id > ?`) of `f` and its parameters.
fn clause(f: &EventFilter) -> (String, Vec<Value>) {
    let mut sql = String::new();
    let mut args = Vec::new();
    if let Some(e) = f.endpoint {
        // `chain` is the endpoint's events (`through_chain`); the column check keeps a
        // damaged chain from showing another endpoint's.
        sql.push_str(" AND id IN (SELECT id FROM chain) AND endpoint = ?");
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

/// The `WITH` clause that names `chain` when `f` is about one endpoint (events with ids
/// above `after`, at most `most`), and its parameters; nothing otherwise.
fn through_chain(f: &EventFilter, after: i64, most: Option<usize>) -> (&'static str, Vec<Value>) {
    match f.endpoint {
        Some(e) => (CHAIN, chain_args(e, after, most)),
        None => ("", Vec::new()),
    }
}

impl Sqlite {
    /// Events matching `f` with id > `after`, oldest first.
    pub fn events_matching(
        &self,
        f: &EventFilter,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let (chain, mut args) = through_chain(f, after, None);
        let (clause, more) = clause(f);
        let sql = format!(
            "{chain}SELECT {EVENT_COLS} FROM events WHERE id > ?{clause} ORDER BY id LIMIT ?"
        );
        args.push(Value::Integer(after));
        args.extend(more);
        args.push(Value::Integer(limit as i64));
        let mut st = self.conn.prepare_cached(&sql)?;
        let rows = st.query_map(params_from_iter(args), read_event)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The last `n` events matching `f`, oldest first.
    pub fn last_events_matching(
        &self,
        f: &EventFilter,
        n: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        // With nothing else to match, the last `n` of the chain are the last `n` events.
        let most = (f.kinds.is_empty() && f.since.is_none()).then_some(n);
        let (chain, mut args) = through_chain(f, 0, most);
        let (clause, more) = clause(f);
        let sql = format!(
            "{chain}SELECT {EVENT_COLS} FROM events WHERE id > ?{clause} ORDER BY id DESC LIMIT ?"
        );
        args.push(Value::Integer(0));
        args.extend(more);
        args.push(Value::Integer(n as i64));
        let mut st = self.conn.prepare_cached(&sql)?;
        let rows = st.query_map(params_from_iter(args), read_event)?;
        let mut v: Vec<EventRow> = rows.collect::<Result<_, _>>()?;
        v.reverse();
        Ok(v)
    }

    /// Delete up to `batch` of the oldest events that happened before `before`; returns
    /// how many went. Only the `batch` lowest ids are looked at, so one call costs
    /// O(batch) whatever the table's size; ids follow time, so the oldest come first.
    /// Endpoint rows are never touched; a removed endpoint's id is remembered after its
    /// last event went.
    pub fn prune_events(&mut self, before: SystemTime, batch: usize) -> Result<usize, StoreError> {
        // Two events stay, however old. The newest: SQLite gives a new row the largest id
        // plus one, so with the table emptied ids would start again at 1 and the chains'
        // heads would point at new events. And the newest of the removed endpoint with the
        // largest id, which is what keeps that id from coming back in a copy to PostgreSQL
        // (its next id is read from `events`). Only a run of the lowest ids goes, up to the
        // first one that is not old enough (a clock set back leaves no hole in a chain).
        let n = self.conn.execute(
            "WITH w AS (SELECT id, at FROM events WHERE id < (SELECT MAX(id) FROM events) \
               ORDER BY id LIMIT ?2) \
             DELETE FROM events WHERE id IN (SELECT id FROM w WHERE id < COALESCE( \
               (SELECT MIN(id) FROM w WHERE at >= ?1), 9223372036854775807)) \
               AND id IS NOT (SELECT last_event FROM removed_endpoints ORDER BY id DESC LIMIT 1)",
            rusqlite::params![fmt_time(before), batch as i64],
        )?;
        if n > 0 {
            // A removed endpoint whose events are all gone keeps its row only so its id
            // is not handed out again, and the largest id does that for all of them.
            self.conn.execute(
                "DELETE FROM removed_endpoints \
                 WHERE last_event < COALESCE((SELECT MIN(id) FROM events), 9223372036854775807) \
                   AND id < (SELECT MAX(id) FROM removed_endpoints)",
                [],
            )?;
        }
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
