//! What evidence does to a pair or a target (docs/blame.md): a success or failure on a
//! pair and its trial given back, a target's trial, up or down, and the pending failures
//! a success confirms.

use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::apply::Act;
use super::destinations::PairInput;
use super::evidence::Settle;
use super::targets::{Judged, Pending, Reached};
use super::Pools;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::blame::Blame;
use crate::health::{Failure, Input, Reason, State, Step};
use crate::store::pairs::PairWrite;
use crate::store::{NewEvent, Write};

impl Pools {
    /// A success or failure on the pair (endpoint `id`, `key`). A success touches only a
    /// pair that is held; a failure creates one. Returns the writes and whether the
    /// pair's trial was decided.
    pub(super) fn pair_input(
        &mut self,
        pool: usize,
        key: &str,
        id: EndpointId,
        what: Result<(), (&Failure, Blame)>,
        lease: Option<String>,
        now: Instant,
    ) -> (Vec<Write>, bool) {
        let trial = self.pools[pool].dests.is_claimed(key, id);
        let (input, status, act) = match what {
            Ok(()) => {
                if self.pools[pool].dests.pair(key, id).is_none() {
                    return (Vec::new(), false);
                }
                let act = NewEvent {
                    lease,
                    ..NewEvent::new(EventKind::Report)
                };
                (Input::Success { trial }, None, act)
            }
            Err((f, blame)) => {
                let act = NewEvent {
                    reason: f.reason,
                    phase: f.phase,
                    detail: f.detail.clone(),
                    lease,
                    blame: Some(blame),
                    ..NewEvent::new(EventKind::Report)
                };
                let input = Input::Failure {
                    failure: f.clone(),
                    trial,
                };
                (input, f.status, act)
            }
        };
        let jitter = self.rng.f64() * 2.0 - 1.0;
        let ps = &mut self.pools[pool];
        let what = PairInput {
            input,
            status,
            act: Some(act),
        };
        let r = ps.dests.apply(key, id, what, &ps.cfg.policy, now, jitter);
        let decided = trial && matches!(r.step, Step::Changed { .. });
        let mut writes: Vec<Write> = r.writes.into_iter().map(Write::Pair).collect();
        // A subnet this ban made suspect is told at once (docs/exit.md).
        writes.extend(ps.dests.subnet_events(now).into_iter().map(Write::Pair));
        (writes, decided)
    }

    /// Give back the trial of pair (endpoint `id`, `key`) that a report did not decide.
    pub(super) fn abandon_pair(
        &mut self,
        pool: usize,
        key: &str,
        id: EndpointId,
        lease: Option<String>,
        now: Instant,
    ) -> Vec<Write> {
        let ps = &mut self.pools[pool];
        let why = "the report did not decide the pair";
        let r = ps.dests.abandon(key, id, why, lease, &ps.cfg.policy, now);
        r.writes.into_iter().map(Write::Pair).collect()
    }

    /// The target's trial (the claim of generation `gen`) ended without an answer about
    /// the target. Nothing when that claim was handed back already (its hold ran out).
    pub(super) fn abandon_target_trial(
        &mut self,
        pool: usize,
        target: &str,
        gen: u32,
        on: &Settle<'_>,
        now: Instant,
    ) -> Vec<Write> {
        if !self.pools[pool].targets.abandon_trial(target, gen, now) {
            return Vec::new();
        }
        vec![target_event(
            target,
            Some(on.id),
            EventKind::TrialAbandoned,
            None,
            "the target's trial got no answer about the target; the next use is the trial",
            on.lease.clone(),
        )]
    }

    /// Hand back the target trials of pool `p` held past the pool's trial hold (docs/blame.md,
    /// "A target that is down"): whatever the lease's ttl, the next use is the trial again.
    pub(super) fn lapse_target_trials(&mut self, p: usize, now: Instant) -> Vec<Write> {
        let ps = &mut self.pools[p];
        if ps.targets.next_lapse().is_none_or(|t| t > now) {
            return Vec::new();
        }
        let hold = ps.cfg.trial_hold();
        let lapsed = ps.targets.lapse(now);
        if ps.probe_trial.is_some() {
            let t = ps.probe_target.as_deref();
            if t.is_some_and(|t| lapsed.iter().any(|l| &**l == t)) {
                ps.probe_trial = None;
            }
        }
        let detail = format!(
            "the target's trial did not decide within {} (the pool's probe timeout and 5 s); the next use is the trial",
            humantime::format_duration(hold)
        );
        lapsed
            .iter()
            .map(|t| target_event(t, None, EventKind::TrialAbandoned, None, &detail, None))
            .collect()
    }

    /// What a success through `by` did to the target: up again, and others' pending
    /// failures confirmed (each cools the pair, or for a probe's the endpoint).
    pub(super) fn apply_reached(
        &mut self,
        pool: usize,
        target: &str,
        by: EndpointId,
        r: Reached,
        lease: Option<String>,
        now: Instant,
    ) -> Vec<Write> {
        let mut writes = Vec::new();
        if let Some(down_for) = r.up {
            if self.budget.admit(now, "-") {
                info!(pool = %self.pools[pool].cfg.name, target, endpoint = by, "target up");
            }
            writes.push(target_event(
                target,
                Some(by),
                EventKind::TargetUp,
                None,
                &format!(
                    "reached through endpoint {by} after {} down",
                    humantime::format_duration(Duration::from_millis(down_for.as_millis() as u64))
                ),
                lease,
            ));
        }
        for p in r.confirmed {
            writes.extend(self.confirm(pool, target, by, p, now));
        }
        for id in r.escalated {
            let live = self
                .entries
                .get(&id)
                .is_some_and(|e| e.pool == pool && e.health.state == State::Available);
            if live {
                let on = Settle {
                    id,
                    ..Settle::default()
                };
                let f = Failure::new(
                    Reason::UpstreamUnreachable,
                    Some(crate::health::Phase::ProxyHandshake),
                );
                writes.extend(self.escalate(&on, &f, target, now));
            }
        }
        writes
    }

    fn confirm(
        &mut self,
        pool: usize,
        target: &str,
        by: EndpointId,
        p: Pending,
        now: Instant,
    ) -> Vec<Write> {
        let live = self
            .entries
            .get(&p.endpoint)
            .is_some_and(|e| e.pool == pool && e.health.state == State::Available);
        if !live {
            return Vec::new();
        }
        let f = p.failure(by);
        if p.endpoint_wide() {
            let ev = Act {
                detail: f.detail.clone(),
                reason: f.reason,
                phase: f.phase,
                blame: Some(Blame::Endpoint),
                ..Default::default()
            };
            let input = Input::Failure {
                failure: f,
                trial: false,
            };
            return self.apply(p.endpoint, input, now, ev).1;
        }
        // One row: the pair's transition, blamed and explained.
        let act = NewEvent {
            reason: f.reason,
            phase: f.phase,
            detail: f.detail.clone(),
            blame: Some(Blame::Pair),
            ..NewEvent::new(EventKind::StateChanged)
        };
        let jitter = self.rng.f64() * 2.0 - 1.0;
        let ps = &mut self.pools[pool];
        let input = Input::Failure {
            failure: f,
            trial: false,
        };
        let what = PairInput {
            input,
            status: None,
            act: Some(act),
        };
        let r = ps
            .dests
            .apply(target, p.endpoint, what, &ps.cfg.policy, now, jitter);
        r.writes.into_iter().map(Write::Pair).collect()
    }

    /// `target_down` when a target went down or its trial failed.
    pub(super) fn target_news(
        &self,
        pool: usize,
        target: &str,
        judged: &Judged,
        f: &Failure,
        lease: Option<String>,
        now: Instant,
    ) -> Option<Write> {
        let next = judged.down_for?;
        let reason = f.reason.map(|r| r.as_str());
        let line = self.budget.admit(now, reason.unwrap_or("-"));
        let next = humantime::format_duration(Duration::from_millis(next.as_millis() as u64));
        let name = &self.pools[pool].cfg.name;
        let detail = if judged.verdict.target_goes_down {
            let n = judged.absolved.len() + 1;
            if line {
                info!(pool = %name, target, endpoints = n, reason, "target down");
            }
            format!("{n} endpoints failed it and none reached it; its trial in {next}")
        } else {
            if line {
                info!(pool = %name, target, reason, "target trial failed");
            }
            format!("its trial failed; the next in {next}")
        };
        Some(Write::Pair(PairWrite::Event {
            destination: target.to_string(),
            status: f.status,
            event: NewEvent {
                reason: f.reason,
                phase: f.phase,
                detail: Some(detail),
                lease,
                blame: Some(Blame::Target),
                ..NewEvent::new(EventKind::TargetDown)
            },
        }))
    }

    /// The pool has no other endpoint in service to contrast with.
    pub(super) fn alone(&self, pool: usize) -> bool {
        self.pools[pool].index.counts().in_service() <= 1
    }
}

/// An event about a target (no pair row): its trial, up, down.
pub(super) fn target_event(
    target: &str,
    endpoint: Option<EndpointId>,
    kind: EventKind,
    reason: Option<Reason>,
    detail: &str,
    lease: Option<String>,
) -> Write {
    Write::Pair(PairWrite::Event {
        destination: target.to_string(),
        status: None,
        event: NewEvent {
            endpoint,
            reason,
            detail: Some(detail.to_string()),
            lease,
            ..NewEvent::new(kind)
        },
    })
}
