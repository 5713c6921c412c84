//! What `status` shows of each pool: counts by state, leases, down targets, pacing.

use serde::Serialize;
use tokio::time::Instant;

use super::{PoolError, Pools};
use crate::health::State;

/// Counts of a pool for `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub pool: String,
    pub mode: String,
    /// Endpoints available.
    pub available: usize,
    /// Endpoints cooling.
    pub cooling: usize,
    /// Endpoints waiting for their single attempt.
    pub probe_allowed: usize,
    /// Endpoints disabled.
    pub disabled: usize,
    /// Live leases.
    pub leases: usize,
    /// Time until the soonest cooldown ends.
    pub next_deadline_ms: Option<u64>,
    /// Targets that are down (docs/blame.md).
    #[serde(default)]
    pub targets_down: usize,
    /// The down targets, soonest trial first (at most 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub down_targets: Vec<DownTargetView>,
    /// The pool's pacing state, when it paces (docs/selection.md, "Pacing").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<PaceStatus>,
    /// What the pool knows of its exit addresses, when it learns them (docs/exit.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<ExitStatus>,
}

/// A pool's exit addresses as `status` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ExitStatus {
    /// Distinct exit addresses known.
    pub addresses: usize,
    /// Endpoints whose address is known.
    pub known: usize,
    /// Endpoints that leave through an address another endpoint of the pool also has...
    pub shared_endpoints: usize,
    /// ...and how many addresses those are.
    pub shared_addresses: usize,
    /// (address, destination) bans that hold for every endpoint of their address.
    #[serde(default)]
    pub address_bans: usize,
    /// Subnets suspect for a host, by host then subnet (docs/exit.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspect_subnets: Vec<super::destinations::SuspectSubnet>,
}

/// What a pool's pacing holds, as `status` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PaceStatus {
    /// Hosts with some (endpoint, host) pair held.
    pub hosts: usize,
    /// (endpoint, host) pairs held.
    pub pairs: usize,
    /// Hosts forgotten to stay within the bounds (least recently used first), ever.
    pub hosts_dropped: u64,
    /// Lease requests answered `paced`, ever (the final answer of each, after its wait).
    pub paced: u64,
}

/// A down target as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DownTargetView {
    pub target: String,
    /// Time until its trial (0: due, or out).
    pub retry_after_ms: u64,
    /// Failed trials in a row, the failures that made it down counted as one.
    pub streak: u32,
    pub reason: Option<crate::health::Reason>,
    /// How long it has been down.
    pub down_for_ms: u64,
}

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
