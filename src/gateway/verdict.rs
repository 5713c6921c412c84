//! What came back through one upstream, judged: no answer (`not_sent`), a forward proxy's
//! own refusal, or the destination's answer by the `[[ban]]` rules, `ban_status` and
//! `retry_status`; each reported against the upstream, and the answer the client gets.

use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body as HttpBody;
use hyper::header;
use hyper::{Response, StatusCode};
use tracing::info;

use super::answer::{set_endpoint, set_upstream, text, upstream_error};
use super::headers::{strip_hop_by_hop, strip_own};
use super::idle::Body;
use super::lease::LeaseGuard;
use super::outgoing::Outgoing;
use super::screen::{rule_failure, screen};
use super::send::Sent;
use super::upstream::{failure_outcome, Tries};
use super::Shared;
use crate::ban::Ban;
use crate::dial::{self, DialFailure};
use crate::endpoint::EndpointId;
use crate::health::{Phase, Reason};
use crate::pool::Outcome;
use crate::retry_after::parse_retry_after;

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

/// The request got no response head through the upstream of `guard`.
pub(super) async fn not_sent(
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
            // A kept or shared connection ended under the request (the origin's doing as
            // often as not): the upstream is not blamed.
            drop(guard);
            Try::Failed(bad_gateway(
                endpoint,
                Reason::ConnectionReset,
                "a kept connection closed, or the origin refused the request, before an answer; it was not re-sent because its body can be sent only once",
            ))
        }
        Sent::NotTaken => {
            drop(guard);
            Try::Failed(bad_gateway(
                endpoint,
                Reason::ConnectionReset,
                "the origin took the request on none of the HTTP/2 connections it was sent on (each went away or refused it); the upstream is not blamed",
            ))
        }
    }
}

/// A forward proxy refused the upstream's credentials (407, or a 401 without `Via`):
/// reported as a connect-phase failure, and the request goes through another upstream
/// when it can.
pub(super) async fn credentials_refused(
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
pub(super) async fn proxy_failed(
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

/// The destination's answer, judged by the `[[ban]]` rules first (when there are any),
/// then by `ban_status` and `retry_status`.
pub(super) async fn judge<B>(
    shared: &Shared,
    guard: LeaseGuard,
    resp: Response<B>,
    out: &Outgoing,
    tries: &Tries,
) -> Try
where
    B: ClientBody + Unpin,
{
    let host = &out.target.dest.host;
    judge_answer(shared, guard, resp, host, out.resendable(tries)).await
}

/// `judge`, for an answer from `host`; `resendable`: a ban or a `retry_status` may send
/// the request again through another upstream (else the answer is the client's).
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
pub(super) async fn banned<B: ClientBody>(
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
pub(super) async fn judge_status<B: ClientBody>(
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
pub(super) fn bad_gateway(endpoint: EndpointId, reason: Reason, message: &str) -> Response<Body> {
    let mut resp = text(StatusCode::BAD_GATEWAY, reason.as_str(), message);
    set_endpoint(resp.headers_mut(), endpoint);
    resp
}

/// An upstream's answer as the client gets it: hop-by-hop headers off, the endpoint and
/// the pool that served it named. The lease (`guard`) lives as long as the body streams to the client; a body
/// that breaks off is the upstream path failing mid-response.
pub(super) fn to_client<B: ClientBody>(
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
