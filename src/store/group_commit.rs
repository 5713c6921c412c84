//! A group commit as the store thread builds it: opened at a batch's first group, given
//! each caller's group as it arrives, committed once the batch is whole.
//!
//! SQLite applies a group when it is added, inside the open transaction: the rows of the
//! callers already here are written while the thread waits for the others to come back,
//! and only the commit itself is left at the end. PostgreSQL keeps the groups for the
//! commit, where it sends them all in its few pipelined round trips (docs/fleet.md); an
//! open transaction there would cost a round trip per group instead.

use super::sqlite::Groups;
use super::{Applied, Store, StoreError, Write};

pub enum GroupCommit<'s> {
    Sqlite(Groups<'s>),
    Postgres(&'s mut super::Postgres),
}

impl Store {
    /// Open a group commit (SQLite: its transaction starts now).
    pub fn begin_groups(&mut self) -> Result<GroupCommit<'_>, StoreError> {
        Ok(match self {
            Store::Sqlite(s) => GroupCommit::Sqlite(s.begin_groups()?),
            Store::Postgres(p) => GroupCommit::Postgres(p),
        })
    }
}

impl GroupCommit<'_> {
    /// Add one caller's group, atomic on its own.
    pub fn add(&mut self, group: &[Write]) {
        match self {
            GroupCommit::Sqlite(g) => g.add(group),
            GroupCommit::Postgres(_) => {}
        }
    }

    /// Commit the batch: `groups` are the groups added, in order (PostgreSQL writes them
    /// now). Each group's result, or the error that failed the whole commit.
    pub fn commit(
        self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        match self {
            GroupCommit::Sqlite(g) => g.commit(groups),
            GroupCommit::Postgres(p) => p.write_groups(groups),
        }
    }
}
