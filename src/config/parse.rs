//! `Config::parse`: the file as written (`raw`) checked section by section, in the order
//! the reference documents them: `[store]`, `[server]`, each `[[pool]]` (its probe,
//! cooldown and sources), `[[endpoint]]`, `[[gateway]]`. A bad value is an error naming
//! its key; nothing is half-applied.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::pace::{
    check_fallbacks, check_in_flight, check_interval, site_host, MAX_PACE_WAIT, MAX_SITES,
    MAX_SLOW_START,
};
use super::raw::{
    BlameKeys, RawBan, RawConfig, RawCooldown, RawEndpoint, RawGateway, RawPace, RawPool, RawProbe,
    RawServer, RawSource, RawSourceKind, RawStore, RawTargetCooldown,
};
use super::{
    Config, ConfigError, Durability, EndpointDecl, GatewayConfig, Mode, PaceConfig, PoolConfig,
    ProbeConfig, SiteRule, SourceConfig, SourceKind, TokenFiles, DEFAULT_EVENTS_RETENTION,
    DEFAULT_POOL, MAX_MAX_LEASES,
};
use crate::endpoint::ProxyUrl;
use crate::health::blame::{Rules, MAX_DOWN_AFTER};
use crate::health::{Policy, PolicyError, ReasonPolicy};
use crate::tags::Tags;

impl Config {
    /// Parse and validate TOML text; relative paths resolve against `base`.
    pub fn parse(text: &str, name: &str, base: Option<&Path>) -> Result<Config, ConfigError> {
        Config::parse_raw(text, name, base).map_err(|e| match e {
            ConfigError::Invalid {
                path,
                key,
                message,
                line: None,
            } => ConfigError::Invalid {
                line: super::locate::line_of(text, &key),
                path,
                key,
                message,
            },
            e => e,
        })
    }

    fn parse_raw(text: &str, name: &str, base: Option<&Path>) -> Result<Config, ConfigError> {
        let parse_error = |e: toml::de::Error, path: Option<String>| {
            let at = e.span().map_or(0, |s| s.start);
            let (line, column) = super::locate::line_col(text, at);
            ConfigError::Parse {
                path: name.to_string(),
                line,
                column,
                // The key under the error's position; else (a missing key, a table
                // written as the wrong kind) the path serde was at.
                key: e
                    .span()
                    .and_then(|s| super::locate::key_at(text, s.start))
                    .or(path.clone()),
                message: plain_message(e.message(), path.as_deref()),
            }
        };
        let de = toml::Deserializer::parse(text).map_err(|e| parse_error(e, None))?;
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let path = (path != ".").then_some(path);
            parse_error(e.into_inner(), path)
        })?;
        let file = File { name, base };
        let mut cfg = file.store_and_server(raw.store, raw.server)?;
        cfg.tls = super::TlsConfig::written(raw.tls, |p| file.resolve(p));
        let mut seen = BTreeSet::new();
        for (i, rp) in raw.pools.into_iter().enumerate() {
            let pool = file.pool(i, rp, &mut seen)?;
            cfg.pools.insert(pool.name.clone(), pool);
        }
        let fallbacks = cfg
            .pools
            .iter()
            .map(|(n, p)| (n.clone(), p.fallback.clone()))
            .collect();
        check_fallbacks(&fallbacks)
            .map_err(|(pool, m)| file.invalid(format!("pool.{pool}.fallback"), m))?;
        for (i, e) in raw.endpoints.into_iter().enumerate() {
            let decl = file.endpoint(i, e, &cfg.pools)?;
            cfg.endpoints.push(decl);
        }
        for (i, g) in raw.gateways.into_iter().enumerate() {
            let gw = file.gateway(i, g, &cfg.pools)?;
            // Two listeners on one address: the second could never bind, and `config
            // check` would pass a file `serve` fails on. Port 0 is a fresh port each time.
            let taken = cfg
                .gateways
                .iter()
                .position(|o| clash(o.listen, gw.listen))
                .map(|j| (format!("gateway[{j}]"), cfg.gateways[j].listen))
                .or_else(|| {
                    cfg.http
                        .filter(|h| clash(*h, gw.listen))
                        .map(|h| ("server.http".to_string(), h))
                });
            if let Some((other, at)) = taken {
                return Err(file.invalid(
                    format!("gateway[{i}].listen"),
                    format!("{} cannot be bound beside {other} on {at}", gw.listen),
                ));
            }
            cfg.gateways.push(gw);
        }
        cfg.bans = file.bans(raw.bans)?;
        Ok(cfg)
    }
}

/// Whether two listen addresses cannot both be bound: the same port (not 0, a fresh port
/// each time) on the same address, or on any address where one is a wildcard (`0.0.0.0`
/// and `[::]`, dual-stack, take the port on every address).
fn clash(a: std::net::SocketAddr, b: std::net::SocketAddr) -> bool {
    let (x, y) = (a.ip().to_canonical(), b.ip().to_canonical());
    a.port() == b.port() && a.port() != 0 && (x == y || x.is_unspecified() || y.is_unspecified())
}

/// A parser's message as a user reads it: one line, and a table where it names the type
/// that holds one (`expected struct RawStore`); at a key that takes `[[...]]` tables, an
/// array of tables where it says sequence.
fn plain_message(m: &str, path: Option<&str>) -> String {
    let m = m.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(m.len());
    let mut rest = m.as_str();
    while let Some(i) = rest.find("struct Raw") {
        out.push_str(&rest[..i]);
        out.push_str("a table");
        rest = rest[i + "struct Raw".len()..].trim_start_matches(|c: char| c.is_alphanumeric());
    }
    out.push_str(rest);
    let last = path.and_then(|p| p.rsplit('.').next()).unwrap_or("");
    let last = last.split('[').next().unwrap_or("");
    let tables = ["pool", "endpoint", "gateway", "source", "site", "ban"];
    match tables.contains(&last) {
        true => out.replace(
            "expected a sequence",
            "expected an array of tables ([[...]])",
        ),
        false => out.replace("expected a sequence", "expected an array"),
    }
}

/// The file being parsed: its name for errors, its folder for relative paths.
struct File<'a> {
    name: &'a str,
    base: Option<&'a Path>,
}

impl File<'_> {
    fn invalid(&self, key: String, message: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.name.to_string(),
            key,
            message,
            line: None,
        }
    }

    fn resolve(&self, p: PathBuf) -> PathBuf {
        match self.base {
            Some(b) if p.is_relative() => b.join(p),
            _ => p,
        }
    }

    /// `[store]` and `[server]`: a config with no pool yet.
    fn store_and_server(
        &self,
        store: Option<RawStore>,
        server: Option<RawServer>,
    ) -> Result<Config, ConfigError> {
        if let Some(s) = &store {
            if let Some(url) = &s.url {
                if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                    return Err(self.invalid(
                        "store.url".to_string(),
                        "must start with postgres:// or postgresql:// (a SQLite file is [store] path)"
                            .to_string(),
                    ));
                }
                if s.path.is_some() {
                    return Err(self.invalid(
                        "store.url".to_string(),
                        "name one store: [store] path (SQLite) or url (PostgreSQL), not both"
                            .to_string(),
                    ));
                }
            }
        }
        let store_url = store.as_ref().and_then(|s| s.url.clone());
        let claim_hold = store.as_ref().and_then(|s| s.claim_hold);
        if claim_hold.is_some_and(|h| h < Duration::from_secs(1)) {
            return Err(self.invalid(
                "store.claim_hold".to_string(),
                "must be at least 1s (a daemon renews its claims every third of it)".to_string(),
            ));
        }
        let (store_path, durability, events_retention) = match store {
            Some(s) => (
                s.path.map(|p| self.resolve(p)),
                s.synchronous.unwrap_or_default(),
                s.events_retention.unwrap_or(DEFAULT_EVENTS_RETENTION),
            ),
            None => (None, Durability::default(), DEFAULT_EVENTS_RETENTION),
        };
        let server = server.unwrap_or_default();
        let (socket, http) = (server.socket, server.http);
        let (max_connections, max_tcp_connections) =
            (server.max_connections, server.max_tcp_connections);
        let token_files = TokenFiles {
            admin: server.token_file.map(|p| self.resolve(p)),
            lease: server.lease_token_file.map(|p| self.resolve(p)),
            http: server.http_token_file.map(|p| self.resolve(p)),
        };
        for (key, v) in [
            ("server.max_connections", max_connections),
            ("server.max_tcp_connections", max_tcp_connections),
        ] {
            if v == Some(0) {
                return Err(self.invalid(
                    key.to_string(),
                    "must be at least 1 (leave it out for a default from the open-file limit)"
                        .to_string(),
                ));
            }
        }
        Ok(Config {
            store_path,
            store_url,
            claim_hold,
            durability,
            socket: socket.map(|p| self.resolve(p)),
            max_connections,
            max_tcp_connections,
            http,
            token_files,
            events_retention,
            ..Config::default()
        })
    }

    /// The `i`-th `[[pool]]`, its name not among those `seen` before.
    fn pool(
        &self,
        i: usize,
        mut rp: RawPool,
        seen: &mut BTreeSet<String>,
    ) -> Result<PoolConfig, ConfigError> {
        let key = format!("pool[{i}]");
        if rp.name.trim().is_empty() {
            return Err(self.invalid(format!("{key}.name"), "must not be empty".into()));
        }
        if !seen.insert(rp.name.clone()) {
            return Err(self.invalid(
                format!("{key}.name"),
                format!("pool {:?} is declared twice", rp.name),
            ));
        }
        let key = format!("pool.{}", rp.name);
        let blame_keys = rp.blame_keys();
        let mut pool = PoolConfig::builtin(&rp.name);
        pool.mode = rp.mode;
        pool.max_leases_per_endpoint = rp.max_leases_per_endpoint;
        if let Some(n) = rp.max_leases {
            if !(1..=MAX_MAX_LEASES).contains(&n) {
                return Err(self.invalid(
                    format!("{key}.max_leases"),
                    format!("must be between 1 and {MAX_MAX_LEASES}"),
                ));
            }
            pool.max_leases = n;
        }
        if let Some(d) = rp.max_ttl {
            if d.is_zero() {
                return Err(self.invalid(format!("{key}.max_ttl"), "must be greater than 0".into()));
            }
            pool.max_ttl = d;
        }
        pool.select = rp.select.unwrap_or_default();
        if let Some(d) = rp.slow_start {
            if d > MAX_SLOW_START {
                return Err(self.invalid(format!("{key}.slow_start"), "must be at most 24h".into()));
            }
            pool.slow_start = d;
        }
        pool.fallback = rp.fallback.clone();
        if let Some(p) = rp.pace.take() {
            pool.pace = Some(self.pace(&key, p)?);
        }
        if let Some(p) = rp.probe {
            self.probe(&key, p, &mut pool.probe)?;
        }
        if let Some(x) = rp.exit.take() {
            pool.exit = Some(self.exit(&key, x, pool.probe.url.as_deref())?);
        }
        let target_cooldown = match rp.cooldown {
            Some(mut c) => {
                let target = c.target.take();
                cooldown(c, &mut pool.policy);
                target
            }
            None => None,
        };
        pool.policy
            .validate(&format!("{key}.cooldown"))
            .map_err(|e: PolicyError| self.invalid(e.key().to_string(), e.problem()))?;
        self.blame(&key, &blame_keys, target_cooldown, &mut pool.blame)?;
        let mut sources = rp
            .sources
            .into_iter()
            .enumerate()
            .map(|(j, s)| self.source(&format!("{key}.source[{j}]"), s))
            .collect::<Result<Vec<_>, _>>()?;
        self.check_mode(&key, &pool, &sources)?;
        // Stable sort: preferred first, then config order.
        sources.sort_by_key(|s| !s.preferred);
        pool.sources = sources;
        Ok(pool)
    }

    /// The `[[pool]]` keys of blame and `[pool.cooldown.target]`, over the defaults.
    fn blame(
        &self,
        key: &str,
        k: &BlameKeys,
        target: Option<RawTargetCooldown>,
        rules: &mut Rules,
    ) -> Result<(), ConfigError> {
        if let Some(w) = k.contrast_window {
            if w.is_zero() {
                return Err(self.invalid(format!("{key}.contrast_window"), "must be > 0".into()));
            }
            rules.contrast_window = w;
        }
        if let Some(n) = k.down_after {
            if !(1..=MAX_DOWN_AFTER).contains(&n) {
                return Err(self.invalid(
                    format!("{key}.down_after"),
                    format!("must be between 1 and {MAX_DOWN_AFTER}, got {n}"),
                ));
            }
            rules.down_after = n;
        }
        if let Some(n) = k.escalate_after {
            if n > 1000 {
                return Err(self.invalid(
                    format!("{key}.escalate_after"),
                    format!("must be at most 1000 (0 turns escalation off), got {n}"),
                ));
            }
            rules.escalate_after = n;
        }
        if let Some(w) = k.verdict_window {
            if w > Duration::from_secs(3600) {
                return Err(
                    self.invalid(format!("{key}.verdict_window"), "must be at most 1h".into())
                );
            }
            rules.verdict_window = w;
        }
        if let Some(t) = target {
            let c = &mut rules.target.cooldown;
            c.base = t.base.unwrap_or(c.base);
            c.factor = t.factor.unwrap_or(c.factor);
            c.max = t.max.unwrap_or(c.max);
            c.jitter = t.jitter.unwrap_or(c.jitter);
        }
        rules
            .target
            .validate(&format!("{key}.cooldown.target"))
            .map_err(|e: PolicyError| self.invalid(e.key().to_string(), e.problem()))
    }

    /// `[pool.pace]` and its `[[pool.pace.site]]`s.
    fn pace(&self, key: &str, p: RawPace) -> Result<PaceConfig, ConfigError> {
        let key = format!("{key}.pace");
        let interval = p.interval.unwrap_or_default();
        check_interval(interval).map_err(|m| self.invalid(format!("{key}.interval"), m))?;
        let in_flight = p.in_flight.unwrap_or(0);
        check_in_flight(in_flight).map_err(|m| self.invalid(format!("{key}.in_flight"), m))?;
        let wait = p.wait.unwrap_or_default();
        if wait > MAX_PACE_WAIT {
            return Err(self.invalid(format!("{key}.wait"), "must be at most 10m".into()));
        }
        if p.sites.len() > MAX_SITES {
            return Err(self.invalid(
                format!("{key}.site"),
                format!("at most {MAX_SITES} sites, got {}", p.sites.len()),
            ));
        }
        let mut sites = BTreeMap::new();
        for (j, s) in p.sites.into_iter().enumerate() {
            let skey = format!("{key}.site[{j}]");
            let host = site_host(&s.host).map_err(|m| self.invalid(format!("{skey}.host"), m))?;
            if let Some(d) = s.interval {
                check_interval(d).map_err(|m| self.invalid(format!("{skey}.interval"), m))?;
            }
            if let Some(n) = s.in_flight {
                check_in_flight(n).map_err(|m| self.invalid(format!("{skey}.in_flight"), m))?;
            }
            let rule = SiteRule {
                interval: s.interval,
                in_flight: s.in_flight,
            };
            if sites.insert(host.clone(), rule).is_some() {
                return Err(self.invalid(
                    format!("{skey}.host"),
                    format!("site {host:?} is given twice"),
                ));
            }
        }
        Ok(PaceConfig {
            interval,
            in_flight,
            wait,
            slow_down: p.slow_down,
            sites,
        })
    }

    /// `[pool.exit]` over its defaults.
    fn exit(
        &self,
        key: &str,
        x: super::raw::RawExit,
        probe_url: Option<&str>,
    ) -> Result<super::ExitConfig, ConfigError> {
        let d = super::ExitConfig::default();
        let cfg = super::ExitConfig {
            url: x.url,
            every: x.every.unwrap_or(d.every),
            header: x.header.map(|h| h.to_ascii_lowercase()),
            subnet_v4: x.subnet_v4.unwrap_or(d.subnet_v4),
            subnet_v6: x.subnet_v6.unwrap_or(d.subnet_v6),
            subnet_after: x.subnet_after.unwrap_or(d.subnet_after),
            subnet_window: x.subnet_window.unwrap_or(d.subnet_window),
        };
        super::exit::check(&cfg, probe_url, validate_probe_url)
            .map_err(|(k, m)| self.invalid(format!("{key}.exit.{k}"), m))?;
        Ok(cfg)
    }

    /// `[pool.probe]`, over the defaults in `pr`.
    fn probe(&self, key: &str, p: RawProbe, pr: &mut ProbeConfig) -> Result<(), ConfigError> {
        if let Some(u) = p.url {
            validate_probe_url(&u).map_err(|m| self.invalid(format!("{key}.probe.url"), m))?;
            pr.url = Some(u);
        }
        if let Some(m) = p.method {
            if m.is_empty() || !m.bytes().all(|b| b.is_ascii_uppercase()) {
                return Err(self.invalid(
                    format!("{key}.probe.method"),
                    format!("{m:?} is not an HTTP method (e.g. GET, HEAD)"),
                ));
            }
            pr.method = m;
        }
        if let Some(s) = p.expect_status {
            pr.expect_status = s
                .parse()
                .map_err(|m| self.invalid(format!("{key}.probe.expect_status"), m))?;
        }
        pr.expect_body = p.expect_body;
        if let Some(t) = p.timeout {
            if t.is_zero() {
                return Err(self.invalid(format!("{key}.probe.timeout"), "must be > 0".into()));
            }
            pr.timeout = t;
        }
        if let Some(m) = p.max_body {
            pr.max_body = m;
        }
        if let Some(i) = p.interval {
            // Sub-second periodic probes would hammer every proxy (and the store).
            if !i.is_zero() && i < Duration::from_secs(1) {
                return Err(self.invalid(
                    format!("{key}.probe.interval"),
                    "must be at least 1s (or \"0s\" for no periodic probes)".into(),
                ));
            }
            pr.interval = i;
        }
        if let Some(c) = p.concurrency {
            if c == 0 {
                return Err(self.invalid(format!("{key}.probe.concurrency"), "must be >= 1".into()));
            }
            pr.concurrency = c;
        }
        for (h, v) in &p.headers {
            if hyper::header::HeaderName::from_bytes(h.as_bytes()).is_err()
                || hyper::header::HeaderValue::from_str(v).is_err()
            {
                return Err(self.invalid(
                    format!("{key}.probe.headers.{h}"),
                    "not a valid HTTP header".into(),
                ));
            }
        }
        pr.headers = p.headers;
        pr.ca_file = p.ca_file.map(|p| self.resolve(p));
        Ok(())
    }

    /// One `[[pool.source]]` (`skey` names it in errors).
    fn source(&self, skey: &str, s: RawSource) -> Result<SourceConfig, ConfigError> {
        let kind = match s.kind {
            RawSourceKind::File => {
                let path = s.path.ok_or_else(|| {
                    self.invalid(format!("{skey}.path"), "kind = \"file\" needs path".into())
                })?;
                SourceKind::File(self.resolve(path))
            }
            RawSourceKind::Url => {
                let u = s.url.ok_or_else(|| {
                    self.invalid(format!("{skey}.url"), "kind = \"url\" needs url".into())
                })?;
                validate_probe_url(&u).map_err(|m| self.invalid(format!("{skey}.url"), m))?;
                SourceKind::Url(u)
            }
            RawSourceKind::Command => {
                let c = s.command.filter(|c| !c.is_empty()).ok_or_else(|| {
                    self.invalid(
                        format!("{skey}.command"),
                        "kind = \"command\" needs command = [\"prog\", \"arg\", ...]".into(),
                    )
                })?;
                SourceKind::Command(c)
            }
        };
        Ok(SourceConfig {
            kind,
            preferred: s.preferred,
            refresh: s.refresh.unwrap_or(Duration::from_secs(600)),
            timeout: s.timeout.unwrap_or(Duration::from_secs(30)),
            max_bytes: s.max_bytes.unwrap_or(4 << 20),
            tags: Tags::try_from(s.tags)
                .map_err(|e| self.invalid(format!("{skey}.tags"), e.to_string()))?,
            dir: self.base.map(Path::to_path_buf),
        })
    }

    /// What a pool's mode requires: sources exactly when sniffing, a probe target when
    /// its prober recovers endpoints.
    fn check_mode(
        &self,
        key: &str,
        pool: &PoolConfig,
        sources: &[SourceConfig],
    ) -> Result<(), ConfigError> {
        if !sources.is_empty() && pool.mode != Mode::Sniffing {
            return Err(self.invalid(
                format!("{key}.source"),
                format!("sources need mode = \"sniffing\" (pool is {})", pool.mode),
            ));
        }
        if pool.mode == Mode::Sniffing && sources.is_empty() {
            return Err(self.invalid(
                format!("{key}.source"),
                "mode = \"sniffing\" needs at least one [[pool.source]]".into(),
            ));
        }
        // No built-in target: probing a page the user never chose proves nothing
        // about the destination that matters (docs/probe.md).
        if pool.mode.prober_recovers() && pool.probe.url.is_none() {
            return Err(self.invalid(
                format!("{key}.probe.url"),
                format!(
                    "pool {:?} is mode = \"{}\": its prober needs a target; set [pool.probe] url \
                     to a page of the destination that matters",
                    pool.name, pool.mode
                ),
            ));
        }
        Ok(())
    }

    /// The `i`-th `[[endpoint]]`, in a pool declared above (or `default`).
    fn endpoint(
        &self,
        i: usize,
        e: RawEndpoint,
        pools: &BTreeMap<String, PoolConfig>,
    ) -> Result<EndpointDecl, ConfigError> {
        let key = format!("endpoint[{i}]");
        let url = ProxyUrl::parse(&e.url)
            .map_err(|err| self.invalid(format!("{key}.url"), err.to_string()))?;
        let pool = e.pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
        if !pools.contains_key(&pool) {
            return Err(self.invalid(
                format!("{key}.pool"),
                format!("unknown pool {pool:?} (declare it with [[pool]])"),
            ));
        }
        let tags = Tags::try_from(e.tags)
            .map_err(|err| self.invalid(format!("{key}.tags"), err.to_string()))?;
        Ok(EndpointDecl {
            url,
            pool,
            label: e.label,
            tags,
        })
    }

    /// The `i`-th `[[gateway]]`, over a pool declared above.
    fn gateway(
        &self,
        i: usize,
        g: RawGateway,
        pools: &BTreeMap<String, PoolConfig>,
    ) -> Result<GatewayConfig, ConfigError> {
        let key = format!("gateway[{i}]");
        let listen = g.listen.parse().map_err(|e| {
            self.invalid(
                format!("{key}.listen"),
                format!("{:?} is not an IP:port address: {e}", g.listen),
            )
        })?;
        let mut gw = GatewayConfig::new(listen);
        if let Some(p) = g.pool {
            if !pools.contains_key(&p) {
                return Err(self.invalid(
                    format!("{key}.pool"),
                    format!("unknown pool {p:?} (declare it with [[pool]])"),
                ));
            }
            gw.pool = p;
        }
        gw.retries = g.retries.unwrap_or(gw.retries);
        gw.ban_status = g.ban_status.unwrap_or(gw.ban_status);
        gw.retry_status = g.retry_status.unwrap_or(gw.retry_status);
        gw.connect_timeout = g.connect_timeout.unwrap_or(gw.connect_timeout);
        gw.response_timeout = g.response_timeout.unwrap_or(gw.response_timeout);
        gw.half_close_timeout = g.half_close_timeout.unwrap_or(gw.half_close_timeout);
        gw.token = g.token.filter(|t| !t.is_empty());
        gw.max_connections = g.max_connections.unwrap_or(gw.max_connections);
        gw.ca_file = g.ca_file.map(|p| self.resolve(p));
        gw.plain_http = g.plain_http.unwrap_or_default();
        gw.intercept_ports = g.intercept_ports.unwrap_or(gw.intercept_ports);
        gw.rotate = g.rotate.unwrap_or_default();
        gw.set_intercept(g.intercept, g.insecure_origins)
            .map_err(|(k, m)| self.invalid(format!("{key}.{k}"), m))?;
        gw.check()
            .map_err(|(k, m)| self.invalid(format!("{key}.{k}"), m))?;
        Ok(gw)
    }
}

impl File<'_> {
    /// The `[[ban]]` entries, compiled; a problem names the entry and its key.
    fn bans(&self, raw: Vec<RawBan>) -> Result<crate::ban::BanRules, ConfigError> {
        let entries = raw
            .into_iter()
            .map(|b| crate::ban::BanEntry {
                name: b.name,
                builtin: b.builtin,
                status: b.status,
                header: b.header,
                body: b.body,
                host: b.host,
                body_bytes: b.body_bytes,
            })
            .collect();
        crate::ban::BanRules::compile(entries).map_err(|e| {
            let key = match e.key {
                "" => format!("ban[{}]", e.index),
                k => format!("ban[{}].{k}", e.index),
            };
            self.invalid(key, e.to_string())
        })
    }
}

/// `[pool.cooldown]`, over the defaults in `policy` (checked afterwards as a whole).
fn cooldown(c: RawCooldown, policy: &mut Policy) {
    let d = &mut policy.cooldown;
    d.base = c.base.unwrap_or(d.base);
    d.factor = c.factor.unwrap_or(d.factor);
    d.max = c.max.unwrap_or(d.max);
    d.jitter = c.jitter.unwrap_or(d.jitter);
    policy.fall = c.fall.unwrap_or(policy.fall);
    for (reason, r) in c.reasons {
        let entry = policy.reasons.entry(reason).or_default();
        *entry = ReasonPolicy {
            base: r.base,
            factor: r.factor,
            max: r.max,
            jitter: r.jitter,
            disable_after: r.disable_after.or(entry.disable_after),
            fall: r.fall.or(entry.fall),
        };
    }
}

fn validate_probe_url(u: &str) -> Result<(), String> {
    // Provider URLs may carry credentials: errors show them redacted.
    let shown = crate::endpoint::redact_raw(u);
    let uri: hyper::Uri = u
        .parse()
        .map_err(|e| format!("{shown:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(format!("{shown:?} must be an http:// or https:// URL")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{shown:?} has no host"));
    }
    Ok(())
}
