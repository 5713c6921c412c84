//! The prober's side of the pools: claiming recovery attempts, the probe target's gate
//! (a probe target that is down is tried through ONE endpoint per its cooldown, and
//! nothing else is probed meanwhile), and recording probe results by whom they count
//! against (docs/blame.md, "Contrast").

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::apply::Act;
use super::evidence::Settle;
use super::targets::{Admission, Failed};
use super::{Outcome, PoolError, Pools};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::health::blame::{classify, Blame, Class};
use crate::health::{Failure, Input, State, Step};
use crate::store::Write;

/// Who ran a probe, which decides what its result may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeRole {
    /// A periodic check of an available endpoint.
    Check,
    /// The claimed single recovery attempt.
    Trial,
    /// `proxypool probe`: its success ends a cooldown.
    Operator,
}

/// The probe target's key of a probe URL: `host:port`, the port from the scheme when the
/// URL names none.
pub(super) fn probe_target(url: Option<&str>) -> Option<Box<str>> {
    let uri: hyper::Uri = url?.parse().ok()?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let place = super::destinations::Place::at(uri.host()?, port).ok()?;
    Some(place.target.into())
}

/// Which endpoint a probe went through, who ran it, and the pool's probe target with
/// the target's trial if this probe was it.
struct Probed {
    p: usize,
    id: EndpointId,
    role: ProbeRole,
    target: Option<Box<str>>,
    target_trial: Option<u32>,
    now: Instant,
}

impl Pools {
    /// Whether a probe of pool `p` may run now, and if it is the probe target's trial:
    /// `Err(retry_after)` while the target is down.
    fn probe_gate(&mut self, p: usize, id: EndpointId, now: Instant) -> Result<(), Duration> {
        let ps = &mut self.pools[p];
        let Some(t) = ps.probe_target.as_deref() else {
            return Ok(());
        };
        match ps.targets.admit(t, now) {
            Admission::Go { .. } => Ok(()),
            Admission::Trial(gen) => {
                ps.probe_trial = Some((id, gen));
                Ok(())
            }
            Admission::Down { retry_after, .. } => Err(retry_after),
        }
    }

    /// When the probe target of `pool` is down: the time until its trial (the next probe
    /// of the pool that will run).
    pub fn probe_target_down(&self, pool: &str, now: Instant) -> Option<Duration> {
        let &p = self.by_name.get(pool)?;
        let ps = &self.pools[p];
        ps.targets.down_for(ps.probe_target.as_deref()?, now)
    }

    /// Admit one probe of endpoint `id` (a periodic check, or a probe of one endpoint):
    /// refused, with the time until the probe target's trial, while it is down.
    pub fn probe_admit(&mut self, id: EndpointId, now: Instant) -> Result<(), Duration> {
        let Some(p) = self.entries.get(&id).map(|e| e.pool) else {
            return Ok(());
        };
        self.probe_gate(p, id, now)
    }

    /// Claim the recovery attempt of the next `probe_allowed` endpoint of a pool (prober).
    /// Nothing is claimed while the pool's probe target is down, but for its one trial.
    pub fn claim_next(
        &mut self,
        pool: &str,
        now: Instant,
    ) -> (Option<(EndpointId, ProxyUrl)>, Vec<Write>) {
        let mut writes = self.advance(now);
        let Some(&p) = self.by_name.get(pool) else {
            return (None, writes);
        };
        if self.frozen {
            return (None, writes);
        }
        let Some(id) = self.pools[p].index.oldest_trial() else {
            return (None, writes);
        };
        if self.probe_gate(p, id, now).is_err() {
            return (None, writes);
        }
        let ev = Act {
            kind: Some(EventKind::TrialAdmitted),
            detail: Some("probe".into()),
            hold: Some(self.pools[p].cfg.trial_hold()),
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Claim, now, ev);
        writes.extend(w);
        if step == Step::Claimed {
            (Some((id, self.entries[&id].url.clone())), writes)
        } else {
            self.end_probe_trial(p, id, now);
            (None, writes)
        }
    }

    /// Try to claim one specific endpoint's recovery attempt.
    pub fn try_claim(&mut self, id: EndpointId, now: Instant) -> (bool, Vec<Write>) {
        let mut writes = self.advance(now);
        let Some(p) = self.entries.get(&id).map(|e| e.pool) else {
            return (false, writes);
        };
        if self.frozen {
            return (false, writes);
        }
        let ev = Act {
            kind: Some(EventKind::TrialAdmitted),
            hold: Some(self.pools[p].cfg.trial_hold()),
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Claim, now, ev);
        writes.extend(w);
        (step == Step::Claimed, writes)
    }

    /// The pool (index) of an endpoint.
    pub(super) fn pool_index_of(&self, id: EndpointId) -> Option<usize> {
        self.entries.get(&id).map(|e| e.pool)
    }

    /// The probe of `id` that was the probe target's trial ended without an answer.
    pub(super) fn end_probe_trial(&mut self, p: usize, id: EndpointId, now: Instant) {
        let ps = &mut self.pools[p];
        if let Some((_, gen)) = ps.probe_trial.filter(|&(by, _)| by == id) {
            ps.probe_trial = None;
            if let Some(t) = ps.probe_target.as_deref() {
                ps.targets.abandon_trial(t, gen, now);
            }
        }
    }

    /// Record a probe result; `trial` when it was a claimed recovery attempt.
    pub fn probe_result(
        &mut self,
        id: EndpointId,
        outcome: Outcome,
        trial: bool,
        detail: Option<String>,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        let role = if trial {
            ProbeRole::Trial
        } else {
            ProbeRole::Check
        };
        self.probe_result_as(id, outcome, role, detail, now, wall)
    }

    /// Record a probe result, by who ran it. A failure to reach the probe target is
    /// judged by contrast with the pool's other endpoints: until it is known to be this
    /// endpoint's, it changes nothing.
    pub fn probe_result_as(
        &mut self,
        id: EndpointId,
        outcome: Outcome,
        role: ProbeRole,
        detail: Option<String>,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        let trial = role == ProbeRole::Trial;
        let mut writes = self.advance(now);
        let Some(p) = self.entries.get(&id).map(|e| e.pool) else {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        };
        if trial && self.claimed_remotely(id) {
            // Our probe's claim lapsed and another daemon holds the trial now.
            return (Err(PoolError::StaleClaim(format!("endpoint {id}"))), writes);
        }
        let probed = Probed {
            p,
            id,
            role,
            target_trial: self.take_probe_trial(p, id),
            target: self.pools[p].probe_target.clone(),
            now,
        };
        let failure = match &outcome {
            Outcome::Failure(f) => Some(f.reason),
            Outcome::Success => None,
        };
        self.count_outcome(id, failure, None, wall, false);
        writes.extend(match outcome {
            Outcome::Success => self.probe_succeeded(&probed, detail),
            Outcome::Failure(f) => self.probe_failed(&probed, &f, detail),
        });
        (Ok(self.entries[&id].health.state), writes)
    }

    /// A probe reached the probe target through `id`.
    fn probe_succeeded(&mut self, probed: &Probed, detail: Option<String>) -> Vec<Write> {
        let Probed {
            p, id, role, now, ..
        } = *probed;
        let mut writes = Vec::new();
        if let Some(t) = probed.target.as_deref() {
            let r = self.pools[p].targets.reached(t, id, now);
            writes.extend(self.apply_reached(p, t, id, r, None, now));
        }
        let input = if role == ProbeRole::Operator {
            // An operator's probe is an operator act: it ends a cooldown.
            Input::OperatorProbeSuccess
        } else {
            Input::Success {
                trial: role == ProbeRole::Trial,
            }
        };
        let ev = Act {
            kind: Some(EventKind::ProbeSuccess),
            detail,
            // A periodic or recovery probe's success is a row only when it changed the
            // state; an operator's probe always leaves one.
            only_on_change: role != ProbeRole::Operator,
            ..Default::default()
        };
        writes.extend(self.apply(id, input, now, ev).1);
        writes
    }

    /// A probe through `id` failed with `f`: judged by contrast first, and only a
    /// failure that is the endpoint's counts against it.
    fn probe_failed(&mut self, probed: &Probed, f: &Failure, detail: Option<String>) -> Vec<Write> {
        let Probed {
            p, id, role, now, ..
        } = *probed;
        let target = probed.target.as_deref();
        let (blame, mut writes) = self.probe_blame(p, id, f, target, probed.target_trial, now);
        self.count_blame(p, blame);
        // An operator's failed probe is an ordinary non-trial failure, which never extends
        // a cooldown.
        let input = match blame {
            Blame::Endpoint => Input::Failure {
                failure: f.clone(),
                trial: role == ProbeRole::Trial,
            },
            // Not this endpoint's: a recovery probe gives its attempt back.
            _ => Input::Abandon,
        };
        let ev = Act {
            kind: Some(EventKind::ProbeFailure),
            reason: f.reason,
            phase: f.phase,
            detail: detail.or_else(|| f.detail.clone()),
            blame: Some(blame),
            ..Default::default()
        };
        let (step, w) = self.apply(id, input, now, ev);
        writes.extend(w);
        if step == Step::Refused {
            // Nothing to give back (a periodic check): the event still says what happened
            // and whom it counted against.
            writes.push(self.probe_event(id, f, blame));
        }
        writes
    }

    /// The probe target's trial, when `id`'s probe was it (by the claim's generation): a
    /// result ends it.
    fn take_probe_trial(&mut self, p: usize, id: EndpointId) -> Option<u32> {
        let ps = &mut self.pools[p];
        let (_, gen) = ps.probe_trial.filter(|&(by, _)| by == id)?;
        ps.probe_trial = None;
        Some(gen)
    }

    /// Whom a probe failure counts against: the endpoint, unless it is a failure to reach
    /// the probe target, which is judged by contrast.
    fn probe_blame(
        &mut self,
        p: usize,
        id: EndpointId,
        f: &Failure,
        target: Option<&str>,
        target_trial: Option<u32>,
        now: Instant,
    ) -> (Blame, Vec<Write>) {
        let reason = f.reason.expect("a probe failure has a reason");
        let class = classify(reason, f.phase, target.is_some(), true);
        let (Class::Unreachable | Class::Certificate, Some(t)) = (class, target) else {
            if let (Some(g), Some(t)) = (target_trial, target) {
                let on = Settle {
                    id,
                    ..Settle::default()
                };
                return (
                    Blame::Endpoint,
                    self.abandon_target_trial(p, t, g, &on, now),
                );
            }
            return (Blame::Endpoint, Vec::new());
        };
        let failed = Failed {
            endpoint: id,
            class,
            failure: f,
            probe: true,
            alone: self.alone(p),
            trial: target_trial,
            pair_trial: false,
        };
        let jitter = self.rng.f64() * 2.0 - 1.0;
        let judged = self.pools[p].targets.failed(t, failed, now, jitter);
        let writes = self
            .target_news(p, t, &judged, f, None, now)
            .into_iter()
            .collect();
        (judged.verdict.blame, writes)
    }

    fn probe_event(&self, id: EndpointId, f: &Failure, blame: Blame) -> Write {
        let state = self.entries[&id].health.state;
        Write::Event(crate::store::NewEvent {
            endpoint: Some(id),
            from: Some(state),
            to: Some(state),
            reason: f.reason,
            phase: f.phase,
            detail: f.detail.clone(),
            blame: Some(blame),
            ..crate::store::NewEvent::new(EventKind::ProbeFailure)
        })
    }
}
