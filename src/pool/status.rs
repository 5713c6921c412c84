//! What `status` shows of each pool: counts by state, leases, down targets, pacing.

use tokio::time::Instant;

use super::{PoolError, Pools};
use crate::health::State;
use crate::protocol::{DownTargetView, ExitStatus, PoolStatus};

/// Down targets listed per pool in `status` at most.
const DOWN_TARGETS_SHOWN: usize = 50;

impl Pools {
    /// Counts by state for one or every pool.
    pub fn status(&self, pool: Option<&str>, now: Instant) -> Result<Vec<PoolStatus>, PoolError> {
        let idx: Vec<usize> = match pool {
            Some(name) => vec![*self
                .by_name
                .get(name)
                .ok_or_else(|| PoolError::UnknownPool(name.to_string()))?],
            None => (0..self.pools.len())
                .filter(|&i| self.is_current(i))
                .collect(),
        };
        Ok(idx
            .into_iter()
            .map(|i| {
                let p = &self.pools[i];
                PoolStatus {
                    pool: p.cfg.name.clone(),
                    mode: p.cfg.mode.to_string(),
                    available: p.index.counts().of(State::Available),
                    cooling: p.index.counts().of(State::Cooling),
                    probe_allowed: p.index.counts().of(State::ProbeAllowed),
                    disabled: p.index.counts().of(State::Disabled),
                    leases: p.leases,
                    next_deadline_ms: p
                        .index
                        .next_cooling()
                        .map(|(d, _)| d.saturating_duration_since(now).as_millis() as u64),
                    targets_down: p.targets.down_count(),
                    down_targets: p
                        .targets
                        .down_list(now, DOWN_TARGETS_SHOWN)
                        .into_iter()
                        .map(|t| DownTargetView {
                            retry_after_ms: t.retry_after.as_millis() as u64,
                            down_for_ms: t.down_for.as_millis() as u64,
                            target: t.target,
                            streak: t.streak,
                            reason: t.reason,
                        })
                        .collect(),
                    pace: p.pace.status(),
                    exit: p.exits.config().map(|_| {
                        let (shared_endpoints, shared_addresses) = p.exits.sharing();
                        ExitStatus {
                            addresses: p.exits.addresses(),
                            known: p.exits.known(),
                            shared_endpoints,
                            shared_addresses,
                            address_bans: p.dests.address_bans(),
                            suspect_subnets: p.dests.suspect_subnets(),
                        }
                    }),
                }
            })
            .collect())
    }
}
