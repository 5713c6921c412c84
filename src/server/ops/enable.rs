//! `enable`: an operator puts an endpoint back in service, or clears one of its pairs.

use super::{resolve, Op};
use crate::health::Input;
use crate::pool::destinations::normalize_key;
use crate::protocol::{EnableMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;

impl Op for EnableMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        match self.destination {
            Some(ref d) => enable_pair(cx, &self, d).await,
            None => {
                let id = resolve(cx, &self.endpoint, self.pool.as_deref()).await?;
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
    destination: &str,
) -> Result<Payload, OpError> {
    if m.now.is_some() {
        return Err(OpError::bad(
            "enable takes `now` or `destination`, not both: a pair is cleared at once",
        ));
    }
    let d = normalize_key(destination).map_err(|e| OpError::bad(format!("destination: {e}")))?;
    let id = resolve(cx, &m.endpoint, m.pool.as_deref()).await?;
    let state = cx.engine.enable_pair(id, &d).await?;
    Ok(Payload::State {
        endpoint: Some(id),
        state,
        blame: None,
    })
}
