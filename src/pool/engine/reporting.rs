//! How a lease ended: a report with its verdict, a release, a tunnel that opened; and
//! an operator clearing one pair.

use super::{Aftermath, Engine, EngineError, CLAIM_TRIES};
use crate::endpoint::EndpointId;
use crate::health::State;

use crate::pool::{Outcome, ReportOn, Reported};
use crate::protocol::TargetCleared;

impl Engine {
    /// Release a lease.
    pub async fn release(&self, lease: &str) -> Result<(), EngineError> {
        let r = self.with_notify(|p, now, _| p.release(lease, now)).await?;
        Ok(r?)
    }

    /// Report a lease's outcome; returns the endpoint's state.
    pub async fn report(&self, lease: &str, outcome: Outcome) -> Result<State, EngineError> {
        let r = self.report_on(lease, outcome, &ReportOn::default()).await?;
        Ok(r.state)
    }

    /// Report a lease's outcome with what the report says besides it (where the use went;
    /// its duration). Returns the endpoint's state and whom a failure counted against.
    pub async fn report_on(
        &self,
        lease: &str,
        outcome: Outcome,
        on: &ReportOn,
    ) -> Result<Reported, EngineError> {
        // No `writable` first: a report that writes nothing (most successes) is answered
        // while the store is away, and one that must write ends its lease all the same
        // (`Engine::run_as`), so nothing is left leased behind an outage.
        let (r, done) = self
            .run(|p, now, wall| p.report_with(lease, outcome, on, now, wall))
            .await?;
        self.notify_waiters();
        Ok(self.as_it_is(r?, &done))
    }

    /// A report whose transition another daemon's came before answers the state the
    /// endpoint is in now (the report is a late one, docs/fleet.md).
    fn as_it_is(&self, mut r: Reported, done: &Aftermath) -> Reported {
        if done.changed_elsewhere.contains(&r.endpoint) {
            if let Some(h) = self.lock().health(r.endpoint) {
                r.state = h.state;
            }
        }
        r
    }

    /// A tunnel opened through the lease's endpoint to its target: the endpoint and the
    /// target's reachability are proven, a ban inside is not (docs/blame.md). The lease
    /// goes on.
    pub async fn reached(&self, lease: &str) -> Result<State, EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.reached(lease, now, wall))
            .await?;
        Ok(r?)
    }

    /// Report on the endpoint bound to a sticky session; a failure unbinds it.
    pub async fn report_session(
        &self,
        pool: &str,
        session: &str,
        outcome: Outcome,
        on: &ReportOn,
    ) -> Result<Reported, EngineError> {
        let (r, done) = self
            .run(|p, now, wall| p.report_session(pool, session, outcome, on, now, wall))
            .await?;
        self.notify_waiters();
        Ok(self.as_it_is(r?, &done))
    }

    /// `enable --target`: forget what the pools (or `pool`) know of `target`, down or not.
    pub async fn enable_target(
        &self,
        pool: Option<&str>,
        target: &str,
    ) -> Result<Vec<TargetCleared>, EngineError> {
        self.writable()?;
        let (r, _) = self
            .run(|p, now, _| p.enable_target(pool, target, now))
            .await?;
        self.notify_waiters();
        Ok(r?)
    }

    /// Clear one (endpoint, destination) pair; returns the pair's state (`available`).
    pub async fn enable_pair(
        &self,
        id: EndpointId,
        destination: &str,
    ) -> Result<State, EngineError> {
        self.writable()?;
        for tries in 1.. {
            let (r, done) = self
                .run(|p, now, _| p.enable_pair(id, destination, now))
                .await?;
            self.notify_waiters();
            // Changed elsewhere meanwhile: act on what it is now.
            if done.changed_elsewhere.contains(&id) && tries < CLAIM_TRIES {
                continue;
            }
            return Ok(r?);
        }
        unreachable!("the loop returns")
    }
}
