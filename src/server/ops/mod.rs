//! One handler per op of the lease socket (docs/reference.md, "Lease socket protocol"),
//! each in its own file: it takes the op's message (`protocol`) and a `Context`, and
//! answers a payload or an `OpError`.
//!
//! A new op is a file here and its `mod` line (its arm in `route` comes from the
//! protocol's op list, `with_ops!`). What an op allows (the
//! Unix socket only, the role it needs) is an associated const of its `Op` impl, checked
//! once, in `run`.

mod add;
mod disable;
mod edit;
mod enable;
mod endpoints;
mod import;
mod lease;
mod ping;
mod probe;
mod release;
mod remove;
mod report;
mod status;

use std::future::Future;

use super::context::Context;
use super::error::OpError;
use crate::endpoint::EndpointId;
use crate::pool::PoolError;
use crate::protocol::{with_ops, EndpointRef, ErrorCode, Payload, Request};
use crate::server::token::Role;

pub use edit::edit_fields;

/// An op: how its message is answered, and who may send it.
pub(super) trait Op {
    /// Only accepted on the Unix socket (the op reads a file of the daemon's).
    const UNIX_ONLY: bool = false;

    /// The least role that may send it (docs/operators.md, "Tokens and roles"): every op
    /// is an operator's unless it says otherwise.
    const ROLE: Role = Role::Admin;

    /// Answer the message.
    fn answer(self, cx: &Context<'_>) -> impl Future<Output = Result<Payload, OpError>> + Send;
}

/// How the request arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    Unix,
    Tcp,
}

/// Who sent a request: how it arrived, and the role its token granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caller {
    pub(super) via: Transport,
    pub(super) role: Role,
}

/// The one place each op is routed to its handler: an arm per op of the protocol's list.
pub(super) async fn route(
    req: Request,
    caller: Caller,
    cx: &Context<'_>,
) -> Result<Payload, OpError> {
    macro_rules! arms {
        ($($variant:ident($message:ident) = $name:literal,)+) => {
            match req {
                $(Request::$variant(m) => run($name, m, caller, cx).await,)+
            }
        };
    }
    with_ops!(arms)
}

/// Check what the op allows, then answer it.
async fn run<O: Op>(
    op: &str,
    msg: O,
    caller: Caller,
    cx: &Context<'_>,
) -> Result<Payload, OpError> {
    if !caller.role.allows(O::ROLE) {
        return Err(OpError::new(
            ErrorCode::Forbidden,
            format!(
                "{op} needs the {} role; this token has the {} role (nothing changed)",
                O::ROLE,
                caller.role
            ),
        ));
    }
    if O::UNIX_ONLY && caller.via != Transport::Unix {
        return Err(OpError::bad(format!(
            "{op} is only accepted on the Unix socket"
        )));
    }
    msg.answer(cx).await
}

/// A pool the request names must exist.
fn check_pool(cx: &Context<'_>, pool: Option<&str>) -> Result<(), OpError> {
    match pool {
        Some(p) if !cx.engine.has_pool(p) => Err(PoolError::UnknownPool(p.to_string()).into()),
        _ => Ok(()),
    }
}

/// The endpoint `r` names, of `pool` when the request names one (which must exist).
async fn resolve(
    cx: &Context<'_>,
    r: &EndpointRef,
    pool: Option<&str>,
) -> Result<EndpointId, OpError> {
    check_pool(cx, pool)?;
    Ok(cx
        .engine
        .resolve(r.as_arg(), pool.map(str::to_string))
        .await?)
}

async fn resolve_all(
    cx: &Context<'_>,
    refs: &[EndpointRef],
    pool: Option<&str>,
) -> Result<Vec<EndpointId>, OpError> {
    let mut ids = Vec::with_capacity(refs.len());
    for r in refs {
        ids.push(resolve(cx, r, pool).await?);
    }
    Ok(ids)
}
