//! The durable writes (and their one tracing line) of a pair's acts and transitions.

use tokio::time::Instant;
use tracing::info;

use super::PairStep;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
use crate::health::{cell, Health, State, Step};
use crate::store::pairs::{PairRecord, PairWrite};
use crate::store::{NewEvent, StoredHealth};

/// No pair and none created (`note`: why, when the pair table was full): only the act is
/// recorded, with the note.
pub(super) fn nothing(
    destination: &str,
    id: EndpointId,
    act: Option<NewEvent>,
    status: Option<u16>,
    note: Option<String>,
) -> PairStep {
    let act = act.map(|mut a| {
        if let Some(note) = note {
            let what = a.detail.as_deref().unwrap_or("failure");
            a.detail = Some(format!("{what}; not recorded: {note}"));
        }
        a
    });
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

/// The row of the act itself on the pair named `name`, when it is recorded. An act of
/// kind `state_changed` is only the template of the transition's row.
pub(super) fn act(
    name: &str,
    id: EndpointId,
    stepped: &cell::Stepped,
    state: State,
    status: Option<u16>,
    act: Option<&NewEvent>,
) -> Option<PairWrite> {
    let act = act.filter(|a| a.kind != EventKind::StateChanged)?;
    stepped.recorded().then(|| PairWrite::Event {
        destination: name.to_string(),
        status,
        event: NewEvent {
            endpoint: Some(id),
            from: Some(stepped.from),
            to: Some(state),
            ..act.clone()
        },
    })
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

/// The durable write of a pair's change from `from` to the state of `h` (the health after
/// the step).
pub(super) fn transition(
    (name, id): (&str, EndpointId),
    from: State,
    h: &Health,
    status: Option<u16>,
    act: Option<NewEvent>,
    trial: Option<crate::store::Epoch>,
    now: Instant,
) -> PairWrite {
    let to = h.state;
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
            health: StoredHealth::of(h, now),
            status,
        },
        event,
    )
}
