//! A report's evidence, applied to what it speaks for (docs/blame.md): the endpoint, an
//! (endpoint, host) or (endpoint, target) pair, the target — or nobody yet. Whom a
//! failure counts against is decided by `health::blame` and `targets`; this file carries
//! the decision out on the pools and records what it did.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::info;

use super::apply::Act;
use super::targets::Failed;
use super::{Outcome, Pools};
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::blame::{classify, slows_down, Blame, Class};
use crate::health::{Failure, Input, Reason, State, Step};
use crate::store::pairs::PairWrite;
use crate::store::{NewEvent, Write};

/// Whom a report is about, and what its lease holds.
#[derive(Debug, Default)]
pub(super) struct Settle<'a> {
    pub(super) id: EndpointId,
    /// The lease is the endpoint's single recovery attempt.
    pub(super) trial: bool,
    /// The pair (host or target key) whose trial the lease holds.
    pub(super) pair_trial: Option<&'a str>,
    /// The lease is the target's single trial: the claim's generation.
    pub(super) target_trial: Option<u32>,
    /// Where the use went: the host (bans) and the target (reachability).
    pub(super) host: Option<&'a str>,
    pub(super) target: Option<&'a str>,
    pub(super) lease: Option<String>,
    /// How long the use took, when the client said (the latency estimate).
    pub(super) took: Option<Duration>,
}

/// What a success proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proof {
    /// The destination answered: the endpoint, the target and the host's ban pair.
    Answer,
    /// A tunnel opened: the endpoint works and the target is reachable through it; it
    /// says nothing about a ban inside.
    Tunnel,
}

/// What settling a report did.
#[derive(Debug, Default)]
pub(super) struct Settled {
    /// Whom a failure counted against (none for a success).
    pub(super) blame: Option<Blame>,
    pub(super) writes: Vec<Write>,
    /// Trials the report decided: a lease that goes on (a tunnel) no longer holds them.
    pub(super) endpoint_trial_decided: bool,
    pub(super) pair_trial_decided: bool,
    pub(super) target_trial_decided: bool,
}

impl Pools {
    /// Apply a report's outcome to what it speaks for.
    pub(super) fn settle(
        &mut self,
        on: Settle<'_>,
        outcome: Outcome,
        proof: Proof,
        now: Instant,
        wall: SystemTime,
    ) -> Settled {
        let id = on.id;
        let outcome = match outcome {
            Outcome::Failure(mut f) => {
                // Scrapers paste exception texts holding the proxy URL: never store them raw.
                let known = [self.entries[&id]
                    .url
                    .password
                    .as_deref()
                    .unwrap_or_default()];
                f.detail = f.detail.map(|d| crate::redact::redact_text(&d, &known));
                Outcome::Failure(f)
            }
            success => success,
        };
        let failure = match &outcome {
            Outcome::Failure(f) => Some(f.reason),
            Outcome::Success => None,
        };
        self.count_outcome(id, failure, on.took, wall, true);
        let settled = match outcome {
            Outcome::Success => self.settle_success(&on, proof, now),
            Outcome::Failure(f) => self.settle_failure(&on, f, now),
        };
        if let Some(b) = settled.blame {
            let pool = self.entries.get(&id).map(|e| e.pool);
            if let Some(p) = pool {
                self.count_blame(p, b);
            }
        }
        settled
    }

    fn settle_success(&mut self, on: &Settle<'_>, proof: Proof, now: Instant) -> Settled {
        let id = on.id;
        let pool = self.entries[&id].pool;
        let mut out = Settled::default();
        match on.target {
            Some(t) => {
                // A tunnel's open verified no certificate.
                let verified = proof == Proof::Answer;
                let r = self.pools[pool].targets.reached_as(t, id, now, verified);
                let w = self.apply_reached(pool, t, id, r, on.lease.clone(), now);
                out.writes.extend(w);
                out.target_trial_decided = on.target_trial.is_some();
            }
            None => self.pools[pool].targets.endpoint_succeeded(id),
        }
        // The target's pair takes any success (it is about reaching it); the host's ban
        // pair only an answer from the destination.
        let host = on
            .host
            .filter(|h| proof == Proof::Answer && Some(*h) != on.target);
        if let (Proof::Answer, Some(h)) = (proof, on.host) {
            // The host answered: a widened pacing narrows again.
            self.pools[pool].pace.success(h, id);
        }
        for key in [on.target, host].into_iter().flatten() {
            let (w, decided) = self.pair_input(pool, key, id, Ok(()), on.lease.clone(), now);
            out.writes.extend(w);
            out.pair_trial_decided |= decided && on.pair_trial == Some(key);
        }
        if let Some(k) = on.pair_trial {
            // A ban's trial through a tunnel waits for a report (or its verdict window).
            let waits = proof == Proof::Tunnel && on.host == Some(k) && on.target != Some(k);
            if !waits && !out.pair_trial_decided {
                out.writes
                    .extend(self.abandon_pair(pool, k, id, on.lease.clone(), now));
            }
        }
        let h = &self.entries[&id].health;
        let (cur_state, cur_streak) = (h.state, h.streak);
        // A plain success on a healthy endpoint changes nothing worth a row.
        let quiet = cur_state == State::Available && cur_streak == 0;
        let ev = Act {
            kind: (!quiet).then_some(EventKind::Report),
            lease: on.lease.clone(),
            detail: (!on.trial && cur_state != State::Available)
                .then(|| format!("late result ignored: endpoint is {cur_state}")),
            ..Default::default()
        };
        let (step, w) = self.apply(id, Input::Success { trial: on.trial }, now, ev);
        out.writes.extend(w);
        out.endpoint_trial_decided = on.trial && matches!(step, Step::Changed { .. });
        if let Step::Recorded { late: true } = step {
            info!(endpoint = id, state = %cur_state, "late result ignored");
        }
        out
    }

    fn settle_failure<'a>(&mut self, on: &Settle<'a>, f: Failure, now: Instant) -> Settled {
        let id = on.id;
        let pool = self.entries[&id].pool;
        let reason = f.reason.expect("callers check the reason");
        let has_place = on.host.is_some() || on.target.is_some();
        let mut out = Settled::default();
        // Whom it counts against, and the key of the pair it decided, if any.
        let (blame, decided_key) = match classify(reason, f.phase, has_place, false) {
            Class::Proxy => {
                if let (Some(g), Some(t)) = (on.target_trial, on.target) {
                    let w = self.abandon_target_trial(pool, t, g, on, now);
                    out.writes.extend(w);
                }
                let w = self.endpoint_failure(on, f, Blame::Endpoint, now);
                out.writes.extend(w);
                (Blame::Endpoint, None)
            }
            Class::Ban if self.slows_down(pool, on, &f) => {
                self.slow_at_destination(pool, on, &f, &mut out, now);
                (Blame::Pair, None)
            }
            Class::Ban | Class::Destination => {
                let key = self.fail_at_destination(pool, on, &f, &mut out, now);
                (Blame::Pair, Some(key))
            }
            class @ (Class::Refused | Class::Unreachable | Class::Certificate) => {
                self.fail_to_reach(pool, on, class, &f, &mut out, now)
            }
        };
        if on.trial && blame != Blame::Endpoint && !out.endpoint_trial_decided {
            // The proxy did its part; a trial of the endpoint got no answer about it.
            let ev = Act {
                kind: Some(EventKind::TrialAbandoned),
                detail: Some(format!("the failure was the {}'s", blame_owner(blame))),
                lease: on.lease.clone(),
                ..Default::default()
            };
            out.writes.extend(self.apply(id, Input::Abandon, now, ev).1);
        }
        if let Some(k) = on.pair_trial.filter(|k| decided_key != Some(*k)) {
            out.writes
                .extend(self.abandon_pair(pool, k, id, on.lease.clone(), now));
        }
        out.blame = Some(blame);
        out
    }

    /// The one rule of slow-down (docs/blame.md, "Slow down, not banned"): the pool paces
    /// with `slow_down`, the use named its host, and the answer asks to slow down.
    fn slows_down(&self, pool: usize, on: &Settle<'_>, f: &Failure) -> bool {
        let reason = f.reason.expect("callers check the reason");
        on.host.is_some()
            && self.pools[pool].pace.slows_down()
            && slows_down(reason, f.status, f.retry_after)
    }

    /// The destination asked to slow down: the (endpoint, host) pair's pacing widens and
    /// nothing is banned. Reaching it is evidence about the target, as for a ban.
    fn slow_at_destination(
        &mut self,
        pool: usize,
        on: &Settle<'_>,
        f: &Failure,
        out: &mut Settled,
        now: Instant,
    ) {
        if let Some(t) = on.target {
            let r = self.pools[pool].targets.reached(t, on.id, now);
            let w = self.apply_reached(pool, t, on.id, r, on.lease.clone(), now);
            out.writes.extend(w);
            out.target_trial_decided = on.target_trial.is_some();
        }
        let host = on.host.expect("slows_down checked the host");
        let slowed = self.pools[pool]
            .pace
            .slow_down(host, on.id, f.retry_after, now);
        let said = f.detail.clone().unwrap_or_default();
        let detail = match slowed {
            Some(s) => format!(
                "slowed down, not banned: this endpoint uses {host} at most every {} now, the next use in {}{}{said}",
                fmt_ms(s.spacing),
                fmt_ms(s.until),
                if said.is_empty() { "" } else { "; " },
            ),
            None => said,
        };
        let shown = Failure {
            detail: Some(detail),
            ..f.clone()
        };
        out.writes
            .push(self.unblamed_report(on, &shown, host, Blame::Pair));
    }

    /// A ban, or a break after the destination was reached: the (endpoint, host) pair.
    /// Reaching it is evidence about the target too. Returns the pair's key.
    fn fail_at_destination<'a>(
        &mut self,
        pool: usize,
        on: &Settle<'a>,
        f: &Failure,
        out: &mut Settled,
        now: Instant,
    ) -> &'a str {
        if let Some(t) = on.target {
            // Broken in the TLS handshake: the certificate was not verified through it.
            let verified = f.phase != Some(crate::health::Phase::DestinationTls);
            let r = self.pools[pool].targets.reached_as(t, on.id, now, verified);
            let w = self.apply_reached(pool, t, on.id, r, on.lease.clone(), now);
            out.writes.extend(w);
            out.target_trial_decided = on.target_trial.is_some();
        }
        let key = on.host.or(on.target).expect("a place was named");
        let fail = Err((f, Blame::Pair));
        let (w, decided) = self.pair_input(pool, key, on.id, fail, on.lease.clone(), now);
        out.writes.extend(w);
        out.pair_trial_decided = decided && on.pair_trial == Some(key);
        key
    }

    /// The proxy refused the target, or could not reach it: judged by contrast with the
    /// pool's other endpoints. Returns the blame and the pair it decided, if any.
    fn fail_to_reach<'a>(
        &mut self,
        pool: usize,
        on: &Settle<'a>,
        class: Class,
        f: &Failure,
        out: &mut Settled,
        now: Instant,
    ) -> (Blame, Option<&'a str>) {
        let t = on.target.or(on.host).expect("a place was named");
        let failed = Failed {
            endpoint: on.id,
            class,
            failure: f,
            probe: false,
            alone: self.alone(pool),
            trial: on.target_trial,
            pair_trial: on.pair_trial == Some(t),
        };
        let jitter = self.rng.f64() * 2.0 - 1.0;
        let judged = self.pools[pool].targets.failed(t, failed, now, jitter);
        let blame = judged.verdict.blame;
        out.target_trial_decided = on.target_trial.is_some() && blame == Blame::Target;
        let mut decided_key = None;
        match blame {
            Blame::Pair => {
                let fail = Err((f, Blame::Pair));
                let (w, decided) = self.pair_input(pool, t, on.id, fail, on.lease.clone(), now);
                out.writes.extend(w);
                out.pair_trial_decided = decided && on.pair_trial == Some(t);
                decided_key = Some(t);
            }
            // Probes only; a report's confirmed failure is its pair's.
            Blame::Endpoint => {
                let w = self.endpoint_failure(on, f.clone(), blame, now);
                out.writes.extend(w);
            }
            Blame::Pending | Blame::Target => {
                out.writes.push(self.unblamed_report(on, f, t, blame));
                out.writes
                    .extend(self.target_news(pool, t, &judged, f, on.lease.clone(), now));
            }
        }
        (blame, decided_key)
    }

    /// A failure that counts against the endpoint itself.
    fn endpoint_failure(
        &mut self,
        on: &Settle<'_>,
        f: Failure,
        blame: Blame,
        now: Instant,
    ) -> Vec<Write> {
        let id = on.id;
        let h = &self.entries[&id].health;
        let cur_state = h.state;
        let ev = Act {
            kind: Some(EventKind::Report),
            lease: on.lease.clone(),
            detail: f.detail.clone().or_else(|| {
                (!on.trial && cur_state != State::Available)
                    .then(|| format!("late result ignored: endpoint is {cur_state}"))
            }),
            reason: f.reason,
            phase: f.phase,
            status: f.status,
            blame: Some(blame),
            hold: None,
            only_on_change: false,
        };
        let input = Input::Failure {
            failure: f,
            trial: on.trial,
        };
        let (step, w) = self.apply(id, input, now, ev);
        if let Step::Recorded { late: true } = step {
            info!(endpoint = id, state = %cur_state, "late result ignored");
        }
        w
    }

    /// The `report` event of a failure that changed nobody's health (pending, the
    /// target's, a slow-down), with the target or host it was about.
    fn unblamed_report(&self, on: &Settle<'_>, f: &Failure, target: &str, blame: Blame) -> Write {
        let state = self.entries[&on.id].health.state;
        Write::Pair(PairWrite::Event {
            destination: target.to_string(),
            status: f.status,
            event: NewEvent {
                endpoint: Some(on.id),
                from: Some(state),
                to: Some(state),
                reason: f.reason,
                phase: f.phase,
                detail: f.detail.clone(),
                lease: on.lease.clone(),
                blame: Some(blame),
                ..NewEvent::new(EventKind::Report)
            },
        })
    }

    /// Escalation: the endpoint fails, on `escalate_after` distinct targets, what other
    /// endpoints reach; it reaches nothing and cools endpoint-wide.
    pub(super) fn escalate(
        &mut self,
        on: &Settle<'_>,
        f: &Failure,
        last: &str,
        now: Instant,
    ) -> Vec<Write> {
        let pool = self.entries[&on.id].pool;
        let n = self.pools[pool].cfg.blame.escalate_after;
        info!(
            endpoint = on.id,
            targets = n,
            last,
            "endpoint reaches nothing others reach"
        );
        let failure = Failure {
            reason: Some(Reason::UpstreamUnreachable),
            phase: f.phase,
            detail: Some(format!(
                "failed {n} distinct targets that other endpoints reached after it (the last: {last})"
            )),
            ..Failure::default()
        };
        // An endpoint trial, if the lease was one, is decided by this very failure.
        let on = Settle {
            id: on.id,
            trial: on.trial,
            lease: on.lease.clone(),
            ..Settle::default()
        };
        self.endpoint_failure(&on, failure, Blame::Endpoint, now)
    }
}

fn fmt_ms(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
}

fn blame_owner(b: Blame) -> &'static str {
    match b {
        Blame::Endpoint => "endpoint",
        Blame::Pair => "pair",
        Blame::Target => "target",
        Blame::Pending => "target (pending contrast)",
    }
}
