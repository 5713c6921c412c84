//! Connect through an endpoint to `host:port` under one deadline.
//!
//! TCP to the proxy (+ TLS for `https` proxies), then the SOCKS4/4a/5/5h handshake or an
//! HTTP CONNECT, each step timed as its phase. Every failure is classified into
//! (reason, phase) here, once, so the prober and the gateway give the same answer for the
//! same broken proxy. `docs/probe.md` has the table.

mod auth;
mod connect;
mod progress;
mod socks;
mod tcp;
mod tls;

use std::borrow::Cow;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsConnector;
use tokio_socks::TargetAddr;

use crate::endpoint::{ProxyUrl, Scheme};
use crate::health::{Failure, Phase, Reason};

pub use auth::{base64, base64_decode, basic_auth};
pub use connect::{proxy_auth_answer, proxy_failure_answer, reply_header};
pub use tls::{client_config, connector, handshake as tls_handshake, root_store, TlsSetupError};

/// The `User-Agent` of every request proxypool makes on its own behalf.
pub const USER_AGENT: &str = concat!("proxypool/", env!("CARGO_PKG_VERSION"));

/// Anything a connection can run over: TCP, TLS, a SOCKS or CONNECT tunnel.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
/// A boxed connection; any bytes the handshake read past its end are still in it.
pub type BoxIo = Box<dyn Io>;

/// Where the connection should lead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dest {
    /// Host without IPv6 brackets, as DNS, SNI and SOCKS want it.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Dest {
    /// A destination; brackets around an IPv6 literal are dropped, the name lower-cased.
    pub fn new(host: &str, port: u16) -> Dest {
        Dest {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase(),
            port,
        }
    }

    /// `host:port` as CONNECT wants it (IPv6 in brackets).
    pub fn authority(&self) -> String {
        self.to_string()
    }

    fn target_addr(&self) -> TargetAddr<'_> {
        match self.host.parse::<IpAddr>() {
            Ok(ip) => TargetAddr::Ip(SocketAddr::new(ip, self.port)),
            Err(_) => TargetAddr::Domain(Cow::Borrowed(self.host.as_str()), self.port),
        }
    }
}

/// The authority form, `host:port` (IPv6 in brackets): written straight into a request
/// without a string of its own.
impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// How the caller will talk to the destination once dialed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A byte tunnel to the destination (CONNECT through HTTP proxies).
    Tunnel,
    /// Plain HTTP: an HTTP proxy takes absolute-form requests on its own connection, so it
    /// gets no handshake; SOCKS proxies still tunnel.
    PlainHttp,
}

/// What a dialed connection will carry. A plain connection to an `http://` proxy that
/// carries one request and its answer needs no `TCP_QUICKACK` after its reads (see
/// `tcp::QuickAck`); any other does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carries {
    /// One request and its answer, then it closes.
    OneExchange,
    /// A tunnel, or a connection kept for further requests.
    More,
}

impl Carries {
    /// What the TCP connection itself carries on `route` through a `scheme` proxy. Only a
    /// plain connection to an `http://` proxy sends the request first: a handshake before
    /// it (SOCKS, TLS, a CONNECT) is an exchange already, after which Linux delays ACKs.
    fn through(self, scheme: Scheme, route: Route) -> Carries {
        if scheme == Scheme::Http && route == Route::PlainHttp {
            self
        } else {
            Carries::More
        }
    }
}

/// A dialed connection.
pub struct Dialed {
    /// The stream.
    pub io: BoxIo,
    /// The stream ends at an HTTP proxy that expects absolute-form requests (with
    /// `Proxy-Authorization`), not at the destination.
    pub forward: bool,
    /// The proxy's status answer to CONNECT, when one was sent.
    pub connect_status: Option<u16>,
    /// The head of that answer (empty when none): a provider may name the exit address in
    /// one of its headers (docs/exit.md). Take it, or it lives as long as this struct.
    pub connect_head: Vec<u8>,
}

/// A classified failure: why, where, and what an operator reads (never a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} at {phase}: {detail}")]
pub struct DialFailure {
    /// Why.
    pub reason: Reason,
    /// Where.
    pub phase: Phase,
    /// Free text for operators.
    pub detail: String,
    /// The HTTP status that explains it, when one was seen.
    pub status: Option<u16>,
    /// `Retry-After` sent with that status.
    pub retry_after: Option<Duration>,
    /// The failure is this machine's (out of descriptors, memory or local ports): it says
    /// nothing about the endpoint and is never reported against it.
    pub local: bool,
    /// See `Failure::substituted`.
    pub substituted: bool,
}

impl DialFailure {
    /// A failure without a status.
    pub fn new(reason: Reason, phase: Phase, detail: impl Into<String>) -> DialFailure {
        DialFailure {
            reason,
            phase,
            detail: detail.into(),
            status: None,
            retry_after: None,
            local: false,
            substituted: false,
        }
    }

    /// A failure on this machine's side (see [`DialFailure::local`]).
    pub fn on_this_machine(phase: Phase, detail: impl Into<String>) -> DialFailure {
        DialFailure {
            local: true,
            ..DialFailure::new(Reason::ConnectRefused, phase, detail)
        }
    }
}

impl From<DialFailure> for Failure {
    fn from(f: DialFailure) -> Failure {
        Failure {
            reason: Some(f.reason),
            phase: Some(f.phase),
            status: f.status,
            retry_after: f.retry_after,
            detail: Some(f.detail),
            substituted: f.substituted,
        }
    }
}

/// One deadline shared by every phase, and the time each phase took.
#[derive(Debug, Clone)]
pub struct Clock {
    /// When the whole attempt must be done.
    pub deadline: Instant,
    /// The budget the deadline came from (for the failure's detail).
    pub budget: Duration,
    /// Names the budget in failure details, e.g. "probe timeout".
    pub what: &'static str,
    /// Time spent in each phase that ran, in order (a failed phase included).
    pub phases: Vec<(Phase, Duration)>,
}

impl Clock {
    /// A clock whose deadline is `budget` from now.
    pub fn start(budget: Duration, what: &'static str) -> Clock {
        Clock {
            deadline: Instant::now() + budget,
            budget,
            what,
            phases: Vec::new(),
        }
    }

    /// Run one phase under the shared deadline and record its duration.
    pub async fn timed<T>(
        &mut self,
        phase: Phase,
        fut: impl Future<Output = Result<T, DialFailure>>,
    ) -> Result<T, DialFailure> {
        self.timed_or(phase, fut, |c| c.deadline_failure(phase))
            .await
    }

    /// `timed`, with the failure for a passed deadline decided by `on_deadline`.
    async fn timed_or<T>(
        &mut self,
        phase: Phase,
        fut: impl Future<Output = Result<T, DialFailure>>,
        on_deadline: impl FnOnce(&Clock) -> DialFailure,
    ) -> Result<T, DialFailure> {
        let t0 = Instant::now();
        let r = timeout_at(self.deadline, fut).await;
        self.phases.push((phase, t0.elapsed()));
        match r {
            Ok(r) => r,
            Err(_) => Err(on_deadline(self)),
        }
    }

    /// The failure for a deadline that passed during `phase`.
    pub fn deadline_failure(&self, phase: Phase) -> DialFailure {
        // Before the TCP connection is up the deadline is a connect timeout; after it, the
        // proxy or destination was slow.
        let reason = if phase == Phase::Connect {
            Reason::ConnectTimeout
        } else {
            Reason::SlowResponse
        };
        DialFailure::new(
            reason,
            phase,
            format!(
                "{} ({}) passed during {phase}",
                self.what,
                humantime::format_duration(self.budget)
            ),
        )
    }
}

/// Dials through proxies; cheap to clone.
#[derive(Clone)]
pub struct Dialer {
    tls: TlsConnector,
}

impl Dialer {
    /// A dialer that speaks TLS to `https` proxies with `tls`.
    pub fn new(tls: TlsConnector) -> Dialer {
        Dialer { tls }
    }

    /// The TLS client, for TLS to the destination over a dialed stream.
    pub fn tls(&self) -> &TlsConnector {
        &self.tls
    }

    /// Connect through `proxy` to `dest`; every phase runs under `clock`'s deadline.
    pub async fn dial(
        &self,
        proxy: &ProxyUrl,
        dest: &Dest,
        route: Route,
        carries: Carries,
        clock: &mut Clock,
    ) -> Result<Dialed, DialFailure> {
        // An HTTP proxy's CONNECT is known before the connection is up: to a plain one it
        // goes with the connect (`tcp::connect`); over TLS the first bytes are the TLS
        // handshake's.
        let request = if route == Route::Tunnel && !proxy.scheme.is_socks() {
            connect::request(proxy, dest)
        } else {
            String::new()
        };
        let opening = match proxy.scheme {
            Scheme::Http => request.as_bytes(),
            _ => &[],
        };
        let carries = carries.through(proxy.scheme, route);
        let (tcp, sent) = clock
            .timed(Phase::Connect, tcp::connect(proxy, opening, carries))
            .await?;
        let mut io: BoxIo = Box::new(tcp);
        if proxy.scheme == Scheme::Https {
            io = clock
                .timed(
                    Phase::ProxyTls,
                    tls::handshake(&self.tls, io, &proxy.host, Phase::ProxyTls),
                )
                .await?;
        }
        // A deadline during the handshake is blamed by how far it got (see `progress`).
        let progress = progress::Progress::default();
        let on_deadline = |c: &Clock| progress.deadline_failure(c);
        if proxy.scheme.is_socks() {
            let shake = socks::handshake(io, proxy, dest, &progress);
            io = clock
                .timed_or(Phase::ProxyHandshake, shake, on_deadline)
                .await?;
            return Ok(Dialed {
                io,
                forward: false,
                connect_status: None,
                connect_head: Vec::new(),
            });
        }
        if route == Route::PlainHttp {
            return Ok(Dialed {
                io,
                forward: true,
                connect_status: None,
                connect_head: Vec::new(),
            });
        }
        let shake = connect::connect(io, &request.as_bytes()[sent..], &progress);
        let (io, status, head) = clock
            .timed_or(Phase::ProxyHandshake, shake, on_deadline)
            .await?;
        Ok(Dialed {
            io,
            forward: false,
            connect_status: Some(status),
            connect_head: head,
        })
    }
}

/// Classify a hyper error seen at `phase` of an HTTP exchange.
pub fn hyper_failure(e: &hyper::Error, phase: Phase) -> DialFailure {
    let reason = if e.is_parse() || e.is_parse_status() {
        // The bytes could come from the proxy or from the destination behind it; either
        // way this path does not speak HTTP.
        Reason::ProxyProtocolError
    } else if e.is_timeout() {
        Reason::SlowResponse
    } else {
        Reason::ConnectionReset
    };
    DialFailure::new(reason, phase, error_chain(e))
}

/// The origin-form request target (`/path?query`) of an absolute URL; `http://h?x=1`
/// has the path `/`.
pub fn origin_form(uri: &hyper::Uri) -> String {
    let path = match uri.path() {
        "" => "/",
        p => p,
    };
    match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    }
}

/// An error and its sources, each once, joined by ": ".
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        let t = src.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = src.source();
    }
    s
}

/// First position of `needle` in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_plain_connection_to_an_http_proxy_carries_one_exchange() {
        use super::{Carries, Route, Scheme};
        use Carries::{More, OneExchange};
        let table = [
            (Scheme::Http, Route::PlainHttp, OneExchange, OneExchange),
            (Scheme::Http, Route::PlainHttp, More, More),
            (Scheme::Http, Route::Tunnel, OneExchange, More),
            (Scheme::Https, Route::PlainHttp, OneExchange, More),
            (Scheme::Socks4, Route::PlainHttp, OneExchange, More),
            (Scheme::Socks4a, Route::PlainHttp, OneExchange, More),
            (Scheme::Socks5, Route::PlainHttp, OneExchange, More),
            (Scheme::Socks5h, Route::PlainHttp, OneExchange, More),
            (Scheme::Socks5, Route::Tunnel, More, More),
        ];
        for (scheme, route, asked, carried) in table {
            assert_eq!(
                asked.through(scheme, route),
                carried,
                "{scheme:?} {route:?} {asked:?}"
            );
        }
    }

    use super::*;

    #[test]
    fn origin_form_keeps_path_and_query() {
        for (abs, want) in [
            ("http://h/a/b?x=1&y=2", "/a/b?x=1&y=2"),
            ("http://h?x=1", "/?x=1"),
            ("http://h", "/"),
            ("http://h/", "/"),
            ("http://h:8080/p", "/p"),
        ] {
            let u: hyper::Uri = abs.parse().unwrap();
            assert_eq!(origin_form(&u), want, "{abs}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn phases_run_on_tokio_time() {
        let timeout = Duration::from_secs(10);
        let mut run = Clock::start(timeout, "probe timeout");
        let quick = run
            .timed(Phase::Connect, async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok(())
            })
            .await;
        assert!(quick.is_ok());
        let stuck = run
            .timed(
                Phase::ResponseBody,
                std::future::pending::<Result<(), DialFailure>>(),
            )
            .await
            .unwrap_err();
        assert_eq!(stuck.reason, Reason::SlowResponse);
        assert_eq!(stuck.phase, Phase::ResponseBody);
        assert_eq!(
            run.phases,
            [
                (Phase::Connect, Duration::from_secs(3)),
                (Phase::ResponseBody, Duration::from_secs(7))
            ]
        );
        assert_eq!(
            run.deadline_failure(Phase::Connect).reason,
            Reason::ConnectTimeout
        );
        assert!(
            stuck.detail.contains("probe timeout (10s)"),
            "{}",
            stuck.detail
        );
    }

    #[test]
    fn destinations_normalise() {
        let d = Dest::new("[::1]", 443);
        assert_eq!(d.host, "::1");
        assert_eq!(d.authority(), "[::1]:443");
        assert_eq!(Dest::new("Example.COM", 80).authority(), "example.com:80");
    }

    #[test]
    fn failures_convert_keeping_everything() {
        let mut d = DialFailure::new(Reason::ProxyRejected, Phase::ProxyHandshake, "x");
        d.status = Some(503);
        d.retry_after = Some(Duration::from_secs(5));
        let f: Failure = d.into();
        assert_eq!(f.reason, Some(Reason::ProxyRejected));
        assert_eq!(f.phase, Some(Phase::ProxyHandshake));
        assert_eq!(f.status, Some(503));
        assert_eq!(f.retry_after, Some(Duration::from_secs(5)));
        assert_eq!(f.detail.as_deref(), Some("x"));
    }
}
