//! `remove`: an operator deletes endpoints.

use super::{resolve_all, Op};
use crate::protocol::{Payload, RemoveMessage};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for RemoveMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let ids = resolve_all(cx, &self.endpoints, self.pool.as_deref()).await?;
        cx.engine.remove(ids).await?;
        Ok(Payload::Empty {})
    }
}
