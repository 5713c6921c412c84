//! The durable writes (and their one tracing line) of a pair's acts and transitions.

use tokio::time::Instant;
use tracing::info;

use super::PairStep;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{Health, State, Step};
use crate::store::pairs::{PairRecord, PairWrite};
use crate::store::NewEvent;

/// No pair and none created: only the act is recorded.
pub(super) fn nothing(
    destination: &str,
    id: EndpointId,
    act: Option<NewEvent>,
    status: Option<u16>,
) -> PairStep {
    let mut writes = Vec::new();
    let claim_like = act
        .as_ref()
        .is_some_and(|a| matches!(a.kind, EventKind::TrialAdmitted | EventKind::TrialAbandoned));
    if let (Some(act), false) = (act, claim_like) {
        writes.push(PairWrite::Event {
            destination: destination.to_string(),
            status,
            event: NewEvent {
                endpoint: Some(id),
                from: Some(State::Available),
                to: Some(State::Available),
                ..act
            },
        });
    }
    PairStep {
        step: if claim_like {
            Step::Refused
        } else {
            Step::Recorded { late: false }
        },
        state: State::Available,
        writes,
    }
}

/// The one line of a pair's transition (when the budget of state changes admits it).
pub(super) fn log_transition(name: &str, id: EndpointId, from: State, to: State, h: &Health) {
    info!(
        endpoint = id,
        destination = name,
        from = %from,
        to = %to,
        reason = h.reason.map(|r| r.as_str()).unwrap_or("-"),
        phase = h.phase.map(|p| p.as_str()).unwrap_or("-"),
        "pair state changed"
    );
}

#[allow(clippy::too_many_arguments)]
pub(super) fn transition(
    name: &str,
    id: EndpointId,
    from: State,
    to: State,
    h: &Health,
    status: Option<u16>,
    act: Option<NewEvent>,
    trial: Option<crate::store::Epoch>,
    now: Instant,
) -> PairWrite {
    let (detail, lease, blame) = act
        .map(|a| (a.detail, a.lease, a.blame))
        .unwrap_or_default();
    let event = NewEvent {
        endpoint: Some(id),
        from: Some(from),
        to: Some(to),
        reason: h.reason,
        phase: h.phase,
        detail: detail.or_else(|| h.detail.clone()),
        lease,
        // Only a failure that made the change is blamed: a recovery is nobody's fault.
        blame: blame.filter(|_| to != State::Available),
        ..NewEvent::new(EventKind::StateChanged)
    };
    if to == State::Available {
        return PairWrite::Delete {
            endpoint: id,
            destination: name.to_string(),
            from,
            trial,
            event,
        };
    }
    PairWrite::Upsert(
        PairRecord {
            endpoint: id,
            destination: name.to_string(),
            from,
            trial,
            state: h.state,
            reason: h.reason,
            phase: h.phase,
            status,
            detail: h.detail.clone(),
            streak: h.streak,
            reason_streak: h.reason_streak,
            cooldown_ms: h.cooldown.map(|d| d.as_millis() as u64),
            cooldown_left: h.cooldown_left(now),
        },
        event,
    )
}
