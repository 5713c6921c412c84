//! `enable`: an operator puts an endpoint back in service, clears one of its pairs, or
//! clears a target.

use super::{resolve, Op};
use crate::health::Input;
use crate::pool::destinations::normalize_key;
use crate::protocol::{EnableMessage, EndpointRef, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for EnableMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let endpoint = match (&self.endpoint, &self.target) {
            (None, Some(t)) => return enable_target(cx, &self, t).await,
            (Some(_), Some(_)) => {
                return Err(OpError::bad(
                    "enable takes `endpoint` or `target`, not both: a target is cleared for every endpoint",
                ))
            }
            (None, None) => return Err(OpError::bad("enable needs `endpoint` (or `target`)")),
            (Some(e), None) => e.clone(),
        };
        match self.destination {
            Some(ref d) => enable_pair(cx, &self, &endpoint, d).await,
            None => {
                let id = resolve(cx, &endpoint, self.pool.as_deref()).await?;
                let input = Input::Enable {
                    now: self.now.unwrap_or(false),
                };
                let detail = Some("enabled by operator".into());
                let (_, state) = cx.engine.input(id, input, None, detail).await?;
                Ok(Payload::State {
                    endpoint: Some(id),
                    state,
                    blame: None,
                })
            }
        }
    }
}

/// Clear the endpoint's pair for `destination` (docs/destinations.md, "Pairs").
async fn enable_pair(
    cx: &Context<'_>,
    m: &EnableMessage,
    endpoint: &EndpointRef,
    destination: &str,
) -> Result<Payload, OpError> {
    if m.now.is_some() {
        return Err(OpError::bad(
            "enable takes `now` or `destination`, not both: a pair is cleared at once",
        ));
    }
    let d = normalize_key(destination).map_err(|e| OpError::bad(format!("destination: {e}")))?;
    let id = resolve(cx, endpoint, m.pool.as_deref()).await?;
    let state = cx.engine.enable_pair(id, &d).await?;
    Ok(Payload::State {
        endpoint: Some(id),
        state,
        blame: None,
    })
}

/// Clear a target in every pool that knows it (docs/blame.md, "A target that is down").
async fn enable_target(
    cx: &Context<'_>,
    m: &EnableMessage,
    target: &str,
) -> Result<Payload, OpError> {
    if m.now.is_some() || m.destination.is_some() {
        return Err(OpError::bad(
            "enable with `target` takes only `pool`: a target is cleared at once, for every endpoint",
        ));
    }
    let t = normalize_key(target).map_err(|e| OpError::bad(format!("target: {e}")))?;
    let cleared = cx.engine.enable_target(m.pool.as_deref(), &t).await?;
    Ok(Payload::Cleared { cleared })
}
