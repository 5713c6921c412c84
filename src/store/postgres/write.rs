//! Group commit on PostgreSQL: the writes of many callers in one transaction.
//!
//! A fleet shares the rows, so a write that builds on what this daemon believes is
//! guarded by it (`guard`): a guard that finds the row changed makes the write (and its
//! `state_changed` event) not happen, and the row as it is goes back to the caller for
//! memory to follow (docs/fleet.md, "Ownership").
//!
//! A commit of endpoint transitions and events alone, the common one, is one round trip:
//! one call of the database's function and the flush behind it (`commit_call`). Any other
//! commit takes two: `BEGIN`, the change number and every guarded statement of the batch
//! at once (pipelined); then the events, tombstones and source rows, the notification,
//! `COMMIT` and the flush (`Split`), again at once. A trial result under a stale claim, or
//! an error, must leave nothing of its own batch behind: then the transaction is redone
//! batch by batch (`one_by_one`).
//!
//! ## Split
//!
//! Event ids commit in id order across the fleet (`statements::EVENTS_LOCK`): the lock is
//! held from the insert of a transaction's events to its end. A commit that waited for its
//! WAL flush inside it would make the daemons' commits flush one after another, each
//! daemon's batches small (its own clients only), so that three daemons wrote half as fast
//! as one. The fast path therefore commits without waiting for the flush
//! (`synchronous_commit = off` for that transaction alone), which ends it and frees the lock
//! at once, and a transaction of its own sent right behind it (`statements::FLUSH`) waits
//! for the flush of everything before it: the daemons' flushes go together, as PostgreSQL
//! flushes concurrent commits, and nothing is answered before the flush. A server that
//! refuses the flush statement gets ordinary commits.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use tokio_postgres::{Client, Statement};

use super::commit_call;
use super::guard::{bad_group, guard_all, lock_rows, out_of_order, Found};
use super::outcome::{finish, fresh, group_error, Outcome};
use super::statements::{Stmts, CHANNEL, COMMIT_CALL};
use super::Postgres;
use crate::store::{Applied, RowNow, StoreError, Write};

/// Statement results of the first round trip of the fast path.
type Guarded = (i64, Vec<Found>);

/// Whether group commits are split from their flush (`Split` above): not known until the
/// first one, then known for the store's life.
pub(super) struct SplitState(AtomicU8);

impl Default for SplitState {
    fn default() -> Self {
        SplitState(AtomicU8::new(UNKNOWN))
    }
}

const UNKNOWN: u8 = 0;
const SPLIT: u8 = 1;
const WHOLE: u8 = 2;

/// How the fast path failed: before its `COMMIT` took effect (nothing was committed; the
/// batches may be redone one by one) or after (committed, its flush not confirmed).
enum Failed {
    Before(tokio_postgres::Error),
    After(tokio_postgres::Error),
}

/// After a failed statement the transaction is aborted: end it, so the connection goes
/// back to the pool clean (a broken connection is dropped by the pool anyway).
async fn rollback(c: &Client) {
    let _ = c.batch_execute("ROLLBACK").await;
}

/// `BEGIN`, the change number, every row locked first when the guards would not lock them
/// in order (`guard::out_of_order`), and the guards of `writes`, sent at once.
async fn begin_guarded(
    c: &Client,
    st: &Stmts,
    writes: &[&Write],
    hold: Duration,
    split: bool,
) -> Result<Guarded, tokio_postgres::Error> {
    let begin = match split {
        true => "BEGIN; SET LOCAL synchronous_commit TO off",
        false => "BEGIN",
    };
    let locked = async {
        match out_of_order(writes) {
            true => lock_rows(c, st, writes).await,
            false => Ok(()),
        }
    };
    let (begun, seq, locked, founds) = futures_util::join!(
        c.batch_execute(begin),
        c.query_one(&st.next, &[]),
        locked,
        guard_all(c, st, writes, hold)
    );
    begun?;
    let seq: i64 = seq?.get(0);
    locked?;
    Ok((seq, founds?))
}

fn changed(out: &Outcome) -> bool {
    out.changed || !out.tombstones.is_empty()
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
            let c = self.client().await?;
            let st = Stmts::prepare(&c).await.map_err(|e| self.err(e))?;
            let split = self.split(&c, &st).await?;
            let call = self.call_statement(&c, groups).await?;
            match self.fast(&c, &st, groups, hold, split, call.as_ref()).await {
                Ok(Some(done)) => return Ok(done),
                Ok(None) => {}
                // Committed: never redone. Unconfirmed counts as not written.
                Err(Failed::After(e)) => return Err(self.err(e)),
                Err(Failed::Before(e)) if super::is_connection_error(&e) => return Err(self.err(e)),
                Err(Failed::Before(e)) if call.is_some() && commit_call::is_refused(&e) => {
                    self.refuse_call(&e)
                }
                // A statement the server refused: find out whose, batch by batch.
                Err(Failed::Before(_)) => {}
            }
            match self.one_by_one(&c, &st, groups, hold).await {
                Ok(done) => Ok(done),
                Err(e) => {
                    rollback(&c).await;
                    Err(self.err(e))
                }
            }
        })
    }

    /// Whether group commits are split from their flush: the first asks the server (the
    /// flush statement once, alone), which either runs it or refuses it for good.
    async fn split(&self, c: &Client, st: &Stmts) -> Result<bool, StoreError> {
        let state = &self.inner.split.0;
        match state.load(Ordering::Relaxed) {
            SPLIT => return Ok(true),
            WHOLE => return Ok(false),
            _ => {}
        }
        match c.query_one(&st.flush, &[]).await {
            Ok(_) => state.store(SPLIT, Ordering::Relaxed),
            Err(e) if super::is_connection_error(&e) => return Err(self.err(e)),
            // Not a refusal (a statement timeout, the server short of memory): a whole
            // commit this time, and the question again at the next.
            Err(e) if !commit_call::is_refused(&e) => return Ok(false),
            Err(e) => {
                tracing::warn!(
                    error = %crate::store::pg_message(&e),
                    "the database refuses pg_logical_emit_message: each commit waits for its flush holding the events' lock (slower with several daemons)"
                );
                state.store(WHOLE, Ordering::Relaxed);
            }
        }
        Ok(state.load(Ordering::Relaxed) == SPLIT)
    }

    /// The group commit's function, prepared, when `groups` fit one call of it and the
    /// server has not refused it.
    async fn call_statement(
        &self,
        c: &deadpool_postgres::Object,
        groups: &[Vec<Write>],
    ) -> Result<Option<Statement>, StoreError> {
        if self.inner.call_refused.load(Ordering::Relaxed)
            || !commit_call::fits(groups.iter().flatten())
        {
            return Ok(None);
        }
        match c.prepare_cached(COMMIT_CALL).await {
            Ok(s) => Ok(Some(s)),
            Err(e) if super::is_connection_error(&e) => Err(self.err(e)),
            Err(e) => {
                // Refused for good only when the server will not run it (missing, or not
                // this role's to execute); another error sends this commit as statements.
                if commit_call::is_refused(&e) {
                    self.refuse_call(&e);
                }
                Ok(None)
            }
        }
    }

    /// The server will not run the group commit's function (dropped, or this role may
    /// not execute it): every commit is sent as statements from now on, said once.
    fn refuse_call(&self, e: &tokio_postgres::Error) {
        if !self.inner.call_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error = %crate::store::pg_message(e),
                "the database will not run proxypool_commit: group commits are sent as statements (one round trip more each)"
            );
        }
    }

    /// Every batch at once; `None` when one of them must not apply (then nothing did).
    /// `call`: the group commit's function, when the batches fit one call of it.
    async fn fast(
        &self,
        c: &Client,
        st: &Stmts,
        groups: &[Vec<Write>],
        hold: Duration,
        split: bool,
        call: Option<&Statement>,
    ) -> Result<Option<Vec<Result<Applied, StoreError>>>, Failed> {
        let all: Vec<&Write> = groups.iter().flatten().collect();
        if let Some(call) = call {
            return one_call(c, st, call, groups, &all, split).await;
        }
        let (seq, founds) = match begin_guarded(c, st, &all, hold, split).await {
            Ok(g) => g,
            Err(e) => {
                rollback(c).await;
                return Err(Failed::Before(e));
            }
        };
        if bad_group(&founds) {
            c.batch_execute("ROLLBACK").await.map_err(Failed::Before)?;
            return Ok(None);
        }
        let outs = outcomes(groups, &founds);
        let mut total = Outcome::default();
        for (w, f) in all.iter().zip(&founds) {
            total.add(w, f);
        }
        // The rows that changed under a write, read before COMMIT in the same round trip.
        let rows = join_all(outs.iter().map(|out| fresh(c, st, out)));
        // Sent after COMMIT (polled last): its own transaction.
        let flushed = async {
            match split {
                true => c.query_one(&st.flush, &[]).await.map(|_| ()),
                false => Ok(()),
            }
        };
        let (written, rows, committed, flushed) = futures_util::join!(
            finish(c, st, &all, &total, changed(&total)),
            rows,
            c.batch_execute("COMMIT"),
            flushed
        );
        // A COMMIT after a failed statement is a rollback that reports no error: the
        // other results say whether anything was committed.
        let rows: Result<Vec<_>, _> = rows.into_iter().collect();
        let rows = match (written, rows) {
            (Ok(()), Ok(rows)) => rows,
            (Err(e), _) | (_, Err(e)) => {
                rollback(c).await;
                return Err(Failed::Before(e));
            }
        };
        committed.map_err(Failed::Before)?;
        flushed.map_err(Failed::After)?;
        Ok(Some(applied(outs, rows, seq)))
    }

    /// Batch by batch: one that must not apply leaves nothing, and the others are written.
    /// Every row is locked first (`lock_rows`), every batch's guarded statements run next,
    /// each batch in a savepoint, and the events and source rows last: the events' lock
    /// (`statements::EVENTS_LOCK`) is then never held while this commit waits for a row,
    /// or for another daemon's insert of the same pair. A batch whose events or source rows
    /// the server refuses gets that error, and the commit is redone without it.
    async fn one_by_one(
        &self,
        c: &Client,
        st: &Stmts,
        groups: &[Vec<Write>],
        hold: Duration,
    ) -> Result<Vec<Result<Applied, StoreError>>, tokio_postgres::Error> {
        let mut refused: Vec<Option<StoreError>> = groups.iter().map(|_| None).collect();
        loop {
            if let Some(mut done) = batches(c, st, groups, hold, &mut refused).await? {
                for (r, e) in done.iter_mut().zip(&mut refused) {
                    if let Some(e) = e.take() {
                        *r = Err(e);
                    }
                }
                return Ok(done);
            }
            rollback(c).await;
        }
    }
}

/// A batch whose guarded statements were written (`batches`), its events not yet.
struct Written<'a> {
    at: usize,
    writes: Vec<&'a Write>,
    out: Outcome,
}

/// One attempt of `one_by_one` without the batches in `refused`; `None` when a batch's
/// events were refused (it is added to `refused`; the transaction is aborted).
async fn batches(
    c: &Client,
    st: &Stmts,
    groups: &[Vec<Write>],
    hold: Duration,
    refused: &mut [Option<StoreError>],
) -> Result<Option<Vec<Result<Applied, StoreError>>>, tokio_postgres::Error> {
    c.batch_execute("BEGIN").await?;
    let seq: i64 = c.query_one(&st.next, &[]).await?.get(0);
    let live = |i: usize| refused[i].is_none();
    let all: Vec<&Write> = (0..groups.len())
        .filter(|&i| live(i))
        .flat_map(|i| &groups[i])
        .collect();
    lock_rows(c, st, &all).await?;
    let mut results: Vec<Result<Applied, StoreError>> = (0..groups.len())
        .map(|_| Err(StoreError::Corrupt("a batch left out".into())))
        .collect();
    let mut kept = Vec::new();
    for (at, g) in groups.iter().enumerate().filter(|(i, _)| live(*i)) {
        match guard_batch(c, st, at, g, hold).await? {
            Ok(done) => kept.push(done),
            Err(e) => results[at] = Err(e),
        }
    }
    for k in &kept {
        if let Err(e) = finish(c, st, &k.writes, &k.out, false).await {
            if super::is_connection_error(&e) {
                return Err(e);
            }
            refused[k.at] = Some(StoreError::Postgres(e));
            return Ok(None);
        }
    }
    let any = kept.iter().any(|k| changed(&k.out));
    for k in kept {
        results[k.at] = fresh(c, st, &k.out).await?.map(|fresh| Applied {
            claims: k.out.claims,
            fresh,
            before: k.out.before,
            seq,
        });
    }
    if any {
        c.execute(&st.notify, &[&CHANNEL]).await?;
    }
    c.batch_execute("COMMIT").await?;
    Ok(Some(results))
}

/// One batch's guarded statements in a savepoint: kept, or rolled back with the batch's
/// error (a statement the server refused, a stale trial, a removal of a missing row).
async fn guard_batch<'a>(
    c: &Client,
    st: &Stmts,
    at: usize,
    g: &'a [Write],
    hold: Duration,
) -> Result<Result<Written<'a>, StoreError>, tokio_postgres::Error> {
    let writes: Vec<&Write> = g.iter().collect();
    c.batch_execute("SAVEPOINT batch").await?;
    let founds = match guard_all(c, st, &writes, hold).await {
        Ok(f) => f,
        Err(e) if super::is_connection_error(&e) => return Err(e),
        Err(e) => {
            c.batch_execute("ROLLBACK TO SAVEPOINT batch").await?;
            return Ok(Err(StoreError::Postgres(e)));
        }
    };
    let mut out = Outcome::default();
    for (w, f) in writes.iter().zip(&founds) {
        out.add(w, f);
    }
    if bad_group(&founds) {
        c.batch_execute("ROLLBACK TO SAVEPOINT batch").await?;
        let rows = fresh(c, st, &out).await?.unwrap_or_default();
        return Ok(Err(group_error(&writes, &founds, rows)));
    }
    c.batch_execute("RELEASE SAVEPOINT batch").await?;
    Ok(Ok(Written { at, writes, out }))
}

/// What each batch's callers learn (`Outcome::for_callers`: the events are the
/// commit's).
fn outcomes(groups: &[Vec<Write>], founds: &[Found]) -> Vec<Outcome> {
    let mut at = 0;
    groups
        .iter()
        .map(|g| {
            let mut out = Outcome::for_callers();
            for (w, f) in g.iter().zip(&founds[at..at + g.len()]) {
                out.add(w, f);
            }
            at += g.len();
            out
        })
        .collect()
}

/// What each batch's callers learn.
fn applied(
    outs: Vec<Outcome>,
    rows: Vec<Result<Vec<RowNow>, StoreError>>,
    seq: i64,
) -> Vec<Result<Applied, StoreError>> {
    outs.into_iter()
        .zip(rows)
        .map(|(out, fresh)| {
            fresh.map(|fresh| Applied {
                claims: out.claims,
                fresh,
                before: out.before,
                seq,
            })
        })
        .collect()
}

/// The fast path of a commit of transitions and events (`commit_call`): the call, and the
/// flush behind it, in one round trip; the rows that changed under a transition are read
/// after it (another daemon's later change may be in them: memory follows the row as it
/// is). `None` when a trial's outcome was under a stale claim (nothing was written).
async fn one_call(
    c: &Client,
    st: &Stmts,
    call: &Statement,
    groups: &[Vec<Write>],
    all: &[&Write],
    split: bool,
) -> Result<Option<Vec<Result<Applied, StoreError>>>, Failed> {
    let flushed = async {
        match split {
            true => c.query_one(&st.flush, &[]).await.map(|_| ()),
            false => Ok(()),
        }
    };
    let (called, flushed) = futures_util::join!(commit_call::call(c, call, all, split), flushed);
    let (seq, founds) = match called {
        Ok(done) => done,
        Err(e) if commit_call::is_stale(&e) => return Ok(None),
        Err(e) => return Err(Failed::Before(e)),
    };
    flushed.map_err(Failed::After)?;
    let outs = outcomes(groups, &founds);
    // Committed and durable: a batch whose rows cannot be read back fails alone.
    let rows = join_all(outs.iter().map(|out| fresh(c, st, out))).await;
    let rows = rows
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| Err(StoreError::Postgres(e))))
        .collect();
    Ok(Some(applied(outs, rows, seq)))
}
