//! Sending one request on an upstream connection, a kept one or a new one, with the
//! response head's deadline.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::http::request::Parts;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use tracing::debug;

use super::deadline::{head_within, BodyEnd};
use super::driven::{Driven, Held};
use super::headers::upstream_request;
use super::idle::{Body, Sender};
use super::lease::LeaseGuard;
use super::origin::Origins;
use super::upstream::Link;
use super::Shared;
use crate::dial::{self, Carries, Dest, DialFailure, Route};
use crate::health::{Phase, Reason};

/// Why a request did not get a response head.
pub(super) enum Sent {
    /// The upstream path failed; reported against the upstream.
    Failed(DialFailure),
    /// A new connection to replace a kept one that closed could not be made: reported
    /// against the upstream, and nothing reached the destination.
    Unreachable(DialFailure),
    /// A kept or shared connection closed under the request (or the origin refused it),
    /// and its one-time body cannot go out again.
    Unsendable,
    /// The origin took the request on none of the HTTP/2 connections it met (each went
    /// away or refused its stream): no fault of the upstream.
    NotTaken,
    /// No response head within `response_timeout`: reported against the upstream; a
    /// GET/HEAD goes on through another one.
    Slow(DialFailure),
}

/// What it takes to send a request again on a new connection.
pub(super) struct Again<'a> {
    pub(super) parts: &'a Parts,
    /// A GET/HEAD body, kept.
    pub(super) kept: &'a Option<Bytes>,
    pub(super) dest: &'a Dest,
    /// The request is in absolute form, for a forward proxy.
    pub(super) forward: bool,
    /// Set when a one-time body has gone out: the response deadline counts from then.
    pub(super) body_end: Option<&'a Arc<BodyEnd>>,
    /// The connection speaks TLS with the destination (an intercepted request's): a new
    /// one does too.
    pub(super) origin: Option<&'a Origins>,
}

/// Send `out` on `link`. A kept connection the far side closed (most often just as it was
/// taken) is no fault of the upstream: the request goes again on a new connection through
/// the same upstream when it can be had again (not written yet, or a kept GET/HEAD body).
/// The response's body runs the connection it came on (`driven`).
pub(super) async fn send(
    shared: &Shared,
    guard: &LeaseGuard,
    link: Link<Sender>,
    out: Request<Body>,
    again: Again<'_>,
) -> Result<Response<Driven>, Sent> {
    let Again {
        parts,
        kept,
        dest,
        forward,
        body_end,
        origin,
    } = again;
    let metrics = &shared.metrics;
    let within = shared.cfg.response_timeout;
    let mut held = match link {
        Link::Dialed(d) => {
            metrics.upstream_connection(false);
            return exchange(d.io, out, within, body_end).await;
        }
        Link::Reused(sender) => Held::kept(sender),
    };
    let sent = head_within(within, body_end.map(|e| &**e), held.try_send(out)).await;
    // Unless hyper gives the request back unwritten, it went out on the kept connection.
    if !matches!(&sent, Some(Err(e)) if e.message().is_some()) {
        metrics.upstream_connection(true);
    }
    let mut e = match sent {
        None => return Err(Sent::Slow(no_head_in(within))),
        Some(Ok(resp)) => return Ok(held.carry(resp)),
        Some(Err(e)) => e,
    };
    debug!(endpoint = guard.endpoint(), error = %e.error(), "gateway idle upstream connection closed");
    // The request hyper gives back was not written: its body (a one-time body too) still
    // says when it has gone out. One rebuilt from a kept body is out at once.
    let (again, body_end) = match e.take_message() {
        Some(m) => (m, body_end),
        None => {
            let b = kept.as_ref().ok_or(Sent::Unsendable)?;
            let body = Full::new(b.clone()).map_err(|n| match n {}).boxed_unsync();
            let req = upstream_request(parts, body, forward.then(|| guard.proxy()), true);
            (req, None)
        }
    };
    // The same way as the connection it replaces: the request is already in its form.
    let route = if forward {
        Route::PlainHttp
    } else {
        Route::Tunnel
    };
    let d = shared
        .upstream
        // It stands for a kept connection, and is kept in turn.
        .dial(guard, dest, route, Carries::More)
        .await
        .map_err(Sent::Unreachable)?;
    metrics.upstream_connection(false);
    let io = match origin {
        None => d.io,
        // The request is in HTTP/1.1's form: the replacement offers only that, whatever
        // the origin would settle on now.
        Some(o) => o
            .handshake_http1(d.io, dest, Instant::now() + within)
            .await
            .map_err(Sent::Unreachable)?,
    };
    exchange(io, again, within, body_end).await
}

/// Send the first request over a new upstream connection, which stays open after it when
/// the far side allows; its response head must come `within` that long.
async fn exchange(
    io: dial::BoxIo,
    req: Request<Body>,
    within: Duration,
    body_end: Option<&Arc<BodyEnd>>,
) -> Result<Response<Driven>, Sent> {
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| Sent::Failed(dial::hyper_failure(&e, Phase::Request)))?;
    let mut held = Held::opened(sender, conn, body_end.cloned());
    let resp = head_within(within, body_end.map(|e| &**e), held.send(req))
        .await
        .ok_or_else(|| Sent::Slow(no_head_in(within)))?
        .map_err(|e| Sent::Failed(dial::hyper_failure(&e, Phase::ResponseHead)))?;
    Ok(held.carry(resp))
}

/// The failure of a response head that did not come within `response_timeout`.
fn no_head_in(within: Duration) -> DialFailure {
    DialFailure::new(
        Reason::SlowResponse,
        Phase::ResponseHead,
        format!(
            "no response head within the gateway's response_timeout ({})",
            humantime::format_duration(within)
        ),
    )
}
