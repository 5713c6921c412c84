//! Probes: one full transaction through a proxy to the pool's destination.
//!
//! A probe connects to the proxy, runs its handshake (SOCKS, CONNECT or an absolute-form
//! request), does TLS to the destination when the URL is https, sends the configured
//! request and reads the answer up to `max_body` bytes. Every failure is classified into
//! a (reason, phase) pair; `docs/probe.md` has the table.

use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Body as _;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{timeout_at, Instant};

use crate::config::{ProbeConfig, StatusSet};
use crate::dial::{
    self, proxy_auth_answer, proxy_failure_answer, BoxIo, Carries, Clock, Dest, DialFailure,
    Dialer, Route, USER_AGENT,
};
use crate::endpoint::ProxyUrl;
use crate::health::{Failure, Phase, Reason};
use crate::retry_after::parse_retry_after;

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
    /// It failed on this machine's side (out of descriptors, memory, local ports): the
    /// failure says nothing about the endpoint and is not recorded against it.
    pub local: bool,
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
    dialer: Dialer,
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
        let path = crate::dial::origin_form(&uri);
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

    fn dest(&self) -> Dest {
        Dest {
            host: self.host.clone(),
            port: self.port,
        }
    }
}

fn build_tls(ca_file: Option<&PathBuf>) -> Result<Dialer, ProbeError> {
    match dial::connector(ca_file.map(PathBuf::as_path)) {
        Ok(tls) => Ok(Dialer::new(tls)),
        Err(dial::TlsSetupError::CaFile { path, msg }) => Err(ProbeError::CaFile { path, msg }),
        Err(e) => Err(ProbeError::Tls(e.to_string())),
    }
}

impl Prober {
    /// Validate the probe config and build the TLS client once.
    pub fn new(cfg: &ProbeConfig) -> Result<Prober, ProbeError> {
        let url = cfg.url.as_deref().ok_or_else(|| ProbeError::Url {
            url: String::new(),
            msg: "no probe url is configured".into(),
        })?;
        let target = Target::parse(url)?;
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
                dialer: build_tls(cfg.ca_file.as_ref())?,
            }),
        })
    }

    /// One GET through `proxy` whose answer is kept, not judged beyond its status: the
    /// head and at most `max_body` bytes of the body (`over` when it had more).
    pub async fn fetch(&self, proxy: &ProxyUrl) -> Result<Fetched, Failure> {
        let mut run = Run {
            clock: Clock::start(self.inner.timeout, "probe timeout"),
            status: None,
        };
        self.inner.run(proxy, &mut run).await.map_err(Failure::from)
    }

    /// Run one full transaction through `proxy`, bounded by the configured timeout.
    pub async fn probe(&self, proxy: &ProxyUrl) -> ProbeResult {
        let start = Instant::now();
        let mut run = Run {
            clock: Clock::start(self.inner.timeout, "probe timeout"),
            status: None,
        };
        let outcome =
            self.inner
                .run(proxy, &mut run)
                .await
                .and_then(|f| match &self.inner.expect_body {
                    Some(want) if !contains(&f.body, want) => Err(fail(
                        Reason::BodyMismatch,
                        Phase::ResponseBody,
                        format!(
                            "expected text not found in the first {} body bytes",
                            f.body.len()
                        ),
                    )),
                    _ => Ok(()),
                });
        let local = outcome.as_ref().is_err_and(|f| f.local);
        let outcome = outcome.map_err(Failure::from);
        let total = start.elapsed();
        match outcome {
            Ok(()) => ProbeResult {
                ok: true,
                failure: None,
                status: run.status,
                phases: run.clock.phases,
                total,
                local,
            },
            Err(f) => {
                tracing::debug!(proxy = %proxy, reason = ?f.reason, phase = ?f.phase, detail = ?f.detail, "probe failed");
                ProbeResult {
                    ok: false,
                    // A failure's own status is the one that explains it; otherwise keep
                    // the last one seen (e.g. the 200 to CONNECT before a TLS failure).
                    status: f.status.or(run.status),
                    failure: Some(f),
                    phases: run.clock.phases,
                    total,
                    local,
                }
            }
        }
    }
}

/// An answer as `Prober::fetch` keeps it.
#[derive(Debug)]
pub struct Fetched {
    pub headers: hyper::HeaderMap,
    /// At most `max_body` bytes.
    pub body: Vec<u8>,
    /// The body went on past `max_body`.
    pub over: bool,
    /// The head of the proxy's answer to CONNECT (empty when none was sent).
    pub connect_head: Vec<u8>,
}

/// Per-probe bookkeeping: the shared clock and the last status seen.
struct Run {
    clock: Clock,
    status: Option<u16>,
}

fn fail(reason: Reason, phase: Phase, detail: impl Into<String>) -> DialFailure {
    DialFailure::new(reason, phase, detail)
}

impl Inner {
    async fn run(&self, proxy: &ProxyUrl, run: &mut Run) -> Result<Fetched, DialFailure> {
        // A plain probe is one request and its answer; an https one runs TLS in a tunnel.
        let (route, carries) = if self.target.https {
            (Route::Tunnel, Carries::More)
        } else {
            (Route::PlainHttp, Carries::OneExchange)
        };
        let dialed = self
            .dialer
            .dial(proxy, &self.target.dest(), route, carries, &mut run.clock)
            .await?;
        if dialed.connect_status.is_some() {
            run.status = dialed.connect_status;
        }
        let (mut io, connect_head) = (dialed.io, dialed.connect_head);
        if self.target.https {
            io = run
                .clock
                .timed(
                    Phase::DestinationTls,
                    dial::tls_handshake(
                        self.dialer.tls(),
                        io,
                        &self.target.host,
                        Phase::DestinationTls,
                    ),
                )
                .await?;
        }
        let mut fetched = self.exchange(io, proxy, dialed.forward, run).await?;
        fetched.connect_head = connect_head;
        Ok(fetched)
    }

    /// The HTTP exchange over a dialed stream: the request, the status line and headers
    /// (judged by `judge_head`), the body (checked by `read_body`).
    async fn exchange(
        &self,
        io: BoxIo,
        proxy: &ProxyUrl,
        absolute_form: bool,
        run: &mut Run,
    ) -> Result<Fetched, DialFailure> {
        let marks = Arc::new(Mutex::new(Marks::default()));
        let io = TokioIo::new(Tracked {
            inner: io,
            marks: marks.clone(),
        });
        let t0 = Instant::now();
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(io)
            .await
            .map_err(|e| {
                fail(
                    Reason::ConnectionReset,
                    Phase::Request,
                    dial::error_chain(&e),
                )
            })?;
        let _conn = AbortOnDrop(tokio::spawn(async move {
            // Errors surface through the request and body futures.
            let _ = conn.await;
        }));
        let req = self.request(proxy, absolute_form)?;
        let sent = timeout_at(run.clock.deadline, sender.send_request(req)).await;
        let head_phase = request_phases(run, &marks, t0);
        let resp = match sent {
            Err(_) => return Err(run.clock.deadline_failure(head_phase)),
            Ok(Err(e)) => return Err(dial::hyper_failure(&e, head_phase)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        run.status = Some(status);
        self.judge_head(status, resp.headers(), absolute_form)?;
        let (head, body) = resp.into_parts();
        let (body, over) = self.read_body(body, run).await?;
        Ok(Fetched {
            headers: head.headers,
            body,
            over,
            connect_head: Vec::new(),
        })
    }

    /// Whose answer the status line is: the proxy's refusal of our credentials, the
    /// proxy's own error page (it could not reach the site), or the destination's status.
    fn judge_head(
        &self,
        status: u16,
        headers: &hyper::HeaderMap,
        absolute_form: bool,
    ) -> Result<(), DialFailure> {
        let failed = |reason, phase, detail: String| {
            let mut f = fail(reason, phase, detail);
            f.status = Some(status);
            f
        };
        // A 401 the probe target is expected to send is the destination's, not the proxy's.
        let expected_401 = status == 401 && self.expect_status.contains(401);
        if absolute_form && !expected_401 && proxy_auth_answer(status, headers) {
            return Err(failed(
                Reason::ProxyAuthRejected,
                Phase::ProxyHandshake,
                format!("proxy refused the credentials with {status}"),
            ));
        }
        // An HTTP proxy's own error page (a 5xx without Via, tinyproxy's "Unable to
        // connect") is its failure to reach the site, not the site's status.
        if let Some(reason) = absolute_form
            .then(|| proxy_failure_answer(status, headers))
            .flatten()
        {
            return Err(failed(
                reason,
                Phase::ProxyHandshake,
                format!(
                    "proxy answered {status} itself (no Via): it could not reach the destination"
                ),
            ));
        }
        if !self.expect_status.contains(status) {
            let mut f = failed(
                Reason::DestinationStatus,
                Phase::ResponseHead,
                format!(
                    "destination answered {status}, expected {}",
                    self.expect_status
                ),
            );
            f.retry_after = headers
                .get(hyper::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            return Err(f);
        }
        Ok(())
    }

    /// Up to `max_body` bytes of the body, within the clock, and whether it had more.
    async fn read_body(
        &self,
        mut body: hyper::body::Incoming,
        run: &mut Run,
    ) -> Result<(Vec<u8>, bool), DialFailure> {
        let max = self.max_body;
        let read = async {
            let mut got: Vec<u8> = Vec::new();
            let mut over = false;
            while !over {
                match body.frame().await {
                    None => break,
                    Some(Err(e)) => return Err(dial::hyper_failure(&e, Phase::ResponseBody)),
                    Some(Ok(frame)) => {
                        if let Some(d) = frame.data_ref() {
                            let take = d.len().min(max - got.len());
                            got.extend_from_slice(&d[..take]);
                            over = take < d.len() || (got.len() == max && !body.is_end_stream());
                        }
                    }
                }
            }
            Ok((got, over))
        };
        run.clock.timed(Phase::ResponseBody, read).await
    }

    fn request(
        &self,
        proxy: &ProxyUrl,
        absolute_form: bool,
    ) -> Result<Request<Empty<Bytes>>, DialFailure> {
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
            if let Some(auth) = dial::basic_auth(proxy) {
                set(hyper::header::PROXY_AUTHORIZATION, &auth);
            }
        }
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

/// Record how long the request and the wait for the head took (as far as the bytes on the
/// wire tell), and which of the two a deadline or error now falls in.
fn request_phases(run: &mut Run, marks: &Mutex<Marks>, t0: Instant) -> Phase {
    let now = Instant::now();
    let request_done = marks
        .lock()
        .ok()
        .and_then(|m| m.flushed_at.or(m.first_read_at));
    match request_done {
        Some(at) => {
            run.clock
                .phases
                .push((Phase::Request, at.saturating_duration_since(t0)));
            run.clock
                .phases
                .push((Phase::ResponseHead, now.saturating_duration_since(at)));
            Phase::ResponseHead
        }
        None => {
            run.clock
                .phases
                .push((Phase::Request, now.saturating_duration_since(t0)));
            Phase::Request
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    dial::find(hay, needle).is_some()
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
    fn probe_future_is_send() {
        // The daemon spawns probes on the multi-threaded runtime.
        fn is_send<T: Send>(_: &T) {}
        let prober = Prober::new(&ProbeConfig {
            url: Some("https://localhost/".into()),
            ..Default::default()
        })
        .unwrap();
        let proxy = ProxyUrl::parse("socks5://u:p@h:1").unwrap();
        let fut = prober.probe(&proxy);
        is_send(&fut);
    }

    #[test]
    fn bad_ca_file_is_a_config_error() {
        let cfg = ProbeConfig {
            url: Some("https://localhost/".into()),
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        assert!(matches!(Prober::new(&cfg), Err(ProbeError::CaFile { .. })));
    }
}
