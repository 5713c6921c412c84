//! A CONNECT tunnel from the lease to the report, whichever path read its request: the
//! quick one for a head that came whole in the client's first bytes (`quick_connect`), or
//! hyper's (`http`), which serves every other head. The routing check is shared with
//! absolute-form requests.

use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use super::answer::{empty, set_upstream, text, upstream_error};
use super::idle::Body;
use super::lease::LeaseGuard;
use super::relay::relay;
use super::routing::{authorize, basic_credentials, Denied, Routing};
use super::target::Target;
use super::Shared;
use crate::dial::{BoxIo, Route};

/// A tunnel through an upstream that reached the target, not yet answered.
pub(super) struct Opened {
    guard: LeaseGuard,
    io: BoxIo,
}

/// The routing a request's `Proxy-Authorization` value asks for (`None` when absent or
/// not visible ASCII).
pub(super) fn route(shared: &Shared, proxy_auth: Option<&str>) -> Result<Routing, Denied> {
    let creds = proxy_auth.and_then(basic_credentials);
    authorize(
        shared.cfg.token.as_deref(),
        creds.as_ref().map(|(u, p)| (u.as_str(), p.as_str())),
        &shared.upstream.tag_keys(),
    )
}

/// The answer to a request `route` refused: `407` without the gateway token, `400` for a
/// username that does not parse.
pub(super) fn refusal(denied: Denied) -> Response<Body> {
    match denied {
        Denied::Token => {
            let mut resp = text(
                StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                "proxy_auth_required",
                "send the gateway token as the proxy password",
            );
            let h = resp.headers_mut();
            h.insert(
                header::PROXY_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"proxypool\""),
            );
            // A client without the token gets one answer per connection: it cannot hold
            // a slot by sending a request now and then (it dials again with the token).
            h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            resp
        }
        Denied::Username(e) => text(StatusCode::BAD_REQUEST, "bad_request", &e.to_string()),
    }
}

/// Lease and dial through upstreams until one reaches `target`; the answer the client
/// gets when none does.
pub(super) async fn open(
    shared: &Shared,
    routing: &Routing,
    target: &Target,
) -> Result<Opened, Response<Body>> {
    let (mut guard, dialed) = shared
        .upstream
        .connect(routing, target, Route::Tunnel)
        .await
        .map_err(upstream_error)?;
    // The tunnel is up: that is all the gateway can judge of it (it cannot see inside
    // TLS), so a ban's trial it carries waits for a report by session.
    guard.reached().await;
    Ok(Opened {
        guard,
        io: dialed.io,
    })
}

impl Opened {
    /// The `200` for this tunnel: which endpoint and pool carry it.
    pub(super) fn answer(&self) -> Response<Body> {
        let mut resp = Response::new(empty());
        set_upstream(resp.headers_mut(), self.guard.endpoint(), self.guard.pool());
        resp
    }

    /// Relay between `client` and the upstream until the tunnel ends or the gateway stops
    /// (`early`: what the client sent past its request, to go first), then give the lease
    /// back and wait for it, so the next lease sees the result.
    pub(super) async fn run<C>(self, shared: &Shared, client: C, early: Vec<u8>)
    where
        C: AsyncRead + AsyncWrite + Unpin + 'static,
    {
        let endpoint = self.guard.endpoint();
        let tunnel = relay(client, self.io, early, shared.cfg.half_close_timeout);
        tokio::select! {
            _ = shared.shutdown.cancelled() => {}
            r = tunnel => {
                debug!(endpoint, result = ?r.map_err(|e| e.kind()), "gateway tunnel closed");
            }
        }
        self.guard.finish().await;
    }

    /// The client left before the tunnel started: give the lease back.
    pub(super) async fn abandon(self) {
        debug!(
            endpoint = self.guard.endpoint(),
            "client left before the tunnel started"
        );
        self.guard.finish().await;
    }
}
