//! `add`: an operator adds endpoints, all or nothing.

use super::Op;
use crate::config::DEFAULT_POOL;
use crate::endpoint::ProxyUrl;
use crate::pool::engine::initial_state;
use crate::protocol::{AddMessage, Payload};
use crate::server::context::Context;
use crate::server::error::OpError;
use crate::store::NewEndpoint;

impl Op for AddMessage {
    async fn answer(self, cx: &Context<'_>) -> Result<Payload, OpError> {
        let pool = self.pool.unwrap_or_else(|| DEFAULT_POOL.to_string());
        let config = cx.live().config;
        let cfg = config.pool(&pool);
        let source = self.source.unwrap_or_else(|| "cli".into());
        let mut eps = Vec::with_capacity(self.urls.len());
        for (i, u) in self.urls.iter().enumerate() {
            let url = ProxyUrl::parse(u)
                .map_err(|e| OpError::bad(format!("entry {}: {e}; nothing was added", i + 1)))?;
            eps.push(NewEndpoint {
                url,
                pool: pool.clone(),
                label: self.label.clone(),
                source: Some(source.clone()),
                state: initial_state(cfg),
                tags: self.tags.clone().unwrap_or_default(),
            });
        }
        let ids = cx.engine.add(eps).await?;
        Ok(Payload::Added { ids, skipped: None })
    }
}
