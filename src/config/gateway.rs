//! A `[[gateway]]` section (docs/reference.md, "`[[gateway]]`"), after parsing: defaults
//! and checks.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

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
}

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
        }
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
            .finish()
    }
}
