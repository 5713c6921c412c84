//! One daemon of a fleet as `status`, `/api/status` and the status page show it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One daemon of the fleet as its row says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRow {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub version: String,
    pub addresses: Vec<String>,
    /// Live leases it held at its last heartbeat, in all pools.
    pub leases: u64,
    /// The same by pool.
    pub pool_leases: BTreeMap<String, u64>,
    /// RFC 3339 UTC.
    pub started_at: String,
    /// How long ago its last heartbeat was, by the database's clock.
    pub heartbeat_ms_ago: u64,
    /// Its heartbeat is younger than the time after which the fleet counts a daemon gone
    /// (the store's `GONE_AFTER`).
    pub live: bool,
}
