//! `endpoints`: the endpoints of a pool, state or tags, or one endpoint, with statistics.

use super::{check_pool, Op};
use crate::health::State;
use crate::protocol::{EndpointsMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for EndpointsMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let EndpointsMessage {
            pool,
            state,
            endpoint,
            tags,
        } = self;
        let state = state
            .map(|s| s.parse::<State>())
            .transpose()
            .map_err(|e| OpError::bad(e.to_string()))?;
        check_pool(cx, pool.as_deref())?;
        let mut rows: Vec<_> = match endpoint {
            Some(id) => cx
                .engine
                .row(id)
                .await?
                .into_iter()
                .filter(|r| pool.as_ref().is_none_or(|p| *p == r.pool))
                .filter(|r| state.is_none_or(|s| s == r.state))
                .collect(),
            None => cx.engine.rows(pool, state).await?,
        };
        if let Some(want) = tags.filter(|t| !t.is_empty()) {
            rows.retain(|r| r.tags.contains_all(&want));
        }
        Ok(Payload::Endpoints {
            endpoints: cx.engine.views_with_stats(&rows),
        })
    }
}
