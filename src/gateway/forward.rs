//! Absolute-form (plain HTTP) requests: one upstream per request, the destination's
//! status judged (`ban_status`, `retry_status`), the upstream connection kept for the next
//! request when it can be (`idle`, `plain`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use tracing::{debug, info};

use super::answer::{empty, set_endpoint, set_upstream, text, upstream_error};
use super::deadline::{head_within, BodyEnd, Tracked};
use super::idle::{Body, IdleKey, Sender};
use super::lease::LeaseGuard;
use super::plain::PlainWay;
use super::routing::Routing;
use super::target::Target;
use super::upstream::{failure_outcome, Link, Tries};
use super::Shared;
use crate::dial::{self, Dest, DialFailure, Route};
use crate::endpoint::{EndpointId, ProxyUrl};
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
            (Some(b), _) => (Full::new(b.clone()).map_err(|n| match n {}).boxed(), None),
            (None, Some(b)) => {
                let end = Arc::new(BodyEnd::default());
                (Tracked::new(b, end.clone()).boxed(), Some(end))
            }
            (None, None) => (empty(), None),
        }
    }

    /// Whether the request may be sent again through another upstream.
    fn resendable(&self, tries: &Tries) -> bool {
        self.kept.is_some() && tries.left()
    }
}

/// How one try through one upstream ended.
enum Try {
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
    let (link, key) = match link {
        Link::Dialed(d) => {
            let key = IdleKey::new(guard.proxy(), &out.target.dest, d.forward);
            (Link::Dialed(d), key)
        }
        Link::Reused((sender, key)) => (Link::Reused(sender), key),
    };
    let forward = key.forward();
    let reuse = shared.plain.reuse();
    let (body, body_end) = out.body();
    let req = upstream_request(&out.parts, body, forward.then(|| guard.proxy()), reuse);
    let again = Again {
        parts: &out.parts,
        kept: &out.kept,
        dest: &out.target.dest,
        forward,
        body_end: body_end.as_deref(),
    };
    match send(shared, &guard, link, req, again).await {
        Ok((resp, _)) if framing_conflict(resp.headers()) => {
            // The connection is not kept: where this body ends is anybody's guess.
            let f = DialFailure::new(
                Reason::ProxyProtocolError,
                Phase::ResponseHead,
                "the response has both Content-Length and Transfer-Encoding (RFC 9112 §6.3): its body cannot be framed",
            );
            not_sent(shared, guard, Sent::Failed(f), out, tries).await
        }
        Ok((resp, sender)) => {
            let refused_credentials = forward && proxy_auth(resp.status().as_u16(), resp.headers());
            if reuse && !refused_credentials {
                // Back to the idle list once this response has been read to its end.
                shared.idle.park(key, sender);
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

/// The destination's answer: a `ban_status` is reported as `destination_status`, a
/// `retry_status` sends the request through another upstream while it can.
async fn judge(
    shared: &Shared,
    mut guard: LeaseGuard,
    resp: Response<Incoming>,
    out: &Outgoing,
    tries: &Tries,
) -> Try {
    let endpoint = guard.endpoint();
    let pool = guard.pool().to_string();
    let status = resp.status().as_u16();
    let host = &out.target.dest.host;
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
    if shared.cfg.retry_status.contains(&status) && out.resendable(tries) {
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
fn to_client(
    resp: Response<Incoming>,
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
        .boxed();
    Response::from_parts(parts, body)
}

/// Why a request did not get a response head.
enum Sent {
    /// The upstream path failed; reported against the upstream.
    Failed(DialFailure),
    /// A new connection to replace a kept one that closed could not be made: reported
    /// against the upstream, and nothing reached the destination.
    Unreachable(DialFailure),
    /// A kept connection closed after the request's one-time body went out on it.
    Unsendable,
    /// No response head within `response_timeout`: reported against the upstream; a
    /// GET/HEAD goes on through another one.
    Slow(DialFailure),
}

/// What it takes to send a request again on a new connection.
struct Again<'a> {
    parts: &'a Parts,
    /// A GET/HEAD body, kept.
    kept: &'a Option<Bytes>,
    dest: &'a Dest,
    /// The request is in absolute form, for a forward proxy.
    forward: bool,
    /// Set when a one-time body has gone out: the response deadline counts from then.
    body_end: Option<&'a BodyEnd>,
}

/// Send `out` on `link`. A kept connection the far side closed (most often just as it was
/// taken) is no fault of the upstream: the request goes again on a new connection through
/// the same upstream when it can be had again (not written yet, or a kept GET/HEAD body).
async fn send(
    shared: &Shared,
    guard: &LeaseGuard,
    link: Link<Sender>,
    out: Request<Body>,
    again: Again<'_>,
) -> Result<(Response<Incoming>, Sender), Sent> {
    let Again {
        parts,
        kept,
        dest,
        forward,
        body_end,
    } = again;
    let metrics = &shared.metrics;
    let within = shared.cfg.response_timeout;
    let mut sender = match link {
        Link::Dialed(d) => {
            metrics.upstream_connection(false);
            return exchange(d.io, out, within, body_end).await;
        }
        Link::Reused(sender) => sender,
    };
    metrics.upstream_connection(true);
    let sent = head_within(within, body_end, sender.try_send_request(out)).await;
    let mut e = match sent {
        None => return Err(Sent::Slow(no_head_in(within))),
        Some(Ok(resp)) => return Ok((resp, sender)),
        Some(Err(e)) => e,
    };
    debug!(endpoint = guard.endpoint(), error = %e.error(), "gateway idle upstream connection closed");
    // The request hyper gives back was not written: its body (a one-time body too) still
    // says when it has gone out. One rebuilt from a kept body is out at once.
    let (again, body_end) = match e.take_message() {
        Some(m) => (m, body_end),
        None => {
            let b = kept.as_ref().ok_or(Sent::Unsendable)?;
            let body = Full::new(b.clone()).map_err(|n| match n {}).boxed();
            let req = upstream_request(parts, body, forward.then(|| guard.proxy()), true);
            (req, None)
        }
    };
    metrics.upstream_connection(false);
    // The same way as the connection it replaces: the request is already in its form.
    let route = if forward {
        Route::PlainHttp
    } else {
        Route::Tunnel
    };
    let d = shared
        .upstream
        .dial(guard, dest, route)
        .await
        .map_err(Sent::Unreachable)?;
    exchange(d.io, again, within, body_end).await
}

/// The request as sent upstream: absolute form with the proxy's credentials to a forward
/// proxy (`proxy` set), origin form inside a tunnel; `Connection: close` unless the
/// connection is to be kept. `Host` is always the request target's host and port (RFC
/// 9112 §3.2.2), never what the client wrote: a name-based virtual host must serve the
/// site the URL names. Userinfo in the URL goes nowhere.
fn upstream_request(
    parts: &Parts,
    body: Body,
    proxy: Option<&ProxyUrl>,
    keep: bool,
) -> Request<Body> {
    let mut out = Request::new(body);
    *out.method_mut() = parts.method.clone();
    *out.version_mut() = Version::HTTP_11;
    *out.headers_mut() = parts.headers.clone();
    let host = host_port(&parts.uri);
    *out.uri_mut() = if proxy.is_some() {
        format!("http://{host}{}", dial::origin_form(&parts.uri))
            .parse()
            .unwrap_or_else(|_| parts.uri.clone())
    } else {
        dial::origin_form(&parts.uri)
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"))
    };
    let h = out.headers_mut();
    match HeaderValue::from_str(&host) {
        Ok(v) => {
            h.insert(header::HOST, v);
        }
        Err(_) => {
            h.remove(header::HOST);
        }
    }
    if let Some(auth) = proxy.and_then(dial::basic_auth) {
        if let Ok(v) = HeaderValue::from_str(&auth) {
            h.insert(header::PROXY_AUTHORIZATION, v);
        }
    }
    if !keep {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    out
}

/// Send the first request over a new upstream connection, which stays open after it when
/// the far side allows; its response head must come `within` that long.
async fn exchange(
    io: dial::BoxIo,
    req: Request<Body>,
    within: Duration,
    body_end: Option<&BodyEnd>,
) -> Result<(Response<Incoming>, Sender), Sent> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| Sent::Failed(dial::hyper_failure(&e, Phase::Request)))?;
    tokio::spawn(async move {
        // Errors surface through the response and its body.
        let _ = conn.await;
    });
    let resp = head_within(within, body_end, sender.send_request(req))
        .await
        .ok_or_else(|| Sent::Slow(no_head_in(within)))?
        .map_err(|e| Sent::Failed(dial::hyper_failure(&e, Phase::ResponseHead)))?;
    Ok((resp, sender))
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

/// A response whose body length cannot be told: `Content-Length` and `Transfer-Encoding`
/// both (a request-smuggling shape; RFC 9112 §6.3 has a proxy refuse it).
fn framing_conflict(h: &HeaderMap) -> bool {
    h.contains_key(header::TRANSFER_ENCODING) && h.contains_key(header::CONTENT_LENGTH)
}

/// `host[:port]` of an absolute URL as `Host` wants it: the port only when the URL has one,
/// an IPv6 address in brackets, no userinfo.
fn host_port(uri: &Uri) -> String {
    let host = uri.host().unwrap_or_default();
    match uri.port_u16() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

/// Take out every `X-Proxypool-*` header.
fn strip_own(h: &mut HeaderMap) {
    // Most messages have none: nothing is collected then.
    let own = |n: &HeaderName| {
        n.as_str()
            .get(..OWN_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(OWN_PREFIX))
    };
    if !h.keys().any(own) {
        return;
    }
    let names: Vec<HeaderName> = h.keys().filter(|n| own(n)).cloned().collect();
    for n in names {
        h.remove(n);
    }
}

/// The gateway's own header names start with this (`answer::ENDPOINT_HEADER`, …).
const OWN_PREFIX: &str = "x-proxypool-";

fn proxy_auth(status: u16, headers: &HeaderMap) -> bool {
    dial::proxy_auth_answer(status, headers)
}

fn strip_hop_by_hop(h: &mut HeaderMap) {
    // Headers the Connection header names are hop-by-hop too (RFC 9110 §7.6.1).
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
    ] {
        h.remove(n);
    }
    h.remove("keep-alive");
    h.remove("proxy-connection");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay_on_their_hop() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("x-secret-hop", "1"),
            ("proxy-authorization", "Basic Zm9vOmJhcg=="),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("host", "example.com"),
            ("cookie", "a=b"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["cookie", "host"]);
    }

    #[test]
    fn own_headers_are_taken_out_whatever_their_case() {
        let mut h = HeaderMap::new();
        for k in [
            "x-proxypool-error",
            "X-ProxyPool-Endpoint",
            "x-proxypool-",
            "x-proxy",
            "host",
        ] {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_static("1"),
            );
        }
        strip_own(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["host", "x-proxy"]);
    }

    #[test]
    fn host_comes_from_the_url_and_only_from_it() {
        let parts = |url: &str, host: &str| {
            let (p, _) = Request::builder()
                .uri(url)
                .header("host", host)
                .body(())
                .unwrap()
                .into_parts();
            p
        };
        let p = parts("http://u:pw@127.0.0.1:8080/a?b=1", "evil.example");
        let tunnel = upstream_request(&p, empty(), None, true);
        assert_eq!(tunnel.headers()[header::HOST], "127.0.0.1:8080");
        assert_eq!(tunnel.uri(), "/a?b=1");
        let proxy = ProxyUrl::parse("http://127.0.0.1:3128").unwrap();
        let fwd = upstream_request(&p, empty(), Some(&proxy), false);
        assert_eq!(fwd.uri(), "http://127.0.0.1:8080/a?b=1");
        assert_eq!(fwd.headers()[header::HOST], "127.0.0.1:8080");
        assert_eq!(fwd.headers()[header::CONNECTION], "close");
        let p = parts("http://Shop.Example/", "x");
        let r = upstream_request(&p, empty(), None, true);
        assert_eq!(r.headers()[header::HOST], "Shop.Example");
        let p = parts("http://[::1]:81/", "x");
        assert_eq!(
            upstream_request(&p, empty(), None, true).headers()[header::HOST],
            "[::1]:81"
        );
    }
}
