//! SQLite's group commit: the writes of several callers in one transaction, each caller's
//! atomic on its own (a savepoint).

use std::time::SystemTime;

use rusqlite::{params, Connection, TransactionBehavior};

use super::endpoints::{deadline_of, remove_rows};
use super::events::{insert_event, insert_event_on};
use super::{pairs, text, Sqlite};
use crate::health::{Phase, Reason};
use crate::store::{fmt_time, Applied, StoreError, Write};

impl Sqlite {
    /// Apply a batch of writes in one transaction.
    pub fn write(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for w in writes {
            apply_write(&tx, w)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Group commit: apply several independent batches in one transaction, each batch
    /// atomic on its own (a savepoint), so one bad batch fails alone.
    pub fn write_groups(
        &mut self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let mut tx = self.begin_groups()?;
        for g in groups {
            tx.add(g);
        }
        tx.commit()
    }

    /// Open a group commit (`Groups`): its transaction starts now, and each group is
    /// applied as it is added.
    pub fn begin_groups(&mut self) -> Result<Groups<'_>, StoreError> {
        // Committing into a deleted file would acknowledge writes that nobody can read.
        self.check_file()?;
        #[cfg(test)]
        if self.fail_commits > 0 {
            self.fail_commits -= 1;
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some("database or disk is full (injected)".into()),
            )));
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        Ok(Groups {
            tx,
            out: Vec::new(),
            failed: None,
        })
    }

    /// Fail the next `n` commits as a full disk would.
    #[cfg(test)]
    pub(crate) fn fail_next_commits(&mut self, n: u32) {
        self.fail_commits = n;
    }

    /// Commits still to fail.
    #[cfg(test)]
    pub(crate) fn failing_commits(&self) -> u32 {
        self.fail_commits
    }
}

/// A group commit under way: one transaction, each caller's group in a savepoint of its
/// own, applied when it is added, so the work of the callers already here is done while
/// the store thread waits for the rest (docs/leases.md, "Durability").
pub struct Groups<'a> {
    tx: rusqlite::Transaction<'a>,
    out: Vec<Result<Applied, StoreError>>,
    /// A failure of the transaction itself (not of one group): the commit fails whole.
    failed: Option<StoreError>,
}

impl Groups<'_> {
    /// Apply one caller's group: all of it, or (its savepoint rolled back) none of it and
    /// its error as its result.
    pub fn add(&mut self, group: &[Write]) {
        if self.failed.is_some() {
            return;
        }
        let sp = match self.tx.savepoint() {
            Ok(sp) => sp,
            Err(e) => return self.failed = Some(e.into()),
        };
        match group.iter().try_for_each(|w| apply_write(&sp, w)) {
            Ok(()) => match sp.commit() {
                Ok(()) => self.out.push(Ok(Applied::one_daemon(group))),
                Err(e) => self.failed = Some(e.into()),
            },
            Err(e) => {
                drop(sp);
                self.out.push(Err(e));
            }
        }
    }

    /// Commit every group added: each one's result, in order, or the error that failed
    /// them all (nothing is committed then).
    pub fn commit(self) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        self.tx.commit()?;
        Ok(self.out)
    }
}

fn apply_write(tx: &Connection, w: &Write) -> Result<(), StoreError> {
    match w {
        Write::Transition(h, ev) => {
            let mut st = tx.prepare_cached(
                "UPDATE endpoints SET state=?2, reason=?3, phase=?4, detail=?5, streak=?6, reason_streak=?7, \
                 cooldown_ms=?8, cooldown_until=?9, state_changed_at=?10 WHERE id=?1",
            )?;
            let n = st.execute(params![
                h.id,
                h.state.as_str(),
                h.reason.map(Reason::as_str),
                h.phase.map(Phase::as_str),
                text(&h.detail),
                h.streak,
                h.reason_streak,
                h.cooldown_ms.map(|v| v as i64),
                deadline_of(h.cooldown_left).map(fmt_time),
                fmt_time(SystemTime::now()),
            ])?;
            if n == 0 {
                return Err(StoreError::NotFound(format!("with id {}", h.id)));
            }
            insert_event(tx, ev)
        }
        Write::Event(ev) => insert_event(tx, ev),
        Write::Remove(ids) => remove_rows(tx, ids),
        Write::Pair(w) => pairs::apply(tx, w),
        Write::EventStatus(ev, status) => insert_event_on(tx, ev.endpoint, None, *status, ev),
        // One daemon: a claim in memory is the claim; only its event is stored.
        Write::Claim(c) => pairs::apply(tx, &crate::store::pairs::PairWrite::Claim(c.clone())),
        Write::Unclaim(u) => pairs::apply(tx, &crate::store::pairs::PairWrite::Unclaim(u.clone())),
        Write::SourceResult {
            pool,
            name,
            ok,
            detail,
            count,
        } => {
            tx.prepare_cached(
                "INSERT INTO sources (pool, name, last_at, last_ok, last_detail, last_count) VALUES (?1,?2,?3,?4,?5,?6) \
                 ON CONFLICT(pool, name) DO UPDATE SET last_at=excluded.last_at, last_ok=excluded.last_ok, \
                 last_detail=excluded.last_detail, last_count=excluded.last_count",
            )?
            .execute(params![
                pool,
                name,
                fmt_time(SystemTime::now()),
                *ok as i64,
                text(detail),
                count.map(|c| c as i64)
            ])?;
            Ok(())
        }
    }
}
