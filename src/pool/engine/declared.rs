//! Endpoints declared in the config file, and the state a new endpoint starts in.

use crate::config::{Config, PoolConfig};
use crate::health::State;
use crate::store::{NewEndpoint, Store, StoreError};

/// Make the endpoints declared in the config exist in the store (never removes any).
pub fn sync_config_endpoints(store: &mut Store, cfg: &Config) -> Result<usize, StoreError> {
    let eps: Vec<NewEndpoint> = cfg
        .endpoints
        .iter()
        .map(|d| NewEndpoint {
            url: d.url.clone(),
            pool: d.pool.clone(),
            label: d.label.clone(),
            source: Some("config".into()),
            state: initial_state(cfg.pool(&d.pool)),
            tags: d.tags.clone(),
        })
        .collect();
    Ok(store
        .ensure_endpoints(&eps)?
        .iter()
        .filter(|(_, added)| *added)
        .count())
}

/// The state a new endpoint starts in, by pool mode (docs/reference.md, "Pools and modes").
pub fn initial_state(pool: Option<&PoolConfig>) -> State {
    match pool.map(|p| p.mode.prober_recovers()) {
        Some(true) => State::ProbeAllowed,
        _ => State::Available,
    }
}
