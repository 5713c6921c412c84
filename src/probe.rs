//! Probes: one full transaction through a proxy to the pool's destination.
//!
//! A probe connects to the proxy, runs its handshake (SOCKS, CONNECT or an absolute-form
//! request), does TLS to the destination when the URL is https, sends the configured
//! request and reads the answer up to `max_body` bytes. Every failure is classified into
//! a (reason, phase) pair; `docs/probe.md` has the table.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsConnector;
use tokio_socks::tcp::{Socks4Stream, Socks5Stream};
use tokio_socks::TargetAddr;

use crate::config::{ProbeConfig, StatusSet};
use crate::endpoint::{ProxyUrl, Scheme};
use crate::health::{Failure, Phase, Reason};

/// The `User-Agent` every probe sends unless the config overrides it.
pub const USER_AGENT: &str = concat!("proxypool/", env!("CARGO_PKG_VERSION"));

/// A proxy's reply head larger than this is treated as a protocol error.
const MAX_PROXY_HEAD: usize = 64 * 1024;

/// The outcome of one probe.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeResult {
    /// The transaction completed and met every expectation.
    pub ok: bool,
    /// Why and where it failed (None when `ok`).
    pub failure: Option<Failure>,
    /// The last HTTP status seen (proxy's CONNECT answer or the destination's).
    pub status: Option<u16>,
    /// Time spent in each phase that ran, in order (a failed phase included).
    pub phases: Vec<(Phase, Duration)>,
    /// Wall time of the whole probe.
    pub total: Duration,
}

/// A probe configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The probe URL is not an absolute http(s) URL.
    #[error("probe url {url:?}: {msg}")]
    Url {
        /// The URL, password redacted.
        url: String,
        /// What is wrong with it.
        msg: String,
    },
    /// The `ca_file` could not be read or holds no certificate.
    #[error("ca_file {path}: {msg}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// The method or an extra header is not valid HTTP.
    #[error("probe {what}: {msg}")]
    Request {
        /// Which setting.
        what: String,
        /// What is wrong with it.
        msg: String,
    },
    /// The TLS client could not be built.
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// Runs probes for one pool; cheap to clone.
#[derive(Clone)]
pub struct Prober {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    method: Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    expect_status: StatusSet,
    expect_body: Option<Vec<u8>>,
    timeout: Duration,
    max_body: usize,
    tls: TlsConnector,
}

/// The destination, split once at construction.
#[derive(Debug, Clone, PartialEq)]
struct Target {
    https: bool,
    /// Host without IPv6 brackets (for DNS, SNI and SOCKS).
    host: String,
    port: u16,
    /// `host[:port]` as the Host header wants it (port omitted when default).
    host_header: String,
    /// `host:port` for CONNECT.
    authority: String,
    /// Origin-form request target.
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, ProbeError> {
        let err = |msg: &str| ProbeError::Url {
            url: crate::endpoint::redact_raw(url),
            msg: msg.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| err(&e.to_string()))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(_) => return Err(err("scheme must be http or https")),
            None => return Err(err("must be an absolute URL (http:// or https://)")),
        };
        let auth = uri.authority().ok_or_else(|| err("missing host"))?;
        if auth.as_str().contains('@') {
            return Err(err("credentials in the probe URL are not supported"));
        }
        let raw_host = auth.host();
        if raw_host.is_empty() {
            return Err(err("missing host"));
        }
        let host = raw_host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let default_port = if https { 443 } else { 80 };
        let port = auth.port_u16().unwrap_or(default_port);
        let bracketed = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let host_header = if port == default_port {
            bracketed.clone()
        } else {
            format!("{bracketed}:{port}")
        };
        let path = uri
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .unwrap_or("/")
            .to_string();
        Ok(Target {
            https,
            authority: format!("{bracketed}:{port}"),
            host,
            port,
            host_header,
            path,
        })
    }

    fn absolute(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}", self.host_header, self.path)
    }

    fn target_addr(&self) -> TargetAddr<'_> {
        match self.host.parse::<IpAddr>() {
            Ok(ip) => TargetAddr::Ip(SocketAddr::new(ip, self.port)),
            Err(_) => TargetAddr::Domain(Cow::Borrowed(self.host.as_str()), self.port),
        }
    }
}

fn build_tls(ca_file: Option<&PathBuf>) -> Result<TlsConnector, ProbeError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let ca_err = |msg: String| ProbeError::CaFile {
            path: path.clone(),
            msg,
        };
        let data = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
        let mut found = 0usize;
        for cert in rustls_pemfile::certs(&mut data.as_slice()) {
            let cert = cert.map_err(|e| ca_err(format!("bad PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| ca_err(format!("bad certificate: {e}")))?;
            found += 1;
        }
        if found == 0 {
            return Err(ca_err("no PEM certificate found".into()));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(cfg)))
}

impl Prober {
    /// Validate the probe config and build the TLS client once.
    pub fn new(cfg: &ProbeConfig) -> Result<Prober, ProbeError> {
        let target = Target::parse(&cfg.url)?;
        let method =
            Method::from_bytes(cfg.method.as_bytes()).map_err(|e| ProbeError::Request {
                what: "method".into(),
                msg: e.to_string(),
            })?;
        let mut headers = Vec::new();
        for (k, v) in &cfg.headers {
            let bad = |msg: String| ProbeError::Request {
                what: format!("header {k:?}"),
                msg,
            };
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| bad(e.to_string()))?;
            let value = HeaderValue::from_str(v).map_err(|e| bad(e.to_string()))?;
            headers.push((name, value));
        }
        Ok(Prober {
            inner: Arc::new(Inner {
                target,
                method,
                headers,
                expect_status: cfg.expect_status.clone(),
                expect_body: cfg.expect_body.clone().map(String::into_bytes),
                timeout: cfg.timeout,
                max_body: cfg.max_body,
                tls: build_tls(cfg.ca_file.as_ref())?,
            }),
        })
    }

    /// Run one full transaction through `proxy`, bounded by the configured timeout.
    pub async fn probe(&self, proxy: &ProxyUrl) -> ProbeResult {
        let start = Instant::now();
        let mut run = Run {
            deadline: start + self.inner.timeout,
            timeout: self.inner.timeout,
            phases: Vec::new(),
            status: None,
        };
        let outcome = self.inner.run(proxy, &mut run).await;
        let total = start.elapsed();
        match outcome {
            Ok(()) => ProbeResult {
                ok: true,
                failure: None,
                status: run.status,
                phases: run.phases,
                total,
            },
            Err(f) => {
                tracing::debug!(proxy = %proxy, reason = ?f.reason, phase = ?f.phase, detail = ?f.detail, "probe failed");
                ProbeResult {
                    ok: false,
                    // A failure's own status is the one that explains it; otherwise keep
                    // the last one seen (e.g. the 200 to CONNECT before a TLS failure).
                    status: f.status.or(run.status),
                    failure: Some(f),
                    phases: run.phases,
                    total,
                }
            }
        }
    }
}

/// Per-probe bookkeeping: the one deadline and the phase clock.
struct Run {
    deadline: Instant,
    timeout: Duration,
    phases: Vec<(Phase, Duration)>,
    status: Option<u16>,
}

impl Run {
    /// Run one phase under the shared deadline and record its duration.
    async fn timed<T>(
        &mut self,
        phase: Phase,
        fut: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        let t0 = Instant::now();
        let r = timeout_at(self.deadline, fut).await;
        self.phases.push((phase, t0.elapsed()));
        match r {
            Ok(r) => r,
            Err(_) => Err(self.deadline_failure(phase)),
        }
    }

    fn deadline_failure(&self, phase: Phase) -> Failure {
        // Before the TCP connection is up the deadline is a connect timeout; after it, the
        // proxy or destination was slow.
        let reason = if phase == Phase::Connect {
            Reason::ConnectTimeout
        } else {
            Reason::SlowResponse
        };
        fail(
            reason,
            phase,
            format!(
                "probe timeout ({}) passed during {phase}",
                humantime::format_duration(self.timeout)
            ),
        )
    }
}

fn fail(reason: Reason, phase: Phase, detail: impl Into<String>) -> Failure {
    Failure {
        reason: Some(reason),
        phase: Some(phase),
        status: None,
        retry_after: None,
        detail: Some(detail.into()),
    }
}

/// Anything the transaction can run over: TCP, TLS, a SOCKS or CONNECT tunnel.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type BoxIo = Box<dyn Io>;

impl Inner {
    async fn run(&self, proxy: &ProxyUrl, run: &mut Run) -> Result<(), Failure> {
        let tcp = run.timed(Phase::Connect, connect_tcp(proxy)).await?;
        let mut io: BoxIo = Box::new(tcp);
        if proxy.scheme == Scheme::Https {
            io = run
                .timed(Phase::ProxyTls, self.tls(io, &proxy.host, Phase::ProxyTls))
                .await?;
        }
        let absolute_form = !proxy.scheme.is_socks() && !self.target.https;
        if proxy.scheme.is_socks() {
            io = run
                .timed(Phase::ProxyHandshake, self.socks(io, proxy))
                .await?;
        } else if self.target.https {
            let (tunnel, status) = run
                .timed(Phase::ProxyHandshake, self.http_connect(io, proxy))
                .await?;
            run.status = Some(status);
            io = tunnel;
        }
        if self.target.https {
            io = run
                .timed(
                    Phase::DestinationTls,
                    self.tls(io, &self.target.host, Phase::DestinationTls),
                )
                .await?;
        }
        self.exchange(io, proxy, absolute_form, run).await
    }

    async fn tls(&self, io: BoxIo, host: &str, phase: Phase) -> Result<BoxIo, Failure> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            fail(
                Reason::TlsFailed,
                phase,
                format!("bad TLS server name {host:?}: {e}"),
            )
        })?;
        match self.tls.connect(name, io).await {
            Ok(s) => Ok(Box::new(s)),
            // A peer that hangs up mid-handshake is as much a TLS failure as a bad
            // certificate: both mean this path cannot carry TLS.
            Err(e) => Err(fail(
                Reason::TlsFailed,
                phase,
                format!("TLS: {}", tls_detail(&e)),
            )),
        }
    }

    async fn socks(&self, io: BoxIo, proxy: &ProxyUrl) -> Result<BoxIo, Failure> {
        let phase = Phase::ProxyHandshake;
        let user = proxy.user.as_deref();
        // RFC 1929 has no empty password; a bare user name means no authentication.
        let pass = proxy.password.as_deref().filter(|p| !p.is_empty());
        let v5 = matches!(proxy.scheme, Scheme::Socks5 | Scheme::Socks5h);
        let remote_dns = matches!(proxy.scheme, Scheme::Socks5h | Scheme::Socks4a);
        let target = match self.target.target_addr() {
            TargetAddr::Domain(..) if !remote_dns => {
                TargetAddr::Ip(resolve_destination(&self.target, !v5).await?)
            }
            t => t,
        };
        let res = if v5 {
            match (user, pass) {
                (Some(u), Some(p)) => {
                    Socks5Stream::connect_with_password_and_socket(io, target, u, p).await
                }
                _ => Socks5Stream::connect_with_socket(io, target).await,
            }
            .map(Socks5Stream::into_inner)
        } else {
            match user {
                Some(u) => Socks4Stream::connect_with_userid_and_socket(io, target, u).await,
                None => Socks4Stream::connect_with_socket(io, target).await,
            }
            .map(Socks4Stream::into_inner)
        };
        res.map_err(|e| {
            let (reason, detail) = classify_socks(&e, v5);
            fail(reason, phase, detail)
        })
    }

    async fn http_connect(&self, io: BoxIo, proxy: &ProxyUrl) -> Result<(BoxIo, u16), Failure> {
        let phase = Phase::ProxyHandshake;
        let a = &self.target.authority;
        let mut req = format!("CONNECT {a} HTTP/1.1\r\nHost: {a}\r\nUser-Agent: {USER_AGENT}\r\n");
        if let Some(auth) = basic_auth(proxy) {
            req.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
        }
        req.push_str("\r\n");
        // The reader keeps whatever follows the head; it belongs to the tunnel.
        let mut io = BufReader::new(io);
        io.write_all(req.as_bytes())
            .await
            .map_err(|e| io_failure(&e, phase, "sending CONNECT"))?;
        io.flush()
            .await
            .map_err(|e| io_failure(&e, phase, "sending CONNECT"))?;
        let head = read_proxy_head(&mut io).await?;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        let status = match resp.parse(&head) {
            Ok(httparse::Status::Complete(_)) => resp.code.unwrap_or(0),
            Ok(httparse::Status::Partial) => {
                return Err(fail(
                    Reason::ProxyProtocolError,
                    phase,
                    "incomplete CONNECT reply",
                ))
            }
            Err(e) => {
                return Err(fail(
                    Reason::ProxyProtocolError,
                    phase,
                    format!("unparsable CONNECT reply: {e}"),
                ))
            }
        };
        match connect_status_reason(status) {
            None => Ok((Box::new(io), status)),
            Some(reason) => {
                let retry_after = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("retry-after"))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .and_then(|v| parse_retry_after(v, SystemTime::now()));
                let reason_phrase = resp.reason.unwrap_or("");
                let mut f = fail(
                    reason,
                    phase,
                    format!("proxy answered CONNECT with {status} {reason_phrase}")
                        .trim_end()
                        .to_string(),
                );
                f.status = Some(status);
                f.retry_after = retry_after;
                Err(f)
            }
        }
    }

    async fn exchange(
        &self,
        io: BoxIo,
        proxy: &ProxyUrl,
        absolute_form: bool,
        run: &mut Run,
    ) -> Result<(), Failure> {
        let marks = Arc::new(Mutex::new(Marks::default()));
        let io = TokioIo::new(Tracked {
            inner: io,
            marks: marks.clone(),
        });
        let t0 = Instant::now();
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
            .await
            .map_err(|e| fail(Reason::ConnectionReset, Phase::Request, error_chain(&e)))?;
        let _conn = AbortOnDrop(tokio::spawn(async move {
            // Errors surface through the request and body futures.
            let _ = conn.await;
        }));
        let req = self.request(proxy, absolute_form)?;
        let sent = timeout_at(run.deadline, sender.send_request(req)).await;
        let now = Instant::now();
        let request_done = marks
            .lock()
            .ok()
            .and_then(|m| m.flushed_at.or(m.first_read_at));
        let head_phase = match request_done {
            Some(at) => {
                run.phases
                    .push((Phase::Request, at.saturating_duration_since(t0)));
                run.phases
                    .push((Phase::ResponseHead, now.saturating_duration_since(at)));
                Phase::ResponseHead
            }
            None => {
                run.phases
                    .push((Phase::Request, now.saturating_duration_since(t0)));
                Phase::Request
            }
        };
        let resp = match sent {
            Err(_) => return Err(run.deadline_failure(head_phase)),
            Ok(Err(e)) => return Err(hyper_failure(&e, head_phase)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        run.status = Some(status);
        // A 401 the probe target is expected to send is the destination's, not the proxy's.
        let expected_401 = status == 401 && self.expect_status.contains(401);
        if absolute_form && !expected_401 && proxy_auth_answer(status, resp.headers()) {
            let mut f = fail(
                Reason::ProxyAuthRejected,
                Phase::ProxyHandshake,
                format!("proxy refused the credentials with {status}"),
            );
            f.status = Some(status);
            return Err(f);
        }
        if !self.expect_status.contains(status) {
            let retry_after = resp
                .headers()
                .get(hyper::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let mut f = fail(
                Reason::DestinationStatus,
                Phase::ResponseHead,
                format!(
                    "destination answered {status}, expected {}",
                    self.expect_status
                ),
            );
            f.status = Some(status);
            f.retry_after = retry_after;
            return Err(f);
        }
        let max = self.max_body;
        let mut body = resp.into_body();
        let read_body = async {
            let mut got: Vec<u8> = Vec::new();
            while got.len() < max {
                match body.frame().await {
                    None => break,
                    Some(Err(e)) => return Err(hyper_failure(&e, Phase::ResponseBody)),
                    Some(Ok(frame)) => {
                        if let Some(d) = frame.data_ref() {
                            let take = d.len().min(max - got.len());
                            got.extend_from_slice(&d[..take]);
                        }
                    }
                }
            }
            Ok(got)
        };
        let got = run.timed(Phase::ResponseBody, read_body).await?;
        if let Some(want) = &self.expect_body {
            if !contains(&got, want) {
                return Err(fail(
                    Reason::BodyMismatch,
                    Phase::ResponseBody,
                    format!(
                        "expected text not found in the first {} body bytes",
                        got.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn request(
        &self,
        proxy: &ProxyUrl,
        absolute_form: bool,
    ) -> Result<Request<Empty<Bytes>>, Failure> {
        let uri = if absolute_form {
            self.target.absolute()
        } else {
            self.target.path.clone()
        };
        let mut req = Request::builder()
            .method(self.method.clone())
            .uri(uri)
            .body(Empty::<Bytes>::new())
            .map_err(|e| fail(Reason::ProxyProtocolError, Phase::Request, e.to_string()))?;
        let h = req.headers_mut();
        let mut set = |name: HeaderName, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                h.insert(name, v);
            }
        };
        set(hyper::header::HOST, &self.target.host_header);
        set(hyper::header::USER_AGENT, USER_AGENT);
        set(hyper::header::CONNECTION, "close");
        if absolute_form {
            if let Some(auth) = basic_auth(proxy) {
                set(hyper::header::PROXY_AUTHORIZATION, &auth);
            }
        }
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

async fn connect_tcp(proxy: &ProxyUrl) -> Result<TcpStream, Failure> {
    let phase = Phase::Connect;
    let addrs: Vec<SocketAddr> =
        match tokio::net::lookup_host((proxy.host.as_str(), proxy.port)).await {
            Ok(a) => a.collect(),
            Err(e) => {
                return Err(fail(
                    Reason::DnsFailed,
                    phase,
                    format!("resolving proxy host {:?}: {e}", proxy.host),
                ))
            }
        };
    if addrs.is_empty() {
        return Err(fail(
            Reason::DnsFailed,
            phase,
            format!("proxy host {:?} has no address", proxy.host),
        ));
    }
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    let Some((addr, e)) = last else {
        return Err(fail(Reason::ConnectRefused, phase, "no address tried"));
    };
    let reason = match e.kind() {
        io::ErrorKind::TimedOut => Reason::ConnectTimeout,
        _ => Reason::ConnectRefused,
    };
    Err(fail(reason, phase, format!("TCP connect to {addr}: {e}")))
}

/// Resolve the destination here, for the SOCKS variants that carry addresses only.
async fn resolve_destination(t: &Target, v4_only: bool) -> Result<SocketAddr, Failure> {
    let phase = Phase::ProxyHandshake;
    let addrs = tokio::net::lookup_host((t.host.as_str(), t.port))
        .await
        .map_err(|e| {
            fail(
                Reason::DnsFailed,
                phase,
                format!("resolving destination {:?}: {e}", t.host),
            )
        })?;
    let mut addrs = addrs.filter(|a| !v4_only || a.is_ipv4());
    addrs.next().ok_or_else(|| {
        let what = if v4_only {
            "IPv4 address (SOCKS4)"
        } else {
            "address"
        };
        fail(
            Reason::DnsFailed,
            phase,
            format!("destination {:?} has no {what}", t.host),
        )
    })
}

/// Read the proxy's reply head, consuming nothing past its blank line.
async fn read_proxy_head(io: &mut BufReader<BoxIo>) -> Result<Vec<u8>, Failure> {
    let phase = Phase::ProxyHandshake;
    let mut head: Vec<u8> = Vec::new();
    loop {
        let (n, end) = {
            let avail = io
                .fill_buf()
                .await
                .map_err(|e| io_failure(&e, phase, "reading the CONNECT reply"))?;
            if avail.is_empty() {
                return Err(fail(
                    Reason::ConnectionReset,
                    phase,
                    format!(
                        "proxy closed the connection after {} bytes of its CONNECT reply",
                        head.len()
                    ),
                ));
            }
            let from = head.len().saturating_sub(3);
            head.extend_from_slice(avail);
            let end = find(&head[from..], b"\r\n\r\n").map(|i| from + i + 4);
            (avail.len(), end)
        };
        match end {
            Some(end) => {
                let before = head.len() - n;
                io.consume(end - before);
                head.truncate(end);
                return Ok(head);
            }
            None => io.consume(n),
        }
        // Fail fast on garbage instead of waiting for a blank line that never comes.
        let mut headers = [httparse::EMPTY_HEADER; 64];
        if let Err(e) = httparse::Response::new(&mut headers).parse(&head) {
            return Err(fail(
                Reason::ProxyProtocolError,
                phase,
                format!("unparsable CONNECT reply: {e}"),
            ));
        }
        if head.len() > MAX_PROXY_HEAD {
            return Err(fail(
                Reason::ProxyProtocolError,
                phase,
                "CONNECT reply head too large",
            ));
        }
    }
}

fn io_failure(e: &io::Error, phase: Phase, doing: &str) -> Failure {
    fail(Reason::ConnectionReset, phase, format!("{doing}: {e}"))
}

fn hyper_failure(e: &hyper::Error, phase: Phase) -> Failure {
    let reason = if e.is_parse() || e.is_parse_status() {
        // The bytes could come from the proxy or from the destination behind it; either
        // way this path does not speak HTTP.
        Reason::ProxyProtocolError
    } else if e.is_timeout() {
        Reason::SlowResponse
    } else {
        Reason::ConnectionReset
    };
    fail(reason, phase, error_chain(e))
}

fn error_chain(e: &dyn StdError) -> String {
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

fn tls_detail(e: &io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => tls.to_string(),
        None => e.to_string(),
    }
}

/// `Basic base64(user:password)` when the proxy URL has a user.
fn basic_auth(proxy: &ProxyUrl) -> Option<String> {
    let user = proxy.user.as_deref()?;
    let pass = proxy.password.as_deref().unwrap_or("");
    Some(format!(
        "Basic {}",
        base64(format!("{user}:{pass}").as_bytes())
    ))
}

pub(crate) fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

/// True when an answer to an absolute-form request is the proxy refusing our credentials.
///
/// 407 only ever comes from a proxy. Some proxies (tinyproxy) answer 401 instead; a 401
/// the proxy merely forwarded from the destination carries the `Via` header that RFC 9110
/// requires of forwarded messages, so a 401 without one is taken as the proxy's own.
pub fn proxy_auth_answer(status: u16, headers: &hyper::HeaderMap) -> bool {
    status == 407 || (status == 401 && !headers.contains_key(hyper::header::VIA))
}

/// The reason for a non-2xx answer to CONNECT; `None` when the tunnel is up.
pub fn connect_status_reason(status: u16) -> Option<Reason> {
    match status {
        200..=299 => None,
        // Some proxies send 401 where 407 is meant.
        401 | 407 => Some(Reason::ProxyAuthRejected),
        502 | 504 => Some(Reason::UpstreamUnreachable),
        _ => Some(Reason::ProxyRejected),
    }
}

/// The reason for a SOCKS5 reply code other than 0 (RFC 1928 §6).
pub fn socks5_reply_reason(code: u8) -> Reason {
    match code {
        // 5 is the destination refusing the proxy: the proxy could not get there.
        3..=6 => Reason::UpstreamUnreachable,
        1 | 2 | 7 | 8 => Reason::ProxyRejected,
        _ => Reason::ProxyProtocolError,
    }
}

/// The reason for a SOCKS4 reply code other than 90.
pub fn socks4_reply_reason(code: u8) -> Reason {
    match code {
        91 => Reason::ProxyRejected,
        92 | 93 => Reason::ProxyAuthRejected,
        _ => Reason::ProxyProtocolError,
    }
}

/// Map a tokio-socks error to (reason, detail); the detail carries the reply code.
fn classify_socks(e: &tokio_socks::Error, v5: bool) -> (Reason, String) {
    use tokio_socks::Error as E;
    let ver = if v5 { "SOCKS5" } else { "SOCKS4" };
    let code = |c: u8| {
        let reason = if v5 {
            socks5_reply_reason(c)
        } else {
            socks4_reply_reason(c)
        };
        (reason, format!("{ver} reply code {c}: {e}"))
    };
    match e {
        E::Io(io) => (Reason::ConnectionReset, format!("{ver} handshake: {io}")),
        E::GeneralSocksServerFailure if !v5 => code(91),
        E::IdentdAuthFailure => code(92),
        E::InvalidUserIdAuthFailure => code(93),
        E::GeneralSocksServerFailure => code(1),
        E::ConnectionNotAllowedByRuleset => code(2),
        E::NetworkUnreachable => code(3),
        E::HostUnreachable => code(4),
        E::ConnectionRefused => code(5),
        E::TtlExpired => code(6),
        E::CommandNotSupported => code(7),
        E::AddressTypeNotSupported => code(8),
        E::PasswordAuthFailure(c) => (
            Reason::ProxyAuthRejected,
            format!("{ver} username/password rejected (status {c})"),
        ),
        E::NoAcceptableAuthMethods => (
            Reason::ProxyAuthRejected,
            format!("{ver}: no acceptable authentication method"),
        ),
        E::AuthorizationRequired => (
            Reason::ProxyAuthRejected,
            format!("{ver}: proxy requires username/password"),
        ),
        E::InvalidAuthValues(m) => (
            Reason::ProxyAuthRejected,
            format!("{ver}: credentials unusable: {m}"),
        ),
        // Reply codes past 8 come back from tokio-socks as UnknownAuthMethod.
        E::InvalidResponseVersion
        | E::InvalidReservedByte
        | E::UnknownAddressType
        | E::UnknownAuthMethod
        | E::UnknownError
        | E::InvalidTargetAddress(_)
        | E::ParseError(_)
        | E::ProxyServerUnreachable => (
            Reason::ProxyProtocolError,
            format!("{ver} protocol error: {e}"),
        ),
    }
}

/// Parse `Retry-After`: delay-seconds or an HTTP date (relative to `now`).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long values saturate instead of failing: the policy caps them anyway.
        return Some(Duration::from_secs(v.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let at = parse_http_date(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// IMF-fixdate, RFC 850 and asctime dates (RFC 9110 §5.6.7).
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let month = |m: &str| -> Option<u32> {
        let names = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(m))
            .map(|i| i as u32 + 1)
    };
    let num = |x: &str| -> Option<u32> {
        if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        x.parse().ok()
    };
    let (year, mon, day, time) = if let Some((_, rest)) = s.split_once(',') {
        let parts: Vec<&str> = rest.split_whitespace().collect();
        match parts.as_slice() {
            // Sun, 06 Nov 1994 08:49:37 GMT
            [d, m, y, t, "GMT"] => (num(y)?, month(m)?, num(d)?, *t),
            // Sunday, 06-Nov-94 08:49:37 GMT
            [dmy, t, "GMT"] => {
                let mut it = dmy.split('-');
                let (d, m, y) = (it.next()?, it.next()?, it.next()?);
                let y = num(y)?;
                let y = if y < 100 {
                    if y < 70 {
                        2000 + y
                    } else {
                        1900 + y
                    }
                } else {
                    y
                };
                (y, month(m)?, num(d)?, *t)
            }
            _ => return None,
        }
    } else {
        // Sun Nov  6 08:49:37 1994
        let parts: Vec<&str> = s.split_whitespace().collect();
        match parts.as_slice() {
            [_, m, d, t, y] => (num(y)?, month(m)?, num(d)?, *t),
            _ => return None,
        }
    };
    let mut hms = time.split(':');
    let (h, mi, se) = (num(hms.next()?)?, num(hms.next()?)?, num(hms.next()?)?);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let days = days_from_civil(i64::from(year), mon, day);
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + se);
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// When the request left and the answer started, seen from the socket.
#[derive(Default)]
struct Marks {
    wrote: bool,
    flushed_at: Option<Instant>,
    first_read_at: Option<Instant>,
}

/// Wraps the stream under hyper so the request and response-head phases can be told apart.
struct Tracked {
    inner: BoxIo,
    marks: Arc<Mutex<Marks>>,
}

impl Tracked {
    fn mark(&self, f: impl FnOnce(&mut Marks)) {
        if let Ok(mut m) = self.marks.lock() {
            f(&mut m);
        }
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.mark(|m| {
                m.first_read_at.get_or_insert_with(Instant::now);
            });
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.mark(|m| m.wrote = true);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.mark(|m| m.wrote = true);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            this.mark(|m| {
                if m.wrote {
                    m.flushed_at.get_or_insert_with(Instant::now);
                }
            });
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Stops the hyper connection task when the probe ends, however it ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:51:37 GMT", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-94 08:50:37 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Sun Nov  6 08:49:47 1994", now),
            Some(Duration::from_secs(10))
        );
        // A date in the past means "now".
        assert_eq!(
            parse_retry_after("Sat, 05 Nov 1994 08:49:37 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in [
            "",
            "-5",
            "1.5",
            "soon",
            "Sun, 06 Nov 1994 25:00:00 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn http_date_epoch_math() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
    }

    #[test]
    fn socks_reply_codes() {
        use Reason::*;
        let v5 = [
            (1, ProxyRejected),
            (2, ProxyRejected),
            (3, UpstreamUnreachable),
            (4, UpstreamUnreachable),
            (5, UpstreamUnreachable),
            (6, UpstreamUnreachable),
            (7, ProxyRejected),
            (8, ProxyRejected),
            (9, ProxyProtocolError),
        ];
        for (c, r) in v5 {
            assert_eq!(socks5_reply_reason(c), r, "code {c}");
        }
        assert_eq!(socks4_reply_reason(91), ProxyRejected);
        assert_eq!(socks4_reply_reason(92), ProxyAuthRejected);
        assert_eq!(socks4_reply_reason(93), ProxyAuthRejected);
        assert_eq!(socks4_reply_reason(17), ProxyProtocolError);
    }

    #[test]
    fn socks_errors_carry_the_code() {
        let (r, d) = classify_socks(&tokio_socks::Error::HostUnreachable, true);
        assert_eq!(r, Reason::UpstreamUnreachable);
        assert!(d.contains("code 4"), "{d}");
        let (r, d) = classify_socks(&tokio_socks::Error::GeneralSocksServerFailure, false);
        assert_eq!(r, Reason::ProxyRejected);
        assert!(d.contains("91"), "{d}");
        let (r, _) = classify_socks(&tokio_socks::Error::PasswordAuthFailure(1), true);
        assert_eq!(r, Reason::ProxyAuthRejected);
        let (r, _) = classify_socks(&tokio_socks::Error::InvalidResponseVersion, true);
        assert_eq!(r, Reason::ProxyProtocolError);
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        let (r, _) = classify_socks(&tokio_socks::Error::Io(eof), true);
        assert_eq!(r, Reason::ConnectionReset);
    }

    #[test]
    fn connect_statuses() {
        assert_eq!(connect_status_reason(200), None);
        assert_eq!(connect_status_reason(407), Some(Reason::ProxyAuthRejected));
        assert_eq!(connect_status_reason(401), Some(Reason::ProxyAuthRejected));
        assert_eq!(
            connect_status_reason(502),
            Some(Reason::UpstreamUnreachable)
        );
        assert_eq!(
            connect_status_reason(504),
            Some(Reason::UpstreamUnreachable)
        );
        assert_eq!(connect_status_reason(503), Some(Reason::ProxyRejected));
        assert_eq!(connect_status_reason(403), Some(Reason::ProxyRejected));
        assert_eq!(connect_status_reason(301), Some(Reason::ProxyRejected));
    }

    #[test]
    fn absolute_form_auth_answers() {
        let mut h = hyper::HeaderMap::new();
        assert!(proxy_auth_answer(407, &h));
        assert!(proxy_auth_answer(401, &h));
        assert!(!proxy_auth_answer(403, &h));
        h.insert(hyper::header::VIA, HeaderValue::from_static("1.1 proxy"));
        assert!(proxy_auth_answer(407, &h));
        assert!(
            !proxy_auth_answer(401, &h),
            "a forwarded 401 is the destination's"
        );
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn targets_split_once() {
        let t = Target::parse("https://Example.com/a?b=1").unwrap();
        assert_eq!(
            (t.https, t.host.as_str(), t.port),
            (true, "example.com", 443)
        );
        assert_eq!(t.host_header, "example.com");
        assert_eq!(t.authority, "example.com:443");
        assert_eq!(t.path, "/a?b=1");
        let t = Target::parse("http://[::1]:8080").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        assert_eq!(t.host_header, "[::1]:8080");
        assert_eq!(t.absolute(), "http://[::1]:8080/");
        assert!(Target::parse("ftp://x/").is_err());
        assert!(Target::parse("/relative").is_err());
        let e = Target::parse("http://u:hunter2@x/")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn basic_auth_only_with_a_user() {
        let p = ProxyUrl::parse("http://alice:s3cret@h:1").unwrap();
        assert_eq!(basic_auth(&p).as_deref(), Some("Basic YWxpY2U6czNjcmV0"));
        let p = ProxyUrl::parse("http://h:1").unwrap();
        assert_eq!(basic_auth(&p), None);
    }

    #[tokio::test(start_paused = true)]
    async fn phases_run_on_tokio_time() {
        let timeout = Duration::from_secs(10);
        let mut run = Run {
            deadline: Instant::now() + timeout,
            timeout,
            phases: Vec::new(),
            status: None,
        };
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
                std::future::pending::<Result<(), Failure>>(),
            )
            .await
            .unwrap_err();
        assert_eq!(stuck.reason, Some(Reason::SlowResponse));
        assert_eq!(stuck.phase, Some(Phase::ResponseBody));
        assert_eq!(
            run.phases,
            [
                (Phase::Connect, Duration::from_secs(3)),
                (Phase::ResponseBody, Duration::from_secs(7))
            ]
        );
        assert_eq!(
            run.deadline_failure(Phase::Connect).reason,
            Some(Reason::ConnectTimeout)
        );
    }

    #[test]
    fn probe_future_is_send() {
        // The daemon spawns probes on the multi-threaded runtime.
        fn is_send<T: Send>(_: &T) {}
        let prober = Prober::new(&ProbeConfig::default()).unwrap();
        let proxy = ProxyUrl::parse("socks5://u:p@h:1").unwrap();
        let fut = prober.probe(&proxy);
        is_send(&fut);
    }

    #[test]
    fn bad_ca_file_is_a_config_error() {
        let cfg = ProbeConfig {
            url: "https://localhost/".into(),
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        assert!(matches!(Prober::new(&cfg), Err(ProbeError::CaFile { .. })));
    }
}
