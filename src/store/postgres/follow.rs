//! `proxypool events --follow` on PostgreSQL. Event ids are taken before commit, so
//! several daemons commit them in any order and "every id past the last one printed" would
//! miss an event whose transaction committed after a later id's. Events are followed by
//! transaction id instead, as the change feed follows rows (`feed`): each read takes the
//! events of transactions its previous read's snapshot did not see (those it saw in
//! progress, and those from its `xmax` on: `unseen`), so a transaction left open for hours elsewhere
//! makes no read larger.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::read::{event_row, EVENT_COLS};
use super::unseen::{Unseen, SNAPSHOT, UNSEEN_COLS};
use super::Postgres;
use crate::store::{EventFilter, EventRow, StoreError};

/// Where a follow stands.
#[derive(Debug, Clone, Default)]
pub struct FollowAt {
    /// Events past this id are new whatever their transaction (the start: what was
    /// printed before following went up to here).
    after: i64,
    /// What the last completed read did not see; `None` before the first.
    unseen: Option<Unseen>,
    /// Events printed whose transactions the position held (`Unseen::holds`): a paged
    /// read's later pages, in snapshots of their own, print events its first page did not
    /// see, and the next read lists them again.
    seen: HashMap<i64, i64>,
    /// A read that hit its limit goes on past this id.
    pass: Option<Pass>,
}

#[derive(Debug, Clone)]
struct Pass {
    last_id: i64,
    /// What the pass's first read did not see: where the follow stands once it is done.
    unseen: Unseen,
}

impl FollowAt {
    /// Follow after event `after` (what was printed before).
    pub fn after(after: i64) -> FollowAt {
        FollowAt {
            after,
            ..FollowAt::default()
        }
    }

    /// The events of `rows` (read in a snapshot that did not see `now`) not printed yet;
    /// where the follow stands after them (`more`: the read hit its limit, go on past its
    /// last id).
    fn take(&mut self, rows: &[tokio_postgres::Row], now: Unseen, more: bool) -> Vec<EventRow> {
        let from_id = self.pass.as_ref().map_or(i64::MIN, |p| p.last_id);
        let next = self.pass.take().map_or(now, |p| p.unseen);
        let mut out = Vec::new();
        for r in rows {
            let id: i64 = r.get(0);
            let xid: Option<i64> = r.get(13);
            if self.seen.contains_key(&id) {
                continue;
            }
            out.push(event_row(r));
            if let Some(xid) = xid.filter(|&x| next.holds(x)) {
                self.seen.insert(id, xid);
            }
        }
        if more {
            let last_id = rows.last().map_or(from_id, |r| r.get(0));
            self.pass = Some(Pass {
                last_id,
                unseen: next,
            });
        } else {
            // The last id of the whole pass (its last page may be empty).
            self.after = self.after.max(rows.last().map_or(from_id, |r| r.get(0)));
            self.seen.retain(|_, xid| next.holds(*xid));
            self.unseen = Some(next);
        }
        out
    }
}

/// What the snapshot did not see (`Unseen`).
static HEAD: LazyLock<String> = LazyLock::new(|| format!("SELECT {UNSEEN_COLS} FROM {SNAPSHOT}"));

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
                let now = Unseen::read(&tx.query_one(HEAD.as_str(), &[]).await?, 0);
                let from_id = at.pass.as_ref().map_or(i64::MIN, |p| p.last_id);
                // Every event past `after`, and those of transactions the last read did not
                // see (`Unseen`; none before the first read completes). The array is a
                // literal of the statement, planned with it: index scans of both keys.
                let Unseen { xmax, xip } = at.unseen.clone().unwrap_or_else(Unseen::none);
                let sql = format!(
                    "SELECT {EVENT_COLS}, xid::text::bigint FROM events \
                     WHERE (xid >= $1::bigint::text::xid8 OR xid = ANY ($8::bigint[]::text[]::xid8[]) \
                            OR id > $2) \
                     AND id > $3 \
                     AND ($4::bigint IS NULL OR endpoint = $4) \
                     AND (cardinality($5::text[]) = 0 OR kind = ANY($5)) \
                     AND ($6::timestamptz IS NULL OR at >= $6) ORDER BY id LIMIT $7"
                );
                let rows = tx
                    .query(
                        &sql,
                        &[
                            &xmax,
                            &at.after,
                            &from_id,
                            &f.endpoint,
                            &f.kinds,
                            &f.since,
                            &limit,
                            &xip,
                        ],
                    )
                    .await?;
                tx.commit().await?;
                let more = rows.len() as i64 == limit;
                let out = at.take(&rows, now, more);
                Ok((out, more))
            }
            .await;
            r.map_err(|e| self.err(e))
        })
    }
}
