//! `disable`: an operator takes an endpoint out of service.

use super::{resolve, Op};
use crate::health::Input;
use crate::protocol::{DisableMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for DisableMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let id = resolve(cx, &self.endpoint, self.pool.as_deref()).await?;
        let input = Input::Disable {
            detail: self.reason,
        };
        let (_, state) = cx.engine.input(id, input, None, None).await?;
        Ok(Payload::State {
            endpoint: Some(id),
            state,
            blame: None,
        })
    }
}
