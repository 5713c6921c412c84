//! `fall` (docs/destinations.md, "`fall`") through `Pools`: the failures before the N-th
//! write a `report` event and change no state; the N-th cools with the first cooldown; a
//! success resets.

mod common;

use std::time::{Duration, SystemTime};

use proxypool::config::Mode;
use proxypool::health::{Failure, Phase, Reason, State};
use proxypool::pool::{Outcome, Pools};
use proxypool::store::Write;
use tokio::time::Instant;

use common::vpool::{endpoint_row, pool_config};

const BASE: Duration = Duration::from_secs(60);

fn pools(fall: u32) -> Pools {
    let mut cfg = pool_config("p", Mode::StaticNoPing, BASE, Duration::from_secs(1800));
    cfg.policy.fall = fall;
    let mut p = Pools::new([cfg]);
    p.insert_row(&endpoint_row(1, "p", State::Available), Instant::now());
    p
}

/// Lease and report one use; returns the state after and the kinds written.
fn use_once(p: &mut Pools, outcome: Outcome) -> (State, Vec<&'static str>) {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let (g, _) = p.lease("p", Duration::from_secs(30), None, now);
    let g = g.unwrap();
    let (state, writes) = p.report(&g.lease, outcome, now, wall);
    let kinds = writes
        .iter()
        .map(|w| match w {
            Write::Transition(_, ev) => ev.kind.as_str(),
            Write::Event(ev) => ev.kind.as_str(),
            _ => "other",
        })
        .collect();
    (state.unwrap(), kinds)
}

fn reset() -> Outcome {
    Outcome::Failure(Failure::new(
        Reason::ConnectionReset,
        Some(Phase::ResponseBody),
    ))
}

#[tokio::test(start_paused = true)]
async fn third_consecutive_failure_cools_and_success_resets() {
    let mut p = pools(3);
    for _ in 0..2 {
        assert_eq!(
            use_once(&mut p, reset()),
            (State::Available, vec!["report"])
        );
    }
    // A success in between starts the count again.
    use_once(&mut p, Outcome::Success);
    for _ in 0..2 {
        assert_eq!(use_once(&mut p, reset()).0, State::Available);
    }
    let t = Instant::now();
    assert_eq!(
        use_once(&mut p, reset()),
        (State::Cooling, vec!["report", "state_changed"])
    );
    let h = p.health(1).unwrap();
    assert_eq!(h.streak, 1, "the first cooldown, not the third");
    assert_eq!(h.deadline, Some(t + BASE));
}

#[tokio::test(start_paused = true)]
async fn default_fall_cools_on_the_first_failure() {
    let mut p = pools(1);
    assert_eq!(use_once(&mut p, reset()).0, State::Cooling);
}
