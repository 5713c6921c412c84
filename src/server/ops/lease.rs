//! `lease`: take an endpoint of a pool, for a destination, schemes and tags if given.

use std::time::Duration;

use super::Op;
use crate::config::DEFAULT_POOL;
use crate::limits::check_session_key;
use crate::pool::scoped::WantError;
use crate::pool::Want;
use crate::protocol::{LeaseMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;
use crate::server::token::Role;
use crate::server::DEFAULT_TTL;

impl Op for LeaseMessage {
    const ROLE: Role = Role::Lease;

    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let want = want(self.destination, self.schemes)?.with_tags(self.tags.unwrap_or_default());
        if let Some(s) = &self.session {
            check_session_key(s).map_err(|e| OpError::bad(format!("session: {e}")))?;
        }
        let pool = self.pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
        let ttl = self.ttl.map(|d| d.0).unwrap_or(DEFAULT_TTL);
        if ttl.is_zero() {
            return Err(OpError::bad("ttl must be greater than 0"));
        }
        let wait = self.wait.map(|d| d.0).unwrap_or(Duration::ZERO);
        // A lease whose client left while it waited is never granted: nobody could
        // release it.
        let g = cx
            .engine
            .lease_while_there(&pool, ttl, self.session.as_deref(), wait, &want, cx.gone)
            .await?;
        Ok(Payload::Lease(g))
    }
}

/// A lease's `destination` and `schemes`, checked (bad input names the field).
fn want(destination: Option<String>, schemes: Option<Vec<String>>) -> Result<Want, OpError> {
    Want::parse(destination.as_deref(), schemes.as_deref()).map_err(|e| match e {
        WantError::Destination(d) => OpError::bad(format!("destination: {d}")),
        e => OpError::bad(e.to_string()),
    })
}
