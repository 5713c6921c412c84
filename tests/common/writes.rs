//! Store writes for the tests that drive a `Store` directly (tests/store_backends.rs,
//! tests/fleet_commit.rs).

use std::time::Duration;

use proxypool::event_kind::EventKind;
use proxypool::health::{Phase, Reason, State};
use proxypool::store::pairs::{PairRecord, PairWrite};
use proxypool::store::{NewEvent, StoredHealth};

/// The pair of `endpoint` and `dest` cooled for a minute after an HTTP 403, from `from`:
/// a row inserted when `from` is available, else updated from it.
pub fn pair_cooled(endpoint: i64, dest: &str, from: State) -> PairWrite {
    PairWrite::Upsert(
        PairRecord {
            endpoint,
            destination: dest.into(),
            from,
            trial: None,
            health: StoredHealth {
                state: State::Cooling,
                reason: Some(Reason::DestinationStatus),
                phase: Some(Phase::ResponseHead),
                detail: Some("HTTP 403".into()),
                streak: 1,
                reason_streak: 1,
                cooldown_ms: Some(60_000),
                cooldown_left: Some(Duration::from_secs(60)),
            },
            status: Some(403),
        },
        NewEvent {
            endpoint: Some(endpoint),
            from: Some(from),
            to: Some(State::Cooling),
            ..NewEvent::new(EventKind::StateChanged)
        },
    )
}
