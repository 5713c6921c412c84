//! The lease socket protocol: one JSON object per line (SPEC §7).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::endpoint::EndpointId;
use crate::health::State;
use crate::pool::{Grant, PoolStatus};
use crate::store::EndpointView;

pub use crate::limits::{MAX_DURATION, MAX_LINE};

/// Every op the server knows.
pub const OPS: &[&str] = &[
    "lease",
    "report",
    "release",
    "status",
    "endpoints",
    "probe",
    "import",
    "disable",
    "enable",
    "add",
    "remove",
    "edit",
    "ping",
];

/// A duration given as a humantime string (`"90s"`) or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dur(pub Duration);

// Sent as seconds, which every reader of the protocol accepts.
impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let d = match Value::deserialize(d)? {
            // Also what a `Retry-After` header holds: "120" or an HTTP date, passed on as is.
            Value::String(s) => humantime::parse_duration(&s)
                .ok()
                .or_else(|| crate::retry_after::parse_retry_after(&s, std::time::SystemTime::now()))
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "invalid duration {s:?}: write e.g. \"90s\", a number of seconds, or an HTTP date"
                    ))
                })?,
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 && f <= MAX_DURATION.as_secs_f64() => {
                    Duration::from_secs_f64(f)
                }
                _ => {
                    return Err(serde::de::Error::custom(format!(
                        "invalid duration {n}: expected seconds >= 0"
                    )))
                }
            },
            other => {
                return Err(serde::de::Error::custom(format!(
                    "invalid duration {other}: expected a string like \"60s\" or a number of seconds"
                )))
            }
        };
        if d > MAX_DURATION {
            return Err(serde::de::Error::custom(format!(
                "duration {} is too long (at most 365 days)",
                humantime::format_duration(d)
            )));
        }
        Ok(Dur(d))
    }
}

/// `duration_ms`: a finite number of milliseconds, at least 0 and at most MAX_DURATION.
fn duration_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match Option::<f64>::deserialize(d)? {
        Some(v) if !(v.is_finite() && v >= 0.0 && v <= MAX_DURATION.as_millis() as f64) => {
            Err(serde::de::Error::custom(format!(
                "invalid duration_ms {v}: expected milliseconds >= 0"
            )))
        }
        v => Ok(v),
    }
}

/// A report's `retry_after`. It comes from a header a remote server chose, so a bad value
/// must not cost the report: far values are clamped (the policy's max bounds them again)
/// and an unparsable one is kept only to be noted in the event's detail.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryAfter {
    /// A usable delay, at most `MAX_DURATION`.
    After(Duration),
    /// What was sent, shortened; ignored by the policy.
    Unparsable(String),
}

impl RetryAfter {
    /// The delay, if there is one.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            RetryAfter::After(d) => Some(*d),
            RetryAfter::Unparsable(_) => None,
        }
    }

    fn from_value(v: Value) -> Self {
        let clamp = |d: Duration| RetryAfter::After(d.min(MAX_DURATION));
        match v {
            Value::String(s) => humantime::parse_duration(s.trim())
                .ok()
                .or_else(|| crate::retry_after::parse_retry_after(&s, std::time::SystemTime::now()))
                .map(clamp)
                .unwrap_or_else(|| RetryAfter::Unparsable(shorten(&s))),
            Value::Number(n) => match n.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 => {
                    clamp(Duration::from_secs_f64(f.min(MAX_DURATION.as_secs_f64())))
                }
                _ => RetryAfter::Unparsable(n.to_string()),
            },
            other => RetryAfter::Unparsable(shorten(&other.to_string())),
        }
    }
}

fn shorten(s: &str) -> String {
    s.chars().take(64).collect()
}

impl Serialize for RetryAfter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RetryAfter::After(d) => s.serialize_f64(d.as_secs_f64()),
            RetryAfter::Unparsable(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for RetryAfter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(RetryAfter::from_value(Value::deserialize(d)?))
    }
}

/// An endpoint named by id or URL.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum EndpointRef {
    /// Database id.
    Id(EndpointId),
    /// Proxy URL (credentials optional; identity includes the user).
    Url(String),
}

impl EndpointRef {
    /// As an operator would type it.
    pub fn as_arg(&self) -> String {
        match self {
            EndpointRef::Id(i) => i.to_string(),
            EndpointRef::Url(u) => u.clone(),
        }
    }
}

/// Outcome of a leased use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportOutcome {
    /// It worked.
    Success,
    /// It failed.
    Failure,
}

/// A request, tagged by `op`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Take an endpoint.
    Lease {
        /// Pool (default `default`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        /// Lease lifetime (default 60s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl: Option<Dur>,
        /// How long to wait for an endpoint (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait: Option<Dur>,
        /// Sticky key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        /// Host the lease is for: its banned pairs are skipped (SPEC §13).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        destination: Option<String>,
        /// Only endpoints of these schemes (SPEC §15).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schemes: Option<Vec<String>>,
    },
    /// Say how a lease (or the endpoint bound to a session) went.
    Report {
        /// Lease id; or `pool` (default `default`) and `session` instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease: Option<String>,
        /// Pool of `session`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        /// Report on the endpoint bound to this sticky session (SPEC §13).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        /// Host the use was for: scopes the failure (SPEC §13).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        destination: Option<String>,
        /// success | failure.
        outcome: ReportOutcome,
        /// Required for failures.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Optional phase.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
        /// HTTP status seen.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// Retry-After seen (seconds, humantime or an HTTP date).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<RetryAfter>,
        /// Free text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// How long the use took, in milliseconds (feeds the latency estimate).
        #[serde(
            default,
            deserialize_with = "duration_ms",
            skip_serializing_if = "Option::is_none"
        )]
        duration_ms: Option<f64>,
    },
    /// Give a lease back without an outcome.
    Release {
        /// Lease id.
        lease: String,
    },
    /// Counts by state.
    Status {
        /// One pool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
    },
    /// List endpoints (passwords redacted).
    Endpoints {
        /// Pool filter.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        /// State filter.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        /// Only this endpoint (`show` asks for one endpoint's statistics).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<EndpointId>,
    },
    /// Operator disable.
    Disable {
        endpoint: EndpointRef,
        /// Operator's text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Operator enable.
    Enable {
        endpoint: EndpointRef,
        /// Straight to available.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        now: Option<bool>,
        /// Clear only the endpoint's pair for this destination (SPEC §13).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        destination: Option<String>,
    },
    /// Operator add (used by the CLI while a daemon runs).
    Add {
        urls: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
        /// Who adds them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
    },
    /// Operator add of a large batch from a file the CLI wrote (one URL a line).
    Import {
        /// Absolute path of the file.
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// Operator remove (used by the CLI while a daemon runs).
    Remove { endpoints: Vec<EndpointRef> },
    /// Probe endpoints now (used by the CLI while a daemon runs).
    Probe {
        /// Endpoints; empty with `all` or `pool` = every endpoint (of the pool).
        #[serde(default)]
        endpoints: Vec<EndpointRef>,
        /// Only this pool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        /// Every endpoint.
        #[serde(default)]
        all: bool,
        /// Parallel probes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        concurrency: Option<usize>,
    },
    /// Operator edit: a new URL (same pool) and/or label, keeping id, state and history.
    Edit {
        endpoint: EndpointRef,
        /// Replacement URL.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// New label; "" clears it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// Liveness.
    Ping,
}

/// Protocol error codes (SPEC §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed or invalid request.
    BadRequest,
    /// `op` not known.
    UnknownOp,
    /// Pool not known.
    UnknownPool,
    /// Lease not known.
    UnknownLease,
    LeaseExpired,
    /// Nothing to lease.
    PoolExhausted,
    /// Line over 64 KiB.
    TooLarge,
    /// Server-side failure (nothing was acknowledged).
    Internal,
}

/// The error object of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    /// Human message (never a password).
    pub message: String,
    /// For `pool_exhausted`: ms until the soonest cooldown ends, or null.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub retry_after_ms: Option<Option<u64>>,
}

/// The payload of a successful response. Variants are told apart by their fields when
/// read back, so `Empty` comes last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Body {
    Lease(Grant),
    /// `report`, `disable`, `enable`.
    State {
        /// Endpoint id, for operator ops.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<EndpointId>,
        /// New state.
        state: State,
    },
    Status {
        /// Per pool.
        pools: Vec<PoolStatus>,
    },
    Endpoints {
        endpoints: Vec<EndpointView>,
    },
    /// `add`.
    Added {
        /// New ids.
        ids: Vec<EndpointId>,
    },
    Probes {
        /// One result per endpoint, by id.
        results: Vec<crate::probe_report::ProbeReport>,
    },
    Ping {
        /// Server version.
        version: String,
    },
    /// `release`, `remove`.
    Empty {},
}

/// A response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "ResponseWire")]
pub struct Response {
    pub ok: bool,
    /// Echo of the request's `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// Set when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// For `pool_exhausted`, also at top level for convenience.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub retry_after_ms: Option<Option<u64>>,
    /// Payload fields, flattened.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub body: Option<Body>,
}

// What a response line reads as before the payload is settled: a failure's fields would
// otherwise also read as an empty success payload.
#[derive(Deserialize)]
struct ResponseWire {
    ok: bool,
    /// Echo of the request's `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<Value>,
    /// Set when `ok` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
    /// For `pool_exhausted`, also at top level for convenience.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    retry_after_ms: Option<Option<u64>>,
    /// Payload fields, flattened.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    body: Option<Body>,
}

impl From<ResponseWire> for Response {
    fn from(w: ResponseWire) -> Self {
        Response {
            ok: w.ok,
            id: w.id,
            retry_after_ms: w.retry_after_ms,
            body: if w.ok { w.body } else { None },
            error: w.error,
        }
    }
}

impl Response {
    /// A success.
    pub fn ok(id: Option<Value>, body: Body) -> Self {
        Response {
            ok: true,
            id,
            error: None,
            retry_after_ms: None,
            body: Some(body),
        }
    }

    /// A failure.
    pub fn err(id: Option<Value>, code: ErrorCode, message: impl Into<String>) -> Self {
        Response {
            ok: false,
            id,
            error: Some(ErrorBody {
                code,
                message: message.into(),
                retry_after_ms: None,
            }),
            retry_after_ms: None,
            body: None,
        }
    }

    /// The payload of a success, or the error of a failure.
    pub fn into_result(self) -> Result<Body, ErrorBody> {
        match (self.ok, self.error, self.body) {
            (true, _, Some(body)) => Ok(body),
            (true, _, None) => Ok(Body::Empty {}),
            (false, Some(e), _) => Err(e),
            (false, None, _) => Err(ErrorBody {
                code: ErrorCode::Internal,
                message: "failed response without an error".into(),
                retry_after_ms: None,
            }),
        }
    }

    /// The serialized object, without the newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| {
            r#"{"ok":false,"error":{"code":"internal","message":"unserializable response"}}"#
                .to_string()
        })
    }

    /// The serialized line, newline included.
    pub fn to_line(&self) -> String {
        let mut s = self.to_json();
        s.push('\n');
        s
    }
}

// A field that is present reads as `Some`, even when it is null: `retry_after_ms: null`
// means "no cooldown deadline", not "no value".
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

/// Parse one line: the request and its `id`, or an error response.
pub fn parse_line(line: &str) -> Result<(Option<Value>, Request, Option<String>), Box<Response>> {
    let mut v: Value = serde_json::from_str(line).map_err(|e| {
        Box::new(Response::err(
            None,
            ErrorCode::BadRequest,
            format!("invalid JSON: {e}"),
        ))
    })?;
    let Some(obj) = v.as_object_mut() else {
        return Err(Box::new(Response::err(
            None,
            ErrorCode::BadRequest,
            "a request is a JSON object",
        )));
    };
    let id = obj.remove("id");
    let token = obj.remove("token");
    let token = match token {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            return Err(Box::new(Response::err(
                id,
                ErrorCode::BadRequest,
                "token must be a string",
            )))
        }
    };
    match obj.get("op") {
        None => {
            return Err(Box::new(Response::err(
                id,
                ErrorCode::BadRequest,
                "missing \"op\"",
            )))
        }
        Some(Value::String(op)) if !OPS.contains(&op.as_str()) => {
            return Err(Box::new(Response::err(
                id,
                ErrorCode::UnknownOp,
                format!("unknown op {op:?}; known: {}", OPS.join(", ")),
            )))
        }
        Some(Value::String(_)) => {}
        Some(_) => {
            return Err(Box::new(Response::err(
                id,
                ErrorCode::BadRequest,
                "\"op\" must be a string",
            )))
        }
    }
    let req: Request = serde_json::from_value(v).map_err(|e| {
        Box::new(Response::err(
            id.clone(),
            ErrorCode::BadRequest,
            e.to_string(),
        ))
    })?;
    Ok((id, req, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_classifies() {
        let (id, req, _) = parse_line(r#"{"op":"lease","id":7,"ttl":"30s","wait":1.5}"#).unwrap();
        assert_eq!(id, Some(Value::from(7)));
        assert_eq!(
            req,
            Request::Lease {
                pool: None,
                ttl: Some(Dur(Duration::from_secs(30))),
                wait: Some(Dur(Duration::from_millis(1500))),
                session: None,
                destination: None,
                schemes: None,
            }
        );
        let (_, req, _) =
            parse_line(r#"{"op":"report","lease":"x","outcome":"failure","retry_after":"120"}"#)
                .unwrap();
        match req {
            Request::Report { retry_after, .. } => {
                assert_eq!(
                    retry_after,
                    Some(RetryAfter::After(Duration::from_secs(120)))
                )
            }
            other => panic!("{other:?}"),
        }
        let cases = [
            ("nope", ErrorCode::BadRequest),
            ("[1]", ErrorCode::BadRequest),
            (r#"{"id":1}"#, ErrorCode::BadRequest),
            (r#"{"op":"fly"}"#, ErrorCode::UnknownOp),
            (r#"{"op":"lease","ttl":"soon"}"#, ErrorCode::BadRequest),
            (r#"{"op":"lease","bogus":1}"#, ErrorCode::BadRequest),
            (r#"{"op":"report","lease":"x"}"#, ErrorCode::BadRequest),
            (
                r#"{"op":"report","lease":"x","outcome":"success","duration_ms":-1}"#,
                ErrorCode::BadRequest,
            ),
            (r#"{"op":"lease","schemes":"http"}"#, ErrorCode::BadRequest),
        ];
        for (line, code) in cases {
            let err = parse_line(line).unwrap_err();
            assert_eq!(err.error.as_ref().unwrap().code, code, "{line}");
        }
    }

    #[test]
    fn response_shapes() {
        let r = Response::ok(
            Some(Value::from("a")),
            Body::Ping {
                version: "1".into(),
            },
        );
        assert_eq!(
            r.to_line(),
            "{\"ok\":true,\"id\":\"a\",\"version\":\"1\"}\n"
        );
        let r = Response::ok(None, Body::Empty {});
        assert_eq!(r.to_line(), "{\"ok\":true}\n");
    }

    #[test]
    fn requests_round_trip() {
        let reqs = [
            Request::Lease {
                pool: Some("p".into()),
                ttl: Some(Dur(Duration::from_millis(1500))),
                wait: None,
                session: Some("s".into()),
                destination: Some("shop.example".into()),
                schemes: Some(vec!["http".into(), "https".into()]),
            },
            Request::Report {
                lease: None,
                pool: Some("p".into()),
                session: Some("s".into()),
                destination: Some("shop.example".into()),
                duration_ms: Some(1250.0),
                outcome: ReportOutcome::Failure,
                reason: Some("destination_status".into()),
                phase: Some("response_head".into()),
                status: Some(403),
                retry_after: None,
                detail: None,
            },
            Request::Report {
                lease: Some("l".into()),
                pool: None,
                session: None,
                destination: None,
                outcome: ReportOutcome::Failure,
                reason: Some("timeout".into()),
                phase: None,
                status: Some(503),
                retry_after: Some(RetryAfter::After(Duration::from_secs(120))),
                detail: None,
                duration_ms: Some(120.5),
            },
            Request::Enable {
                endpoint: EndpointRef::Id(3),
                now: Some(true),
                destination: None,
            },
            Request::Enable {
                endpoint: EndpointRef::Id(3),
                now: None,
                destination: Some("shop.example".into()),
            },
            Request::Remove {
                endpoints: vec![EndpointRef::Id(1), EndpointRef::Url("http://h:1".into())],
            },
            Request::Probe {
                endpoints: vec![],
                pool: None,
                all: true,
                concurrency: Some(4),
            },
            Request::Edit {
                endpoint: EndpointRef::Id(9),
                url: Some("socks5://u:new@h:1".into()),
                label: None,
            },
            Request::Ping,
        ];
        for req in reqs {
            let line = serde_json::to_string(&req).unwrap();
            let (_, back, _) = parse_line(&line).unwrap();
            assert_eq!(back, req, "{line}");
        }
        assert_eq!(
            serde_json::to_string(&Request::Release { lease: "x".into() }).unwrap(),
            r#"{"op":"release","lease":"x"}"#
        );
    }

    #[test]
    fn responses_round_trip() {
        let mut exhausted = Response::err(Some(Value::from(1)), ErrorCode::PoolExhausted, "none");
        exhausted.retry_after_ms = Some(None);
        exhausted.error.as_mut().unwrap().retry_after_ms = Some(None);
        let cases = [
            exhausted,
            Response::ok(None, Body::Added { ids: vec![1, 2] }),
            Response::ok(
                None,
                Body::Lease(Grant {
                    lease: "ab-1".into(),
                    proxy: "http://h:1".into(),
                    endpoint: 1,
                    trial: true,
                    expires_in_ms: 30_000,
                    scope: Some("destination".into()),
                }),
            ),
            Response::ok(
                None,
                Body::State {
                    endpoint: Some(4),
                    state: State::Cooling,
                },
            ),
            Response::ok(
                None,
                Body::Ping {
                    version: "1".into(),
                },
            ),
            Response::ok(None, Body::Empty {}),
        ];
        for r in cases {
            let line = r.to_json();
            let back: Response = serde_json::from_str(&line).unwrap();
            assert_eq!(back, r, "{line}");
            assert_eq!(back.to_json(), line);
        }
        let err = Response::err(None, ErrorCode::Internal, "disk full");
        let back: Response = serde_json::from_str(&err.to_json()).unwrap();
        assert_eq!(back.into_result().unwrap_err().code, ErrorCode::Internal);
    }
}
