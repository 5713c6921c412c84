//! `PoolError`: what a pool operation refuses, each mapping to a protocol error code.

use std::time::Duration;

use crate::endpoint::EndpointId;

use super::Ended;

/// Errors of pool operations, each mapping to a protocol error code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    /// No such pool.
    #[error("unknown pool {0:?}")]
    UnknownPool(String),
    /// Endpoints exist, none can be leased now.
    #[error("pool {pool:?} has no {}endpoint available{}", filter.as_ref().map(|f| format!("{f} ")).unwrap_or_default(), retry_after.map(|d| format!(" (the soonest cooldown ends in {})", wait_text(d))).unwrap_or_else(|| " (none is cooling: every one is leased, on trial or disabled)".into()))]
    Exhausted {
        pool: String,
        /// Time until the soonest cooldown deadline (of an endpoint that fits the lease).
        retry_after: Option<Duration>,
        /// The schemes the lease asked for, as written (`socks5 or http`).
        filter: Option<String>,
    },
    /// The pool has no endpoint at all, or none of the schemes the lease asked for:
    /// nothing comes by waiting.
    #[error("{}", match filter {
        None => format!("pool {pool:?} has no endpoints: add some with `proxypool add URL --pool {pool}` (or [[endpoint]] entries in the config)"),
        Some(f) => format!("pool {pool:?} has no {f} endpoint at all: the lease asks only for schemes {f}"),
    })]
    Empty {
        pool: String,
        /// The schemes the lease asked for, when that is why.
        filter: Option<String>,
    },
    /// The target is down: nothing is dialed until its trial.
    #[error("destination {target:?} is down (every endpoint of pool {pool:?} that tried it failed to reach it); {}", if *trial_out { format!("its trial is under way: its answer, or at the latest in {} ms its hand-back, lets the next use through", retry_after.as_millis()) } else { format!("next trial in {} ms", retry_after.as_millis()) })]
    DestinationDown {
        pool: String,
        target: String,
        /// Time until its trial (while its trial is out: until that trial is handed back
        /// at the latest).
        retry_after: Duration,
        /// Its single trial is out now.
        trial_out: bool,
    },
    /// `enable --target` named a target no pool knows (nothing to clear).
    #[error("target {target:?} is not known to {}: nothing to clear (a target is known once a lease or report named it, and forgotten by a restart)", match pool { Some(p) => format!("pool {p:?}"), None => "any pool".to_string() })]
    UnknownTarget {
        target: String,
        pool: Option<String>,
    },
    /// The lease id is not known.
    #[error("unknown lease {0:?}")]
    UnknownLease(String),
    /// The lease existed but expired.
    #[error("lease {0:?} expired")]
    LeaseExpired(String),
    /// The lease was reported or released already: a lease takes one.
    #[error("lease {lease:?} was already {how}: a lease takes one report or release")]
    LeaseEnded { lease: String, how: Ended },
    /// No such endpoint.
    #[error("no endpoint with id {0}")]
    UnknownEndpoint(EndpointId),
    /// A lease lifetime the clock cannot represent.
    #[error("ttl {0:?} is too long")]
    InvalidTtl(Duration),
    /// A lease asked to live longer than its pool's `max_ttl`.
    #[error("ttl {} is longer than pool {pool:?}'s max_ttl {} (ask for less, or raise max_ttl in its [[pool]] section)", humantime::format_duration(*ttl), humantime::format_duration(*max))]
    TtlOverMax {
        pool: String,
        ttl: Duration,
        max: Duration,
    },
    /// The pool holds `max_leases` live leases: none is granted until one ends.
    #[error("pool {pool:?} holds {max} live leases, its max_leases: release or report the leases you hold (or raise max_leases in its [[pool]] section)")]
    TooManyLeases { pool: String, max: u32 },
    /// A failure report without a reason.
    #[error("a failure report needs a reason (one of: {})", crate::health::Reason::ALL.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", "))]
    MissingReason,
    /// A report by session named a session with no endpoint bound to it.
    #[error("no endpoint is bound to session {session:?} in pool {pool:?} (it was never leased, or a failure unbound it)")]
    UnknownSession { pool: String, session: String },
    /// A trial's result after its claim lapsed and the trial was claimed again (by
    /// another daemon of the fleet): it changed nothing.
    #[error(
        "stale claim: the trial of {0} lapsed and was claimed again; this result changed nothing"
    )]
    StaleClaim(String),
    /// Every endpoint that fits was used for the host too recently (docs/selection.md,
    /// "Pacing").
    #[error("pool {pool:?}: every endpoint that fits was used for {host:?} too recently (pacing){}", retry_after.map(|d| format!("; the soonest is ready in {} ms", d.as_millis())).unwrap_or_else(|| "; one is ready when a lease for it ends".into()))]
    Paced {
        pool: String,
        host: String,
        /// Time until the soonest pair passed over is ready (`None`: when a lease ends).
        retry_after: Option<Duration>,
        /// `[pool.pace] wait`: how long a request that says no `wait` waits.
        wait: Duration,
    },
    /// A lease named a tag key no endpoint carries.
    #[error("unknown tag key {key:?} (keys in use: {})", if known.is_empty() { "none".to_string() } else { known.join(", ") })]
    UnknownTag { key: String, known: Vec<String> },
}

/// A wait as a message says it: `450ms`, else whole seconds rounded up (`2s`, `1m 5s`).
fn wait_text(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let secs = d.as_millis().div_ceil(1000) as u64;
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

impl PoolError {
    /// The pool has nothing to lease right now (empty, exhausted or paced): the case a
    /// `fallback` pool is there for.
    pub(crate) fn nothing_to_lease(&self) -> bool {
        matches!(
            self,
            PoolError::Exhausted { .. }
                | PoolError::Empty { .. }
                | PoolError::Paced { .. }
                | PoolError::TooManyLeases { .. }
        )
    }
}
