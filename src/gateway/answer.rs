//! The gateway's own HTTP answers (errors, the endpoint header); shared by CONNECT and
//! absolute-form.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

use super::idle::Body;
use super::upstream::UpstreamError;
use crate::endpoint::EndpointId;
use crate::metrics::GatewayOutcome;
use crate::pool::engine::EngineError;
use crate::pool::PoolError;
use crate::pool::Refusal;
use crate::protocol::ErrorCode;

// Names made once: a `&str` name outside the standard set is copied into every map.
/// The response header naming the upstream endpoint id.
pub const ENDPOINT_HEADER: HeaderName = HeaderName::from_static("x-proxypool-endpoint");
/// The response header naming why the gateway itself answered with an error.
pub const ERROR_HEADER: HeaderName = HeaderName::from_static("x-proxypool-error");
/// The response header naming the pool that served the request (its `fallback`, maybe).
pub const POOL_HEADER: HeaderName = HeaderName::from_static("x-proxypool-pool");

pub(super) fn set_endpoint(h: &mut HeaderMap, endpoint: i64) {
    h.insert(ENDPOINT_HEADER, HeaderValue::from(endpoint));
}

/// The endpoint and the pool that served a request.
pub(super) fn set_upstream(h: &mut HeaderMap, endpoint: i64, pool: &str) {
    set_endpoint(h, endpoint);
    if let Ok(v) = HeaderValue::from_str(pool) {
        h.insert(POOL_HEADER, v);
    }
}

pub(super) fn empty() -> Body {
    Empty::<Bytes>::new().map_err(|n| match n {}).boxed_unsync()
}

/// One of the gateway's own answers: every body has the same form,
/// `proxypool gateway: <error>: <message>`, the error being `X-Proxypool-Error`'s value.
pub(super) fn text(status: StatusCode, error: &str, message: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!(
        "proxypool gateway: {error}: {message}\n"
    )))
    .map_err(|n| match n {})
    .boxed_unsync();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.extensions_mut().insert(outcome_of(status, error));
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

/// What `proxypool_gateway_requests_total` counts an answer as: answers the gateway made
/// itself carry their outcome; anything else came through an upstream (a destination's
/// own 4xx/5xx included).
pub(super) fn outcome<B>(resp: &Response<B>) -> GatewayOutcome {
    resp.extensions()
        .get::<GatewayOutcome>()
        .copied()
        .unwrap_or(GatewayOutcome::Ok)
}

/// The request outcome of an answer the gateway made itself, by its status (and, for a
/// 502, its error code): the one mapping (a SOCKS5 client's failure is counted by the
/// answer an HTTP client would get).
fn outcome_of(status: StatusCode, error: &str) -> GatewayOutcome {
    match status {
        StatusCode::BAD_GATEWAY if error == DESTINATION_DOWN || error == DESTINATION_TLS => {
            GatewayOutcome::DestinationDown
        }
        StatusCode::SERVICE_UNAVAILABLE if error == LOCAL_RESOURCES => {
            GatewayOutcome::LocalResources
        }
        StatusCode::PROXY_AUTHENTICATION_REQUIRED => GatewayOutcome::Denied,
        StatusCode::BAD_GATEWAY => GatewayOutcome::UpstreamFailed,
        StatusCode::SERVICE_UNAVAILABLE if error == PACED => GatewayOutcome::Paced,
        StatusCode::SERVICE_UNAVAILABLE if error == STORE_UNAVAILABLE => GatewayOutcome::Internal,
        StatusCode::SERVICE_UNAVAILABLE => GatewayOutcome::Exhausted,
        StatusCode::INTERNAL_SERVER_ERROR => GatewayOutcome::Internal,
        // 400, 408, 413: the request itself was wrong.
        _ => GatewayOutcome::BadRequest,
    }
}

// The codes the socket also answers with come from the protocol's one mapping.
const DESTINATION_DOWN: &str = ErrorCode::DestinationDown.as_str();
const PACED: &str = ErrorCode::Paced.as_str();
const STORE_UNAVAILABLE: &str = ErrorCode::StoreUnavailable.as_str();
/// `X-Proxypool-Error` of a destination that is down because its own certificate failed
/// verification through every upstream that tried it (intercepted HTTPS). The gateway's
/// word for a `destination_down` the socket answers as such: only the gateway verifies.
const DESTINATION_TLS: &str = "destination_tls";
/// `X-Proxypool-Error` of an answer for want of descriptors, memory or local ports (the
/// gateway's own: the socket has no dial to run short).
pub(super) const LOCAL_RESOURCES: &str = "local_resources";

/// The status an HTTP client gets when no upstream could serve its request.
fn status_of(e: &UpstreamError) -> StatusCode {
    match e {
        UpstreamError::Refused { error, .. } => match Refusal::from(error).code {
            ErrorCode::PoolExhausted
            | ErrorCode::PoolEmpty
            | ErrorCode::Paced
            | ErrorCode::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::UnknownPool | ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::DestinationDown => StatusCode::BAD_GATEWAY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        },
        UpstreamError::Local(_) => StatusCode::SERVICE_UNAVAILABLE,
        UpstreamError::AllFailed { .. } => StatusCode::BAD_GATEWAY,
        UpstreamError::UnusableUrl { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// What `proxypool_gateway_requests_total` counts a request that ended in `e`, on any front.
pub(super) fn error_outcome(e: &UpstreamError) -> GatewayOutcome {
    let error = match e {
        UpstreamError::Refused { error, .. } if down_for_certificate(error) => DESTINATION_TLS,
        UpstreamError::Refused { error, .. } => Refusal::from(error).code.as_str(),
        UpstreamError::Local(_) => LOCAL_RESOURCES,
        _ => "",
    };
    outcome_of(status_of(e), error)
}

/// A target down because its certificate failed verification through every upstream.
fn down_for_certificate(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Pool(PoolError::DestinationDown {
            certificate: true,
            ..
        })
    )
}

/// `Retry-After` in whole seconds, rounded up, at least 1: "0" would invite a busy loop.
fn retry_after_secs(d: std::time::Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

pub(super) fn upstream_error(e: UpstreamError) -> Response<Body> {
    let status = status_of(&e);
    let said = ErrorAnswer::of(e);
    let mut resp = text(status, said.code, &said.message);
    if let Some(secs) = said.retry_after_secs {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Some(endpoint) = said.endpoint {
        set_endpoint(resp.headers_mut(), endpoint);
    }
    resp
}

/// What an error answer says: its `X-Proxypool-Error` code, its text, when to come back
/// and which endpoint the last try went through.
struct ErrorAnswer {
    code: &'static str,
    message: String,
    retry_after_secs: Option<u64>,
    endpoint: Option<EndpointId>,
}

impl ErrorAnswer {
    fn new(code: &'static str, message: String) -> ErrorAnswer {
        ErrorAnswer {
            code,
            message,
            retry_after_secs: None,
            endpoint: None,
        }
    }

    /// `destination_down`: answered at once (`endpoint` none), or after this request's
    /// tries, naming the last upstream that failed.
    fn down(
        target: &str,
        retry_after: std::time::Duration,
        trial_out: bool,
        endpoint: Option<crate::endpoint::EndpointId>,
        certificate: bool,
    ) -> ErrorAnswer {
        let ms = retry_after.as_millis();
        let next = if trial_out {
            format!("its trial is under way: at the latest in {ms} ms the next request may be the trial")
        } else {
            format!("next try in {ms} ms")
        };
        let dialed = match endpoint {
            Some(e) => format!(
                "this request's tries failed to reach it too (the last through upstream {e})"
            ),
            None => "nothing was dialed".to_string(),
        };
        let (code, why) = if certificate {
            (
                DESTINATION_TLS,
                "its certificate failed verification through every upstream that tried it (the origin's own certificate is bad, not a proxy's)",
            )
        } else {
            (
                DESTINATION_DOWN,
                "every upstream that tried it failed to reach it",
            )
        };
        ErrorAnswer {
            retry_after_secs: Some(retry_after_secs(retry_after)),
            endpoint,
            ..ErrorAnswer::new(
                code,
                format!("destination {target} is down: {why}; {dialed} ({next})"),
            )
        }
    }

    fn of(e: UpstreamError) -> ErrorAnswer {
        match e {
            UpstreamError::Refused { error, endpoint } => ErrorAnswer::refused(error, endpoint),
            UpstreamError::AllFailed {
                last,
                endpoint,
                tried,
            } => ErrorAnswer {
                endpoint: Some(endpoint),
                ..ErrorAnswer::new(
                    last.reason.as_str(),
                    format!(
                        "{tried} upstream(s) failed; last: {} at {}",
                        last.reason, last.phase
                    ),
                )
            },
            UpstreamError::Local(why) => ErrorAnswer {
                // The failure is this machine's: a second later it may be over.
                retry_after_secs: Some(1),
                ..ErrorAnswer::new(
                    LOCAL_RESOURCES,
                    format!("out of local resources ({why}); the failure is this machine's, nothing was reported against an upstream"),
                )
            },
            e @ UpstreamError::UnusableUrl { .. } => {
                ErrorAnswer::new(ErrorCode::Internal.as_str(), e.to_string())
            }
        }
    }

    /// A refusal: the code and the time of the one mapping, in the gateway's words.
    fn refused(error: EngineError, endpoint: Option<EndpointId>) -> ErrorAnswer {
        let r = Refusal::from(&error);
        let message = match &error {
            EngineError::Pool(PoolError::DestinationDown {
                target,
                retry_after,
                trial_out,
                certificate,
                ..
            }) => {
                return ErrorAnswer::down(target, *retry_after, *trial_out, endpoint, *certificate)
            }
            EngineError::Pool(PoolError::Exhausted { pool, .. }) => {
                let when = match r.retry_after {
                    Some(d) => format!("the soonest cooldown ends in {} ms", d.as_millis()),
                    None => "none is cooling: waiting will not help".into(),
                };
                format!("pool {pool:?} has no endpoint available; {when}")
            }
            EngineError::Pool(PoolError::Paced { pool, host, .. }) => {
                let when = match r.retry_after {
                    Some(d) => format!("the soonest is ready in {} ms", d.as_millis()),
                    None => "one is ready when a use of it ends".to_string(),
                };
                format!("pool {pool:?}: every endpoint that fits was used for {host} too recently (pacing); {when}")
            }
            EngineError::Pool(PoolError::Empty { pool, .. }) => {
                format!("pool {pool:?} has no endpoints: waiting will not help")
            }
            e if r.code == ErrorCode::Internal => format!("internal error: {e}"),
            e => e.to_string(),
        };
        let retry_after_secs = match r.code {
            // Paced always says when: a second when no time is known.
            ErrorCode::Paced => Some(r.retry_after.map(retry_after_secs).unwrap_or(1)),
            // Only a deadline that exists: `Retry-After: 1` forever teaches a client to
            // hammer a pool that will not recover by itself.
            _ => r.retry_after.map(retry_after_secs),
        };
        ErrorAnswer {
            retry_after_secs,
            endpoint,
            ..ErrorAnswer::new(r.code.as_str(), message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dial::DialFailure;
    use crate::health::{Phase, Reason};

    fn exhausted(retry_after: Option<std::time::Duration>) -> UpstreamError {
        PoolError::Exhausted {
            pool: "p".into(),
            retry_after,
            filter: None,
        }
        .into()
    }

    fn down(target: &str, ms: u64, endpoint: Option<EndpointId>) -> UpstreamError {
        down_as(target, ms, endpoint, false)
    }

    fn down_as(
        target: &str,
        ms: u64,
        endpoint: Option<EndpointId>,
        certificate: bool,
    ) -> UpstreamError {
        let error = PoolError::DestinationDown {
            pool: "p".into(),
            target: target.into(),
            retry_after: std::time::Duration::from_millis(ms),
            trial_out: false,
            certificate,
        };
        UpstreamError::Refused {
            error: error.into(),
            endpoint,
        }
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
            (upstream_error(exhausted(None)), GatewayOutcome::Exhausted),
            (
                upstream_error(PoolError::UnknownPool("x".into()).into()),
                GatewayOutcome::BadRequest,
            ),
            (
                upstream_error(down("no-such-host.invalid:443", 1_500, None)),
                GatewayOutcome::DestinationDown,
            ),
            (
                text(StatusCode::PROXY_AUTHENTICATION_REQUIRED, "a", "b"),
                GatewayOutcome::Denied,
            ),
            (
                upstream_error(E::Local("Too many open files".into())),
                GatewayOutcome::LocalResources,
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
            let error = resp.headers()[ERROR_HEADER].to_str().unwrap().to_string();
            assert_eq!(outcome_of(resp.status(), &error), want);
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
    fn a_down_destination_is_a_502_that_says_so_and_when_to_come_back() {
        let r = upstream_error(down("shop.example:8443", 1_200, None));
        assert_eq!(r.status(), 502);
        assert_eq!(r.headers()[ERROR_HEADER], "destination_down");
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        assert!(
            r.headers().get(ENDPOINT_HEADER).is_none(),
            "no upstream was involved"
        );
        // After this request's own tries (a trial that failed, say): the last upstream.
        let r = upstream_error(down("shop.example:8443", 4_000, Some(7)));
        assert_eq!(r.status(), 502);
        assert_eq!(r.headers()[ENDPOINT_HEADER], "7");
        // Down because the origin's own certificate is bad: a code of its own, counted
        // as a destination that is down.
        let e = down_as("shop.example:443", 2_000, Some(3), true);
        assert_eq!(error_outcome(&e), GatewayOutcome::DestinationDown);
        let r = upstream_error(e);
        assert_eq!(r.status(), 502);
        assert_eq!(r.headers()[ERROR_HEADER], "destination_tls");
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        assert_eq!(outcome(&r), GatewayOutcome::DestinationDown);
    }

    #[test]
    fn retry_after_only_when_a_cooldown_ends_and_never_for_an_empty_pool() {
        let empty = UpstreamError::from(PoolError::Empty {
            pool: "p".into(),
            filter: None,
        });
        // (answer, X-Proxypool-Error, Retry-After)
        let cases = [
            (
                exhausted(Some(std::time::Duration::from_millis(2_500))),
                "pool_exhausted",
                Some("3"),
            ),
            (exhausted(None), "pool_exhausted", None),
            (empty, "pool_empty", None),
        ];
        for (e, error, retry) in cases {
            let shown = e.to_string();
            let r = upstream_error(e);
            assert_eq!(r.status(), 503, "{shown}");
            assert_eq!(r.headers()[ERROR_HEADER], error, "{shown}");
            let got = r
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap());
            assert_eq!(got, retry, "{shown}");
            assert_eq!(
                r.extensions().get::<GatewayOutcome>(),
                Some(&GatewayOutcome::Exhausted)
            );
        }
    }

    #[tokio::test]
    async fn every_answer_of_the_gateway_has_one_form() {
        let answers = [
            upstream_error(
                PoolError::Empty {
                    pool: "p".into(),
                    filter: None,
                }
                .into(),
            ),
            upstream_error(PoolError::UnknownPool("x".into()).into()),
            text(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "CONNECT needs host:port",
            ),
        ];
        for r in answers {
            let error = r.headers()[ERROR_HEADER].to_str().unwrap().to_string();
            let body = r.into_body().collect().await.unwrap().to_bytes();
            let body = String::from_utf8(body.to_vec()).unwrap();
            let prefix = format!("proxypool gateway: {error}: ");
            assert!(body.starts_with(&prefix), "{body:?}");
            assert!(
                !body[prefix.len()..].contains("proxypool gateway"),
                "{body:?}"
            );
            assert!(
                body.ends_with('\n') && body.lines().count() == 1,
                "{body:?}"
            );
        }
    }

    #[test]
    fn empty_pool_retry_after_rounds_up_to_whole_seconds() {
        let r = upstream_error(exhausted(Some(std::time::Duration::from_millis(1_200))));
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let r = upstream_error(exhausted(Some(std::time::Duration::ZERO)));
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
