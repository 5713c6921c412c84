//! How a pool chooses (docs/selection.md): `[pool.pace]` and its sites, `select`,
//! `slow_start`, `fallback` — the validated values and their checks.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv6Addr;
use std::time::Duration;

use serde::Deserialize;

use crate::ip_literal::{self, V4};

/// `interval` (of the pool or a site) at most.
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// `[pool.pace] wait` at most: a lease or gateway request held longer is a mistake.
pub const MAX_PACE_WAIT: Duration = Duration::from_secs(600);
/// `in_flight` at most.
pub const MAX_IN_FLIGHT: u32 = 65_535;
/// `[[pool.pace.site]]` entries per pool at most.
pub const MAX_SITES: usize = 10_000;
/// `slow_start` at most.
pub const MAX_SLOW_START: Duration = Duration::from_secs(24 * 3600);

/// `[pool.pace]`: spacing of the uses of one endpoint for one host.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PaceConfig {
    /// At least this long from one use of an endpoint for a host to the next (0: none).
    pub interval: Duration,
    /// At most this many live leases of one endpoint for one host (0: no cap).
    pub in_flight: u32,
    /// How long a lease or gateway request may wait for a ready endpoint.
    pub wait: Duration,
    /// A 429 (or 503 with Retry-After) widens the pair's interval instead of banning it.
    pub slow_down: bool,
    /// Per-host overrides, by normalised host.
    pub sites: BTreeMap<String, SiteRule>,
}

/// One `[[pool.pace.site]]`: what it changes for its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SiteRule {
    pub interval: Option<Duration>,
    pub in_flight: Option<u32>,
}

impl PaceConfig {
    /// The interval and in-flight cap for `host` (normalised).
    pub fn rule_for(&self, host: &str) -> (Duration, u32) {
        let site = self.sites.get(host).copied().unwrap_or_default();
        (
            site.interval.unwrap_or(self.interval),
            site.in_flight.unwrap_or(self.in_flight),
        )
    }
}

/// `[[pool]] select`: how a lease picks among the endpoints that qualify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Select {
    /// The least leased, round robin among equals.
    #[default]
    LeastLeased,
    /// Two random candidates, the better score wins (latency × (1 + failure rate)).
    Fastest,
    /// Uniformly at random.
    Random,
}

impl Select {
    pub fn as_str(self) -> &'static str {
        match self {
            Select::LeastLeased => "least_leased",
            Select::Fastest => "fastest",
            Select::Random => "random",
        }
    }
}

impl fmt::Display for Select {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A site's host as pacing keys it: lower case, no trailing dot, an IPv6 address in its
/// canonical form without brackets; no port, scheme or path. The same form leases'
/// destinations are normalised to (a table test in `pool::pace` holds the two together).
pub fn site_host(raw: &str) -> Result<String, String> {
    let s = raw.trim();
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.contains("://") || s.contains('/') {
        return Err(format!("{raw:?}: give the host, not a URL"));
    }
    if let Some(inner) = s.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{raw:?}: a host, without a port"))?;
        let ip: Ipv6Addr = inner
            .parse()
            .map_err(|_| format!("{raw:?} is not an IPv6 address"))?;
        return Ok(ip_literal::ipv6_key(ip));
    }
    if s.matches(':').count() > 1 {
        let ip: Ipv6Addr = s
            .parse()
            .map_err(|_| format!("{raw:?} is not an IPv6 address"))?;
        return Ok(ip_literal::ipv6_key(ip));
    }
    if s.contains(':') {
        return Err(format!(
            "{raw:?}: a host, without a port (pacing is per host)"
        ));
    }
    let host = s.trim_end_matches('.').to_ascii_lowercase();
    let ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !ok {
        return Err(format!("{raw:?} is not a host name"));
    }
    // An IPv4 address in its one spelling, as destinations are keyed.
    match ip_literal::ipv4(&host) {
        V4::Name | V4::Canonical => Ok(host),
        V4::Respelled(ip) => Ok(ip.to_string()),
        V4::Bad(why) => Err(format!("{raw:?}: {why}")),
    }
}

/// Why `interval` is out of bounds, if it is.
pub fn check_interval(d: Duration) -> Result<(), String> {
    if d > MAX_INTERVAL {
        return Err("must be at most 24h".into());
    }
    Ok(())
}

/// Why `in_flight` is out of bounds, if it is.
pub fn check_in_flight(n: u32) -> Result<(), String> {
    if n > MAX_IN_FLIGHT {
        return Err(format!(
            "must be at most {MAX_IN_FLIGHT} (0: no cap), got {n}"
        ));
    }
    Ok(())
}

/// A pool's `fallback` that names a missing pool, itself, or closes a cycle, named in the
/// error; `fallbacks` maps every pool to its fallback.
pub fn check_fallbacks(
    fallbacks: &BTreeMap<String, Option<String>>,
) -> Result<(), (String, String)> {
    for (pool, next) in fallbacks {
        let Some(next) = next else { continue };
        if next == pool {
            return Err((
                pool.clone(),
                format!("pool {pool:?} cannot fall back to itself"),
            ));
        }
        if !fallbacks.contains_key(next) {
            return Err((
                pool.clone(),
                format!("unknown pool {next:?} (declare it with [[pool]])"),
            ));
        }
        // A fallback is one hop, but a cycle would still say two things at once.
        let mut seen = vec![pool.as_str()];
        let mut at = next.as_str();
        while let Some(Some(n)) = fallbacks.get(at) {
            seen.push(at);
            if n == pool {
                seen.push(n);
                return Err((
                    pool.clone(),
                    format!("fallbacks form a cycle: {}", seen.join(" -> ")),
                ));
            }
            if seen.contains(&n.as_str()) {
                break;
            }
            at = n;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_hosts() {
        let ok = [
            ("Shop.Example", "shop.example"),
            ("shop.example.", "shop.example"),
            (" a-b_c.example ", "a-b_c.example"),
            ("127.0.0.1", "127.0.0.1"),
            ("[::1]", "::1"),
            ("2001:DB8::1", "2001:db8::1"),
        ];
        for (raw, want) in ok {
            assert_eq!(site_host(raw).as_deref(), Ok(want), "{raw}");
        }
        for raw in [
            "",
            "https://shop.example/",
            "shop.example:443",
            "[::1]:80",
            "a b",
            "x/y",
        ] {
            assert!(site_host(raw).is_err(), "{raw}");
        }
    }

    #[test]
    fn rules_per_site() {
        let mut p = PaceConfig {
            interval: Duration::from_secs(2),
            in_flight: 1,
            ..PaceConfig::default()
        };
        p.sites.insert(
            "shop.example".into(),
            SiteRule {
                interval: Some(Duration::from_secs(12)),
                in_flight: None,
            },
        );
        assert_eq!(p.rule_for("shop.example"), (Duration::from_secs(12), 1));
        assert_eq!(p.rule_for("other.example"), (Duration::from_secs(2), 1));
    }

    #[test]
    fn fallback_graphs() {
        let g = |edges: &[(&str, Option<&str>)]| -> BTreeMap<String, Option<String>> {
            edges
                .iter()
                .map(|(a, b)| (a.to_string(), b.map(str::to_string)))
                .collect()
        };
        assert_eq!(
            check_fallbacks(&g(&[("a", Some("b")), ("b", None)])),
            Ok(())
        );
        // A chain in the config is allowed; a lease still takes one hop only.
        assert_eq!(
            check_fallbacks(&g(&[("a", Some("b")), ("b", Some("c")), ("c", None)])),
            Ok(())
        );
        let bad = [
            (g(&[("a", Some("a"))]), "itself"),
            (g(&[("a", Some("zz"))]), "unknown pool \"zz\""),
            (
                g(&[("a", Some("b")), ("b", Some("a"))]),
                "cycle: a -> b -> a",
            ),
            (
                g(&[("a", Some("b")), ("b", Some("c")), ("c", Some("a"))]),
                "cycle: a -> b -> c -> a",
            ),
        ];
        for (graph, want) in bad {
            let (_, e) = check_fallbacks(&graph).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
