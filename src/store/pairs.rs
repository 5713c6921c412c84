//! Per-destination health as stored (docs/destinations.md, "Pairs"): the non-available
//! (endpoint, destination) pairs and the writes that change them. Each write is atomic with
//! its event.

use std::time::SystemTime;

use super::{Claim, Epoch, NewEvent, RowClaim, StoredHealth, Unclaim};
use crate::endpoint::EndpointId;
use crate::health::State;

/// The persisted health of a pair: after a transition to a non-available state (a write),
/// or as stored (a read).
#[derive(Debug, Clone, PartialEq)]
pub struct PairRecord {
    /// Endpoint.
    pub endpoint: EndpointId,
    /// Normalised destination host.
    pub destination: String,
    /// The state the transition starts from (`available`: the pair has no row yet). A
    /// store shared by several daemons applies the write only while the row is still in
    /// it (docs/fleet.md, "Ownership"). A read leaves it at the state read.
    pub from: State,
    /// The claim whose outcome this transition is, when it decides the pair's trial.
    pub trial: Option<Epoch>,
    /// HTTP status of the failure, when one was seen.
    pub status: Option<u16>,
    /// Its health (never `available`: a recovered pair is deleted).
    pub health: StoredHealth,
}

/// A stored pair, as loaded on start.
#[derive(Debug, Clone, PartialEq)]
pub struct PairRow {
    /// Pool of the endpoint.
    pub pool: String,
    /// The health.
    pub record: PairRecord,
    /// The stored end of the cooldown, as shown.
    pub cooldown_until: Option<SystemTime>,
    /// The trial claimed in the database, when one is out (PostgreSQL only).
    pub claim: Option<RowClaim>,
    /// The change that last wrote the row (PostgreSQL; 0 in SQLite).
    pub rev: i64,
    /// RFC 3339 of the last transition.
    pub state_changed_at: String,
}

/// One durable pair write; a batch commits atomically.
#[derive(Debug, Clone, PartialEq)]
pub enum PairWrite {
    /// Insert or update a pair and append its event.
    Upsert(PairRecord, NewEvent),
    /// Delete a recovered (or operator-cleared) pair and append its event.
    Delete {
        /// Endpoint.
        endpoint: EndpointId,
        /// Destination.
        destination: String,
        /// The state the pair leaves (the guard of a shared store).
        from: State,
        /// The claim whose outcome this is, when it decides the pair's trial.
        trial: Option<Epoch>,
        /// The event (its `endpoint` is set from the pair).
        event: NewEvent,
    },
    /// Append an event about a pair (report, trial admitted/abandoned).
    Event {
        /// Destination.
        destination: String,
        /// HTTP status seen.
        status: Option<u16>,
        /// The event.
        event: NewEvent,
    },
    /// Confirm the pair's trial claimed in memory.
    Claim(Claim),
    /// Give the pair's claimed trial back.
    Unclaim(Unclaim),
}

impl PairWrite {
    /// The endpoint the write is about.
    pub fn endpoint(&self) -> Option<EndpointId> {
        match self {
            PairWrite::Upsert(r, _) => Some(r.endpoint),
            PairWrite::Delete { endpoint, .. } => Some(*endpoint),
            PairWrite::Event { event, .. } => event.endpoint,
            PairWrite::Claim(c) => Some(c.on.endpoint()),
            PairWrite::Unclaim(u) => Some(u.on.endpoint()),
        }
    }
}
