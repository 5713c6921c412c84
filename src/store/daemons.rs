//! The daemons of a fleet as each registers itself in the database (docs/fleet.md, "The
//! fleet as one"): what a daemon says of itself, how often it beats, when it is gone. The
//! rows as listed are the protocol's `DaemonRow`.

use std::time::Duration;

/// How often a daemon of a fleet writes its row.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A daemon whose last heartbeat is older than this (by the database's clock) is gone: it
/// is listed as such, and the jobs it held go to another daemon.
pub const GONE_AFTER: Duration = Duration::from_secs(10);

/// What a daemon says of itself when it registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonInfo {
    /// Random, one per start of a daemon.
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub version: String,
    /// Its listeners: `socket PATH`, `gateway ADDR`, `http ADDR`, `tcp ADDR`.
    pub addresses: Vec<String>,
}

/// A new daemon id: 128 random bits in hex.
pub fn new_daemon_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// This machine's name, as `status` shows it ("localhost" when it cannot be read).
pub fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().chars().filter(|c| c.is_ascii_graphic()).collect())
        .filter(|h: &String| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
