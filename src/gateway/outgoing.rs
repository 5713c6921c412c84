//! A client's request as it goes upstream: the destination's hop-by-hop headers and the
//! gateway's own taken off, a GET/HEAD body kept so that the request can be sent again
//! through another upstream, any other body streamed once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};

use super::answer::{empty, text};
use super::deadline::{BodyEnd, Tracked};
use super::headers::{strip_hop_by_hop, strip_own};
use super::idle::Body;
use super::target::Target;
use super::upstream::Tries;

/// A GET/HEAD body kept for re-sending is at most this large; larger ones are not retried.
const MAX_REPLAY_BODY: usize = 64 * 1024;

/// A client's request, read and ready to go upstream (again, for GET/HEAD).
pub(super) struct Outgoing {
    pub(super) parts: Parts,
    pub(super) target: Target,
    /// It goes to the origin over TLS (an intercepted connection's request).
    pub(super) secure: bool,
    /// A GET/HEAD body (rare, small), kept so the request can be re-sent.
    kept: Option<Bytes>,
    /// Any other body: it streams once.
    once: Option<Incoming>,
}

impl Outgoing {
    /// The request's destination and hop-by-hop headers checked, a GET/HEAD body read
    /// within `first_request`; or the answer refusing it.
    pub(super) async fn read(
        req: Request<Incoming>,
        target: Target,
        secure: bool,
        first_request: Duration,
    ) -> Result<Self, Response<Body>> {
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // The gateway's own headers are its to set: a client's never go upstream.
        strip_own(&mut parts.headers);
        if !matches!(parts.method, Method::GET | Method::HEAD) {
            return Ok(Outgoing {
                parts,
                target,
                secure,
                kept: None,
                once: Some(body),
            });
        }
        // A body announced and never sent must not hold the connection open forever.
        let collect = Limited::new(body, MAX_REPLAY_BODY).collect();
        match tokio::time::timeout(first_request, collect).await {
            Ok(Ok(b)) => Ok(Outgoing {
                parts,
                target,
                secure,
                kept: Some(b.to_bytes()),
                once: None,
            }),
            Ok(Err(_)) => Err(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "bad_request",
                "a GET or HEAD body must be under 64 KiB",
            )),
            Err(_) => Err(text(
                StatusCode::REQUEST_TIMEOUT,
                "bad_request",
                "the request body did not arrive in time",
            )),
        }
    }

    /// The body for the next try: the kept one again, or the one-time body (only once),
    /// which says when it has gone out (the response deadline starts then).
    pub(super) fn body(&mut self) -> (Body, Option<Arc<BodyEnd>>) {
        match (&self.kept, self.once.take()) {
            (Some(b), _) => (
                Full::new(b.clone()).map_err(|n| match n {}).boxed_unsync(),
                None,
            ),
            (None, Some(b)) => {
                let end = Arc::new(BodyEnd::default());
                (Tracked::new(b, end.clone()).boxed_unsync(), Some(end))
            }
            (None, None) => (empty(), None),
        }
    }

    /// Its body can go out only once (not a kept GET/HEAD body).
    pub(super) fn once_body(&self) -> bool {
        self.kept.is_none()
    }

    /// A GET/HEAD body kept for re-sending.
    pub(super) fn kept(&self) -> &Option<Bytes> {
        &self.kept
    }

    /// Whether the request may be sent again through another upstream.
    pub(super) fn resendable(&self, tries: &Tries) -> bool {
        self.kept.is_some() && tries.left()
    }
}
