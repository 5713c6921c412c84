//! The exit check's side of the engine (docs/exit.md): endpoints due, results recorded.

use std::net::IpAddr;

use tokio::time::Instant;

use super::{Engine, EngineError};
use crate::endpoint::{EndpointId, ProxyUrl};

impl Engine {
    /// Up to `max` available endpoints of `pool` whose exit check is due now.
    pub fn exit_due(&self, pool: &str, max: usize) -> Vec<(EndpointId, ProxyUrl)> {
        self.lock().exit_due(pool, Instant::now(), max)
    }

    /// When the next exit check of `pool` is due.
    pub fn exit_next_due(&self, pool: &str) -> Option<Instant> {
        self.lock().exit_next_due(pool)
    }

    /// Record what an exit check of `id` learned: its address, or why it is unknown.
    pub async fn exit_learned(
        &self,
        id: EndpointId,
        learned: Result<IpAddr, String>,
    ) -> Result<(), EngineError> {
        self.writable()?;
        self.with(|p, now, _| ((), p.exit_learned(id, learned, now)))
            .await
    }

    /// A proxy's answer named `ip` as the exit address of `id`
    /// ([`crate::pool::Pools::exit_sighted`]).
    pub async fn exit_sighted(&self, id: EndpointId, ip: IpAddr) -> Result<(), EngineError> {
        self.writable()?;
        self.with(|p, now, _| ((), p.exit_sighted(id, ip, now)))
            .await
    }

    /// The exit address of `id`, when known.
    pub fn exit_of(&self, id: EndpointId) -> Option<IpAddr> {
        self.lock().exit_of(id)
    }
}
