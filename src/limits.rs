//! Bounds shared by several layers (config, engine, socket protocol).

use std::time::Duration;

/// Longest accepted request line on the lease socket, newline excluded.
pub const MAX_LINE: usize = 64 * 1024;

/// Longest duration accepted anywhere (ttl, wait, retry_after; config durations too).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
