//! The TOML configuration file: the validated `Config` and its parts. `raw` holds the
//! file as written (unknown keys rejected), `parse` checks it section by section,
//! `gateway` a `[[gateway]]`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::endpoint::ProxyUrl;
use crate::health::Policy;

mod gateway;
pub use gateway::{GatewayConfig, PlainHttp, Rotate, DEFAULT_INTERCEPT_PORTS};
mod hosts;
pub use hosts::{Everything, HostPatterns};
mod tls;
pub use tls::{CaFiles, TlsConfig, CA_CERT_FILE, CA_KEY_FILE};
pub mod pace;
pub use pace::{PaceConfig, Select, SiteRule};
pub mod exit;
pub use exit::ExitConfig;
mod locate;
mod parse;
mod restart;
pub use restart::restart_only_changes;
mod raw;

/// The name of the pool used when none is given.
pub const DEFAULT_POOL: &str = "default";

/// Errors loading or validating the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
    /// TOML syntax, unknown key, or wrong type: one line, naming the line and column,
    /// and the key when one is written there.
    #[error("invalid config {path}: line {line}, column {column}: {}{message}", key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Parse {
        /// File.
        path: String,
        line: usize,
        column: usize,
        /// Dotted key at that place, when the file parses as TOML.
        key: Option<String>,
        /// toml's message, on one line.
        message: String,
    },
    /// A value that parses but makes no sense.
    #[error("invalid config {path}: {}{key}: {message}", line.map(|n| format!("line {n}: ")).unwrap_or_default())]
    Invalid {
        /// File.
        path: String,
        /// Dotted key.
        key: String,
        /// What is wrong.
        message: String,
        /// Where the key (or its table) is written.
        line: Option<usize>,
    },
}

/// How a pool recovers endpoints and where new ones start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The next lease after a deadline is the single trial.
    #[default]
    StaticNoPing,
    /// The prober's transaction is the single trial.
    Static,
    /// As `static`, plus sources discover endpoints.
    Sniffing,
}

impl Mode {
    /// Config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::StaticNoPing => "static-no-ping",
            Mode::Static => "static",
            Mode::Sniffing => "sniffing",
        }
    }

    /// True when the prober, not a lease, takes the recovery claim.
    pub fn prober_recovers(self) -> bool {
        !matches!(self, Mode::StaticNoPing)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Accepted HTTP statuses, e.g. `200-399` or `200,204,300-302`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet(pub Vec<(u16, u16)>);

impl StatusSet {
    /// True when `status` is accepted.
    pub fn contains(&self, status: u16) -> bool {
        self.0.iter().any(|(lo, hi)| (*lo..=*hi).contains(&status))
    }
}

impl Default for StatusSet {
    fn default() -> Self {
        StatusSet(vec![(200, 399)])
    }
}

impl FromStr for StatusSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim) {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let p = |x: &str| -> Result<u16, String> {
                x.trim()
                    .parse::<u16>()
                    .ok()
                    .filter(|v| (100..=599).contains(v))
                    .ok_or_else(|| format!("{x:?} is not an HTTP status (100-599) in {s:?}"))
            };
            let (lo, hi) = (p(lo)?, p(hi)?);
            if lo > hi {
                return Err(format!("range {part:?} is reversed"));
            }
            out.push((lo, hi));
        }
        Ok(StatusSet(out))
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(lo, hi)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}-{hi}")
                }
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// What a probe fetches and how it judges the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Destination URL (http or https); none = never probed.
    pub url: Option<String>,
    /// HTTP method.
    pub method: String,
    /// Accepted statuses.
    pub expect_status: StatusSet,
    /// Required substring of the body.
    pub expect_body: Option<String>,
    /// Whole-transaction deadline.
    pub timeout: Duration,
    /// Body bytes read at most.
    pub max_body: usize,
    /// Periodic check of available endpoints; zero = off.
    pub interval: Duration,
    /// Parallel probes per pool.
    pub concurrency: usize,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
    /// Extra root CAs (PEM) for the destination.
    pub ca_file: Option<PathBuf>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            url: None,
            method: "GET".into(),
            expect_status: StatusSet::default(),
            expect_body: None,
            timeout: Duration::from_secs(10),
            max_body: 65536,
            interval: Duration::from_secs(300),
            concurrency: 64,
            headers: BTreeMap::new(),
            ca_file: None,
        }
    }
}

/// Where a sniffing pool learns endpoints.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceKind {
    /// A local file, one URL a line.
    File(PathBuf),
    /// HTTP(S) GET of a list or JSON array.
    Url(String),
    /// A program's stdout.
    Command(Vec<String>),
}

/// One source of a sniffing pool.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    /// Kind and location.
    pub kind: SourceKind,
    /// Tried before non-preferred sources.
    pub preferred: bool,
    /// Re-sniff interval; zero = only at startup and on exhaustion.
    pub refresh: Duration,
    /// Deadline for one fetch.
    pub timeout: Duration,
    /// Largest accepted output.
    pub max_bytes: usize,
    /// Tags given to every endpoint it yields (an entry's own tags win).
    pub tags: crate::tags::Tags,
    /// Working directory of a `command` source: the config file's folder, so that
    /// relative paths in its arguments mean the same as `path` does.
    pub dir: Option<PathBuf>,
}

impl SourceConfig {
    /// A stable, password-free name for events and `proxypool sources`, its control
    /// characters escaped (stored alike by both backends: PostgreSQL takes no NUL).
    pub fn name(&self) -> String {
        let name = match &self.kind {
            SourceKind::File(p) => format!("file:{}", p.display()),
            SourceKind::Url(u) => format!("url:{}", crate::endpoint::redact_raw(u)),
            SourceKind::Command(c) => format!("command:{}", crate::redact::redact_argv(c)),
        };
        crate::redact::printable(&name).into_owned()
    }
}

/// `max_leases` when a pool says none: about 36 MB of leases at most.
pub const DEFAULT_MAX_LEASES: u32 = 100_000;

/// The largest `max_leases` accepted.
pub const MAX_MAX_LEASES: u32 = 10_000_000;

/// `max_ttl` when a pool says none.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(3600);

/// A validated pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// Pool name.
    pub name: String,
    /// Recovery mode.
    pub mode: Mode,
    /// 0 = no cap.
    pub max_leases_per_endpoint: u32,
    /// Live leases the pool holds at most (socket and gateway alike): a client that
    /// never gives leases back cannot grow the daemon without bound.
    pub max_leases: u32,
    /// The longest `ttl` a socket lease may ask for. A gateway lease lives exactly as long
    /// as its connection and is not bound by it.
    pub max_ttl: Duration,
    /// Probe target.
    pub probe: ProbeConfig,
    /// Health policy.
    pub policy: Policy,
    /// How failures are judged against targets (docs/blame.md).
    pub blame: crate::health::blame::Rules,
    /// Sources (sniffing only), preferred first then config order.
    pub sources: Vec<SourceConfig>,
    /// `[pool.pace]` (docs/selection.md, "Pacing"); `None`: off.
    pub pace: Option<PaceConfig>,
    /// How a lease picks among the endpoints that qualify.
    pub select: Select,
    /// An endpoint that just became available is picked less at first, over this long
    /// (zero: off).
    pub slow_start: std::time::Duration,
    /// The pool a lease is served from when this one has nothing (one hop).
    pub fallback: Option<String>,
    /// `[pool.exit]` (docs/exit.md); `None`: off.
    pub exit: Option<ExitConfig>,
}

/// A probe trial's claim holds this much longer than the probe may take.
const PROBE_HOLD_MARGIN: Duration = Duration::from_secs(5);

impl PoolConfig {
    /// How long a trial is held at most, whatever holds it (a lease of any ttl, a probe):
    /// as long as a probe's claim (docs/blame.md, "A target that is down").
    pub fn trial_hold(&self) -> Duration {
        self.probe.timeout + PROBE_HOLD_MARGIN
    }

    /// The built-in pool used when a name is not configured.
    pub fn builtin(name: &str) -> Self {
        PoolConfig {
            name: name.to_string(),
            mode: Mode::StaticNoPing,
            max_leases_per_endpoint: 0,
            max_leases: DEFAULT_MAX_LEASES,
            max_ttl: DEFAULT_MAX_TTL,
            probe: ProbeConfig::default(),
            policy: Policy::default(),
            blame: Default::default(),
            sources: Vec::new(),
            pace: None,
            select: Select::LeastLeased,
            slow_start: Duration::ZERO,
            fallback: None,
            exit: None,
        }
    }
}

/// An endpoint declared in the config file.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointDecl {
    /// Parsed URL.
    pub url: ProxyUrl,
    /// Pool name.
    pub pool: String,
    /// Optional label.
    pub label: Option<String>,
    /// `tags = {country = "us"}`.
    pub tags: crate::tags::Tags,
}

/// `[store] events_retention` when the config does not say.
pub const DEFAULT_EVENTS_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// `[store] synchronous`: how hard a commit is pushed to disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// WAL + `synchronous=NORMAL`: a commit survives a crash or `kill -9` of the process;
    /// only an OS crash or power loss may roll back the last commits.
    #[default]
    Normal,
    /// WAL + `synchronous=FULL`: every commit is fsynced, surviving power loss too.
    Full,
}

/// Files holding the listeners' secrets (`[server] token_file`, `lease_token_file`,
/// `http_token_file`): read when `serve` starts, never stored in the config itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenFiles {
    /// The TCP listener's admin token.
    pub admin: Option<PathBuf>,
    /// The TCP listener's lease token.
    pub lease: Option<PathBuf>,
    /// The HTTP listener's bearer token.
    pub http: Option<PathBuf>,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// File it came from, if any.
    pub path: Option<PathBuf>,
    /// `[store] path`, resolved.
    pub store_path: Option<PathBuf>,
    /// `[store] url`: a PostgreSQL database that several daemons share (docs/fleet.md).
    pub store_url: Option<String>,
    /// `[store] claim_hold`: how long a trial's claim holds in PostgreSQL without renewal
    /// (docs/fleet.md, "Ownership"); `None`: the default.
    pub claim_hold: Option<Duration>,
    /// `[store] synchronous`.
    pub durability: Durability,
    /// `[server] socket`, resolved.
    pub socket: Option<PathBuf>,
    /// `[server] http`: the read-only HTTP listener (docs/observability.md, "HTTP
    /// listener"); off when absent.
    pub http: Option<std::net::SocketAddr>,
    /// `[server] token_file`, `lease_token_file`, `http_token_file`, resolved.
    pub token_files: TokenFiles,
    /// `[store] events_retention`: events older than this are pruned; zero keeps them all.
    pub events_retention: Duration,
    /// Pools by name; `default` always exists.
    pub pools: BTreeMap<String, PoolConfig>,
    /// Declared endpoints.
    pub endpoints: Vec<EndpointDecl>,
    /// `[[gateway]]` entries (and `serve --gateway`).
    pub gateways: Vec<GatewayConfig>,
    /// `[[ban]]` rules (docs/ban-rules.md), judged by every gateway.
    pub bans: crate::ban::BanRules,
    /// `[server] max_connections` (Unix socket) and `max_tcp_connections`; `None` derives
    /// them from the open-file limit (`server::fd_limit::default_caps`).
    pub max_connections: Option<usize>,
    pub max_tcp_connections: Option<usize>,
    /// `[tls]`: the CA's files and the roots trusted for origins.
    pub tls: TlsConfig,
}

impl Default for Config {
    fn default() -> Self {
        let mut pools = BTreeMap::new();
        pools.insert(DEFAULT_POOL.to_string(), PoolConfig::builtin(DEFAULT_POOL));
        Config {
            path: None,
            store_path: None,
            store_url: None,
            claim_hold: None,
            durability: Durability::default(),
            socket: None,
            http: None,
            token_files: TokenFiles::default(),
            events_retention: DEFAULT_EVENTS_RETENTION,
            pools,
            endpoints: Vec::new(),
            gateways: Vec::new(),
            bans: crate::ban::BanRules::default(),
            max_connections: None,
            max_tcp_connections: None,
            tls: TlsConfig::default(),
        }
    }
}

impl Config {
    /// Read and validate a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_regular_file(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut cfg = Config::parse(&text, &path.display().to_string(), path.parent())?;
        cfg.path = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// The pool config for `name`, if configured (or `default`).
    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.get(name)
    }

    /// Whether some `[[gateway]]` intercepts HTTPS (and so needs the CA).
    pub fn intercepts(&self) -> bool {
        self.gateways.iter().any(|g| !g.intercept.is_empty())
    }
}

/// Largest config file read: far above any real one, and a bound on what a wrong path
/// (a log, a disk image) makes the reader hold.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A regular file's text. Opened without blocking, so that a FIFO or a device named as the
/// config is refused at once instead of waiting forever for a writer.
fn read_regular_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO or a device is never read as a config)",
        ));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} bytes; a config is at most 16 MiB", meta.len()),
        ));
    }
    let mut text = String::new();
    f.take(MAX_CONFIG_BYTES).read_to_string(&mut text)?;
    Ok(text)
}

/// `$XDG_DATA_HOME/proxypool/proxypool.db` (or `~/.local/share/...`).
pub fn default_db_path() -> PathBuf {
    xdg_dir("XDG_DATA_HOME", ".local/share").join("proxypool/proxypool.db")
}

/// `$XDG_CONFIG_HOME/proxypool/proxies.toml` (or `~/.config/...`).
pub fn default_config_path() -> PathBuf {
    xdg_dir("XDG_CONFIG_HOME", ".config").join("proxypool/proxies.toml")
}

/// `$XDG_RUNTIME_DIR/proxypool.sock`, else beside the database.
pub fn default_socket_path(db: &Path) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("proxypool.sock"),
        None => db.with_extension("sock"),
    }
}

fn xdg_dir(var: &str, fallback: &str) -> PathBuf {
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(v) => PathBuf::from(v),
        None => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."))
            .join(fallback),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Reason;

    #[test]
    fn example_config_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("proxies.example.toml");
        let cfg = Config::load(&path).unwrap();
        assert!(cfg.pools.contains_key("default"));
        assert!(cfg.pools.values().any(|p| p.mode == Mode::Sniffing));
        assert!(!cfg.endpoints.is_empty());
        assert_eq!(cfg.gateways.len(), 1);
    }

    #[test]
    fn http_and_events_retention() {
        let d = Config::parse("", "t.toml", None).unwrap();
        assert_eq!(
            (d.http, d.events_retention),
            (None, DEFAULT_EVENTS_RETENTION)
        );
        let c = Config::parse(
            "[store]\nevents_retention = \"0s\"\n[server]\nhttp = \"127.0.0.1:9464\"\n",
            "t.toml",
            None,
        )
        .unwrap();
        assert_eq!(c.http, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(c.events_retention, Duration::ZERO);
        for (text, want) in [
            ("[server]\nhttp = \"localhost\"\n", "\"localhost\""),
            ("[store]\nevents_retention = \"a month\"\n", "a month"),
        ] {
            let e = Config::parse(text, "t.toml", None).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = Config::parse("[[pool]]\nname = \"a\"\nbogus = 1\n", "t.toml", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases = [
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\nfactor = 0.5\n", "pool.p.cooldown.factor"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\njitter = 1.0\n", "pool.p.cooldown.jitter"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\nbase = \"2h\"\n", "pool.p.cooldown.base"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\nbase = \"soon\"\n", "soon"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\nmax = \"400000y\"\n", "too long"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown.reasons.proxy_auth_rejected]\ndisable_after = 0\n", "disable_after"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown.reasons.nope]\nbase = \"1s\"\n", "nope"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\nfall = 0\n", "pool.p.cooldown.fall: fall must be >= 1"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown.reasons.connection_reset]\nfall = 0\n", "pool.p.cooldown.reasons.connection_reset.fall: fall must be >= 1"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\nfall = -1\n", "fall"),
            ("[[pool]]\nname=\"p\"\n[pool.cooldown]\nfall = \"2\"\n", "fall"),
            ("[[pool]]\nname=\"p\"\n[pool.probe]\nurl = \"ftp://x/\"\n", "pool.p.probe.url"),
            (
                "[[pool]]\nname=\"p\"\nmode=\"sniffing\"\n[[pool.source]]\nkind=\"url\"\nurl=\"ftp://u:pw@x/\"\n",
                "pool.p.source[0].url",
            ),
            ("[[pool]]\nname=\"p\"\n[pool.probe]\nexpect_status = \"299-200\"\n", "expect_status"),
            ("[[pool]]\nname=\"p\"\nmode = \"sniffing\"\n", "pool.p.source"),
            ("[[pool]]\nname=\"p\"\nmode = \"static\"\n", "pool \"p\" is mode = \"static\""),
            (
                "[[pool]]\nname=\"p\"\nmode=\"sniffing\"\n[[pool.source]]\nkind=\"file\"\npath=\"x\"\n",
                "pool.p.probe.url",
            ),
            ("[[endpoint]]\nurl = \"socks5://u:pw@h\"\n", "endpoint[0].url"),
            ("[[endpoint]]\nurl = \"socks5://h:1\"\npool = \"zz\"\n", "endpoint[0].pool"),
            ("[[pool]]\nname=\"a\"\n[[pool]]\nname=\"a\"\n", "twice"),
        ];
        for (text, want) in cases {
            let err = Config::parse(text, "t.toml", None).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains(":pw@"), "{err}");
        }
    }

    #[test]
    fn every_error_is_one_line_naming_the_key_and_its_line() {
        let cases = [
            (
                "[server]\nhttp = \"127.0.0.1:9464\"\nmax_connections = 0\n",
                "invalid config t.toml: line 3: server.max_connections: must be at least 1",
            ),
            (
                "[[pool]]\nname = \"a\"\n\n[[pool]]\nname = \"eu\"\n[pool.cooldown]\nfall = -1\n",
                "invalid config t.toml: line 7, column 8: pool[1].cooldown.fall: invalid value: integer `-1`, expected u32",
            ),
            (
                "[server]\nsokcet = \"x\"\n",
                "invalid config t.toml: line 2, column 1: server.sokcet: unknown field `sokcet`, expected one of",
            ),
            (
                "[server\nhttp = 1\n",
                "invalid config t.toml: line 1, column 8: ",
            ),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\n[[gateway]]\nlisten = \"0.0.0.0:2\"\n",
                "invalid config t.toml: line 3: gateway[1].token: ",
            ),
        ];
        for (text, want) in cases {
            let err = Config::parse(text, "t.toml", None).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text:?}:\n{err}\nwant {want}");
            assert!(!err.contains('\n'), "{err:?}");
        }
    }

    #[test]
    fn fall_per_pool_and_per_reason() {
        let cfg = Config::parse(
            "[[pool]]\nname=\"p\"\n[pool.cooldown]\nfall = 3\n\
             [pool.cooldown.reasons.destination_status]\nfall = 1\n\
             [pool.cooldown.reasons.proxy_auth_rejected]\nbase = \"10m\"\n\
             [[pool]]\nname=\"q\"\n",
            "t.toml",
            None,
        )
        .unwrap();
        let p = &cfg.pools["p"].policy;
        assert_eq!(p.fall, 3);
        assert_eq!(p.fall_for(Some(Reason::ConnectionReset)), 3);
        assert_eq!(p.fall_for(Some(Reason::DestinationStatus)), 1);
        assert_eq!(p.fall_for(Some(Reason::ProxyAuthRejected)), 3);
        assert_eq!(p.fall_for(None), 3);
        assert_eq!(cfg.pools["q"].policy.fall, 1, "default");
    }

    #[test]
    fn overrides_keep_default_disable_after() {
        let cfg = Config::parse(
            "[[pool]]\nname=\"p\"\n[pool.cooldown.reasons.proxy_auth_rejected]\nbase = \"10m\"\n",
            "t.toml",
            None,
        )
        .unwrap();
        let p = &cfg.pools["p"].policy;
        assert_eq!(p.disable_after(Some(Reason::ProxyAuthRejected)), Some(3));
        assert_eq!(
            p.cooldown_for(Some(Reason::ProxyAuthRejected)).base,
            Duration::from_secs(600)
        );
    }

    #[test]
    fn gateways_parse_with_defaults() {
        let cfg = Config::parse(
            "[[gateway]]\nlisten = \"127.0.0.1:8899\"\n[[gateway]]\nlisten = \"0.0.0.0:9000\"\ntoken = \"t0k\"\nretries = 0\nretry_status = [429]\nconnect_timeout = \"3s\"\nplain_http = \"tunnel\"\nresponse_timeout = \"5s\"\nhalf_close_timeout = \"2m\"\n",
            "t.toml",
            None,
        )
        .unwrap();
        let g = &cfg.gateways[0];
        assert_eq!(g.pool, "default");
        assert_eq!((g.retries, g.ban_status.clone()), (2, vec![403, 429]));
        assert_eq!(g.token, None);
        assert_eq!(g.max_connections, 10_000);
        assert_eq!(g.plain_http, PlainHttp::Forward);
        assert_eq!(g.response_timeout, Duration::from_secs(30));
        assert_eq!(g.half_close_timeout, Duration::from_secs(30));
        let g = &cfg.gateways[1];
        assert_eq!(g.token.as_deref(), Some("t0k"));
        assert_eq!((g.retries, g.retry_status.clone()), (0, vec![429]));
        assert_eq!(g.connect_timeout, Duration::from_secs(3));
        assert_eq!(g.plain_http, PlainHttp::Tunnel);
        assert_eq!(g.response_timeout, Duration::from_secs(5));
        assert_eq!(g.half_close_timeout, Duration::from_secs(120));
        assert!(!format!("{g:?}").contains("t0k"), "token in Debug");
    }

    #[test]
    fn gateway_ca_file_is_relative_to_the_config() {
        let cfg = Config::parse(
            "[[gateway]]\nlisten = \"127.0.0.1:8899\"\nca_file = \"ca.pem\"\n[[gateway]]\nlisten = \"127.0.0.1:8898\"\nca_file = \"/etc/ca.pem\"\n",
            "t.toml",
            Some(Path::new("/cfg")),
        )
        .unwrap();
        assert_eq!(cfg.gateways[0].ca_file, Some(PathBuf::from("/cfg/ca.pem")));
        assert_eq!(cfg.gateways[1].ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            GatewayConfig::new("127.0.0.1:1".parse().unwrap()).ca_file,
            None
        );
    }

    #[test]
    fn bad_gateways_name_the_key() {
        let cases = [
            ("[[gateway]]\nlisten = \"0.0.0.0:1\"\n", "gateway[0].token"),
            (
                "[[gateway]]\nlisten = \"0.0.0.0:1\"\ntoken = \"\"\n",
                "gateway[0].token",
            ),
            (
                "[[gateway]]\nlisten = \"0.0.0.0:1\"\ntoken = \" \"\n",
                "gateway[0].token: is blank",
            ),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\ntoken = \"\\t \"\n",
                "gateway[0].token: is blank",
            ),
            ("[[gateway]]\nlisten = \"localhost\"\n", "gateway[0].listen"),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\npool = \"nope\"\n",
                "gateway[0].pool",
            ),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\nban_status = [42]\n",
                "gateway[0].ban_status",
            ),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\nconnect_timeout = \"0s\"\n",
                "gateway[0].connect_timeout",
            ),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\nresponse_timeout = \"0s\"\n",
                "gateway[0].response_timeout",
            ),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\nhalf_close_timeout = \"0ms\"\n",
                "gateway[0].half_close_timeout",
            ),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\nmax_connections = 0\n",
                "gateway[0].max_connections",
            ),
            ("[[gateway]]\nlisten = \"127.0.0.1:1\"\nport = 3\n", "port"),
            (
                "[[gateway]]\nlisten = \"127.0.0.1:1\"\nplain_http = \"socks\"\n",
                "expected one of `forward`, `forward-keepalive`, `tunnel`",
            ),
        ];
        for (text, want) in cases {
            let err = Config::parse(text, "t.toml", None).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
