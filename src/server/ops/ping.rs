//! `ping`: liveness, and the daemon's version.

use super::Op;
use crate::protocol::{Payload, PingMessage};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for PingMessage {
    async fn answer(self, _: &Context<'_>) -> Result<Payload, OpError> {
        Ok(Payload::Ping {
            version: env!("CARGO_PKG_VERSION").into(),
        })
    }
}
