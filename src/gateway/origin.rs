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
    h2: Mutex<HashMap<H2Key, H2Sender>>,
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

impl Origins {
    pub(super) fn new(config: Arc<rustls::ClientConfig>) -> Origins {
        let mut http1 = (*config).clone();
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        Origins {
            connector: TlsConnector::from(config),
            http1_only: TlsConnector::from(Arc::new(http1)),
            h2: Mutex::new(HashMap::new()),
        }
    }

    /// An open HTTP/2 connection through `proxy` to `dest`, if one is kept.
    pub(super) fn reuse(&self, proxy: &ProxyUrl, dest: &Dest) -> Option<H2Sender> {
        let key = H2Key::new(proxy, dest);
        let mut table = self.h2.lock().unwrap_or_else(|p| p.into_inner());
        match table.get(&key) {
            Some(s) if !s.is_closed() => Some(s.clone()),
            Some(_) => {
                table.remove(&key);
                None
            }
            None => None,
        }
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
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
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
            table.retain(|_, s| !s.is_closed());
        }
        if table.len() < MAX_H2 {
            table.insert(key, sender);
        }
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
    DialFailure::new(reason, Phase::DestinationTls, detail)
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
