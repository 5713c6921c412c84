//! A new set of pool configs for running pools (SIGHUP): policies, modes, probe settings
//! and lease caps change in place, new pools appear, and nothing is lost.

use std::collections::HashSet;

use super::Pools;
use crate::config::PoolConfig;

/// Why a new config was not applied; nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReconfigureError {
    /// Dropping the pool would strand its endpoints.
    #[error(
        "pool {pool:?} is missing from the new config but still has {endpoints} endpoint(s); \
         remove them first (`proxypool remove`) or keep the pool in the config"
    )]
    PoolInUse { pool: String, endpoints: usize },
}

impl Pools {
    /// Apply `configs` (all or nothing). Returns the names of the pools that are new.
    /// Each pool of `dropped` (configured before, not any more) is retired, which is
    /// refused while it holds endpoints. Pools in neither list (the built-in config of
    /// endpoints whose pool was never configured) are left as they are.
    pub fn reconfigure(
        &mut self,
        configs: Vec<PoolConfig>,
        dropped: &[String],
    ) -> Result<Vec<String>, ReconfigureError> {
        let keep: HashSet<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        let mut retire = Vec::new();
        for name in dropped {
            let Some(&i) = self.by_name.get(name) else {
                continue;
            };
            if keep.contains(name.as_str()) {
                continue;
            }
            let endpoints: usize = self.pools[i].counts.iter().sum();
            if endpoints > 0 {
                return Err(ReconfigureError::PoolInUse {
                    pool: name.clone(),
                    endpoints,
                });
            }
            retire.push(name.clone());
        }
        // The slot stays (indices are positions), but the name no longer finds it.
        for name in retire {
            self.by_name.remove(&name);
        }
        let mut added = Vec::new();
        for cfg in configs {
            if !self.by_name.contains_key(&cfg.name) {
                added.push(cfg.name.clone());
            }
            self.ensure_pool(cfg);
        }
        Ok(added)
    }

    /// Whether slot `i` is a pool known by its name (not one retired by a reload).
    pub(super) fn is_current(&self, i: usize) -> bool {
        self.by_name.get(&self.pools[i].cfg.name) == Some(&i)
    }
}
