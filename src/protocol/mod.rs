//! The lease socket protocol: one JSON object per line (docs/reference.md, "Lease socket
//! protocol").
//!
//! `request` holds one message per op, `response` the answers and their error codes,
//! `values` the field types several messages share, and one file per kind of answer
//! (`grant`, `pool_status`, `endpoint_view`, `probe_report`, `daemon_row`,
//! `target_cleared`). The protocol defines these answers and sits below the store and the
//! pool, which build them: nothing above this layer is serialized onto the socket. Every type serializes and
//! deserializes both ways: the daemon reads requests and writes responses, the CLI's
//! client does the reverse.

mod daemon_row;
mod endpoint_view;
mod grant;
mod pool_status;
mod probe_report;
mod request;
mod response;
mod target_cleared;
mod values;

use serde_json::Value;

pub use crate::limits::{MAX_DURATION, MAX_LINE};
pub use daemon_row::DaemonRow;
pub use endpoint_view::{EndpointView, SlowedView};
pub use grant::Grant;
pub use pool_status::{DownTargetView, ExitStatus, PaceStatus, PoolStatus, SuspectSubnet};
pub use probe_report::ProbeReport;
pub(crate) use request::with_ops;
pub use request::{
    AddMessage, DisableMessage, EditMessage, EnableMessage, EndpointsMessage, ImportMessage,
    LeaseMessage, PingMessage, ProbeMessage, ReleaseMessage, RemoveMessage, ReportMessage, Request,
    StatusMessage, OPS,
};
pub use response::{ErrorBody, ErrorCode, Payload, Response};
pub use target_cleared::TargetCleared;
pub use values::{Dur, EndpointRef, ReportOutcome, RetryAfter};

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
mod tests;
