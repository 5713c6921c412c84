//! What `status` shows of each pool: counts by state, leases, down targets, pacing, exit
//! addresses.

use serde::{Deserialize, Serialize};

use crate::health::Reason;

/// Counts of a pool for `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub suspect_subnets: Vec<SuspectSubnet>,
}

/// What a pool's pacing holds, as `status` shows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DownTargetView {
    pub target: String,
    /// Time until its trial (0: due, or out).
    pub retry_after_ms: u64,
    /// Failed trials in a row, the failures that made it down counted as one.
    pub streak: u32,
    pub reason: Option<Reason>,
    /// How long it has been down.
    pub down_for_ms: u64,
}

/// A suspicion as `status` and the page show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuspectSubnet {
    /// `ADDRESS/PREFIX`.
    pub subnet: String,
    pub host: String,
    /// Addresses of it banned for the host.
    pub addresses: usize,
}
