//! The config file as written: serde shapes that reject unknown keys, checked and
//! turned into `Config` by `Config::parse`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::Durability;
use super::{Mode, PlainHttp, Rotate, Select};
use crate::health::Reason;

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    let v = humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {s:?}: {e} (write e.g. \"90s\", \"5m\", \"1h 30m\")"
        ))
    })?;
    if v > crate::limits::MAX_DURATION {
        return Err(serde::de::Error::custom(format!(
            "duration {s:?} is too long (at most 365 days)"
        )));
    }
    Ok(Some(v))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) store: Option<RawStore>,
    pub(super) server: Option<RawServer>,
    #[serde(default, rename = "pool")]
    pub(super) pools: Vec<RawPool>,
    #[serde(default, rename = "endpoint")]
    pub(super) endpoints: Vec<RawEndpoint>,
    #[serde(default, rename = "gateway")]
    pub(super) gateways: Vec<RawGateway>,
    pub(super) tls: Option<RawTls>,
    #[serde(default, rename = "ban")]
    pub(super) bans: Vec<RawBan>,
}

/// `[tls]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) ca_cert: Option<PathBuf>,
    pub(super) ca_key: Option<PathBuf>,
    pub(super) extra_roots: Option<PathBuf>,
}

/// A `[[ban]]` rule (docs/ban-rules.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBan {
    pub(super) name: Option<String>,
    pub(super) builtin: Option<String>,
    pub(super) status: Option<Vec<u16>>,
    pub(super) header: Option<String>,
    pub(super) body: Option<String>,
    #[serde(default, deserialize_with = "de_hosts")]
    pub(super) host: Vec<String>,
    pub(super) body_bytes: Option<usize>,
}

/// One host or a list of them.
fn de_hosts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Hosts;
    impl<'de> serde::de::Visitor<'de> for Hosts {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a host or an array of hosts")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Vec<String>, E> {
            Ok(vec![v.to_string()])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(h) = a.next_element::<String>()? {
                out.push(h);
            }
            Ok(out)
        }
    }
    d.deserialize_any(Hosts)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    pub(super) listen: String,
    pub(super) pool: Option<String>,
    pub(super) retries: Option<u32>,
    pub(super) ban_status: Option<Vec<u16>>,
    pub(super) retry_status: Option<Vec<u16>>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) connect_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) response_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) half_close_timeout: Option<Duration>,
    pub(super) token: Option<String>,
    pub(super) max_connections: Option<usize>,
    pub(super) ca_file: Option<PathBuf>,
    pub(super) plain_http: Option<PlainHttp>,
    pub(super) intercept: Option<Vec<String>>,
    pub(super) intercept_ports: Option<Vec<u16>>,
    pub(super) rotate: Option<Rotate>,
    pub(super) insecure_origins: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub(super) path: Option<PathBuf>,
    pub(super) url: Option<String>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) claim_hold: Option<Duration>,
    pub(super) synchronous: Option<Durability>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) events_retention: Option<Duration>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) socket: Option<PathBuf>,
    pub(super) max_connections: Option<usize>,
    pub(super) max_tcp_connections: Option<usize>,
    #[serde(default, deserialize_with = "de_addr")]
    pub(super) http: Option<std::net::SocketAddr>,
    pub(super) token_file: Option<PathBuf>,
    pub(super) lease_token_file: Option<PathBuf>,
    pub(super) http_token_file: Option<PathBuf>,
}

fn de_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::net::SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!(
            "invalid address {s:?}: write IP:PORT, e.g. \"127.0.0.1:9464\""
        ))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPool {
    pub(super) name: String,
    #[serde(default)]
    pub(super) mode: Mode,
    #[serde(default)]
    pub(super) max_leases_per_endpoint: u32,
    pub(super) max_leases: Option<u32>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) max_ttl: Option<Duration>,
    pub(super) probe: Option<RawProbe>,
    pub(super) cooldown: Option<RawCooldown>,
    #[serde(default, rename = "source")]
    pub(super) sources: Vec<RawSource>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) contrast_window: Option<Duration>,
    pub(super) down_after: Option<u32>,
    pub(super) escalate_after: Option<u32>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) verdict_window: Option<Duration>,
    pub(super) pace: Option<RawPace>,
    pub(super) select: Option<Select>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) slow_start: Option<Duration>,
    pub(super) fallback: Option<String>,
    pub(super) exit: Option<RawExit>,
}

/// `[pool.exit]` (docs/exit.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExit {
    pub(super) url: Option<String>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) every: Option<Duration>,
    pub(super) header: Option<String>,
    pub(super) subnet_v4: Option<u8>,
    pub(super) subnet_v6: Option<u8>,
    pub(super) subnet_after: Option<u32>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) subnet_window: Option<Duration>,
}

/// `[pool.pace]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPace {
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) interval: Option<Duration>,
    pub(super) in_flight: Option<u32>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) wait: Option<Duration>,
    #[serde(default)]
    pub(super) slow_down: bool,
    #[serde(default, rename = "site")]
    pub(super) sites: Vec<RawSite>,
}

/// `[[pool.pace.site]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSite {
    pub(super) host: String,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) interval: Option<Duration>,
    pub(super) in_flight: Option<u32>,
}

/// The `[[pool]]` keys of blame, copied out before the pool's tables are taken apart.
pub(super) struct BlameKeys {
    pub(super) contrast_window: Option<Duration>,
    pub(super) down_after: Option<u32>,
    pub(super) escalate_after: Option<u32>,
    pub(super) verdict_window: Option<Duration>,
}

impl RawPool {
    pub(super) fn blame_keys(&self) -> BlameKeys {
        BlameKeys {
            contrast_window: self.contrast_window,
            down_after: self.down_after,
            escalate_after: self.escalate_after,
            verdict_window: self.verdict_window,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProbe {
    pub(super) url: Option<String>,
    pub(super) method: Option<String>,
    pub(super) expect_status: Option<String>,
    pub(super) expect_body: Option<String>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) timeout: Option<Duration>,
    pub(super) max_body: Option<usize>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) interval: Option<Duration>,
    pub(super) concurrency: Option<usize>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) ca_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCooldown {
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) base: Option<Duration>,
    pub(super) factor: Option<f64>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) max: Option<Duration>,
    pub(super) jitter: Option<f64>,
    pub(super) fall: Option<u32>,
    #[serde(default)]
    pub(super) reasons: BTreeMap<Reason, RawReason>,
    /// `[pool.cooldown.target]`: the cooldown of a target that is down.
    pub(super) target: Option<RawTargetCooldown>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTargetCooldown {
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) base: Option<Duration>,
    pub(super) factor: Option<f64>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) max: Option<Duration>,
    pub(super) jitter: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReason {
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) base: Option<Duration>,
    pub(super) factor: Option<f64>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) max: Option<Duration>,
    pub(super) jitter: Option<f64>,
    pub(super) disable_after: Option<u32>,
    pub(super) fall: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(super) enum RawSourceKind {
    File,
    Url,
    Command,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    pub(super) kind: RawSourceKind,
    pub(super) path: Option<PathBuf>,
    pub(super) url: Option<String>,
    pub(super) command: Option<Vec<String>>,
    #[serde(default)]
    pub(super) preferred: bool,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) refresh: Option<Duration>,
    #[serde(default, deserialize_with = "de_duration")]
    pub(super) timeout: Option<Duration>,
    pub(super) max_bytes: Option<usize>,
    #[serde(default)]
    pub(super) tags: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEndpoint {
    pub(super) url: String,
    pub(super) pool: Option<String>,
    pub(super) label: Option<String>,
    #[serde(default)]
    pub(super) tags: BTreeMap<String, String>,
}
