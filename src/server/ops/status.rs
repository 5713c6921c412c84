//! `status`: counts by state, per pool.

use super::Op;
use crate::protocol::{Payload, StatusMessage};
use crate::server::context::Context;
use crate::server::error::OpError;
use crate::server::token::Role;

impl Op for StatusMessage {
    const ROLE: Role = Role::Lease;

    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        // From memory: it answers while a fleet's database is away, and says so.
        Ok(Payload::Status {
            pools: cx.engine.status(self.pool.as_deref())?,
            database: cx.database.map(str::to_string),
            daemons: cx.engine.fleet_daemons(),
            store: cx.engine.store_state().map(str::to_string),
        })
    }
}
