//! What a daemon of a fleet asks of the database it shares, beyond the reads and writes
//! every store takes: where the change feed starts and the feed itself, its row in the
//! fleet's registry, whose turn a job done for all is, how long a trial's claim holds.
//! Only PostgreSQL holds a fleet (`Store::fleet`); the pool reaches it through this, and
//! the feed it gives, and names nothing else of the backend.

use std::collections::BTreeMap;
use std::time::Duration;

use super::daemons::DaemonInfo;
use super::postgres::Postgres;
pub use super::postgres::{Changes, Feed};
use super::StoreError;
use crate::protocol::DaemonRow;

#[derive(Clone)]
pub struct FleetLink {
    pg: Postgres,
}

impl FleetLink {
    pub(super) fn new(pg: Postgres) -> FleetLink {
        FleetLink { pg }
    }

    /// The database, for messages: hosts and database, never the password.
    pub fn describe(&self) -> String {
        self.pg.target().describe()
    }

    /// How long a trial's claim holds without renewal.
    pub fn claim_hold(&self) -> Duration {
        self.pg.claim_hold()
    }

    /// Where a feed starts: read before the state it follows is loaded, it misses nothing
    /// committed after.
    pub fn feed_start(&self) -> Result<i64, StoreError> {
        self.pg.feed_start()
    }

    /// The changes committed from `from` on, as other daemons make them, on connections
    /// of the feed's own.
    pub fn feed(&self, from: i64) -> Result<Feed, StoreError> {
        Ok(Feed::new(self.pg.for_feed()?, from))
    }

    /// Write this daemon's row: who it is and its live leases by pool.
    pub fn heartbeat(
        &self,
        me: &DaemonInfo,
        pool_leases: &BTreeMap<String, u64>,
    ) -> Result<(), StoreError> {
        self.pg.heartbeat(me, pool_leases)
    }

    /// Take this daemon's row out as it stops.
    pub fn unregister(&self, id: &str) -> Result<(), StoreError> {
        self.pg.unregister(id)
    }

    /// The fleet's daemons as they registered, live ones first.
    pub fn daemons(&self) -> Result<Vec<DaemonRow>, StoreError> {
        self.pg.daemons()
    }

    /// Whether it is `me`'s turn at `job` (run at most once per `every` by the whole
    /// fleet, held `hold` by whoever runs it), by the database's clock.
    pub fn take_turn(
        &self,
        job: &str,
        me: &str,
        every: Duration,
        hold: Duration,
    ) -> Result<bool, StoreError> {
        self.pg.take_turn(job, me, every, hold)
    }
}
