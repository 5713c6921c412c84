//! Cooldowns, trials and lease expiry against a paused tokio clock, on `Pools` directly
//! (synchronous, no I/O). Time only moves through `tokio::time::advance`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proxypool::config::{Mode, PoolConfig};
use proxypool::endpoint::EndpointId;
use proxypool::event_kind::EventKind;
use proxypool::health::{Health, Input, State, Step};
use proxypool::pool::{Outcome, PoolError, Pools};
use proxypool::protocol::Grant;
use proxypool::store::Write;
use tokio::time::{advance, Instant};

use common::vpool::{endpoint_row, failure, pool_config, Clock, TTL};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);
const BASE: Duration = Duration::from_secs(60);
const MAX: Duration = Duration::from_secs(30 * 60);
fn pool_cfg(name: &str, mode: Mode) -> PoolConfig {
    pool_config(name, mode, BASE, MAX)
}

/// A single pool `p` of `mode` with endpoints 1..=n in `state`.
fn pools(mode: Mode, n: i64, state: State, clock: Clock) -> Pools {
    let mut p = Pools::new([pool_cfg("p", mode)]);
    p.seed(7);
    let (now, _) = clock.now();
    for id in 1..=n {
        p.insert_row(&endpoint_row(id, "p", state), now);
    }
    p
}

fn refused() -> Outcome {
    Outcome::Failure(failure())
}

fn lease(p: &mut Pools, clock: Clock) -> Result<Grant, PoolError> {
    let (now, _) = clock.now();
    p.lease("p", TTL, None, now).0
}

fn report(p: &mut Pools, g: &Grant, o: Outcome, clock: Clock) -> State {
    let (now, wall) = clock.now();
    p.report(&g.lease, o, now, wall).0.unwrap()
}

fn health(p: &Pools, id: EndpointId) -> Health {
    p.health(id).unwrap().clone()
}

/// Cool endpoint 1 of a one-endpoint static-no-ping pool at `clock` time; returns its
/// deadline.
fn cool_first(p: &mut Pools, clock: Clock) -> Instant {
    let g = lease(p, clock).unwrap();
    assert!(!g.trial);
    assert_eq!(report(p, &g, refused(), clock), State::Cooling);
    health(p, g.endpoint).deadline.unwrap()
}

fn event_kinds(writes: &[Write]) -> Vec<&'static str> {
    writes
        .iter()
        .map(|w| match w {
            Write::Transition(_, ev) | Write::Event(ev) | Write::EventStatus(ev, _) => {
                ev.kind.as_str()
            }
            Write::SourceResult { .. } => "source_result",
            Write::Remove(_) => "removed",
            Write::Exit { .. } => "exit",
            Write::Pair(_) => "pair",
            Write::Claim(c) => c.event.kind.as_str(),
            Write::Unclaim(u) => u.event.kind.as_str(),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn cooling_until_the_deadline_then_exactly_one_trial_lease() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 1, State::Available, clock);
    let t_fail = Instant::now();
    let deadline = cool_first(&mut p, clock);
    assert_eq!(deadline, t_fail + BASE);

    advance(BASE - MS).await;
    assert_eq!(Instant::now(), deadline - MS);
    match lease(&mut p, clock) {
        Err(PoolError::Exhausted {
            pool, retry_after, ..
        }) => {
            assert_eq!(pool, "p");
            assert_eq!(retry_after, Some(MS));
        }
        other => panic!("still cooling, got {other:?}"),
    }
    assert_eq!(health(&p, 1).state, State::Cooling);

    advance(MS).await;
    let g = lease(&mut p, clock).unwrap();
    assert_eq!(g.endpoint, 1);
    assert!(g.trial, "the first lease at the deadline is the trial");
    let h = health(&p, 1);
    assert_eq!(
        (h.state, h.claimed, h.streak),
        (State::ProbeAllowed, true, 1)
    );
    // The claim is taken: the next lease does not get it (nothing else to lease).
    match lease(&mut p, clock) {
        Err(PoolError::Exhausted { retry_after, .. }) => assert_eq!(retry_after, None),
        other => panic!("the trial is taken, got {other:?}"),
    }
    assert_eq!(
        report(&mut p, &g, Outcome::Success, clock),
        State::Available
    );
    let again = lease(&mut p, clock).unwrap();
    assert!(!again.trial);
}

#[tokio::test(start_paused = true)]
async fn at_the_deadline_the_trial_goes_first_and_only_once() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 2, State::Available, clock);
    let g = lease(&mut p, clock).unwrap();
    assert_eq!(g.endpoint, 1);
    report(&mut p, &g, refused(), clock);

    advance(BASE - MS).await;
    for _ in 0..3 {
        let g = lease(&mut p, clock).unwrap();
        assert_eq!((g.endpoint, g.trial), (2, false), "1 is cooling");
        report(&mut p, &g, Outcome::Success, clock);
    }
    advance(MS).await;
    let first = lease(&mut p, clock).unwrap();
    assert_eq!((first.endpoint, first.trial), (1, true));
    for _ in 0..5 {
        let g = lease(&mut p, clock).unwrap();
        assert_eq!((g.endpoint, g.trial), (2, false), "only one trial");
    }
}

#[tokio::test(start_paused = true)]
async fn thousand_concurrent_claimers_one_winner_repeated() {
    let clock = Clock::new();
    let p = Arc::new(Mutex::new(pools(
        Mode::StaticNoPing,
        1,
        State::Available,
        clock,
    )));
    let mut deadline = cool_first(&mut p.lock().unwrap(), clock);
    for round in 0..100u32 {
        tokio::time::advance(deadline - Instant::now()).await;
        let mut tasks = Vec::with_capacity(1000);
        for _ in 0..1000 {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                tokio::task::yield_now().await;
                let (now, _) = clock.now();
                p.lock().unwrap().try_claim(1, now)
            }));
        }
        let mut wins = 0;
        let mut writes = Vec::new();
        for t in tasks {
            let (won, w) = t.await.unwrap();
            wins += won as usize;
            writes.extend(w);
        }
        assert_eq!(wins, 1, "round {round}: exactly one claimant");
        // One deadline transition and one admission recorded, nothing for the losers.
        let kinds = event_kinds(&writes);
        let admitted = kinds.iter().filter(|k| **k == "trial_admitted").count();
        assert_eq!(admitted, 1, "round {round}: trial_admitted events");
        let first = &kinds[..kinds.len().min(3)];
        assert_eq!(kinds.len(), 2, "round {round}: {first:?}...");
        let h = health(&p.lock().unwrap(), 1);
        assert_eq!((h.state, h.claimed), (State::ProbeAllowed, true));
        assert_eq!(h.streak, round + 1);
        // The trial fails: cool again (a longer cooldown, bounded by max).
        let (now, wall) = clock.now();
        let (st, _) = p
            .lock()
            .unwrap()
            .probe_result(1, refused(), true, None, now, wall);
        assert_eq!(st.unwrap(), State::Cooling);
        let h = health(&p.lock().unwrap(), 1);
        let want = BASE
            .checked_mul(1 << (round + 1).min(20))
            .unwrap_or(MAX)
            .min(MAX);
        assert_eq!(h.cooldown, Some(want), "round {round}");
        deadline = h.deadline.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn thousand_concurrent_leases_one_trial() {
    let clock = Clock::new();
    for _round in 0..10 {
        let p = Arc::new(Mutex::new(pools(
            Mode::StaticNoPing,
            1,
            State::Available,
            clock,
        )));
        let deadline = cool_first(&mut p.lock().unwrap(), clock);
        advance(deadline - Instant::now()).await;
        let mut tasks = Vec::new();
        for _ in 0..1000 {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                tokio::task::yield_now().await;
                let (now, _) = clock.now();
                p.lock().unwrap().lease("p", TTL, None, now).0
            }));
        }
        let mut trials = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(g) => {
                    assert!(g.trial);
                    trials += 1;
                }
                Err(PoolError::Exhausted { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(trials, 1);
    }
}

#[tokio::test(start_paused = true)]
async fn cooldown_sequence_grows_to_max_and_resets_on_success() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 1, State::Available, clock);
    let g = lease(&mut p, clock).unwrap();
    report(&mut p, &g, refused(), clock);
    let mut seen = Vec::new();
    for streak in 1..=12u32 {
        let h = health(&p, 1);
        assert_eq!((h.state, h.streak), (State::Cooling, streak));
        let len = h.cooldown.unwrap();
        assert_eq!(h.deadline.unwrap() - Instant::now(), len);
        let (now, _) = clock.now();
        assert_eq!(
            p.status(Some("p"), now).unwrap()[0].next_deadline_ms,
            Some(len.as_millis() as u64)
        );
        seen.push(len.as_secs());
        advance(len).await;
        let g = lease(&mut p, clock).unwrap();
        assert!(g.trial, "streak {streak}");
        if streak < 12 {
            report(&mut p, &g, refused(), clock);
        } else {
            assert_eq!(
                report(&mut p, &g, Outcome::Success, clock),
                State::Available
            );
        }
    }
    let expected: Vec<u64> = (1..=12u32)
        .map(|s| (60u64 << (s - 1)).min(MAX.as_secs()))
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(
        &seen[..7],
        &[60, 120, 240, 480, 960, 1800, 1800],
        "stops at max"
    );
    let h = health(&p, 1);
    assert_eq!((h.state, h.streak, h.claimed), (State::Available, 0, false));
    assert_eq!(h.cooldown, None);
    // The next failure starts again at base.
    let g = lease(&mut p, clock).unwrap();
    assert!(!g.trial);
    report(&mut p, &g, refused(), clock);
    let h = health(&p, 1);
    assert_eq!((h.streak, h.cooldown), (1, Some(BASE)));
}

/// Cool, reach the deadline and take the trial lease.
async fn trial_lease(p: &mut Pools, clock: Clock) -> Grant {
    let deadline = cool_first(p, clock);
    advance(deadline - Instant::now()).await;
    let g = lease(p, clock).unwrap();
    assert!(g.trial);
    g
}

#[tokio::test(start_paused = true)]
async fn trial_lease_ttl_expiry_gives_the_claim_back() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 1, State::Available, clock);
    let g = trial_lease(&mut p, clock).await;
    let before = health(&p, 1);
    assert_eq!(before.streak, 1);

    advance(TTL - MS).await;
    let (now, _) = clock.now();
    assert!(p.advance(now).is_empty(), "not expired yet");
    assert!(health(&p, 1).claimed);

    advance(MS).await;
    let (now, _) = clock.now();
    let writes = p.advance(now);
    assert_eq!(event_kinds(&writes), vec!["trial_abandoned"]);
    match &writes[0] {
        Write::Event(ev) => {
            assert_eq!(ev.endpoint, Some(1));
            assert_eq!(ev.from, Some(State::ProbeAllowed));
            assert_eq!(ev.to, Some(State::ProbeAllowed));
            assert_eq!(ev.lease.as_deref(), Some(g.lease.as_str()));
            assert_eq!(ev.detail.as_deref(), Some("lease expired"));
        }
        w => panic!("{w:?}"),
    }
    let h = health(&p, 1);
    assert_eq!(
        (h.state, h.claimed, h.streak, h.reason),
        (State::ProbeAllowed, false, 1, before.reason)
    );
    // A report on the expired lease changes nothing.
    let (now, wall) = clock.now();
    let (r, w) = p.report(&g.lease, refused(), now, wall);
    assert_eq!(r, Err(PoolError::LeaseExpired(g.lease.clone())));
    assert!(w.is_empty());
    assert_eq!(health(&p, 1), h);
    // The claim is free again: the next lease is the trial.
    let again = lease(&mut p, clock).unwrap();
    assert!(again.trial);
}

#[tokio::test(start_paused = true)]
async fn trial_lease_expiry_is_seen_by_any_operation() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 2, State::Available, clock);
    // Endpoint 1 fails, 2 stays available.
    let g = lease(&mut p, clock).unwrap();
    assert_eq!(g.endpoint, 1);
    report(&mut p, &g, refused(), clock);
    advance(BASE).await;
    let t = lease(&mut p, clock).unwrap();
    assert_eq!((t.endpoint, t.trial), (1, true));
    advance(TTL + S).await;
    // An ordinary lease runs the expiry first and gets the trial back.
    let (now, _) = clock.now();
    let (g, writes) = p.lease("p", TTL, None, now);
    let g = g.unwrap();
    assert_eq!(
        event_kinds(&writes),
        vec!["trial_abandoned", "trial_admitted"]
    );
    assert_eq!((g.endpoint, g.trial), (1, true));
    assert_eq!(health(&p, 1).streak, 1);
}

#[tokio::test(start_paused = true)]
async fn releasing_a_trial_lease_abandons_it() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 1, State::Available, clock);
    let g = trial_lease(&mut p, clock).await;
    advance(S).await;
    let (now, _) = clock.now();
    let (r, writes) = p.release(&g.lease, now);
    r.unwrap();
    assert_eq!(event_kinds(&writes), vec!["trial_abandoned"]);
    let h = health(&p, 1);
    assert_eq!(
        (h.state, h.claimed, h.streak),
        (State::ProbeAllowed, false, 1)
    );
    // Released twice: the answer says it ended already; nothing changes.
    let (r, w) = p.release(&g.lease, now);
    assert_eq!(
        r,
        Err(PoolError::LeaseEnded {
            lease: g.lease.clone(),
            how: proxypool::pool::Ended::Released
        })
    );
    assert!(w.is_empty());
    // Releasing an ordinary lease writes nothing.
    let t = lease(&mut p, clock).unwrap();
    report(&mut p, &t, Outcome::Success, clock);
    let o = lease(&mut p, clock).unwrap();
    assert!(!o.trial);
    let (r, w) = p.release(&o.lease, now);
    r.unwrap();
    assert!(w.is_empty());
    assert_eq!(health(&p, 1).state, State::Available);
}

#[tokio::test(start_paused = true)]
async fn late_report_does_not_extend_the_cooldown() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 1, State::Available, clock);
    let a = lease(&mut p, clock).unwrap();
    let b = lease(&mut p, clock).unwrap();
    assert_eq!(a.endpoint, b.endpoint);
    report(&mut p, &a, refused(), clock);
    let h = health(&p, 1);
    advance(20 * S).await;
    let (now, wall) = clock.now();
    let (st, writes) = p.report(&b.lease, refused(), now, wall);
    assert_eq!(st, Ok(State::Cooling));
    assert_eq!(
        event_kinds(&writes),
        vec!["report"],
        "logged, no transition"
    );
    assert_eq!(health(&p, 1), h, "deadline and streak unchanged");
}

#[tokio::test(start_paused = true)]
async fn static_and_sniffing_leases_never_get_a_trial() {
    for mode in [Mode::Static, Mode::Sniffing] {
        let clock = Clock::new();
        // New endpoints of prober pools start probe_allowed.
        let mut p = pools(mode, 2, State::ProbeAllowed, clock);
        for _ in 0..3 {
            assert!(
                matches!(
                    lease(&mut p, clock),
                    Err(PoolError::Exhausted {
                        retry_after: None,
                        ..
                    })
                ),
                "{mode}: no lease on probe_allowed"
            );
        }
        let (now, wall) = clock.now();
        let (c1, w) = p.claim_next("p", now);
        let (id1, _) = c1.expect("the prober claims");
        assert_eq!(event_kinds(&w), vec!["trial_admitted"]);
        assert!(health(&p, id1).claimed);
        let (c2, _) = p.claim_next("p", now);
        let (id2, _) = c2.expect("the other one");
        assert_ne!(id1, id2);
        let (c3, w) = p.claim_next("p", now);
        assert!(c3.is_none(), "{mode}: both claimed");
        assert!(w.is_empty());
        // A probe success makes it leasable, never as a trial.
        let (st, _) = p.probe_result(id1, Outcome::Success, true, None, now, wall);
        assert_eq!(st, Ok(State::Available));
        let g = lease(&mut p, clock).unwrap();
        assert_eq!((g.endpoint, g.trial), (id1, false));
        // It fails, cools; at the deadline a lease still does not get it.
        report(&mut p, &g, refused(), clock);
        let (st, _) = p.probe_result(id2, refused(), true, None, now, wall);
        assert_eq!(st, Ok(State::Cooling));
        advance(BASE).await;
        assert!(matches!(
            lease(&mut p, clock),
            Err(PoolError::Exhausted { .. })
        ));
        let h = health(&p, id1);
        assert_eq!((h.state, h.claimed), (State::ProbeAllowed, false));
        // claim_next does, once per endpoint, oldest probe_allowed first.
        let (now, _) = clock.now();
        let (c, _) = p.claim_next("p", now);
        assert_eq!(c.map(|c| c.0), Some(id1));
        let (c, _) = p.claim_next("p", now);
        assert_eq!(c.map(|c| c.0), Some(id2));
        let (c, _) = p.claim_next("p", now);
        assert!(c.is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn refused_claims_and_abandons_write_nothing() {
    let clock = Clock::new();
    let mut p = pools(Mode::Static, 1, State::Available, clock);
    let (now, _) = clock.now();
    // Not probe_allowed: refused, and no admission is recorded.
    let (won, w) = p.try_claim(1, now);
    assert!(!won);
    assert!(w.is_empty(), "{w:?}");
    let (r, w) = p.input(
        1,
        Input::Abandon,
        Some(EventKind::TrialAbandoned),
        None,
        now,
    );
    assert_eq!(r.unwrap().0, Step::Refused);
    assert!(w.is_empty(), "{w:?}");
}

#[tokio::test(start_paused = true)]
async fn a_reused_slot_never_revives_a_removed_endpoints_queue_items() {
    // Same pool: remove, add, cool the newcomer; it must never be leased while cooling.
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 3, State::Available, clock);
    let (now, _) = clock.now();
    let g = lease(&mut p, clock).unwrap();
    assert_eq!(g.endpoint, 1);
    p.release(&g.lease, now).0.unwrap();
    assert!(p.remove_entry(3));
    assert!(p.remove_entry(1));
    p.insert_row(&endpoint_row(4, "p", State::Available), now);
    let g4 = lease(&mut p, clock).unwrap();
    let g4 = if g4.endpoint == 4 {
        g4
    } else {
        p.release(&g4.lease, now).0.unwrap();
        lease(&mut p, clock).unwrap()
    };
    assert_eq!(g4.endpoint, 4);
    assert_eq!(report(&mut p, &g4, refused(), clock), State::Cooling);
    for _ in 0..10 {
        let g = lease(&mut p, clock).unwrap();
        assert_eq!(g.endpoint, 2, "only endpoint 2 is available");
        p.release(&g.lease, now).0.unwrap();
    }

    // Two pools: a slot freed in pool a and reused by pool b is never leased from a.
    let mut p = Pools::new([
        pool_cfg("a", Mode::StaticNoPing),
        pool_cfg("b", Mode::StaticNoPing),
    ]);
    for id in [1, 2, 4] {
        p.insert_row(&endpoint_row(id, "a", State::Available), now);
    }
    assert!(p.remove_entry(2));
    p.insert_row(&endpoint_row(3, "b", State::Available), now);
    let mut seen = Vec::new();
    for _ in 0..6 {
        let g = p.lease("a", TTL, None, now).0.unwrap();
        seen.push(g.endpoint);
        p.release(&g.lease, now).0.unwrap();
    }
    assert!(seen.iter().all(|id| [1, 4].contains(id)), "{seen:?}");
    let st = p.status(None, now).unwrap();
    assert!(st.iter().all(|s| s.leases == 0), "{st:?}");
}

/// On a daemon alone, concurrent sessions spread over the endpoints (least leased), each
/// stays on its own, and one whose endpoint cools moves to the least leased of the rest
/// and stays there (docs/leases.md, "Sticky sessions").
#[tokio::test(start_paused = true)]
async fn sessions_of_a_daemon_alone_get_endpoints_of_their_own_and_stay() {
    let clock = Clock::new();
    let mut p = pools(Mode::Static, 4, State::Available, clock);
    let (now, _) = clock.now();
    let keys = ["a", "b", "c", "d"];
    let held: Vec<_> = keys
        .iter()
        .map(|k| p.lease("p", TTL, Some(k), now).0.unwrap())
        .collect();
    let mut got: Vec<_> = held.iter().map(|g| g.endpoint).collect();
    got.sort();
    assert_eq!(got, vec![1, 2, 3, 4], "four sessions, four endpoints");
    for g in &held {
        p.release(&g.lease, now).0.unwrap();
    }
    // Released, each comes back to its own, whatever else is leased meanwhile.
    let other = p.lease("p", TTL, None, now).0.unwrap();
    for (k, g) in keys.iter().zip(&held) {
        let again = p.lease("p", TTL, Some(k), now).0.unwrap();
        assert_eq!(again.endpoint, g.endpoint, "session {k}");
        p.release(&again.lease, now).0.unwrap();
    }
    // Its endpoint disabled, a session moves, and stays where it moved.
    let moved = held[0].endpoint;
    p.release(&other.lease, now).0.unwrap();
    p.input(moved, Input::Disable { detail: None }, None, None, now)
        .0
        .unwrap();
    let first = p.lease("p", TTL, Some("a"), now).0.unwrap();
    assert_ne!(first.endpoint, moved);
    p.release(&first.lease, now).0.unwrap();
    for _ in 0..3 {
        let g = p.lease("p", TTL, Some("a"), now).0.unwrap();
        assert_eq!(g.endpoint, first.endpoint);
        p.release(&g.lease, now).0.unwrap();
    }
}

/// A forgotten session (an intercepted connection's own, once the connection ended) keeps
/// nothing: the key's next lease is chosen afresh, least leased.
#[tokio::test(start_paused = true)]
async fn a_forgotten_session_is_placed_afresh() {
    let clock = Clock::new();
    let mut p = pools(Mode::Static, 2, State::Available, clock);
    let (now, _) = clock.now();
    let held = p.lease("p", TTL, Some("k"), now).0.unwrap();
    let kept = p.lease("p", TTL, Some("k"), now).0.unwrap();
    assert_eq!(kept.endpoint, held.endpoint, "remembered while it serves");
    p.release(&kept.lease, now).0.unwrap();
    p.forget_session("p", "k");
    p.forget_session("no such pool", "k");
    let fresh = p.lease("p", TTL, Some("k"), now).0.unwrap();
    assert_ne!(
        fresh.endpoint, held.endpoint,
        "the least leased, not the one held"
    );
}

/// A session of a fleet's daemon goes to the endpoint of its key's highest rendezvous
/// weight among those that may serve it (docs/leases.md, "Sticky sessions"), the same on
/// every daemon. One whose endpoint is available stays
/// on it while another endpoint waits for its trial; one whose endpoint waits for its trial
/// (it was on the next in its order meanwhile) takes that trial: that is how its endpoint
/// comes back to it.
#[tokio::test(start_paused = true)]
async fn a_session_stays_on_its_endpoint_and_one_whose_endpoint_waits_takes_the_trial() {
    let clock = Clock::new();
    let mut p = pools(Mode::StaticNoPing, 2, State::Available, clock);
    p.join_fleet();
    let (now, _) = clock.now();
    // A key whose endpoint is 1, and one whose endpoint is 2.
    let top = |p: &mut Pools, key: &str| {
        let g = p.lease("p", TTL, Some(key), now).0.unwrap();
        p.release(&g.lease, now).0.unwrap();
        g.endpoint
    };
    let keys: Vec<String> = (0..64).map(|i| format!("s{i}")).collect();
    let on_1 = keys.iter().find(|k| top(&mut p, k) == 1).unwrap().clone();
    let on_2 = keys.iter().find(|k| top(&mut p, k) == 2).unwrap().clone();
    // Endpoint 2 out of service: both sessions on 1.
    p.input(2, Input::Disable { detail: None }, None, None, now)
        .0
        .unwrap();
    assert_eq!(top(&mut p, &on_2), 1, "the next in its order");
    // Endpoint 2 waits for its single trial.
    p.input(2, Input::Enable { now: false }, None, None, now)
        .0
        .unwrap();
    let g = p.lease("p", TTL, Some(&on_1), now).0.unwrap();
    assert_eq!(
        (g.endpoint, g.trial),
        (1, false),
        "the session stays on its endpoint"
    );
    let t = p.lease("p", TTL, Some(&on_2), now).0.unwrap();
    assert_eq!((t.endpoint, t.trial), (2, true), "its endpoint's trial");
    // While that trial runs, the session's other leases go to the next in its order, and
    // a lease without a session to endpoint 1.
    let g = p.lease("p", TTL, Some(&on_2), now).0.unwrap();
    assert_eq!((g.endpoint, g.trial), (1, false));
    let g = p.lease("p", TTL, None, now).0.unwrap();
    assert_eq!((g.endpoint, g.trial), (1, false));
}

#[tokio::test(start_paused = true)]
async fn a_probe_success_is_an_event_only_when_it_changes_a_state() {
    use proxypool::pool::ProbeRole;
    let clock = Clock::new();
    let mut p = pools(Mode::Static, 1, State::ProbeAllowed, clock);
    let (now, wall) = clock.now();
    // The recovery probe's success changes the state: its row, then state_changed.
    let (c, _) = p.claim_next("p", now);
    let (id, _) = c.expect("claimed");
    let (st, w) = p.probe_result(id, Outcome::Success, true, None, now, wall);
    assert_eq!(st, Ok(State::Available));
    assert_eq!(event_kinds(&w), vec!["probe_success", "state_changed"]);
    // Periodic checks of an available endpoint change nothing: no rows, but the
    // statistics count every one.
    for _ in 0..5 {
        advance(S).await;
        let (now, wall) = clock.now();
        let (st, w) = p.probe_result(id, Outcome::Success, false, None, now, wall);
        assert_eq!(st, Ok(State::Available));
        assert!(w.is_empty(), "{:?}", event_kinds(&w));
    }
    let (now, wall) = clock.now();
    let used = p.endpoint_use(id, now).expect("held");
    assert_eq!(used.stats.successes, 6);
    assert_eq!(used.stats.last_success, Some(wall));
    // An operator's probe always leaves its row, also when nothing changes.
    let (_, w) = p.probe_result_as(id, Outcome::Success, ProbeRole::Operator, None, now, wall);
    assert_eq!(event_kinds(&w), vec!["probe_success"]);
}
