//! `[pool.exit]` (docs/exit.md): where a pool learns the address each endpoint leaves
//! from, and how addresses group into subnets a site may be banning whole.

use std::net::IpAddr;
use std::time::Duration;

/// `every` at least.
pub const MIN_EVERY: Duration = Duration::from_secs(1);
/// `subnet_window` at most.
pub const MAX_SUBNET_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// `subnet_after` at most.
pub const MAX_SUBNET_AFTER: u32 = 1_000;

/// The validated `[pool.exit]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitConfig {
    /// A page that answers the caller's address (text, or JSON with an `"ip"` field);
    /// `None` with a `header`: the pool's probe URL is asked and the header read.
    pub url: Option<String>,
    /// How often each endpoint's address is learned again.
    pub every: Duration,
    /// A response header a provider sets to the exit address (lower case).
    pub header: Option<String>,
    /// Prefix lengths that group addresses into subnets.
    pub subnet_v4: u8,
    pub subnet_v6: u8,
    /// Distinct banned addresses of one subnet, for one host, within `subnet_window`,
    /// that make the subnet suspect for that host.
    pub subnet_after: u32,
    pub subnet_window: Duration,
}

impl Default for ExitConfig {
    fn default() -> Self {
        ExitConfig {
            url: None,
            every: Duration::from_secs(6 * 3600),
            header: None,
            subnet_v4: 24,
            subnet_v6: 48,
            subnet_after: 3,
            subnet_window: Duration::from_secs(600),
        }
    }
}

/// The subnet `ip` falls in under prefix lengths `v4` and `v6`: the address with its
/// host bits cleared, and the prefix length.
pub fn subnet_of(ip: IpAddr, v4: u8, v6: u8) -> (IpAddr, u8) {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let mask = u32::MAX.checked_shl(32 - u32::from(v4)).unwrap_or(0);
            (IpAddr::V4((bits & mask).into()), v4)
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let mask = u128::MAX.checked_shl(128 - u32::from(v6)).unwrap_or(0);
            (IpAddr::V6((bits & mask).into()), v6)
        }
    }
}

/// Why a `[pool.exit]` value is refused: (the key under `[pool.exit]`, the problem).
pub(super) type Refusal = (&'static str, String);

/// Check the pieces of a `[pool.exit]` that the raw shape cannot.
pub(super) fn check(
    cfg: &ExitConfig,
    probe_url: Option<&str>,
    url_ok: impl Fn(&str) -> Result<(), String>,
) -> Result<(), Refusal> {
    match (&cfg.url, &cfg.header) {
        (Some(u), _) => url_ok(u).map_err(|m| ("url", m))?,
        (None, Some(_)) if probe_url.is_some() => {}
        (None, Some(_)) => {
            return Err((
                "url",
                "a header alone needs a page to ask: set url, or a [pool.probe] url".into(),
            ))
        }
        (None, None) => {
            return Err((
                "url",
                "set url (a page answering the caller's address) or header".into(),
            ))
        }
    }
    if let Some(h) = &cfg.header {
        if hyper::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
            return Err(("header", format!("{h:?} is not an HTTP header name")));
        }
    }
    if cfg.every < MIN_EVERY {
        return Err(("every", "must be at least 1s".into()));
    }
    if !(1..=32).contains(&cfg.subnet_v4) {
        return Err(("subnet_v4", "must be a prefix length from 1 to 32".into()));
    }
    if !(1..=128).contains(&cfg.subnet_v6) {
        return Err(("subnet_v6", "must be a prefix length from 1 to 128".into()));
    }
    if !(1..=MAX_SUBNET_AFTER).contains(&cfg.subnet_after) {
        return Err((
            "subnet_after",
            format!("must be from 1 to {MAX_SUBNET_AFTER}"),
        ));
    }
    if cfg.subnet_window.is_zero() || cfg.subnet_window > MAX_SUBNET_WINDOW {
        return Err((
            "subnet_window",
            "must be greater than 0 and at most 24h".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_clear_the_host_bits() {
        let v4: IpAddr = "198.51.100.77".parse().unwrap();
        assert_eq!(subnet_of(v4, 24, 48).0.to_string(), "198.51.100.0");
        assert_eq!(subnet_of(v4, 32, 48).0, v4);
        assert_eq!(subnet_of(v4, 16, 48).0.to_string(), "198.51.0.0");
        let v6: IpAddr = "2001:db8:aa:bb::1".parse().unwrap();
        assert_eq!(
            subnet_of(v6, 24, 48),
            ("2001:db8:aa::".parse().unwrap(), 48)
        );
        assert_eq!(subnet_of(v6, 24, 128).0, v6);
    }

    #[test]
    fn checks_name_the_key() {
        let ok = |_: &str| Ok(());
        let base = ExitConfig {
            url: Some("http://x/".into()),
            ..Default::default()
        };
        assert!(check(&base, None, ok).is_ok());
        let table: Vec<(ExitConfig, Option<&str>, &str)> = vec![
            (ExitConfig::default(), None, "url"),
            (
                ExitConfig {
                    header: Some("x-exit".into()),
                    ..Default::default()
                },
                None,
                "url",
            ),
            (
                ExitConfig {
                    header: Some("bad header".into()),
                    ..base.clone()
                },
                None,
                "header",
            ),
            (
                ExitConfig {
                    every: Duration::from_millis(500),
                    ..base.clone()
                },
                None,
                "every",
            ),
            (
                ExitConfig {
                    subnet_v4: 33,
                    ..base.clone()
                },
                None,
                "subnet_v4",
            ),
            (
                ExitConfig {
                    subnet_v6: 0,
                    ..base.clone()
                },
                None,
                "subnet_v6",
            ),
            (
                ExitConfig {
                    subnet_after: 0,
                    ..base.clone()
                },
                None,
                "subnet_after",
            ),
            (
                ExitConfig {
                    subnet_window: Duration::ZERO,
                    ..base.clone()
                },
                None,
                "subnet_window",
            ),
        ];
        for (cfg, probe, key) in table {
            assert_eq!(check(&cfg, probe, ok).unwrap_err().0, key, "{cfg:?}");
        }
        let header_only = ExitConfig {
            header: Some("x-exit".into()),
            ..Default::default()
        };
        assert!(check(&header_only, Some("http://probe/"), ok).is_ok());
    }
}
