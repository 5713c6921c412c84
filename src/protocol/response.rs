//! Responses: a success's payload, or an error with its code.

use bytes::{BufMut, BytesMut};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::{DaemonRow, EndpointView, Grant, PoolStatus, ProbeReport, TargetCleared};
use crate::endpoint::EndpointId;
use crate::health::blame::Blame;
use crate::health::State;

/// Protocol error codes (docs/reference.md, "Errors").
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
    /// The pool has endpoints, none available now (`retry_after_ms` when a cooldown
    /// ends: the soonest).
    PoolExhausted,
    /// The pool has no endpoint at all (or none of the schemes asked for): waiting will
    /// not help.
    PoolEmpty,
    /// The destination is down: every endpoint that tried failed to reach it
    /// (`retry_after_ms`: until its trial).
    DestinationDown,
    /// Every endpoint that fits was used for the destination too recently (the pool's
    /// pacing; `retry_after_ms`: until the soonest is ready).
    Paced,
    /// The token's role may not send this op (a lease-role token asking for an operator
    /// op); nothing changed.
    Forbidden,
    /// Line over 64 KiB.
    TooLarge,
    /// A trial's report after its claim lapsed and the trial was claimed again (by another
    /// daemon of a fleet): it changed nothing.
    StaleClaim,
    /// The store (PostgreSQL) cannot be reached: nothing was written; try again.
    StoreUnavailable,
    /// Server-side failure (nothing was acknowledged).
    Internal,
}

impl ErrorCode {
    /// The code as written on the wire (and in the gateway's `X-Proxypool-Error`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::UnknownPool => "unknown_pool",
            ErrorCode::UnknownLease => "unknown_lease",
            ErrorCode::LeaseExpired => "lease_expired",
            ErrorCode::PoolExhausted => "pool_exhausted",
            ErrorCode::PoolEmpty => "pool_empty",
            ErrorCode::DestinationDown => "destination_down",
            ErrorCode::Paced => "paced",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::StaleClaim => "stale_claim",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// The error object of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    /// Human message (never a password).
    pub message: String,
    /// Present only when the error says when to try again: the milliseconds until then
    /// (`pool_exhausted`: until the soonest cooldown ends). The daemon leaves it out when
    /// no time is known; a `null` from a peer reads as `Some(None)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub retry_after_ms: Option<Option<u64>>,
}

impl ErrorBody {
    /// An error without `retry_after_ms`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            retry_after_ms: None,
        }
    }

    /// The same error, saying when to try again (`None`: not known, sent as null).
    pub fn retry_after_ms(self, ms: Option<u64>) -> Self {
        ErrorBody {
            retry_after_ms: Some(ms),
            ..self
        }
    }
}

/// The payload of a successful response. Variants are told apart by their fields when
/// read back, so `Empty` comes last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Payload {
    Lease(Grant),
    /// `report`, `disable`, `enable`.
    State {
        /// Endpoint id, for operator ops.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<EndpointId>,
        /// New state.
        state: State,
        /// `report` of a failure: whom it counted against (`endpoint`, `pair`, `target`,
        /// `pending`; docs/blame.md).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blame: Option<Blame>,
    },
    Status {
        /// Per pool.
        pools: Vec<PoolStatus>,
        /// The database the daemon serves (a path; never a password), so that a client
        /// knows which one it read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        database: Option<String>,
        /// A fleet's daemons as they registered in the database (PostgreSQL only), live
        /// ones first.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        daemons: Option<Vec<DaemonRow>>,
        /// A fleet's database: `up`, or `unavailable` (the answer is what this daemon's
        /// memory holds, the daemons as last read).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        store: Option<String>,
    },
    Endpoints {
        endpoints: Vec<EndpointView>,
        /// `unavailable` when a fleet's database is away: the endpoints are what this
        /// daemon's memory holds (no label, source or times).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        store: Option<String>,
    },
    /// `add`.
    Added {
        /// New ids.
        ids: Vec<EndpointId>,
        /// `import` with `skip_existing`: the endpoints that were there already.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        skipped: Option<u64>,
    },
    Probes {
        /// One result per endpoint, by id.
        results: Vec<ProbeReport>,
    },
    Ping {
        /// Server version.
        version: String,
    },
    /// `enable` of a target: the pools that knew it.
    Cleared {
        cleared: Vec<TargetCleared>,
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
    /// The error's `retry_after_ms`, also at top level for convenience.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub retry_after_ms: Option<Option<u64>>,
    /// Payload fields, flattened.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub body: Option<Payload>,
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
    /// The error's `retry_after_ms`, also at top level for convenience.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    retry_after_ms: Option<Option<u64>>,
    /// Payload fields, flattened.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    body: Option<Payload>,
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
    pub fn ok(id: Option<Value>, body: Payload) -> Self {
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
        Response::failure(id, ErrorBody::new(code, message))
    }

    /// A failure; its `retry_after_ms`, if any, is repeated at the top level.
    pub fn failure(id: Option<Value>, error: ErrorBody) -> Self {
        Response {
            ok: false,
            id,
            retry_after_ms: error.retry_after_ms,
            error: Some(error),
            body: None,
        }
    }

    /// The payload of a success, or the error of a failure.
    pub fn into_result(self) -> Result<Payload, ErrorBody> {
        match (self.ok, self.error, self.body) {
            (true, _, Some(body)) => Ok(body),
            (true, _, None) => Ok(Payload::Empty {}),
            (false, Some(e), _) => Err(e),
            (false, None, _) => Err(ErrorBody::new(
                ErrorCode::Internal,
                "failed response without an error",
            )),
        }
    }

    /// The serialized object, without the newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| UNSERIALIZABLE.to_string())
    }

    /// Append the serialized line, newline included, to `out` (a connection's write
    /// buffer: no string of its own per response).
    pub fn write_line(&self, out: &mut BytesMut) {
        let start = out.len();
        if serde_json::to_writer((&mut *out).writer(), self).is_err() {
            out.truncate(start);
            out.extend_from_slice(UNSERIALIZABLE.as_bytes());
        }
        out.put_u8(b'\n');
    }

    /// The serialized line, newline included.
    pub fn to_line(&self) -> String {
        let mut s = self.to_json();
        s.push('\n');
        s
    }
}

const UNSERIALIZABLE: &str =
    r#"{"ok":false,"error":{"code":"internal","message":"unserializable response"}}"#;

// A field that is present reads as `Some`, even when it is null: `retry_after_ms: null`
// means "no cooldown deadline", not "no value".
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}
