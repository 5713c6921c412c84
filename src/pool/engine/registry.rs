//! This daemon in its fleet's registry (docs/fleet.md, "The fleet as one"): its row in the
//! database, written at every heartbeat by the follower thread, the fleet as last read,
//! and its turns at the jobs one daemon does for all (sniffing a pool's sources).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tracing::debug;

use super::{Engine, EngineError};
use crate::protocol::DaemonRow;
use crate::store::daemons::{new_daemon_id, this_host, DaemonInfo, HEARTBEAT};
use crate::store::StoreError;

/// This daemon's entry, once it registered, and the fleet as its last heartbeat read it.
pub(super) struct Registry {
    id: String,
    me: Mutex<Option<DaemonInfo>>,
    fleet: Mutex<Vec<DaemonRow>>,
    beaten: Mutex<Option<std::time::Instant>>,
}

fn held<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    pub(super) fn new() -> Registry {
        Registry {
            id: new_daemon_id(),
            me: Mutex::new(None),
            fleet: Mutex::new(Vec::new()),
            beaten: Mutex::new(None),
        }
    }
}

impl Engine {
    fn registry(&self) -> Option<&Registry> {
        self.fleet.as_ref().map(|f| &f.registry)
    }

    /// Register this daemon in its fleet, with its listeners (`socket PATH`, `gateway
    /// ADDR`...), and write its first heartbeat; nothing on SQLite.
    pub fn register(&self, addresses: Vec<String>) -> Result<(), EngineError> {
        let Some(r) = self.registry() else {
            return Ok(());
        };
        *held(&r.me) = Some(DaemonInfo {
            id: r.id.clone(),
            host: this_host(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            addresses,
        });
        self.heartbeat()?;
        Ok(())
    }

    /// Take this daemon out of the registry (it stops): the jobs it held go to another
    /// daemon at once instead of when its heartbeat is old enough.
    pub fn unregister(&self) {
        let (Some(f), Some(r)) = (&self.fleet, self.registry()) else {
            return;
        };
        if held(&r.me).take().is_some() {
            if let Err(e) = f.link.unregister(&r.id) {
                debug!(error = %e, "could not take this daemon out of the fleet's registry");
            }
        }
    }

    /// Write this daemon's row now (its live leases by pool), and read the fleet's.
    fn heartbeat(&self) -> Result<(), StoreError> {
        let (Some(f), Some(r)) = (&self.fleet, self.registry()) else {
            return Ok(());
        };
        let Some(me) = held(&r.me).clone() else {
            return Ok(());
        };
        let leases: BTreeMap<String, u64> = self
            .lock()
            .status(None, tokio::time::Instant::now())
            .unwrap_or_default()
            .into_iter()
            .map(|p| (p.pool, p.leases as u64))
            .collect();
        f.link.heartbeat(&me, &leases)?;
        *held(&r.fleet) = f.link.daemons()?;
        *held(&r.beaten) = Some(std::time::Instant::now());
        Ok(())
    }

    /// The follower's turn: a heartbeat when one is due.
    pub(super) fn beat_if_due(&self) -> Result<(), StoreError> {
        let Some(r) = self.registry() else {
            return Ok(());
        };
        let due = held(&r.beaten).is_none_or(|t| t.elapsed() >= HEARTBEAT);
        if due && held(&r.me).is_some() {
            self.heartbeat()?;
        }
        Ok(())
    }

    /// The daemons of the fleet as the last heartbeat read them (None on SQLite).
    pub fn fleet_daemons(&self) -> Option<Vec<DaemonRow>> {
        self.registry().map(|r| held(&r.fleet).clone())
    }

    /// Whether this daemon runs `job` now (docs/fleet.md, "Sources in a fleet"): always on
    /// SQLite; in a fleet, when it holds the job (or takes it over from a daemon gone, or
    /// whose `hold` lapsed) and the job last ran at least `every` ago. It holds the job
    /// `hold` more. An unreachable store is a no.
    pub async fn take_turn(&self, job: &str, every: Duration, hold: Duration) -> bool {
        let (Some(f), Some(r)) = (&self.fleet, self.registry()) else {
            return true;
        };
        let (link, job_name, me) = (f.link.clone(), job.to_string(), r.id.clone());
        let asked =
            tokio::task::spawn_blocking(move || link.take_turn(&job_name, &me, every, hold)).await;
        match asked {
            Ok(Ok(yes)) => yes,
            Ok(Err(e)) => {
                debug!(job, error = %e, "could not ask the fleet whose turn it is");
                false
            }
            Err(_) => false,
        }
    }
}
