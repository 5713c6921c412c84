//! A `[[gateway]]` section (docs/reference.md, "`[[gateway]]`"), after parsing: defaults
//! and checks.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::hosts::{Everything, HostPatterns};
use super::DEFAULT_POOL;

/// One rotating gateway (docs/gateway.md).
#[derive(Clone, PartialEq)]
pub struct GatewayConfig {
    /// Address the gateway listens on.
    pub listen: std::net::SocketAddr,
    /// Pool used when the client names none.
    pub pool: String,
    /// Further upstreams tried after a connect-phase failure.
    pub retries: u32,
    /// Plain-HTTP statuses reported as `destination_status`.
    pub ban_status: Vec<u16>,
    /// Statuses for which a GET/HEAD is re-sent through another upstream.
    pub retry_status: Vec<u16>,
    /// Deadline for reaching the destination through one upstream.
    pub connect_timeout: Duration,
    /// Deadline for the response head of a plain-HTTP request, once it is sent upstream.
    pub response_timeout: Duration,
    /// A tunnel one side has closed ends when the other side sends nothing for this long.
    pub half_close_timeout: Duration,
    /// The password clients must send; None = no authentication.
    pub token: Option<String>,
    /// Client connections served at once.
    pub max_connections: usize,
    /// Extra CA certificates (PEM) trusted for `https://` upstream proxies.
    pub ca_file: Option<PathBuf>,
    /// How absolute-form requests travel through an HTTP(S) upstream.
    pub plain_http: PlainHttp,
    /// Hosts whose HTTPS the gateway terminates (docs/intercept.md); empty: tunnels only.
    pub intercept: HostPatterns,
    /// The CONNECT ports at which `intercept` applies.
    pub intercept_ports: Vec<u16>,
    /// Which upstream each request inside an intercepted connection takes.
    pub rotate: Rotate,
    /// Origins whose certificate is not verified.
    pub insecure_origins: HostPatterns,
}

/// `rotate`: how the requests inside one intercepted connection choose their upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rotate {
    /// Every request of a connection goes through the upstream its first one leased.
    #[default]
    Connection,
    /// Each request takes its own lease, even on one keep-alive connection.
    Request,
}

/// The ports `intercept` applies at when `intercept_ports` is not given.
pub const DEFAULT_INTERCEPT_PORTS: [u16; 1] = [443];

/// Why `insecure_origins` refuses `"*"`.
const NO_INSECURE_EVERYTHING: Everything =
    Everything::Refused("\"*\" would turn certificate checks off for every origin: name the hosts");

/// How the gateway sends a plain-HTTP (absolute-form) request through an HTTP(S) upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlainHttp {
    /// Forward the request to the proxy in absolute form on a new connection, closed after
    /// the response: every request may leave a rotating proxy from a new address.
    #[default]
    Forward,
    /// Forward in absolute form on a connection kept for the next request to the same
    /// host through the same upstream, when the proxy keeps it open.
    ForwardKeepalive,
    /// Open a CONNECT tunnel to the destination and send the request inside it; the tunnel
    /// stays open for the next request through the same upstream to the same host. A proxy
    /// that refuses the tunnel by policy (e.g. CONNECT to port 443 only) gets the request
    /// forwarded instead (`forward-keepalive`), remembered for an hour.
    Tunnel,
}

impl GatewayConfig {
    /// A gateway on `listen` with the defaults of docs/reference.md, "`[[gateway]]`".
    pub fn new(listen: std::net::SocketAddr) -> GatewayConfig {
        GatewayConfig {
            listen,
            pool: DEFAULT_POOL.to_string(),
            retries: 2,
            ban_status: vec![403, 429],
            retry_status: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(30),
            half_close_timeout: Duration::from_secs(30),
            token: None,
            max_connections: 10_000,
            ca_file: None,
            plain_http: PlainHttp::Forward,
            intercept: HostPatterns::default(),
            intercept_ports: DEFAULT_INTERCEPT_PORTS.to_vec(),
            rotate: Rotate::Connection,
            insecure_origins: HostPatterns::default(),
        }
    }

    /// `intercept` and `insecure_origins` as written, checked (the key named on error).
    pub(super) fn set_intercept(
        &mut self,
        intercept: Option<Vec<String>>,
        insecure: Option<Vec<String>>,
    ) -> Result<(), (&'static str, String)> {
        let list = |v: Option<Vec<String>>, star| HostPatterns::parse(&v.unwrap_or_default(), star);
        self.intercept = list(intercept, Everything::Allowed).map_err(|m| ("intercept", m))?;
        self.insecure_origins =
            list(insecure, NO_INSECURE_EVERYTHING).map_err(|m| ("insecure_origins", m))?;
        Ok(())
    }

    /// Whether a CONNECT (or SOCKS5 CONNECT) to `host` at `port` is intercepted: `host`
    /// is canonical (lower case, no trailing dot, IPv6 without brackets), as every front
    /// checks a destination.
    pub fn intercepts(&self, host: &str, port: u16) -> bool {
        !self.intercept.is_empty()
            && self.intercept_ports.contains(&port)
            && self.intercept.matches(host)
    }

    /// The first problem found, as (key, message).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            // White space a client could send as easily as nothing: no protection, on
            // loopback or off it.
            return Err((
                "token",
                "is blank (only white space): give a real secret, or leave it out on loopback"
                    .into(),
            ));
        }
        if !self.listen.ip().is_loopback() && self.token.is_none() {
            return Err((
                "token",
                format!(
                    "a gateway listening on {} (not loopback) needs a non-empty token",
                    self.listen
                ),
            ));
        }
        for (key, list) in [
            ("ban_status", &self.ban_status),
            ("retry_status", &self.retry_status),
        ] {
            if let Some(bad) = list.iter().find(|s| !(100..=599).contains(*s)) {
                return Err((key, format!("{bad} is not an HTTP status (100-599)")));
            }
        }
        for (key, d) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("half_close_timeout", self.half_close_timeout),
        ] {
            if d.is_zero() {
                return Err((key, "must be > 0".into()));
            }
        }
        if self.max_connections == 0 {
            return Err(("max_connections", "must be >= 1".into()));
        }
        if self.intercept_ports.contains(&0) {
            return Err(("intercept_ports", "0 is not a port (1-65535)".into()));
        }
        if !self.intercept.is_empty() && self.intercept_ports.is_empty() {
            return Err((
                "intercept_ports",
                "is empty, so `intercept` would apply nowhere: name a port (443 by default)".into(),
            ));
        }
        Ok(())
    }
}

// The token is a credential: it never reaches a log line through `{:?}`.
impl fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("listen", &self.listen)
            .field("pool", &self.pool)
            .field("retries", &self.retries)
            .field("ban_status", &self.ban_status)
            .field("retry_status", &self.retry_status)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("half_close_timeout", &self.half_close_timeout)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("max_connections", &self.max_connections)
            .field("ca_file", &self.ca_file)
            .field("plain_http", &self.plain_http)
            .field("intercept", &self.intercept)
            .field("intercept_ports", &self.intercept_ports)
            .field("rotate", &self.rotate)
            .field("insecure_origins", &self.insecure_origins)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::config::Config;

    fn gateway(keys: &str) -> Result<GatewayConfig, String> {
        let text = format!("[[gateway]]\nlisten = \"127.0.0.1:8899\"\n{keys}");
        Config::parse(&text, "t.toml", None)
            .map(|c| c.gateways[0].clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn interception_keys_and_their_defaults() {
        let g = gateway("").unwrap();
        assert!(g.intercept.is_empty() && g.insecure_origins.is_empty());
        assert_eq!(
            (g.intercept_ports, g.rotate),
            (vec![443], Rotate::Connection)
        );
        let g = gateway(
            "intercept = [\"Shop.Example\", \"*.example.org\"]\nintercept_ports = [443, 8443]\n\
             rotate = \"request\"\ninsecure_origins = [\"self-signed.test\"]\n",
        )
        .unwrap();
        assert_eq!(g.intercept.entries(), ["shop.example", "*.example.org"]);
        assert_eq!(g.intercept_ports, [443, 8443]);
        assert_eq!(g.rotate, Rotate::Request);
        assert_eq!(g.insecure_origins.entries(), ["self-signed.test"]);
        let shown = format!("{g:?}");
        assert!(
            shown.contains("\"*.example.org\"") && shown.contains("Request"),
            "{shown}"
        );
    }

    #[test]
    fn intercepts_by_host_and_port() {
        let g = gateway("intercept = [\"shop.example\", \"*.example.org\", \"::1\"]\n").unwrap();
        let all = gateway("intercept = [\"*\"]\nintercept_ports = [443, 8443]\n").unwrap();
        let none = gateway("").unwrap();
        let cases = [
            (&g, "shop.example", 443, true),
            (&g, "shop.example", 8443, false),
            (&g, "www.shop.example", 443, false),
            (&g, "a.example.org", 443, true),
            (&g, "a.b.example.org", 443, true),
            (&g, "example.org", 443, false),
            (&g, "::1", 443, true),
            (&all, "anything.test", 443, true),
            (&all, "anything.test", 8443, true),
            (&all, "anything.test", 80, false),
            (&none, "shop.example", 443, false),
        ];
        for (gw, host, port, want) in cases {
            assert_eq!(gw.intercepts(host, port), want, "{host}:{port} {gw:?}");
        }
    }

    #[test]
    fn bad_interception_keys_are_named() {
        let cases = [
            (
                "intercept = [\"a*.example\"]\n",
                "gateway[0].intercept: entry 0",
            ),
            (
                "intercept = [\"x\", \"https://y/\"]\n",
                "gateway[0].intercept: entry 1",
            ),
            ("intercept = \"shop.example\"\n", "gateway[0].intercept"),
            (
                "insecure_origins = [\"*\"]\n",
                "gateway[0].insecure_origins: entry 0",
            ),
            (
                "insecure_origins = [\"a:1\"]\n",
                "gateway[0].insecure_origins",
            ),
            (
                "intercept = [\"x\"]\nintercept_ports = []\n",
                "gateway[0].intercept_ports: is empty",
            ),
            (
                "intercept_ports = [0]\n",
                "gateway[0].intercept_ports: 0 is not a port",
            ),
            ("intercept_ports = [70000]\n", "intercept_ports"),
            (
                "rotate = \"always\"\n",
                "gateway[0].rotate: unknown variant `always`, expected `connection` or `request`",
            ),
        ];
        for (keys, want) in cases {
            let e = gateway(keys).unwrap_err();
            assert!(e.contains(want), "{keys:?}: {e}");
        }
    }

    #[test]
    fn tls_paths_are_relative_to_the_config() {
        let text =
            "[tls]\nca_cert = \"ca/root.pem\"\nca_key = \"/etc/pp/root.key\"\nextra_roots = \"\"\n";
        let cfg = Config::parse(text, "t.toml", Some(Path::new("/cfg"))).unwrap();
        assert_eq!(cfg.tls.ca_cert, Some(PathBuf::from("/cfg/ca/root.pem")));
        assert_eq!(cfg.tls.ca_key, Some(PathBuf::from("/etc/pp/root.key")));
        assert_eq!(cfg.tls.extra_roots, None, "an empty string is no file");
        let e = Config::parse("[tls]\nca = \"x\"\n", "t.toml", None).unwrap_err();
        assert!(e.to_string().contains("tls.ca: unknown field"), "{e}");
    }
}
