//! `release`: give a lease back without an outcome.

use super::Op;
use crate::protocol::{Payload, ReleaseMessage};
use crate::server::context::Context;
use crate::server::error::OpError;
use crate::server::token::Role;

impl Op for ReleaseMessage {
    const ROLE: Role = Role::Lease;

    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        cx.engine.release(&self.lease).await?;
        Ok(Payload::Empty {})
    }
}
