//! Wall-clock times as stored and shown: RFC 3339 UTC with milliseconds.

use std::time::SystemTime;

/// Format a wall-clock time as RFC 3339 UTC with milliseconds.
pub fn fmt_time(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Parse what `fmt_time` wrote.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
        .ok()
        .or_else(|| humantime::parse_rfc3339(s).ok())
}
