//! `release`: give a lease back without an outcome.

use super::Op;
use crate::protocol::{Payload, ReleaseMessage};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for ReleaseMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        cx.engine.release(&self.lease).await?;
        Ok(Payload::Empty {})
    }
}
