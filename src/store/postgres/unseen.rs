//! What a read's snapshot did not see, which is where the next read starts: the
//! transactions it found in progress (`xip`), and every id from its `xmax` on. Every other
//! transaction had ended when it was taken, so what it wrote was read then. The change
//! feed (`feed_read`) and `events --follow` (`follow`) both go by it, so a transaction left
//! open for hours elsewhere makes neither read larger.
//!
//! A standby's snapshots do not list the transactions in progress (PostgreSQL keeps them
//! apart there): on a standby everything from the snapshot's `xmin` on counts as unseen,
//! and the reader skips what it has already taken of it.

use tokio_postgres::Row;

/// The columns `Unseen::read` takes, over the FROM item `SNAPSHOT`.
pub(super) const UNSEEN_COLS: &str = "pg_snapshot_xmin(snap.s)::text::bigint, \
     pg_snapshot_xmax(snap.s)::text::bigint, \
     ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(snap.s) AS x ORDER BY 1), \
     pg_is_in_recovery()";

/// The FROM item `UNSEEN_COLS` read.
pub(super) const SNAPSHOT: &str = "pg_current_snapshot() AS snap(s)";

#[derive(Debug, Clone, Default)]
pub(super) struct Unseen {
    pub(super) xmax: i64,
    /// Sorted.
    pub(super) xip: Vec<i64>,
}

impl Unseen {
    /// Every transaction from `xmin` on.
    pub(super) fn from(xmin: i64) -> Unseen {
        Unseen {
            xmax: xmin,
            xip: Vec::new(),
        }
    }

    /// No transaction at all.
    pub(super) fn none() -> Unseen {
        Unseen::from(i64::MAX)
    }

    /// What the snapshot `UNSEEN_COLS` were read in did not see, from column `at` on.
    pub(super) fn read(row: &Row, at: usize) -> Unseen {
        match row.get::<_, bool>(at + 3) {
            true => Unseen::from(row.get(at)),
            false => Unseen {
                xmax: row.get(at + 1),
                xip: row.get(at + 2),
            },
        }
    }

    /// Whether transaction `xid` is one of them.
    pub(super) fn holds(&self, xid: i64) -> bool {
        xid >= self.xmax || self.xip.binary_search(&xid).is_ok()
    }

    /// The oldest of them: a change pruned at or past it may not have been read.
    pub(super) fn oldest(&self) -> i64 {
        self.xip.first().map_or(self.xmax, |&x| x.min(self.xmax))
    }
}
