//! `ping`: liveness, and the daemon's version.

use super::Op;
use crate::protocol::{Payload, PingMessage};
use crate::server::context::Context;
use crate::server::error::OpError;
use crate::server::token::Role;

impl Op for PingMessage {
    const ROLE: Role = Role::Lease;

    async fn answer(self, _: &Context<'_>) -> Result<Payload, OpError> {
        Ok(Payload::Ping {
            version: env!("CARGO_PKG_VERSION").into(),
        })
    }
}
