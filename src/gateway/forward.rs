//! Absolute-form (plain HTTP) requests, and the requests inside an intercepted connection:
//! one upstream per request (or per connection, for an intercepted one that rotates so),
//! tried until one answers within the request's budget, the answer judged (`verdict`), the
//! upstream connection kept for the next request when it can be (`idle`, `plain`,
//! `origin`).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use super::answer::{text, upstream_error};
use super::headers::{closes, framing_conflict, proxy_auth, upstream_request};
use super::idle::{Body, IdleKey};
use super::outgoing::Outgoing;
use super::plain::PlainWay;
use super::routing::Routing;
use super::send::{send, Again, Sent};
use super::target::Target;
use super::upstream::{Link, Tries};
use super::verdict::{credentials_refused, judge, not_sent, proxy_failed, Try};
use super::Shared;
use crate::dial::{self, Dest, DialFailure};
use crate::health::{Phase, Reason};

pub(super) async fn forward(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    routing: Routing,
) -> Response<Body> {
    let target = match Target::url(req.uri()) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::BAD_REQUEST, "bad_request", &e.to_string()),
    };
    match Outgoing::read(req, target, false, shared.limits.first_request).await {
        Ok(out) => answer(&shared, &routing, out).await,
        Err(refused) => refused,
    }
}

/// A request inside an intercepted connection to `target`: it goes to the origin over TLS
/// through an upstream (docs/intercept.md), judged as a plain-HTTP answer is.
pub(super) async fn inside(
    shared: &Shared,
    mut req: Request<Incoming>,
    target: &Target,
    routing: &Routing,
) -> Response<Body> {
    // Absolute, so that `Host` and the request line are built as for any request; the
    // scheme's own port is left out of `Host`.
    let authority = match target.dest.port {
        443 => Dest::new(&target.dest.host, 443)
            .authority()
            .trim_end_matches(":443")
            .to_string(),
        _ => target.dest.authority(),
    };
    let path = dial::origin_form(req.uri());
    match format!("https://{authority}{path}").parse() {
        Ok(uri) => *req.uri_mut() = uri,
        Err(_) => {
            return text(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "the request target does not parse",
            )
        }
    }
    match Outgoing::read(req, target.clone(), true, shared.limits.first_request).await {
        Ok(out) => answer(shared, routing, out).await,
        Err(refused) => refused,
    }
}

/// Try upstreams for `out` until one answers, or the budget is spent.
async fn answer(shared: &Shared, routing: &Routing, mut out: Outgoing) -> Response<Body> {
    let mut tries = shared.upstream.tries();
    // The last answer a re-send was made after: the client's if no other comes.
    let mut answered: Option<Response<Body>> = None;
    loop {
        let tried = match (out.secure, shared.intercept.as_ref()) {
            (true, Some(icpt)) => {
                super::secure::one_try(shared, icpt, routing, &mut out, &mut tries).await
            }
            _ => one_try(shared, routing, &mut out, &mut tries).await,
        };
        match tried {
            Try::Answer(resp) => return resp,
            Try::Again(kept) => answered = kept.or(answered),
            Try::Failed(resp) => return answered.unwrap_or(resp),
        }
    }
}

/// Lease an upstream (or reuse a kept connection of the granted one), send the request
/// through it, and judge what comes back.
async fn one_try(shared: &Shared, routing: &Routing, out: &mut Outgoing, tries: &mut Tries) -> Try {
    let way = PlainWay {
        routes: &shared.plain,
        idle: &shared.idle,
        dest: &out.target.dest,
        once_body: out.once_body(),
    };
    let (guard, link) = match shared
        .upstream
        .connect_or_reuse(routing, &out.target, tries, &way)
        .await
    {
        Ok(v) => v,
        Err(e) => return Try::Failed(upstream_error(e)),
    };
    let reuse = shared.plain.reuse();
    // Where a kept connection goes back to; built only when connections are kept.
    let (link, forward, key) = match link {
        Link::Dialed(d) => {
            let forward = d.forward;
            let key = reuse.then(|| IdleKey::new(guard.proxy(), &out.target.dest, forward));
            (Link::Dialed(d), forward, key)
        }
        Link::Reused((sender, key)) => (Link::Reused(sender), key.forward(), Some(key)),
    };
    let (body, body_end) = out.body();
    let req = upstream_request(&out.parts, body, forward.then(|| guard.proxy()), reuse);
    let again = Again {
        parts: &out.parts,
        kept: out.kept(),
        dest: &out.target.dest,
        forward,
        body_end: body_end.as_ref(),
        origin: None,
    };
    match send(shared, &guard, link, req, again).await {
        Ok(resp) if framing_conflict(resp.headers()) => {
            // The connection is not kept: where this body ends is anybody's guess.
            let f = DialFailure::new(
                Reason::ProxyProtocolError,
                Phase::ResponseHead,
                "the response has both Content-Length and Transfer-Encoding (RFC 9112 §6.3): its body cannot be framed",
            );
            not_sent(shared, guard, Sent::Failed(f), out, tries).await
        }
        Ok(mut resp) => {
            let refused_credentials = forward && proxy_auth(resp.status().as_u16(), resp.headers());
            // Back to the idle list once this response has been read to its end, unless
            // the far side closes it after this answer (tinyproxy closes after every one).
            if let Some(key) = key.filter(|_| !refused_credentials && !closes(resp.headers())) {
                resp.body_mut().park_in(shared.idle.clone(), key);
            }
            if refused_credentials {
                return credentials_refused(shared, guard, resp.status().as_u16(), out, tries)
                    .await;
            }
            if let Some(reason) = forward
                .then(|| dial::proxy_failure_answer(resp.status().as_u16(), resp.headers()))
                .flatten()
            {
                return proxy_failed(shared, guard, resp.status().as_u16(), reason, out, tries)
                    .await;
            }
            judge(shared, guard, resp, out, tries).await
        }
        Err(e) => not_sent(shared, guard, e, out, tries).await,
    }
}
