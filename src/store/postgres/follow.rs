//! `proxypool events --follow` on PostgreSQL. Event ids are taken before commit, so
//! several daemons commit them in any order and "every id past the last one printed" would
//! miss an event whose transaction committed after a later id's. Events are followed by
//! transaction id instead, as the change feed follows rows (`feed`): each read takes the
//! events of transactions with ids from the previous read's `xmin` on, less those printed.

use std::collections::HashMap;

use super::read::{event_row, EVENT_COLS};
use super::Postgres;
use crate::store::{EventFilter, EventRow, StoreError};

/// Where a follow stands.
#[derive(Debug, Clone, Default)]
pub struct FollowAt {
    /// Events past this id are new whatever their transaction (the start: what was
    /// printed before following went up to here).
    after: i64,
    /// The `xmin` of the last completed read.
    xmin: i64,
    /// Events printed whose transaction ids are at least `xmin`: the next read lists them
    /// again.
    seen: HashMap<i64, i64>,
    /// A read that hit its limit goes on past this id, still from `xmin`.
    pass: Option<Pass>,
}

#[derive(Debug, Clone)]
struct Pass {
    last_id: i64,
    /// The `xmin` of the pass's first read: where the feed stands once it is done.
    xmin: i64,
}

impl FollowAt {
    /// Follow after event `after` (what was printed before).
    pub fn after(after: i64) -> FollowAt {
        FollowAt {
            after,
            xmin: -1,
            ..FollowAt::default()
        }
    }
}

/// The start: events up to `at.after` are history, printed or not.
async fn start(
    tx: &tokio_postgres::Transaction<'_>,
    at: &mut FollowAt,
    xmin: i64,
) -> Result<(), tokio_postgres::Error> {
    at.xmin = xmin;
    for r in &tx
        .query(
            "SELECT id, xid::text::bigint FROM events \
             WHERE xid >= $1::bigint::text::xid8 AND id <= $2",
            &[&xmin, &at.after],
        )
        .await?
    {
        at.seen.insert(r.get(0), r.get(1));
    }
    Ok(())
}

impl FollowAt {
    /// The events of `rows` (read in a snapshot with `xmin`) not printed yet; where the
    /// follow stands after them (`more`: the read hit its limit, go on past its last id).
    fn take(&mut self, rows: &[tokio_postgres::Row], xmin: i64, more: bool) -> Vec<EventRow> {
        let from_id = self.pass.as_ref().map_or(i64::MIN, |p| p.last_id);
        let pass_xmin = self.pass.as_ref().map_or(xmin, |p| p.xmin);
        let mut out = Vec::new();
        for r in rows {
            let id: i64 = r.get(0);
            let xid: Option<i64> = r.get(13);
            if self.seen.contains_key(&id) {
                continue;
            }
            out.push(event_row(r));
            if let Some(xid) = xid {
                self.seen.insert(id, xid);
            }
        }
        if more {
            let last_id = rows.last().map_or(from_id, |r| r.get(0));
            self.pass = Some(Pass {
                last_id,
                xmin: pass_xmin,
            });
        } else {
            self.pass = None;
            self.xmin = pass_xmin;
            self.after = self.after.max(rows.last().map_or(self.after, |r| r.get(0)));
            self.seen.retain(|_, xid| *xid >= pass_xmin);
        }
        out
    }
}

impl Postgres {
    /// The events matching `f` committed since the last call, oldest id first; `true` when
    /// more are waiting (the limit was hit).
    pub fn follow_events(
        &self,
        f: &EventFilter,
        at: &mut FollowAt,
        limit: usize,
    ) -> Result<(Vec<EventRow>, bool), StoreError> {
        let limit = limit.clamp(1, i64::MAX as usize) as i64;
        self.block(async {
            let mut c = self.client().await?;
            let r: Result<(Vec<EventRow>, bool), tokio_postgres::Error> = async {
                let tx = super::snapshot(&mut c).await?;
                let xmin: i64 = tx
                    .query_one(
                        "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
                        &[],
                    )
                    .await?
                    .get(0);
                if at.xmin < 0 {
                    start(&tx, at, xmin).await?;
                }
                let from_id = at.pass.as_ref().map_or(i64::MIN, |p| p.last_id);
                let sql = format!(
                    "SELECT {EVENT_COLS}, xid::text::bigint FROM events \
                     WHERE (xid >= $1::bigint::text::xid8 OR id > $2) AND id > $3 \
                     AND ($4::bigint IS NULL OR endpoint = $4) \
                     AND (cardinality($5::text[]) = 0 OR kind = ANY($5)) \
                     AND ($6::timestamptz IS NULL OR at >= $6) ORDER BY id LIMIT $7"
                );
                let rows = tx
                    .query(
                        &sql,
                        &[
                            &at.xmin,
                            &at.after,
                            &from_id,
                            &f.endpoint,
                            &f.kinds,
                            &f.since,
                            &limit,
                        ],
                    )
                    .await?;
                tx.commit().await?;
                let more = rows.len() as i64 == limit;
                let out = at.take(&rows, xmin, more);
                Ok((out, more))
            }
            .await;
            r.map_err(|e| self.err(e))
        })
    }
}
