//! Group commit in one round trip, for the common batch whose every guard applies.
//!
//! The two-round-trip commit (`write`) waits for its guards' results to know which events
//! to write. Here they are assumed to apply: `BEGIN`, the change number, the guards, a
//! check that they all applied (`statements::ALL_APPLIED`), the events, the notification
//! and `COMMIT` go out at once. A guard that did not apply makes the check fail, which
//! aborts the transaction before its events, and `COMMIT` then ends it as a rollback: the
//! caller runs the two-round-trip commit instead, from scratch. Only writes whose applying
//! the check can see take this way; a batch with a claim (contended by design), a removal
//! or a pair's deletion (a row that is gone carries no change number) takes the other.

use std::time::Duration;

use tokio_postgres::Client;

use super::guard::{guard_all, Found};
use super::outcome::{finish, Outcome};
use super::statements::{Stmts, CHANNEL};
use crate::store::pairs::PairWrite;
use crate::store::{Applied, ClaimOn, StoreError, Write};

/// The keys the check looks for, one per guarded write; `None` when a write is one whose
/// applying the check cannot see.
#[derive(Default)]
struct Keys {
    endpoints: Vec<i64>,
    pair_ids: Vec<i64>,
    pair_dests: Vec<String>,
}

impl Keys {
    fn of(writes: &[&Write]) -> Option<Keys> {
        let mut k = Keys::default();
        for w in writes {
            match w {
                Write::Transition(h, _) => k.endpoints.push(h.id),
                Write::Unclaim(u) | Write::Pair(PairWrite::Unclaim(u)) => k.on(&u.on),
                Write::Pair(PairWrite::Upsert(r, _)) => {
                    k.pair_ids.push(r.endpoint);
                    k.pair_dests.push(r.destination.clone());
                }
                Write::Event(_)
                | Write::EventStatus(..)
                | Write::Pair(PairWrite::Event { .. })
                | Write::SourceResult { .. } => {}
                Write::Claim(_)
                | Write::Pair(PairWrite::Claim(_))
                | Write::Remove(_)
                | Write::Pair(PairWrite::Delete { .. }) => return None,
            }
        }
        Some(k)
    }

    fn on(&mut self, on: &ClaimOn) {
        match on {
            ClaimOn::Endpoint(id) => self.endpoints.push(*id),
            ClaimOn::Pair(id, d) => {
                self.pair_ids.push(*id);
                self.pair_dests.push(d.clone());
            }
        }
    }
}

/// What a write leaves when its guard applies.
fn assumed(w: &Write) -> Found {
    match w {
        Write::Event(_)
        | Write::EventStatus(..)
        | Write::Pair(PairWrite::Event { .. })
        | Write::SourceResult { .. } => Found::Plain,
        _ => Found::Applied,
    }
}

/// Every batch of `groups` in one round trip. `Ok(None)`: this way does not fit the
/// batch, or a guard did not apply; nothing was committed and the connection is clean.
pub(super) async fn one_trip(
    c: &Client,
    st: &Stmts,
    groups: &[Vec<Write>],
    hold: Duration,
) -> Result<Option<Vec<Result<Applied, StoreError>>>, tokio_postgres::Error> {
    let all: Vec<&Write> = groups.iter().flatten().collect();
    let Some(keys) = Keys::of(&all) else {
        return Ok(None);
    };
    let mut total = Outcome::default();
    for w in &all {
        total.add(w, &assumed(w));
    }
    let changed = total.changed || !total.tombstones.is_empty();
    let check_params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
        [&keys.endpoints, &keys.pair_ids, &keys.pair_dests];
    let check = c.query_one(&st.all_applied, &check_params);
    let notify = async {
        if changed {
            c.execute(&st.notify, &[&CHANNEL]).await.map(|_| ())
        } else {
            Ok(())
        }
    };
    // Polled in this order, so sent in it: tokio-postgres pipelines them.
    let (begun, seq, founds, checked, written, notified, committed) = futures_util::join!(
        c.batch_execute("BEGIN"),
        c.query_one(&st.next, &[]),
        guard_all(c, st, &all, hold),
        check,
        finish(c, st, &all, &total),
        notify,
        c.batch_execute("COMMIT")
    );
    begun?;
    // A failed statement aborted the transaction, and COMMIT ended it as a rollback
    // without an error of its own: the first failure, in the order sent, says why.
    let done = (|| -> Result<_, tokio_postgres::Error> {
        let (seq, founds) = (seq?, founds?);
        checked?;
        written?;
        notified?;
        Ok((seq, founds))
    })();
    let (seq, founds) = match done {
        Ok(d) => d,
        Err(e) if super::is_connection_error(&e) => return Err(e),
        // The check (a guard that did not apply) or a statement the server refused.
        Err(_) => return Ok(None),
    };
    debug_assert!(founds.iter().zip(&all).all(|(f, w)| *f == assumed(w)));
    let seq: i64 = seq.get(0);
    committed?;
    // No claims among these writes, and nothing went stale: no rows to read back.
    let results = groups
        .iter()
        .map(|_| {
            Ok(Applied {
                claims: Vec::new(),
                fresh: Vec::new(),
                seq,
            })
        })
        .collect();
    Ok(Some(results))
}
