//! The prober's and the operators' side: claims of recovery attempts, probe results,
//! inputs to one endpoint, writes that are not transitions.

use std::time::Duration;

use tokio::time::Instant;

use super::{Engine, EngineError, CLAIM_TRIES};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::health::{Input, State, Step};

use crate::pool::{Outcome, ProbeRole};
use crate::store::{ClaimOn, Write};

impl Engine {
    /// Apply an operator or source input to an endpoint.
    pub async fn input(
        &self,
        id: EndpointId,
        input: Input,
        kind: Option<EventKind>,
        detail: Option<String>,
    ) -> Result<(Step, State), EngineError> {
        self.writable()?;
        for tries in 1.. {
            let (r, done) = self
                .run(|p, now, _| p.input(id, input.clone(), kind, detail.clone(), now))
                .await?;
            self.notify_waiters();
            // Changed elsewhere meanwhile (another daemon, a CLI command): the act applies
            // to what the endpoint is now.
            if done.changed_elsewhere.contains(&id) && tries < CLAIM_TRIES {
                continue;
            }
            return Ok(r?);
        }
        unreachable!("the loop returns")
    }

    /// Claim the next recovery attempt of a pool (prober).
    pub async fn claim_next(
        &self,
        pool: &str,
    ) -> Result<Option<(EndpointId, ProxyUrl)>, EngineError> {
        let (claimed, done) = self.run(|p, now, _| p.claim_next(pool, now)).await?;
        // Another daemon probes it: the prober looks for the next one.
        Ok(claimed.filter(|(id, _)| !done.lost.contains(&ClaimOn::Endpoint(*id))))
    }

    /// Persist writes that are not transitions (pool-level events), in order.
    pub async fn record(&self, writes: Vec<Write>) -> Result<(), EngineError> {
        self.writable()?;
        self.with(|_, _, _| ((), writes)).await
    }

    /// Admit a probe of `id`: refused, with the time until its trial, while the pool's
    /// probe target is down; the one probe admitted then is the target's trial.
    pub fn probe_admit(&self, id: EndpointId) -> Result<(), Duration> {
        self.lock().probe_admit(id, Instant::now())
    }

    /// When the pool's probe target is down: the time until its trial.
    pub fn probe_target_down(&self, pool: &str) -> Option<Duration> {
        self.lock().probe_target_down(pool, Instant::now())
    }

    /// A probe admitted by `probe_admit` did not run: give back the probe target's trial
    /// if it was that.
    pub fn probe_cancel(&self, id: EndpointId) {
        let mut p = self.lock();
        if let Some(pool) = p.pool_index_of(id) {
            p.end_probe_trial(pool, id, Instant::now());
        }
    }

    /// Try to take one endpoint's single recovery attempt.
    pub async fn try_claim(&self, id: EndpointId) -> Result<bool, EngineError> {
        let (won, done) = self.run(|p, now, _| p.try_claim(id, now)).await?;
        Ok(won && !done.lost.contains(&ClaimOn::Endpoint(id)))
    }

    /// Resolves on the next change that may make an endpoint leasable or probeable.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    /// Record a probe result.
    pub async fn probe_result(
        &self,
        id: EndpointId,
        outcome: Outcome,
        trial: bool,
        detail: Option<String>,
    ) -> Result<State, EngineError> {
        let role = if trial {
            ProbeRole::Trial
        } else {
            ProbeRole::Check
        };
        self.probe_result_as(id, outcome, role, detail).await
    }

    /// Record a probe result, by who ran it.
    pub async fn probe_result_as(
        &self,
        id: EndpointId,
        outcome: Outcome,
        role: ProbeRole,
        detail: Option<String>,
    ) -> Result<State, EngineError> {
        self.writable()?;
        let (r, done) = self
            .run(|p, now, wall| p.probe_result_as(id, outcome, role, detail, now, wall))
            .await?;
        self.notify_waiters();
        let state = r?;
        if done.changed_elsewhere.contains(&id) {
            return Ok(self.lock().health(id).map_or(state, |h| h.state));
        }
        Ok(state)
    }

    /// Hand a claimed probe attempt back without an outcome.
    pub async fn abandon(&self, id: EndpointId, why: &str) -> Result<(), EngineError> {
        self.input(
            id,
            Input::Abandon,
            Some(EventKind::TrialAbandoned),
            Some(why.to_string()),
        )
        .await
        .map(|_| ())
    }
}
