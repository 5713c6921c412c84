//! SQLite's group commit: the writes of several callers in one transaction, each caller's
//! atomic on its own.

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

    /// Group commit of `groups` at once, for this module's unit tests: the daemon and
    /// every other caller go through `Store::write_groups` (`GroupCommit`).
    #[cfg(test)]
    pub fn write_groups(
        &mut self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let mut tx = self.begin_groups()?;
        for g in groups {
            tx.add(g);
        }
        tx.commit(groups)
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
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(Groups {
            conn: &mut self.conn,
            redo: false,
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

/// A group commit under way: one transaction, each caller's group applied when it is
/// added, so the work of the callers already here is done while the store thread waits
/// for the rest (docs/leases.md, "Durability").
///
/// Groups are applied without savepoints: a savepoint makes SQLite copy every page it
/// changes a first time, and a commit takes one per caller. A group that fails part-way
/// has left some of its rows in the transaction, so then the commit rolls everything back
/// and redoes the batch group by group, each in a savepoint, as it would have been.
/// Failures are rare (an endpoint removed while its report was on the way), commits many.
pub struct Groups<'a> {
    conn: &'a mut Connection,
    /// A group failed: the batch is redone at commit.
    redo: bool,
    /// A failure of the transaction itself (not of one group): the commit fails whole.
    failed: Option<StoreError>,
}

impl Groups<'_> {
    /// Apply one caller's group. A group that fails marks the batch to be redone, and
    /// the groups after it wait for that.
    pub fn add(&mut self, group: &[Write]) {
        if self.failed.is_some() || self.redo {
            return;
        }
        if let Err(e) = group.iter().try_for_each(|w| apply_write(self.conn, w)) {
            self.redo = true;
            // SQLite ends the transaction itself on some errors (a full disk, an I/O
            // error): then no group of it can be kept.
            if self.conn.is_autocommit() {
                self.failed = Some(e);
            }
        }
    }

    /// Commit the batch: `groups` are the groups added, in order. Each one's result, or
    /// the error that failed them all (nothing is committed then).
    pub fn commit(
        mut self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let out = if self.redo {
            self.redo_in_savepoints(groups)?
        } else {
            groups.iter().map(|g| Ok(Applied::one_daemon(g))).collect()
        };
        self.conn.execute_batch("COMMIT")?;
        Ok(out)
    }

    /// Roll back, then apply each group in a savepoint of its own: all of it, or none of
    /// it and its error as its result.
    fn redo_in_savepoints(
        &mut self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        self.conn.execute_batch("ROLLBACK; BEGIN IMMEDIATE")?;
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            let sp = self.conn.savepoint()?;
            match g.iter().try_for_each(|w| apply_write(&sp, w)) {
                Ok(()) => {
                    sp.commit()?;
                    out.push(Ok(Applied::one_daemon(g)));
                }
                Err(e) => {
                    drop(sp);
                    if self.conn.is_autocommit() {
                        return Err(e);
                    }
                    out.push(Err(e));
                }
            }
        }
        Ok(out)
    }
}

impl Drop for Groups<'_> {
    /// A commit never reached (or one that failed) leaves nothing behind.
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
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
                h.health.state.as_str(),
                h.health.reason.map(Reason::as_str),
                h.health.phase.map(Phase::as_str),
                text(&h.health.detail),
                h.health.streak,
                h.health.reason_streak,
                h.health.cooldown_ms.map(|v| v as i64),
                deadline_of(h.health.cooldown_left).map(fmt_time),
                fmt_time(SystemTime::now()),
            ])?;
            if n == 0 {
                return Err(StoreError::NotFound(format!("with id {}", h.id)));
            }
            insert_event(tx, ev)
        }
        Write::Event(ev) => insert_event(tx, ev),
        Write::Exit { id, ip } => {
            tx.prepare_cached("UPDATE endpoints SET exit_ip=?2, exit_seen_at=?3 WHERE id=?1")?
                .execute(params![
                    id,
                    ip.map(|ip| ip.to_string()),
                    ip.map(|_| fmt_time(SystemTime::now()))
                ])?;
            Ok(())
        }
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
