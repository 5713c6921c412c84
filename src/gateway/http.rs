//! The HTTP front: CONNECT tunnels and absolute-form requests, one upstream per request.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tracing::{debug, info};

use super::idle::{Body, IdleKey, Sender};
use super::limits::{Activity, Watched};
use super::plain::PlainWay;
use super::routing::{authorize, basic_credentials, Denied, Routing};
use super::upstream::{failure_outcome, Link, Tried, UpstreamError};
use super::{Shared, Slot};
use crate::dial::{self, Dest, DialFailure, Route};
use crate::endpoint::ProxyUrl;
use crate::health::{Phase, Reason};
use crate::metrics::{GatewayOutcome, GatewayProtocol};
use crate::pool::Outcome;
use crate::retry_after::parse_retry_after;

/// The response header naming the upstream endpoint id.
pub const ENDPOINT_HEADER: &str = "x-proxypool-endpoint";
/// The response header naming why the gateway itself answered with an error.
pub const ERROR_HEADER: &str = "x-proxypool-error";

/// A GET/HEAD body kept for re-sending is at most this large; larger ones are not retried.
const MAX_REPLAY_BODY: usize = 64 * 1024;

/// Serve one client connection that starts with HTTP.
pub(super) async fn serve(shared: Arc<Shared>, stream: TcpStream, slot: Slot) {
    let activity = Activity::new();
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let svc_shared = shared.clone();
    let svc_activity = activity.clone();
    let svc = hyper::service::service_fn(move |req| {
        let shared = svc_shared.clone();
        let busy = svc_activity.busy();
        let slot = slot.clone();
        async move {
            let resp = handle(shared, req, slot).await;
            drop(busy);
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .max_header_size(shared.limits.max_head)
        .serve_connection(io, svc)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                debug!(error = %e, "gateway client connection ended with an error");
            }
        }
        why = activity.expired(&shared.limits) => {
            debug!(why, "gateway closed a client connection");
        }
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>, slot: Slot) -> Response<Body> {
    let protocol = if req.method() == Method::CONNECT {
        GatewayProtocol::HttpConnect
    } else {
        GatewayProtocol::HttpForward
    };
    let metrics = shared.metrics.clone();
    let resp = answer(shared, req, slot).await;
    // Answers the gateway made itself carry their outcome; anything else came through an
    // upstream (a destination's own 4xx/5xx included).
    let outcome = resp.extensions().get::<GatewayOutcome>().copied();
    metrics.request(protocol, outcome.unwrap_or(GatewayOutcome::Ok));
    resp
}

async fn answer(shared: Arc<Shared>, req: Request<Incoming>, slot: Slot) -> Response<Body> {
    let creds = req
        .headers()
        .get(header::PROXY_AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(basic_credentials);
    let routing = match authorize(
        shared.cfg.token.as_deref(),
        creds.as_ref().map(|(u, p)| (u.as_str(), p.as_str())),
    ) {
        Ok(r) => r,
        Err(Denied::Token) => {
            let mut resp = text(
                StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                "proxy_auth_required",
                "proxypool gateway: send the gateway token as the proxy password",
            );
            resp.headers_mut().insert(
                header::PROXY_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"proxypool\""),
            );
            return resp;
        }
        Err(Denied::Username(e)) => {
            return text(StatusCode::BAD_REQUEST, "bad_request", &e.to_string())
        }
    };
    if req.method() == Method::CONNECT {
        return connect(shared, req, routing, slot).await;
    }
    match req.uri().scheme_str() {
        Some("http") => forward(shared, req, routing).await,
        Some(_) => text(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "only http:// URLs are forwarded; use CONNECT for https",
        ),
        None => text(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "this is a proxy: send CONNECT host:port or an absolute-form request (GET http://host/...)",
        ),
    }
}

fn destination(uri: &Uri, default_port: u16) -> Option<Dest> {
    let auth = uri.authority()?;
    if auth.host().is_empty() {
        return None;
    }
    Some(Dest::new(
        auth.host(),
        auth.port_u16().unwrap_or(default_port),
    ))
}

async fn connect(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    routing: Routing,
    slot: Slot,
) -> Response<Body> {
    let Some(dest) = destination(req.uri(), 443) else {
        return text(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "CONNECT needs host:port",
        );
    };
    let mut tried = Tried::default();
    let (mut guard, dialed) = match shared
        .upstream
        .connect(&routing, &dest, Route::Tunnel, &mut tried)
        .await
    {
        Ok(v) => v,
        Err(e) => return upstream_error(e),
    };
    // The tunnel is up: that is all the gateway can judge of it (it cannot see inside TLS).
    guard.set_outcome(Outcome::Success);
    let endpoint = guard.endpoint();
    let tunnel_shared = shared.clone();
    shared.tracker.spawn(async move {
        let mut upstream = dialed.io;
        let tunnel = async {
            match hyper::upgrade::on(req).await {
                Ok(up) => {
                    let mut client = TokioIo::new(up);
                    let r = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    debug!(endpoint, result = ?r.map_err(|e| e.kind()), "gateway tunnel closed");
                }
                Err(e) => debug!(endpoint, error = %e, "client left before the tunnel started"),
            }
        };
        tokio::select! {
            _ = tunnel_shared.shutdown.cancelled() => {}
            _ = tunnel => {}
        }
        // Reported here rather than by the guard's drop: no extra task per tunnel.
        guard.finish().await;
        drop(slot);
    });
    let mut resp = Response::new(empty());
    set_endpoint(resp.headers_mut(), endpoint);
    resp
}

async fn forward(shared: Arc<Shared>, req: Request<Incoming>, routing: Routing) -> Response<Body> {
    let Some(dest) = destination(req.uri(), 80) else {
        return text(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the URL has no host",
        );
    };
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let replayable = matches!(parts.method, Method::GET | Method::HEAD);
    // GET/HEAD bodies (rare, small) are kept so the request can be re-sent; any other
    // body streams once.
    let mut kept: Option<Bytes> = None;
    let mut once: Option<Incoming> = None;
    if replayable {
        // A body announced and never sent must not hold the connection open forever.
        let collect = Limited::new(body, MAX_REPLAY_BODY).collect();
        match tokio::time::timeout(shared.limits.first_request, collect).await {
            Ok(Ok(b)) => kept = Some(b.to_bytes()),
            Ok(Err(_)) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "bad_request",
                    "a GET or HEAD body must be under 64 KiB",
                )
            }
            Err(_) => {
                return text(
                    StatusCode::REQUEST_TIMEOUT,
                    "bad_request",
                    "the request body did not arrive in time",
                )
            }
        }
    } else {
        once = Some(body);
    }
    let cfg = &shared.cfg;
    let mut tried = Tried::default();
    let mut resends = 0u32;
    loop {
        let way = PlainWay {
            routes: &shared.plain,
            idle: &shared.idle,
            dest: &dest,
        };
        let (mut guard, link) = match shared
            .upstream
            .connect_or_reuse(&routing, &dest, &mut tried, &way)
            .await
        {
            Ok(v) => v,
            Err(e) => return upstream_error(e),
        };
        let endpoint = guard.endpoint();
        let forward = match &link {
            Link::Dialed(d) => d.forward,
            Link::Reused((_, forward)) => *forward,
        };
        let body: Body = match (&kept, once.take()) {
            (Some(b), _) => Full::new(b.clone()).map_err(|n| match n {}).boxed(),
            (None, Some(b)) => b.boxed(),
            (None, None) => empty(),
        };
        let out = upstream_request(&parts, body, forward.then(|| guard.proxy()));
        let metrics = &shared.metrics;
        metrics.upstream_connection(matches!(link, Link::Reused(_)));
        let sent = match link {
            Link::Dialed(d) => exchange(d.io, out).await,
            Link::Reused((mut sender, _)) => match sender.try_send_request(out).await {
                Ok(resp) => Ok((resp, sender)),
                Err(mut e) => {
                    // The far side closed the idle connection, most often just as it was
                    // taken: no fault of the upstream. Send again on a new connection when
                    // the request can be had again (not written yet, or a kept GET/HEAD).
                    debug!(endpoint, error = %e.error(), "gateway idle upstream connection closed");
                    let again = e.take_message().or_else(|| {
                        kept.as_ref().map(|b| {
                            let body = Full::new(b.clone()).map_err(|n| match n {}).boxed();
                            upstream_request(&parts, body, forward.then(|| guard.proxy()))
                        })
                    });
                    let Some(again) = again else {
                        // The body went out once and cannot be sent again; the upstream
                        // is not blamed for a connection that was idle.
                        drop(guard);
                        return text(
                            StatusCode::BAD_GATEWAY,
                            Reason::ConnectionReset.as_str(),
                            "proxypool gateway: the upstream connection closed while the request was sent; it was not re-sent because its body can be sent only once",
                        );
                    };
                    metrics.upstream_connection(false);
                    let route = shared.plain.route(guard.proxy());
                    match shared.upstream.dial(guard.proxy(), &dest, route).await {
                        Ok(d) => exchange(d.io, again).await,
                        Err(f) => Err(f),
                    }
                }
            },
        };
        let (resp, sender) = match sent {
            Ok(v) => v,
            Err(f) => {
                info!(endpoint, reason = %f.reason, phase = %f.phase, "gateway request failed");
                let reason = f.reason;
                shared.upstream.fail(guard, f, &dest.host).await;
                let mut resp = text(
                    StatusCode::BAD_GATEWAY,
                    reason.as_str(),
                    &format!("proxypool gateway: upstream {endpoint} failed: {reason}"),
                );
                set_endpoint(resp.headers_mut(), endpoint);
                return resp;
            }
        };
        // Back to the idle list once this response has been read to its end.
        shared
            .idle
            .park(IdleKey::new(guard.proxy(), &dest, forward), sender);
        let status = resp.status().as_u16();
        let can_resend = kept.is_some() && resends < shared.upstream.retries();
        if forward && proxy_auth(status, resp.headers()) {
            let mut f = DialFailure::new(
                Reason::ProxyAuthRejected,
                Phase::ProxyHandshake,
                format!("proxy refused the credentials with {status}"),
            );
            f.status = Some(status);
            shared.upstream.fail(guard, f, &dest.host).await;
            if can_resend {
                resends += 1;
                continue;
            }
            let mut resp = text(
                StatusCode::BAD_GATEWAY,
                Reason::ProxyAuthRejected.as_str(),
                &format!("proxypool gateway: upstream {endpoint} refused its credentials"),
            );
            set_endpoint(resp.headers_mut(), endpoint);
            return resp;
        }
        let outcome = if cfg.ban_status.contains(&status) {
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
            failure_outcome(f, &dest.host)
        } else {
            Outcome::Success
        };
        if cfg.retry_status.contains(&status) && can_resend {
            info!(
                endpoint,
                status, "gateway re-sends through another upstream"
            );
            guard.set_outcome(outcome);
            guard.finish().await;
            resends += 1;
            continue;
        }
        guard.set_outcome(outcome);
        let (mut rparts, rbody) = resp.into_parts();
        strip_hop_by_hop(&mut rparts.headers);
        set_endpoint(&mut rparts.headers, endpoint);
        let mut guard = Some(guard);
        // The lease lives as long as the body streams to the client; a body that breaks
        // off is the upstream path failing mid-response.
        let host = dest.host.clone();
        let body = rbody
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
        return Response::from_parts(rparts, body);
    }
}

/// The request as sent upstream: absolute form with the proxy's credentials to a forward
/// proxy (`proxy` set), origin form inside a tunnel.
fn upstream_request(parts: &Parts, body: Body, proxy: Option<&ProxyUrl>) -> Request<Body> {
    let mut out = Request::new(body);
    *out.method_mut() = parts.method.clone();
    *out.version_mut() = Version::HTTP_11;
    *out.headers_mut() = parts.headers.clone();
    *out.uri_mut() = if proxy.is_some() {
        parts.uri.clone()
    } else {
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"))
    };
    let h = out.headers_mut();
    if !h.contains_key(header::HOST) {
        if let Some(a) = parts.uri.authority() {
            if let Ok(v) = HeaderValue::from_str(a.as_str()) {
                h.insert(header::HOST, v);
            }
        }
    }
    if let Some(auth) = proxy.and_then(dial::basic_auth) {
        if let Ok(v) = HeaderValue::from_str(&auth) {
            h.insert(header::PROXY_AUTHORIZATION, v);
        }
    }
    out
}

/// Send the first request over a new upstream connection, which stays open after it when
/// the far side allows.
async fn exchange(
    io: dial::BoxIo,
    req: Request<Body>,
) -> Result<(Response<Incoming>, Sender), DialFailure> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| dial::hyper_failure(&e, Phase::Request))?;
    tokio::spawn(async move {
        // Errors surface through the response and its body.
        let _ = conn.await;
    });
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| dial::hyper_failure(&e, Phase::ResponseHead))?;
    Ok((resp, sender))
}

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

fn set_endpoint(h: &mut HeaderMap, endpoint: i64) {
    h.insert(ENDPOINT_HEADER, HeaderValue::from(endpoint));
}

fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|n| match n {}).boxed()
}

fn text(status: StatusCode, error: &str, message: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("{message}\n")))
        .map_err(|n| match n {})
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.extensions_mut().insert(outcome_of(status));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(error) {
        h.insert(ERROR_HEADER, v);
    }
    resp
}

/// The request outcome of an answer the gateway made itself, by its status.
fn outcome_of(status: StatusCode) -> GatewayOutcome {
    match status {
        StatusCode::PROXY_AUTHENTICATION_REQUIRED => GatewayOutcome::Denied,
        StatusCode::BAD_GATEWAY => GatewayOutcome::UpstreamFailed,
        StatusCode::SERVICE_UNAVAILABLE => GatewayOutcome::Exhausted,
        StatusCode::INTERNAL_SERVER_ERROR => GatewayOutcome::Internal,
        // 400, 408, 413: the request itself was wrong.
        _ => GatewayOutcome::BadRequest,
    }
}

fn upstream_error(e: UpstreamError) -> Response<Body> {
    match e {
        UpstreamError::Exhausted { pool, retry_after } => {
            let mut resp = text(
                StatusCode::SERVICE_UNAVAILABLE,
                "pool_exhausted",
                &format!("proxypool gateway: pool {pool:?} has no endpoint available"),
            );
            // Whole seconds, rounded up, at least 1: "0" would invite a busy loop.
            let secs = retry_after
                .map(|d| d.as_millis().div_ceil(1000).max(1) as u64)
                .unwrap_or(1);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            resp
        }
        UpstreamError::UnknownPool(p) => text(
            StatusCode::BAD_REQUEST,
            "unknown_pool",
            &format!("proxypool gateway: unknown pool {p:?}"),
        ),
        UpstreamError::AllFailed {
            last,
            endpoint,
            tried,
        } => {
            let mut resp = text(
                StatusCode::BAD_GATEWAY,
                last.reason.as_str(),
                &format!(
                    "proxypool gateway: {tried} upstream(s) failed; last: {} at {}",
                    last.reason, last.phase
                ),
            );
            set_endpoint(resp.headers_mut(), endpoint);
            resp
        }
        e @ (UpstreamError::Internal(_) | UpstreamError::UnusableUrl { .. }) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &format!("proxypool gateway: {e}"),
        ),
    }
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
    fn destinations_from_request_targets() {
        let u: Uri = "http://Example.com/x".parse().unwrap();
        assert_eq!(destination(&u, 80), Some(Dest::new("example.com", 80)));
        let u: Uri = "[::1]:8443".parse().unwrap();
        assert_eq!(destination(&u, 443), Some(Dest::new("::1", 8443)));
        let u: Uri = "/relative".parse().unwrap();
        assert_eq!(destination(&u, 80), None);
    }

    #[test]
    fn gateway_answers_carry_their_outcome() {
        use UpstreamError as E;
        let failed = E::AllFailed {
            last: DialFailure::new(Reason::ConnectRefused, Phase::Connect, "refused"),
            endpoint: 1,
            tried: 1,
        };
        let cases = [
            (upstream_error(failed), GatewayOutcome::UpstreamFailed),
            (
                upstream_error(E::Exhausted {
                    pool: "p".into(),
                    retry_after: None,
                }),
                GatewayOutcome::Exhausted,
            ),
            (
                upstream_error(E::UnknownPool("x".into())),
                GatewayOutcome::BadRequest,
            ),
            (
                text(StatusCode::PROXY_AUTHENTICATION_REQUIRED, "a", "b"),
                GatewayOutcome::Denied,
            ),
            (
                text(StatusCode::PAYLOAD_TOO_LARGE, "a", "b"),
                GatewayOutcome::BadRequest,
            ),
            (
                text(StatusCode::REQUEST_TIMEOUT, "a", "b"),
                GatewayOutcome::BadRequest,
            ),
        ];
        for (resp, want) in cases {
            assert_eq!(
                resp.extensions().get::<GatewayOutcome>(),
                Some(&want),
                "{}",
                resp.status()
            );
        }
        // Never on the wire: an extension, not a header.
        assert!(Response::new(empty())
            .extensions()
            .get::<GatewayOutcome>()
            .is_none());
    }

    #[test]
    fn empty_pool_retry_after_rounds_up_to_whole_seconds() {
        let r = upstream_error(UpstreamError::Exhausted {
            pool: "p".into(),
            retry_after: Some(std::time::Duration::from_millis(1_200)),
        });
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let r = upstream_error(UpstreamError::Exhausted {
            pool: "p".into(),
            retry_after: Some(std::time::Duration::ZERO),
        });
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
