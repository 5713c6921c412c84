//! The origin's side of an intercepted request: TLS through the tunnel an upstream opened
//! to the origin, verified against the built-in roots and `[tls] extra_roots`, offering
//! `h2` and `http/1.1`; HTTP/2 connections kept per (upstream, origin) and shared by the
//! requests that go that way (an HTTP/1.1 one is kept as plain HTTP keeps its own, under
//! a key of its own); `OriginWay`, the way such a request goes through each upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tracing::debug;

use tokio::sync::OwnedSemaphorePermit;

use super::descriptors::Descriptors;
use super::idle::{Body, IdleConns, IdleKey, Sender};
use super::upstream::Way;
use crate::dial::{BoxIo, Carries, Dest, DialFailure, Dialed, Route};
use crate::endpoint::ProxyUrl;
use crate::health::{Phase, Reason};
use crate::tls::{OriginTlsCause, OriginTlsFailure};

/// The request side of an HTTP/2 connection to an origin (clones share it).
pub(super) type H2Sender = hyper::client::conn::http2::SendRequest<Body>;

/// What TLS with the origin settled on.
pub(super) enum Spoken {
    /// HTTP/1.1 over this stream (also an origin that offers no ALPN).
    Http1(BoxIo),
    /// HTTP/2: the connection runs in a task of its own; requests go through the sender.
    Http2(H2Sender),
}

/// The gateway's TLS client for origins, and the HTTP/2 connections it keeps.
pub(super) struct Origins {
    connector: TlsConnector,
    /// The same, offering `http/1.1` only: an upgrade (WebSocket) has no HTTP/2 form here.
    http1_only: TlsConnector,
    /// Each kept connection holds a descriptor of the gateways' budget (one beyond the
    /// budget is used by its request and not kept), as an idle HTTP/1.1 one does.
    h2: Mutex<HashMap<H2Key, (H2Sender, OwnedSemaphorePermit)>>,
    fds: Descriptors,
}

/// An HTTP/2 connection's way: the upstream (whole URL, credentials included, in memory
/// only, as idle HTTP/1.1 connections are keyed) and the origin.
#[derive(Clone, PartialEq, Eq, Hash)]
struct H2Key {
    proxy: String,
    origin: String,
}

impl H2Key {
    fn new(proxy: &ProxyUrl, dest: &Dest) -> H2Key {
        H2Key {
            proxy: proxy.to_secret_string(),
            origin: dest.authority(),
        }
    }
}

/// HTTP/2 connections kept at most; a connection that closed leaves the table when next
/// looked up.
const MAX_H2: usize = 1024;
/// A kept HTTP/2 connection is pinged this often, and closed when a ping's answer takes
/// longer than `H2_PING_WITHIN`.
const H2_PING_EVERY: std::time::Duration = std::time::Duration::from_secs(30);
const H2_PING_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

impl Origins {
    pub(super) fn new(config: Arc<rustls::ClientConfig>) -> Origins {
        let mut http1 = (*config).clone();
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        Origins {
            connector: TlsConnector::from(config),
            http1_only: TlsConnector::from(Arc::new(http1)),
            h2: Mutex::new(HashMap::new()),
            fds: Descriptors::unlimited(),
        }
    }

    /// Keep HTTP/2 connections within `fds` (the gateways' budget).
    pub(super) fn with_descriptors(mut self, fds: Descriptors) -> Origins {
        self.fds = fds;
        self
    }

    /// An open HTTP/2 connection through `proxy` to `dest`, if one is kept.
    pub(super) fn reuse(&self, proxy: &ProxyUrl, dest: &Dest) -> Option<H2Sender> {
        let key = H2Key::new(proxy, dest);
        let mut table = self.h2.lock().unwrap_or_else(|p| p.into_inner());
        match table.get(&key) {
            Some((s, _)) if !s.is_closed() => Some(s.clone()),
            Some(_) => {
                table.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Drop the kept HTTP/2 connection through `proxy` to `dest`: a request on it failed,
    /// so the next one dials afresh rather than meet the same fate.
    pub(super) fn forget(&self, proxy: &ProxyUrl, dest: &Dest) {
        let mut table = self.h2.lock().unwrap_or_else(|p| p.into_inner());
        table.remove(&H2Key::new(proxy, dest));
    }

    /// TLS with the origin over `io` (a tunnel through an upstream) before `deadline`,
    /// then HTTP/2 when both sides offered it. A certificate that does not verify is
    /// `tls_failed` (judged by contrast between upstreams: docs/intercept.md); a handshake
    /// cut off is `connection_reset`, one too slow `slow_response`, all at
    /// `destination_tls`.
    pub(super) async fn handshake(
        &self,
        io: BoxIo,
        proxy: &ProxyUrl,
        dest: &Dest,
        deadline: Instant,
    ) -> Result<Spoken, DialFailure> {
        let refused =
            |reason, detail: String| DialFailure::new(reason, Phase::DestinationTls, detail);
        let (io, h2) = tls_with(&self.connector, io, dest, deadline).await?;
        if !h2 {
            return Ok(Spoken::Http1(io));
        }
        // Pings while idle: a path through a proxy that went away silently is found in
        // seconds, not at the next request's response_timeout.
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(H2_PING_EVERY)
            .keep_alive_timeout(H2_PING_WITHIN)
            .keep_alive_while_idle(true)
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| {
                refused(
                    Reason::ProxyProtocolError,
                    format!("HTTP/2 with the origin: {e}"),
                )
            })?;
        let origin = dest.authority();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(origin, error = %e, "HTTP/2 connection to the origin ended");
            }
        });
        self.keep(H2Key::new(proxy, dest), sender.clone());
        Ok(Spoken::Http2(sender))
    }

    /// TLS with the origin offering HTTP/1.1 only, for a request that upgrades.
    pub(super) async fn handshake_http1(
        &self,
        io: BoxIo,
        dest: &Dest,
        deadline: Instant,
    ) -> Result<BoxIo, DialFailure> {
        Ok(tls_with(&self.http1_only, io, dest, deadline).await?.0)
    }

    fn keep(&self, key: H2Key, sender: H2Sender) {
        let mut table = self.h2.lock().unwrap_or_else(|p| p.into_inner());
        if table.len() >= MAX_H2 {
            table.retain(|_, (s, _)| !s.is_closed());
        }
        if table.len() >= MAX_H2 {
            return;
        }
        // The one it replaces (a connection that closed) gives its descriptor back first.
        table.remove(&key);
        if let Some(fd) = self.fds.idle() {
            table.insert(key, (sender, fd));
        }
    }

    /// Connections kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.h2.lock().unwrap().len()
    }
}

/// TLS by `connector` over `io` to `dest` before `deadline`; whether ALPN chose HTTP/2.
async fn tls_with(
    connector: &TlsConnector,
    io: BoxIo,
    dest: &Dest,
    deadline: Instant,
) -> Result<(BoxIo, bool), DialFailure> {
    let refused = |reason, detail: String| DialFailure::new(reason, Phase::DestinationTls, detail);
    let name = ServerName::try_from(dest.host.clone()).map_err(|e| {
        refused(
            Reason::TlsFailed,
            format!("bad TLS server name {:?}: {e}", dest.host),
        )
    })?;
    let tls = match tokio::time::timeout_at(deadline, connector.connect(name, io)).await {
        Err(_) => {
            return Err(refused(
                Reason::SlowResponse,
                "no TLS handshake with the origin within the gateway's connect_timeout".into(),
            ))
        }
        Ok(Err(e)) => return Err(certificate_or_not(&e)),
        Ok(Ok(s)) => s,
    };
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    Ok((Box::new(tls), h2))
}

/// A refused handshake read: a certificate that did not verify (`tls_failed`), or the
/// connection cut off, no common protocol (`connection_reset`).
fn certificate_or_not(e: &std::io::Error) -> DialFailure {
    let f = OriginTlsFailure::from_io(e);
    let (reason, detail) = match (&f.issuer, f.cause) {
        (_, OriginTlsCause::Handshake) => (
            Reason::ConnectionReset,
            format!("TLS with the origin failed: {}", f.detail),
        ),
        (Some(issuer), cause) => (
            Reason::TlsFailed,
            format!(
                "origin certificate refused ({cause}), issued by {issuer}: {}",
                f.detail
            ),
        ),
        (None, cause) => (
            Reason::TlsFailed,
            format!("origin certificate refused ({cause}): {}", f.detail),
        ),
    };
    DialFailure {
        substituted: matches!(
            f.cause,
            OriginTlsCause::UnknownIssuer | OriginTlsCause::BadSignature
        ),
        ..DialFailure::new(reason, Phase::DestinationTls, detail)
    }
}

/// A kept connection to the origin that can stand for a dial.
pub(super) enum Kept {
    /// An idle HTTP/1.1 connection, and the key it goes back under.
    Http1(Sender, IdleKey),
    /// A shared HTTP/2 connection.
    Http2(H2Sender),
}

/// One intercepted request's way through the upstreams it is granted: always a tunnel to
/// the origin, then TLS.
pub(super) struct OriginWay<'a> {
    pub(super) origins: &'a Origins,
    pub(super) idle: &'a IdleConns,
    pub(super) dest: &'a Dest,
    /// The request's body can go out only once (see `PlainWay`).
    pub(super) once_body: bool,
}

impl Way for OriginWay<'_> {
    type Conn = Kept;
    type Ready = Spoken;

    fn route(&self, _: &ProxyUrl) -> Route {
        Route::Tunnel
    }

    fn reuse(&self, proxy: &ProxyUrl, _: Route) -> Option<Kept> {
        if let Some(s) = self.origins.reuse(proxy, self.dest) {
            return Some(Kept::Http2(s));
        }
        let key = IdleKey::tls(proxy, self.dest);
        let sender = self.idle.take(&key, self.once_body)?;
        Some(Kept::Http1(sender, key))
    }

    fn fallback(&self, _: &ProxyUrl, _: Route, _: &DialFailure) -> Option<Route> {
        None
    }

    fn carries(&self) -> Carries {
        Carries::More
    }

    fn ready(
        &self,
        proxy: &ProxyUrl,
        dialed: Dialed,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<Spoken, DialFailure>> + Send {
        self.origins
            .handshake(dialed.io, proxy, self.dest, deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live HTTP/2 client connection over an in-memory pipe.
    async fn h2_sender() -> H2Sender {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(|_req| async {
                let empty = http_body_util::Empty::<bytes::Bytes>::new();
                Ok::<_, std::convert::Infallible>(hyper::Response::new(empty))
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(server), svc)
                .await;
        });
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(client))
                .await
                .unwrap();
        tokio::spawn(conn);
        sender
    }

    fn client_config() -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        Arc::new(cfg)
    }

    #[tokio::test]
    async fn kept_http2_connections_hold_a_descriptor_each_and_none_past_the_budget() {
        let fds = Descriptors::new(2);
        let origins = Origins::new(client_config()).with_descriptors(fds.clone());
        let proxy: ProxyUrl = "http://127.0.0.1:1".parse().unwrap();
        let at = |port| Dest::new("origin.test", port);
        for port in [1, 2, 3] {
            origins.keep(H2Key::new(&proxy, &at(port)), h2_sender().await);
        }
        assert_eq!(origins.kept(), 2, "the third is past the budget: not kept");
        assert_eq!(fds.available(), 0);
        assert!(origins.reuse(&proxy, &at(3)).is_none());
        assert!(origins.reuse(&proxy, &at(1)).is_some());
        // Kept again under its own key: still one descriptor.
        origins.keep(H2Key::new(&proxy, &at(1)), h2_sender().await);
        assert_eq!((origins.kept(), fds.available()), (2, 0));
        origins.forget(&proxy, &at(1));
        assert_eq!(
            fds.available(),
            1,
            "a forgotten connection gives its descriptor back"
        );
    }
}
