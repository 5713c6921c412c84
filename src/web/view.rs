//! What the status page shows (filled by a `StatusSource`), and query-string parsing.

use std::time::{Duration, SystemTime};

use percent_encoding::percent_decode_str;

use super::StatusError;
use crate::health::State;
use crate::pool::PoolStatus;
use crate::protocol::ErrorCode;
use crate::stats::EndpointStats;
use crate::store::{EndpointView, EventRow};

/// Minutes in the transitions chart.
pub const CHART_MINUTES: usize = 60;

/// How much the page asks for; a page with 100,000 rows helps nobody and costs a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimits {
    /// Endpoint rows per pool. The source should put the ones that need attention
    /// (not available) first.
    pub endpoints_per_pool: usize,
    /// Recent events, newest first.
    pub events: usize,
}

impl Default for PageLimits {
    fn default() -> Self {
        PageLimits {
            endpoints_per_pool: 200,
            events: 50,
        }
    }
}

/// One endpoint's row.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointLine {
    /// The `endpoints` view (URL already redacted).
    pub view: EndpointView,
    /// Usage statistics.
    pub stats: EndpointStats,
    /// Live leases on it now.
    pub live_leases: u32,
    /// Time until its cooldown ends, when cooling.
    pub cooldown_left: Option<Duration>,
}

/// One pool's section.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolPage {
    /// Counts by state (the `status` answer for this pool).
    pub status: PoolStatus,
    /// Transitions per minute over the last hour, oldest first (see [`minute_buckets`]).
    pub transitions: [u32; CHART_MINUTES],
    /// Endpoint rows, at most `PageLimits::endpoints_per_pool`.
    pub endpoints: Vec<EndpointLine>,
    /// Endpoints in the pool (more than `endpoints.len()` when the list was cut).
    pub endpoints_total: usize,
}

/// The whole page.
#[derive(Debug, Clone, PartialEq)]
pub struct PageModel {
    /// When the data was read.
    pub generated_at: SystemTime,
    /// Daemon version.
    pub version: String,
    /// One section per pool.
    pub pools: Vec<PoolPage>,
    /// Recent events, newest first.
    pub events: Vec<EventRow>,
}

/// Count transition times into per-minute buckets ending at `now`: index 59 is the last
/// minute, index 0 the minute an hour ago. Times outside the hour (or in the future) are
/// left out.
pub fn minute_buckets(
    now: SystemTime,
    times: impl IntoIterator<Item = SystemTime>,
) -> [u32; CHART_MINUTES] {
    let mut b = [0u32; CHART_MINUTES];
    for t in times {
        let Ok(age) = now.duration_since(t) else {
            continue;
        };
        let m = (age.as_secs() / 60) as usize;
        if m < CHART_MINUTES {
            b[CHART_MINUTES - 1 - m] += 1;
        }
    }
    b
}

/// A decoded query string.
#[derive(Debug, Default)]
pub(super) struct Query(Vec<(String, String)>);

pub(super) fn parse_query(q: Option<&str>) -> Result<Query, String> {
    let mut out = Vec::new();
    for part in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let dec = |s: &str| {
            percent_decode_str(&s.replace('+', " "))
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| format!("query parameter {k:?} is not UTF-8"))
        };
        let (k, v) = (dec(k)?, dec(v)?);
        if out.iter().any(|(x, _)| *x == k) {
            return Err(format!("query parameter {k:?} given twice"));
        }
        out.push((k, v));
    }
    Ok(Query(out))
}

impl Query {
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn only(&self, allowed: &[&str]) -> Result<(), StatusError> {
        match self.0.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some((k, _)) => Err(StatusError::new(
                ErrorCode::BadRequest,
                if allowed.is_empty() {
                    format!("unknown query parameter {k:?}: this page takes none")
                } else {
                    format!(
                        "unknown query parameter {k:?}; known: {}",
                        allowed.join(", ")
                    )
                },
            )),
        }
    }

    pub(super) fn state(&self) -> Result<Option<State>, StatusError> {
        self.get("state")
            .map(|s| s.parse::<State>())
            .transpose()
            .map_err(|e| StatusError::new(ErrorCode::BadRequest, e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_by_minute_age() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let ago = |s: u64| now - Duration::from_secs(s);
        let b = minute_buckets(
            now,
            [
                ago(0),
                ago(59),
                ago(60),
                ago(3599),
                ago(3600),
                now + Duration::from_secs(5),
            ],
        );
        assert_eq!(b[59], 2);
        assert_eq!(b[58], 1);
        assert_eq!(b[0], 1);
        assert_eq!(b.iter().sum::<u32>(), 4);
    }

    #[test]
    fn query_strings() {
        let q = parse_query(Some("pool=eu%20west&state=cooling")).unwrap();
        assert_eq!(q.get("pool"), Some("eu west"));
        assert_eq!(q.state().unwrap(), Some(State::Cooling));
        assert!(q.only(&["pool", "state"]).is_ok());
        assert!(q.only(&["pool"]).unwrap_err().message.contains("\"state\""));
        assert!(parse_query(Some("pool=a&pool=b")).is_err());
        let bad = parse_query(Some("state=sleepy"))
            .unwrap()
            .state()
            .unwrap_err();
        assert_eq!(bad.code, ErrorCode::BadRequest);
        assert!(bad.message.contains("available"), "{}", bad.message);
        assert!(parse_query(None).unwrap().only(&[]).is_ok());
    }
}
