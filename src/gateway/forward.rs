//! Absolute-form (plain HTTP) requests: one upstream per request, the destination's
//! answer judged (`[[ban]]` rules, `ban_status`, `retry_status`), the upstream connection
//! kept for the next request when it can be (`idle`, `plain`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body as HttpBody, Incoming};
use hyper::header;
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use tracing::info;

use super::answer::{empty, set_endpoint, set_upstream, text, upstream_error};
use super::deadline::{BodyEnd, Tracked};
use super::driven::Driven;
use super::headers::{
    closes, framing_conflict, proxy_auth, strip_hop_by_hop, strip_own, upstream_request,
};
use super::idle::{Body, IdleKey};
use super::lease::LeaseGuard;
use super::plain::PlainWay;
use super::routing::Routing;
use super::screen::{rule_failure, screen};
use super::send::{send, Again, Sent};
use super::target::Target;
use super::upstream::{failure_outcome, Link, Tries};
use super::Shared;
use crate::ban::Ban;
use crate::dial::{self, DialFailure};
use crate::endpoint::EndpointId;
use crate::health::{Phase, Reason};
use crate::pool::Outcome;
use crate::retry_after::parse_retry_after;

/// A GET/HEAD body kept for re-sending is at most this large; larger ones are not retried.
const MAX_REPLAY_BODY: usize = 64 * 1024;

pub(super) async fn forward(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    routing: Routing,
) -> Response<Body> {
    let mut out = match Outgoing::read(req, shared.limits.first_request).await {
        Ok(out) => out,
        Err(refused) => return refused,
    };
    let mut tries = shared.upstream.tries();
    // The last answer a re-send was made after: the client's if no other comes.
    let mut answered: Option<Response<Body>> = None;
    loop {
        match one_try(&shared, &routing, &mut out, &mut tries).await {
            Try::Answer(resp) => return resp,
            Try::Again(kept) => answered = kept.or(answered),
            Try::Failed(resp) => return answered.unwrap_or(resp),
        }
    }
}

/// A client's request, read and ready to go upstream (again, for GET/HEAD).
struct Outgoing {
    parts: Parts,
    target: Target,
    /// A GET/HEAD body (rare, small), kept so the request can be re-sent.
    kept: Option<Bytes>,
    /// Any other body: it streams once.
    once: Option<Incoming>,
}

impl Outgoing {
    /// The request's destination and hop-by-hop headers checked, a GET/HEAD body read
    /// within `first_request`; or the answer refusing it.
    async fn read(req: Request<Incoming>, first_request: Duration) -> Result<Self, Response<Body>> {
        let target = match Target::url(req.uri()) {
            Ok(t) => t,
            Err(e) => return Err(text(StatusCode::BAD_REQUEST, "bad_request", &e.to_string())),
        };
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // The gateway's own headers are its to set: a client's never go upstream.
        strip_own(&mut parts.headers);
        if !matches!(parts.method, Method::GET | Method::HEAD) {
            return Ok(Outgoing {
                parts,
                target,
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
    fn body(&mut self) -> (Body, Option<Arc<BodyEnd>>) {
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

    /// Whether the request may be sent again through another upstream.
    fn resendable(&self, tries: &Tries) -> bool {
        self.kept.is_some() && tries.left()
    }
}

/// A body an upstream's answer can reach the client with.
pub(super) trait ClientBody:
    HttpBody<Data = Bytes, Error = hyper::Error> + Send + 'static
{
}
impl<B: HttpBody<Data = Bytes, Error = hyper::Error> + Send + 'static> ClientBody for B {}

/// How one try through one upstream ended.
pub(super) enum Try {
    /// The client's answer.
    Answer(Response<Body>),
    /// Send again through another upstream; an answer to fall back on if none comes.
    Again(Option<Response<Body>>),
    /// No answer came through this try; this explains it (unless an earlier answer is kept).
    Failed(Response<Body>),
}

/// Lease an upstream (or reuse a kept connection of the granted one), send the request
/// through it, and judge what comes back.
async fn one_try(shared: &Shared, routing: &Routing, out: &mut Outgoing, tries: &mut Tries) -> Try {
    let way = PlainWay {
        routes: &shared.plain,
        idle: &shared.idle,
        dest: &out.target.dest,
        once_body: out.kept.is_none(),
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
        kept: &out.kept,
        dest: &out.target.dest,
        forward,
        body_end: body_end.as_ref(),
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

/// The request got no response head through the upstream of `guard`.
async fn not_sent(
    shared: &Shared,
    guard: LeaseGuard,
    e: Sent,
    out: &Outgoing,
    tries: &mut Tries,
) -> Try {
    let endpoint = guard.endpoint();
    let host = &out.target.dest.host;
    match e {
        Sent::Unreachable(f) if f.local => {
            // This machine's shortage, not the upstream's: released, not reported.
            drop(guard);
            Try::Failed(upstream_error(super::upstream::UpstreamError::Local(
                f.detail,
            )))
        }
        Sent::Unreachable(f) | Sent::Slow(f) if out.resendable(tries) => {
            // As a failed dial in the attempt loop: reported, and the next upstream.
            info!(endpoint, reason = %f.reason, phase = %f.phase,
                "gateway upstream failed; trying another");
            shared.upstream.fail(guard, f, host, tries).await;
            Try::Again(None)
        }
        Sent::Failed(f) | Sent::Unreachable(f) | Sent::Slow(f) => {
            info!(endpoint, reason = %f.reason, phase = %f.phase, "gateway request failed");
            let reason = f.reason;
            let message = format!(
                "upstream {endpoint} failed: {reason} at {}: {}",
                f.phase, f.detail
            );
            shared.upstream.fail(guard, f, host, tries).await;
            Try::Failed(bad_gateway(endpoint, reason, &message))
        }
        Sent::Unsendable => {
            // The upstream is not blamed for a connection that was idle.
            drop(guard);
            Try::Failed(bad_gateway(
                endpoint,
                Reason::ConnectionReset,
                "the upstream connection closed while the request was sent; it was not re-sent because its body can be sent only once",
            ))
        }
    }
}

/// A forward proxy refused the upstream's credentials (407, or a 401 without `Via`):
/// reported as a connect-phase failure, and the request goes through another upstream
/// when it can.
async fn credentials_refused(
    shared: &Shared,
    guard: LeaseGuard,
    status: u16,
    out: &Outgoing,
    tries: &mut Tries,
) -> Try {
    let endpoint = guard.endpoint();
    let mut f = DialFailure::new(
        Reason::ProxyAuthRejected,
        Phase::ProxyHandshake,
        format!("proxy refused the credentials with {status}"),
    );
    f.status = Some(status);
    shared
        .upstream
        .fail(guard, f, &out.target.dest.host, tries)
        .await;
    if out.resendable(tries) {
        return Try::Again(None);
    }
    Try::Failed(bad_gateway(
        endpoint,
        Reason::ProxyAuthRejected,
        &format!("upstream {endpoint} refused its credentials"),
    ))
}

/// A forward proxy answered with an error page of its own (a 5xx without `Via`): it could
/// not reach the destination. Reported like a failed CONNECT, judged by contrast with the
/// other endpoints (docs/blame.md), and the request goes through another upstream when it
/// can; the proxy's page is not the client's answer.
async fn proxy_failed(
    shared: &Shared,
    guard: LeaseGuard,
    status: u16,
    reason: Reason,
    out: &Outgoing,
    tries: &mut Tries,
) -> Try {
    let endpoint = guard.endpoint();
    let mut f = DialFailure::new(
        reason,
        Phase::ProxyHandshake,
        format!("proxy answered {status} itself (no Via): it could not reach the destination"),
    );
    f.status = Some(status);
    info!(
        endpoint,
        status, "gateway upstream could not reach the destination; trying another"
    );
    shared
        .upstream
        .fail(guard, f, &out.target.dest.host, tries)
        .await;
    if out.resendable(tries) {
        return Try::Again(None);
    }
    Try::Failed(bad_gateway(
        endpoint,
        reason,
        &format!("upstream {endpoint} could not reach the destination ({status})"),
    ))
}

/// The destination's answer to the client's request.
async fn judge(
    shared: &Shared,
    guard: LeaseGuard,
    resp: Response<Driven>,
    out: &Outgoing,
    tries: &Tries,
) -> Try {
    let host = &out.target.dest.host;
    judge_answer(shared, guard, resp, host, out.resendable(tries)).await
}

/// A destination's answer through the upstream of `guard`, judged by the `[[ban]]` rules
/// first (when there are any), then by `ban_status` and `retry_status`; `resendable`:
/// whether the request may go through another upstream (a GET or HEAD with tries left).
/// Reports the outcome on `guard` (now, when the answer is not the client's).
pub(super) async fn judge_answer<B>(
    shared: &Shared,
    guard: LeaseGuard,
    resp: Response<B>,
    host: &str,
    resendable: bool,
) -> Try
where
    B: ClientBody + Unpin,
{
    if shared.bans.is_empty() {
        return judge_status(shared, guard, resp, host, resendable).await;
    }
    let within = shared.cfg.response_timeout;
    match screen(&shared.bans, host, resp, within).await {
        (resp, Some(ban)) => banned(shared, guard, resp, &ban, host, resendable).await,
        (resp, None) => judge_status(shared, guard, resp, host, resendable).await,
    }
}

/// An answer a `[[ban]]` rule matched: reported as a ban of the pair with the rule's
/// name, and a GET/HEAD goes through another upstream while it can.
async fn banned<B: ClientBody>(
    shared: &Shared,
    mut guard: LeaseGuard,
    resp: Response<B>,
    ban: &Ban<'_>,
    host: &str,
    resendable: bool,
) -> Try {
    let endpoint = guard.endpoint();
    let pool = guard.pool().to_string();
    shared.ban_metrics.matched(ban.index);
    let f = rule_failure(ban, &resp);
    info!(
        endpoint,
        rule = ban.rule,
        status = f.status,
        resent = resendable,
        "gateway answer matched a ban rule"
    );
    guard.set_outcome(failure_outcome(f, host));
    if resendable {
        guard.finish().await;
        return Try::Again(Some(to_client(resp, (endpoint, &pool), None, host)));
    }
    Try::Answer(to_client(resp, (endpoint, &pool), Some(guard), host))
}

/// An answer no rule matched: a `ban_status` is reported as `destination_status`, a
/// `retry_status` sends the request through another upstream while it can.
async fn judge_status<B: ClientBody>(
    shared: &Shared,
    mut guard: LeaseGuard,
    resp: Response<B>,
    host: &str,
    resendable: bool,
) -> Try {
    let endpoint = guard.endpoint();
    let pool = guard.pool().to_string();
    let status = resp.status().as_u16();
    let outcome = if shared.cfg.ban_status.contains(&status) {
        let mut f = DialFailure::new(
            Reason::DestinationStatus,
            Phase::ResponseHead,
            format!("destination answered {status}"),
        );
        f.status = Some(status);
        f.retry_after = resp
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        failure_outcome(f, host)
    } else {
        Outcome::Success
    };
    guard.set_outcome(outcome);
    if shared.cfg.retry_status.contains(&status) && resendable {
        info!(
            endpoint,
            status, "gateway re-sends through another upstream"
        );
        // Reported now, so the next lease sees it; the answer is kept in case no other
        // upstream answers (its body, should it break off, goes unreported).
        guard.finish().await;
        return Try::Again(Some(to_client(resp, (endpoint, &pool), None, host)));
    }
    Try::Answer(to_client(resp, (endpoint, &pool), Some(guard), host))
}

/// The gateway's `502` for a try through `endpoint` that got no answer.
fn bad_gateway(endpoint: EndpointId, reason: Reason, message: &str) -> Response<Body> {
    let mut resp = text(StatusCode::BAD_GATEWAY, reason.as_str(), message);
    set_endpoint(resp.headers_mut(), endpoint);
    resp
}

/// An upstream's answer as the client gets it: hop-by-hop headers off, the endpoint and
/// the pool that served it named. The lease (`guard`) lives as long as the body streams to the client; a body
/// that breaks off is the upstream path failing mid-response.
fn to_client<B: ClientBody>(
    resp: Response<B>,
    (endpoint, pool): (EndpointId, &str),
    guard: Option<LeaseGuard>,
    host: &str,
) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // A destination's `X-Proxypool-*` would pass for the gateway's (a Scrapy middleware
    // would skip its ban handling on one): only the gateway's own reach the client.
    strip_own(&mut parts.headers);
    set_upstream(&mut parts.headers, endpoint, pool);
    let mut guard = guard;
    let host = host.to_string();
    let body = body
        .map_err(move |e| {
            if let Some(g) = guard.as_mut() {
                g.set_outcome(failure_outcome(
                    dial::hyper_failure(&e, Phase::ResponseBody),
                    &host,
                ));
            }
            e
        })
        .boxed_unsync();
    Response::from_parts(parts, body)
}
