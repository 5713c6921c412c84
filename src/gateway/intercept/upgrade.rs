//! A request inside an intercepted connection that asks to upgrade (a WebSocket): sent
//! through an upstream to the origin over HTTP/1.1, and once the origin answers `101`, the
//! bytes of both sides relayed as a tunnel's are until either closes. Any other answer goes
//! to the client as it is and is judged as one.

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tracing::debug;

use crate::dial::{self, Route};
use crate::gateway::answer::{set_upstream, text, upstream_error};
use crate::gateway::headers::strip_own;
use crate::gateway::idle::Body;
use crate::gateway::lease::LeaseGuard;
use crate::gateway::relay::relay;
use crate::gateway::routing::Routing;
use crate::gateway::target::Target;
use crate::gateway::upstream::failure_outcome;
use crate::gateway::verdict::to_client;
use crate::gateway::Shared;
use crate::health::Phase;
use crate::pool::Outcome;

/// Whether `req` asks to switch protocols.
pub(super) fn asks_upgrade(req: &Request<Incoming>) -> bool {
    req.headers().contains_key(header::UPGRADE)
}

/// Relay an upgrade through one upstream (no retry: the client's handshake is one-off).
pub(super) async fn upgrade(
    shared: &Shared,
    mut req: Request<Incoming>,
    target: &Target,
    routing: &Routing,
) -> Response<Body> {
    let Some(icpt) = shared.intercept.as_ref() else {
        return text(StatusCode::BAD_GATEWAY, "internal", "interception is off");
    };
    let (mut guard, dialed) = match shared
        .upstream
        .connect(routing, target, Route::Tunnel)
        .await
    {
        Ok(v) => v,
        Err(e) => return upstream_error(e),
    };
    let host = target.dest.host.clone();
    let deadline = tokio::time::Instant::now() + shared.cfg.connect_timeout;
    let io = match icpt
        .origins()
        .handshake_http1(dialed.io, &target.dest, deadline)
        .await
    {
        Ok(io) => io,
        Err(f) => {
            let message = format!("the origin's TLS failed: {f}");
            let reason = f.reason;
            fail(guard, f, &host);
            return text(StatusCode::BAD_GATEWAY, reason.as_str(), &message);
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
        Ok(v) => v,
        Err(e) => {
            fail(guard, dial::hyper_failure(&e, Phase::Request), &host);
            return text(StatusCode::BAD_GATEWAY, "connection_reset", &e.to_string());
        }
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "upgraded origin connection ended");
        }
    });
    let client_side = hyper::upgrade::on(&mut req);
    let out = to_origin(req, target);
    let within = shared.cfg.response_timeout;
    let mut resp = match tokio::time::timeout(within, sender.send_request(out)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            fail(guard, dial::hyper_failure(&e, Phase::ResponseHead), &host);
            return text(StatusCode::BAD_GATEWAY, "connection_reset", &e.to_string());
        }
        Err(_) => {
            let f = dial::DialFailure::new(
                crate::health::Reason::SlowResponse,
                Phase::ResponseHead,
                "no answer to the upgrade within the gateway's response_timeout",
            );
            fail(guard, f, &host);
            return text(
                StatusCode::GATEWAY_TIMEOUT,
                "slow_response",
                "the origin did not answer",
            );
        }
    };
    guard.set_outcome(Outcome::Success);
    let (endpoint, pool) = (guard.endpoint(), guard.pool().to_string());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Not upgraded: the answer as it came, the lease given back once it has gone out.
        return to_client(resp, (endpoint, &pool), Some(guard), &host);
    }
    let origin_side = hyper::upgrade::on(&mut resp);
    let half_close = shared.cfg.half_close_timeout;
    shared
        .tracker
        .spawn(relay_upgraded(client_side, origin_side, guard, half_close));
    let (mut parts, _) = resp.into_parts();
    strip_own(&mut parts.headers);
    set_upstream(&mut parts.headers, endpoint, &pool);
    Response::from_parts(parts, crate::gateway::answer::empty())
}

/// The request as the origin gets it: origin-form, the client's upgrade headers kept,
/// the proxy's credentials and the gateway's own headers taken off.
fn to_origin(req: Request<Incoming>, target: &Target) -> Request<Body> {
    let (mut parts, body) = req.into_parts();
    parts.headers.remove(header::PROXY_AUTHORIZATION);
    strip_own(&mut parts.headers);
    let authority = match target.dest.port {
        443 => target.dest.authority().trim_end_matches(":443").to_string(),
        _ => target.dest.authority(),
    };
    if let Ok(v) = HeaderValue::from_str(&authority) {
        parts.headers.insert(header::HOST, v);
    }
    parts.uri = dial::origin_form(&parts.uri)
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("/"));
    parts.version = hyper::Version::HTTP_11;
    Request::from_parts(parts, body.boxed_unsync())
}

/// Both sides upgraded: relay until either closes, then give the lease back.
async fn relay_upgraded(
    client: hyper::upgrade::OnUpgrade,
    origin: hyper::upgrade::OnUpgrade,
    guard: LeaseGuard,
    half_close: std::time::Duration,
) {
    match tokio::try_join!(client, origin) {
        Ok((c, o)) => {
            let r = relay(TokioIo::new(c), TokioIo::new(o), Vec::new(), half_close).await;
            debug!(endpoint = guard.endpoint(), result = ?r.map_err(|e| e.kind()), "upgraded connection closed");
        }
        Err(e) => debug!(error = %e, "an upgrade did not complete"),
    }
    guard.finish().await;
}

/// Report a failure of this upstream on the way to `host` (the guard's drop sends it).
fn fail(mut guard: LeaseGuard, f: dial::DialFailure, host: &str) {
    guard.set_outcome(failure_outcome(f, host));
}
