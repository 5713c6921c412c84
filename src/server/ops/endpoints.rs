//! `endpoints`: the endpoints of a pool, state or tags, or one endpoint, with statistics.

use super::{check_pool, Op};
use crate::health::State;
use crate::pool::destinations::normalize;
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
            destination,
        } = self;
        let destination = destination
            .map(|d| normalize(&d))
            .transpose()
            .map_err(|e| OpError::bad(format!("destination: {e}")))?;
        let state = state
            .map(|s| s.parse::<State>())
            .transpose()
            .map_err(|e| OpError::bad(e.to_string()))?;
        check_pool(cx, pool.as_deref())?;
        // With a destination, `state` is the state for it (as `/api/endpoints` has it).
        let row_state = if destination.is_some() { None } else { state };
        let mut rows: Vec<_> = match endpoint {
            Some(id) => cx
                .engine
                .row(id)
                .await?
                .into_iter()
                .filter(|r| pool.as_ref().is_none_or(|p| *p == r.pool))
                .filter(|r| row_state.is_none_or(|s| s == r.state))
                .collect(),
            None => cx.engine.rows(pool, row_state).await?,
        };
        if let Some(want) = tags.filter(|t| !t.is_empty()) {
            rows.retain(|r| r.tags.contains_all(&want));
        }
        let mut endpoints = cx.engine.views_with_stats(&rows);
        if let Some(d) = destination {
            let ids: Vec<_> = endpoints.iter().map(|v| v.id).collect();
            for (v, st) in endpoints.iter_mut().zip(cx.engine.states_for(&ids, &d)) {
                v.destination_state = Some(st.unwrap_or(v.state));
            }
            for (v, s) in endpoints.iter_mut().zip(cx.engine.slowed_for(&ids, &d)) {
                v.slowed = s;
            }
            endpoints.retain(|v| state.is_none_or(|s| v.destination_state == Some(s)));
        }
        Ok(Payload::Endpoints { endpoints })
    }
}
