//! Transitions: apply an input to an endpoint, and what each act records.

use tokio::time::Instant;
use tracing::info;

use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::blame::Blame;
use crate::health::{cell, Health, Input, State, Step};
use crate::store::{Claim, ClaimOn, HealthRecord, NewEvent, StoredHealth, Unclaim, Write};

use super::{PoolError, Pools};

/// What caused a transition: its own event row (none when `kind` is `None`, e.g. a plain
/// success), and the lease and detail carried into the `state_changed` row.
#[derive(Debug, Default)]
pub(super) struct Act {
    pub(super) kind: Option<EventKind>,
    pub(super) reason: Option<crate::health::Reason>,
    pub(super) phase: Option<crate::health::Phase>,
    pub(super) detail: Option<String>,
    pub(super) lease: Option<String>,
    /// HTTP status the report carried.
    pub(super) status: Option<u16>,
    /// Whom the failure counted against (docs/blame.md).
    pub(super) blame: Option<Blame>,
    /// A claim's hold in the store: the lease's ttl, or the probe's time (docs/fleet.md).
    pub(super) hold: Option<std::time::Duration>,
    /// The act's row only when the state changed (a periodic probe's success: the
    /// statistics count it, the event log would only repeat it).
    pub(super) only_on_change: bool,
}

/// How long a claim made without a stated hold holds in the store.
pub(super) const DEFAULT_HOLD: std::time::Duration = std::time::Duration::from_secs(60);

impl Pools {
    /// Apply an input to an endpoint, keeping indexes in sync; returns the step and the
    /// writes that record it.
    pub(super) fn apply(
        &mut self,
        id: EndpointId,
        input: Input,
        now: Instant,
        act: Act,
    ) -> (Step, Vec<Write>) {
        let jitter = self.rng.f64() * 2.0 - 1.0;
        self.unindex(id);
        let e = self
            .entries
            .get_mut(&id)
            .expect("caller checked the endpoint");
        let pool = e.pool;
        // Disjoint fields: the policy is borrowed, not cloned, on every transition.
        let policy = &self.pools[e.pool].cfg.policy;
        let stepped = cell::step(&mut e.health, e.claim, input, policy, now, jitter);
        e.claim = stepped.claim;
        let step = stepped.step.clone();
        let h = &e.health;
        let mut writes: Vec<Write> = act_row(id, &stepped, h, &act).into_iter().collect();
        // ...and every change of the persisted state is a `state_changed` row.
        if let Step::Changed { from, to } = step {
            let reason = h.reason.map(|r| r.as_str()).unwrap_or("-");
            if self.budget.admit(now, reason) {
                info!(
                    endpoint = id,
                    from = %from,
                    to = %to,
                    reason,
                    phase = h.phase.map(|p| p.as_str()).unwrap_or("-"),
                    "state changed"
                );
            }
            let reason = h.reason;
            writes.push(transition_row(id, (from, to), h, stepped.settles, act, now));
            if to == State::Available {
                // Slow start counts from here; and it is a candidate it was not.
                e.up_since = now.saturating_duration_since(self.origin).as_millis() as u64;
                self.generation += 1;
                // Back from a cooldown it may leave from another address now.
                self.pools[pool].exits.check_soon(id, now);
            }
            self.count_transition(pool, from, to, reason);
        }
        self.index(id);
        (step, writes)
    }

    /// Move cooling endpoints whose deadline passed to `probe_allowed` and expire leases.
    pub fn advance(&mut self, now: Instant) -> Vec<Write> {
        self.budget.flush(now);
        let mut writes = Vec::new();
        for p in 0..self.pools.len() {
            if self.frozen {
                // The store is away: deadlines wait for it (docs/fleet.md, "Faults").
                break;
            }
            self.lapse_remote_claims(p, now);
            while let Some((d, id)) = self.pools[p].index.next_cooling() {
                if d > now {
                    break;
                }
                let (_, w) = self.apply(id, Input::DeadlinePassed, now, Act::default());
                writes.extend(w);
            }
            let ps = &mut self.pools[p];
            if ps.dests.next_due().is_some_and(|d| d <= now) {
                let w = ps.dests.advance(&ps.cfg.policy, now);
                writes.extend(w.into_iter().map(Write::Pair));
            }
            writes.extend(ps.dests.subnet_events(now).into_iter().map(Write::Pair));
            writes.extend(self.lapse_target_trials(p, now));
        }
        while let Some((lid, l)) = self.leases.pop_expired(now) {
            writes.extend(self.end_lease(lid, l, now, "lease expired"));
        }
        writes
    }

    /// Operator / source / prober input on an endpoint by id.
    pub fn input(
        &mut self,
        id: EndpointId,
        input: Input,
        kind: Option<EventKind>,
        detail: Option<String>,
        now: Instant,
    ) -> (Result<(Step, State), PoolError>, Vec<Write>) {
        let mut writes = self.advance(now);
        if !self.entries.contains_key(&id) {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        }
        let was_claimed = self.entries[&id].health.claimed;
        // An operator's reason can quote the proxy URL: stored redacted, like report details.
        let password = self.entries[&id].url.password.clone().unwrap_or_default();
        let redact = |d: String| crate::redact::redact_text(&d, &[password.as_str()]);
        let input = match input {
            Input::Disable { detail: d } => Input::Disable {
                detail: d.map(redact),
            },
            other => other,
        };
        let detail = detail.map(redact);
        let operator = match &input {
            Input::Disable { .. } => Some("disable"),
            Input::Enable { now: false } => Some("enable"),
            Input::Enable { now: true } => Some("enable --now"),
            _ => None,
        };
        let ev = Act {
            kind,
            detail,
            ..Default::default()
        };
        let (step, w) = self.apply(id, input, now, ev);
        writes.extend(w);
        if let (Step::Refused, Some(action)) = (&step, operator) {
            // Every operator action leaves a row, also one that found nothing to change.
            let h = &self.entries[&id].health;
            writes.push(Write::Event(NewEvent {
                endpoint: Some(id),
                from: Some(h.state),
                to: Some(h.state),
                reason: h.reason,
                detail: Some(format!(
                    "{action}: nothing to change, endpoint is {}",
                    h.state
                )),
                ..NewEvent::new(EventKind::Operator)
            }));
        }
        if matches!(step, Step::Abandoned) {
            // A probe that was the probe target's trial as well gives that back too.
            let p = self.entries[&id].pool;
            self.end_probe_trial(p, id, now);
        }
        if was_claimed && !self.entries[&id].health.claimed {
            // An operator action ended an in-flight trial: its lease no longer is one.
            for l in self.leases.of_endpoint_mut(id) {
                l.trial = false;
            }
        }
        (Ok((step, self.entries[&id].health.state)), writes)
    }
}

/// The row of the act itself (report, probe, trial admission), when it is recorded: a
/// trial's admission is a claim the store confirms (its event written only if it does), a
/// trial handed back gives up its claim.
fn act_row(id: EndpointId, stepped: &cell::Stepped, h: &Health, act: &Act) -> Option<Write> {
    let changed = matches!(stepped.step, Step::Changed { .. });
    let kind = act.kind.filter(|_| changed || !act.only_on_change)?;
    if !stepped.recorded() {
        return None;
    }
    let ev = NewEvent {
        endpoint: Some(id),
        kind,
        from: Some(stepped.from),
        to: Some(h.state),
        reason: act.reason,
        phase: act.phase,
        detail: act.detail.clone(),
        lease: act.lease.clone(),
        blame: act.blame,
    };
    Some(match (&stepped.step, kind, stepped.held, act.status) {
        (Step::Claimed, EventKind::TrialAdmitted, _, _) => Write::Claim(Claim {
            on: ClaimOn::Endpoint(id),
            hold: act.hold.unwrap_or(DEFAULT_HOLD),
            event: ev,
        }),
        (Step::Abandoned, EventKind::TrialAbandoned, Some(epoch), _) => Write::Unclaim(Unclaim {
            on: ClaimOn::Endpoint(id),
            epoch,
            event: ev,
        }),
        (_, _, _, Some(s)) => Write::EventStatus(ev, Some(s)),
        (_, _, _, None) => Write::Event(ev),
    })
}

/// The new persisted state of a transition `(from, to)` and its `state_changed` row; a
/// trial's outcome names the claim it `settles`.
fn transition_row(
    id: EndpointId,
    (from, to): (State, State),
    h: &Health,
    settles: Option<i64>,
    act: Act,
    now: Instant,
) -> Write {
    let rec = HealthRecord {
        id,
        from,
        trial: settles,
        health: StoredHealth::of(h, now),
    };
    let ev = NewEvent {
        endpoint: Some(id),
        kind: EventKind::StateChanged,
        from: Some(from),
        to: Some(to),
        reason: h.reason,
        phase: h.phase,
        detail: act.detail.or_else(|| h.detail.clone()),
        lease: act.lease,
        blame: act.blame.filter(|_| to != State::Available),
    };
    Write::Transition(rec, ev)
}
