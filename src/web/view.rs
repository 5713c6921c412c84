//! What the status page shows (filled by a `StatusSource`), and query-string parsing.

use std::time::{Duration, SystemTime};

use percent_encoding::percent_decode_str;

use super::StatusError;
use crate::health::State;
use crate::protocol::DaemonRow;
use crate::protocol::EndpointView;
use crate::protocol::{ErrorCode, PoolStatus};
use crate::stats::EndpointStats;
use crate::store::EventRow;

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
    /// Destinations it is banned on (its non-available pairs), at most a few.
    pub banned_on: Vec<String>,
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
    /// Banned (endpoint, destination) pairs.
    pub banned_pairs: usize,
    /// The destinations with the most banned pairs, most first, with their count.
    pub most_banned: Vec<(String, usize)>,
}

/// How bad a pool looks; the page lists the worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trouble {
    Ok,
    /// Something is cooling, waiting for its trial, disabled or banned, or a target is down;
    /// endpoints are still available.
    Degraded,
    /// Nothing can be leased: no endpoint at all, or none available.
    Down,
}

impl Trouble {
    pub fn as_str(self) -> &'static str {
        match self {
            Trouble::Ok => "ok",
            Trouble::Degraded => "degraded",
            Trouble::Down => "down",
        }
    }
}

impl PoolPage {
    /// Endpoints that are not available.
    pub fn unavailable(&self) -> usize {
        let s = &self.status;
        s.cooling + s.probe_allowed + s.disabled
    }

    pub fn trouble(&self) -> Trouble {
        let s = &self.status;
        if s.available == 0 {
            Trouble::Down
        } else if self.unavailable() > 0 || self.banned_pairs > 0 || s.targets_down > 0 {
            Trouble::Degraded
        } else {
            Trouble::Ok
        }
    }

    /// What is wrong, in a few words.
    pub fn verdict(&self) -> String {
        let s = &self.status;
        let total = s.available + self.unavailable();
        let mut parts = Vec::new();
        if total == 0 {
            return "no endpoints".into();
        }
        let not: Vec<String> = [
            (s.cooling, "cooling"),
            (s.probe_allowed, "awaiting trial"),
            (s.disabled, "disabled"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if s.available == 0 {
            parts.push(format!("no endpoint available ({})", not.join(", ")));
        } else if !not.is_empty() {
            parts.push(format!("{} of {total}", not.join(", ")));
        }
        if self.banned_pairs > 0 {
            parts.push(format!("{} banned pairs", self.banned_pairs));
        }
        if s.targets_down > 0 {
            parts.push(format!("{} targets down", s.targets_down));
        }
        if parts.is_empty() {
            "all available".into()
        } else {
            parts.join(", ")
        }
    }
}

/// Worst first: by trouble, then the share of endpoints not available, how many, banned
/// pairs, targets down, and the name.
pub fn by_trouble<P: std::borrow::Borrow<PoolPage>>(pools: &mut [P]) {
    pools.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        let share = |p: &PoolPage| {
            let total = p.status.available + p.unavailable();
            // Per mille, so that the key is an integer.
            (p.unavailable() * 1000).checked_div(total).unwrap_or(1000)
        };
        b.trouble()
            .cmp(&a.trouble())
            .then(share(b).cmp(&share(a)))
            .then(b.unavailable().cmp(&a.unavailable()))
            .then(b.banned_pairs.cmp(&a.banned_pairs))
            .then(b.status.targets_down.cmp(&a.status.targets_down))
            .then(a.status.pool.cmp(&b.status.pool))
    });
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
    /// A fleet's database is away: the page shows what this daemon's memory holds (no
    /// events, no chart, no label or times of endpoints).
    pub store_down: bool,
    /// A fleet's daemons as they registered (None on SQLite).
    pub daemons: Option<Vec<DaemonRow>>,
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
    fn pools_are_listed_worst_first() {
        let pool = |name: &str, available, cooling, banned_pairs, targets_down| PoolPage {
            status: PoolStatus {
                pool: name.into(),
                available,
                cooling,
                targets_down,
                ..PoolStatus::default()
            },
            transitions: [0; CHART_MINUTES],
            endpoints: Vec::new(),
            endpoints_total: available + cooling,
            banned_pairs,
            most_banned: Vec::new(),
        };
        // (pool, trouble, verdict), in the order expected.
        let want = [
            (
                "dead",
                Trouble::Down,
                "no endpoint available (5000 cooling)",
            ),
            ("empty", Trouble::Down, "no endpoints"),
            ("half", Trouble::Degraded, "5 cooling of 10"),
            ("few", Trouble::Degraded, "1 cooling of 10, 3 banned pairs"),
            ("bans", Trouble::Degraded, "7 banned pairs"),
            ("sites", Trouble::Degraded, "2 targets down"),
            ("a-fine", Trouble::Ok, "all available"),
            ("b-fine", Trouble::Ok, "all available"),
        ];
        let mut pools = vec![
            pool("b-fine", 3, 0, 0, 0),
            pool("sites", 4, 0, 0, 2),
            pool("a-fine", 5000, 0, 0, 0),
            pool("few", 9, 1, 3, 0),
            pool("dead", 0, 5000, 0, 0),
            pool("bans", 10, 0, 7, 0),
            pool("half", 5, 5, 0, 0),
            pool("empty", 0, 0, 0, 0),
        ];
        by_trouble(&mut pools);
        let got: Vec<(&str, Trouble, String)> = pools
            .iter()
            .map(|p| (p.status.pool.as_str(), p.trouble(), p.verdict()))
            .collect();
        let want: Vec<(&str, Trouble, String)> = want
            .iter()
            .map(|(p, t, v)| (*p, *t, v.to_string()))
            .collect();
        assert_eq!(got, want);
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
