//! The client's side of an intercepted connection: TLS under a leaf for the host the client
//! asked for, then HTTP/1.1 or HTTP/2 as ALPN settled, each request handed to the forward
//! path with the connection's target and routing. The connection's limits are plain
//! HTTP's: the TLS handshake and the first request within `first_request`, every head
//! within `head`, idle keep-alive closed after `idle`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tracing::debug;

use super::rewound::Rewound;
use crate::config::Rotate;
use crate::gateway::answer::{text, LOCAL_RESOURCES};
use crate::gateway::idle::Body;
use crate::gateway::limits::{Activity, Watched};
use crate::gateway::routing::Routing;
use crate::gateway::target::Target;
use crate::gateway::Shared;
use tokio::sync::OwnedSemaphorePermit;

/// What every request of one intercepted connection shares.
struct Inside {
    shared: Arc<Shared>,
    target: Target,
    routing: Routing,
    /// The upstream descriptor of the connection's own two is taken (by a request under
    /// `rotate = "request"`).
    own: Arc<AtomicBool>,
}

/// The descriptor a request's upstream connection holds until its answer ends: the
/// connection's own, or one of the budget.
type Descriptor = (Option<Own>, Option<OwnedSemaphorePermit>);

/// The connection's own upstream descriptor, given back when dropped.
struct Own(Arc<AtomicBool>);

impl Own {
    fn claim(own: &Arc<AtomicBool>) -> Option<Own> {
        own.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| Own(own.clone()))
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Serve the client of an intercepted CONNECT whose `200` has gone out (`early`: what it
/// sent past its CONNECT), until it closes, breaks a limit or the gateway stops.
pub(in crate::gateway) async fn serve<C>(
    shared: Arc<Shared>,
    client: C,
    early: Vec<u8>,
    target: Target,
    routing: Routing,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(icpt) = shared.intercept.as_ref() else {
        return;
    };
    let activity = Activity::new();
    let io = Watched::new(Rewound::new(early, client), activity.clone());
    let acceptor = TlsAcceptor::from(icpt.front.config_for(&target.dest.host));
    let tls = tokio::select! {
        r = acceptor.accept(io) => match r {
            Ok(s) => s,
            Err(e) => return debug!(host = %target.dest.host, error = %e, "intercepted client's TLS handshake failed"),
        },
        why = activity.expired(&shared.limits) => return debug!(why, "intercepted client closed during its TLS handshake"),
        _ = shared.shutdown.cancelled() => return,
    };
    let target = by_name(target, tls.get_ref().1.server_name());
    let pool = routing.pool.as_deref().unwrap_or(&shared.cfg.pool);
    shared.metrics.intercepted(pool);
    shared.metrics.leaf_certificates(icpt.front.leaves().len());
    let routing = connection_routing(shared.cfg.rotate, routing);
    let inside = Arc::new(Inside {
        shared: shared.clone(),
        target,
        routing: routing.clone(),
        own: Arc::new(AtomicBool::new(false)),
    });
    let svc_activity = activity.clone();
    let svc = hyper::service::service_fn(move |req| {
        let inside = inside.clone();
        let busy = svc_activity.busy();
        let activity = svc_activity.clone();
        async move {
            let Some(held) = inside.descriptor() else {
                let refused = text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    LOCAL_RESOURCES,
                    "the gateway is out of descriptors for another upstream connection (its descriptor budget); try again",
                );
                return Ok::<_, Infallible>(refused.map(BodyExt::boxed_unsync));
            };
            let resp = Box::pin(inside.answer(req)).await;
            let responding = activity.responding();
            drop(busy);
            Ok::<_, Infallible>(resp.map(|body| {
                crate::gateway::limits::Holding::new(body, (responding, held)).boxed_unsync()
            }))
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .max_buf_size(shared.limits.max_head.max(8192));
    builder
        .http2()
        .max_header_list_size(shared.limits.max_head as u32)
        .max_concurrent_streams(100);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r {
            debug!(error = %e, "intercepted client connection ended with an error");
        },
        why = activity.expired(&shared.limits) => debug!(why, "gateway closed an intercepted connection"),
        _ = shared.shutdown.cancelled() => {}
    }
    // No request of this connection comes after: its own session would only take a place
    // in the table (an upgraded connection keeps its lease, not the session).
    shared.upstream.session_done(&routing);
}

/// A client that resolved the name itself (a SOCKS5 request for an address, a CONNECT to
/// one) and then sent the name as SNI asks for that site: the connection is served by
/// name, as a client that let the proxy resolve it (`socks5h`) would be. Its requests name
/// the site (`Host`), its leaf is for the site, and the upstream resolves the name, so the
/// client's own lookup does not leak into which address the site is reached at.
fn by_name(target: Target, sni: Option<&str>) -> Target {
    let literal = target.dest.host.parse::<std::net::IpAddr>().is_ok();
    match sni {
        Some(name) if literal => Target::socks(name, target.dest.port).unwrap_or(target),
        _ => target,
    }
}

/// `rotate = "connection"`: the requests of one connection keep one upstream while it
/// serves the host, as a sticky session does (the client's own session, if it named one,
/// else one of the connection's). `"request"`: each takes its own lease.
fn connection_routing(rotate: Rotate, mut routing: Routing) -> Routing {
    if rotate == Rotate::Connection && routing.session.is_none() {
        routing.session = Some(format!("intercept-{:032x}", rand::random::<u128>()));
        routing.own_session = true;
    }
    routing
}

impl Inside {
    /// With `rotate = "request"` each request of the connection goes through an upstream
    /// connection of its own, and the client's two descriptors cover one: the request that
    /// holds the connection's own (`own`) until its answer ends, while others in flight
    /// (HTTP/2 streams) hold one more of the budget each, or are answered `503
    /// local_resources` when the budget has none (`None`).
    fn descriptor(&self) -> Option<Descriptor> {
        if self.shared.cfg.rotate != Rotate::Request {
            return Some((None, None));
        }
        if let Some(own) = Own::claim(&self.own) {
            return Some((Some(own), None));
        }
        let icpt = self.shared.intercept.as_ref()?;
        icpt.extra_descriptor().map(|permit| (None, Some(permit)))
    }

    async fn answer(&self, req: Request<Incoming>) -> Response<Body> {
        if let Err(why) = same_origin(&req, &self.target) {
            return text(StatusCode::MISDIRECTED_REQUEST, "bad_request", &why);
        }
        if super::upgrade::asks_upgrade(&req) {
            return super::upgrade::upgrade(&self.shared, req, &self.target, &self.routing).await;
        }
        crate::gateway::forward::inside(&self.shared, req, &self.target, &self.routing).await
    }
}

/// A request inside the connection must be for its host and port: the leaf was minted
/// for that name, and the upstream is chosen for it.
fn same_origin(req: &Request<Incoming>, target: &Target) -> Result<(), String> {
    let authority = match req.uri().authority() {
        Some(a) => Some(a.as_str().to_string()),
        None => req
            .headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string),
    };
    let Some(authority) = authority else {
        // HTTP/1.0 without Host: the connection's host.
        return Ok(());
    };
    match Target::inside(&authority, target.dest.port) {
        Ok(t) if t.dest == target.dest => Ok(()),
        _ => Err(format!(
            "this connection is for {}; open another for {authority}",
            target.dest.authority()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_without_a_session_gets_its_own_when_it_rotates_per_connection() {
        let r = connection_routing(Rotate::Connection, Routing::default());
        let s = r.session.clone().unwrap();
        assert!(s.starts_with("intercept-") && s.len() <= crate::limits::MAX_SESSION_KEY);
        let other = connection_routing(Rotate::Connection, Routing::default());
        assert_ne!(other.session, r.session);
        let named = Routing {
            session: Some("mine".into()),
            ..Routing::default()
        };
        assert_eq!(
            connection_routing(Rotate::Connection, named)
                .session
                .as_deref(),
            Some("mine")
        );
        assert_eq!(
            connection_routing(Rotate::Request, Routing::default()).session,
            None
        );
    }
}
