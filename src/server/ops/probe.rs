//! `probe`: probe endpoints now, with the probers of their pools.

use super::{check_pool, resolve_all, Op};
use crate::probe::run::{probe_many, probe_targets};
use crate::protocol::{Payload, ProbeMessage};
use crate::server::context::Context;
use crate::server::error::OpError;

/// Parallel probes when the request does not say.
const DEFAULT_CONCURRENCY: usize = 64;

impl Op for ProbeMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let ProbeMessage {
            endpoints,
            pool,
            all,
            concurrency,
        } = self;
        check_pool(cx, pool.as_deref())?;
        let ids = if endpoints.is_empty() {
            if !all && pool.is_none() {
                return Err(OpError::bad("name endpoints, or set all or pool"));
            }
            cx.engine.ids(pool.as_deref())
        } else {
            resolve_all(cx, &endpoints, pool.as_deref()).await?
        };
        let every_pool = endpoints.is_empty() && pool.is_none();
        let probers = cx.live().probers;
        let ids = probe_targets(cx.engine, &probers, ids, every_pool).map_err(OpError::bad)?;
        let concurrency = concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1);
        let results = probe_many(cx.engine, &probers, ids, concurrency, |_| {}).await?;
        Ok(Payload::Probes { results })
    }
}
