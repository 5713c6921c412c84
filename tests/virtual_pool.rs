//! Virtual-pool scenarios with an exact audit of the event trail, and restarts.

mod common;

use std::time::{Duration, SystemTime};

use common::vpool::{config, ev, Audit, Script, VirtualPool, POOL, TTL};
use proxypool::config::Mode;
use proxypool::health::{Failure, Input, Phase, Reason, State};
use proxypool::pool::engine::Engine;
use proxypool::pool::{Outcome, PoolError, Pools};
use proxypool::store::{NewEndpoint, Store};
use tokio::time::{advance, Instant};
use Script::*;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);
const BASE: Duration = Duration::from_secs(60);
const MAX: Duration = Duration::from_secs(30 * 60);

const CR: &str = "connect_refused";

fn vpool(scripts: Vec<Script>) -> VirtualPool {
    VirtualPool::new(config(Mode::StaticNoPing, BASE, MAX), scripts)
}

fn added(vp: &mut VirtualPool) {
    let want: Vec<Audit> = vp
        .ids
        .clone()
        .into_iter()
        .map(|id| ev("added", id, "", "available", ""))
        .collect();
    assert_eq!(vp.audit(), want);
}

/// The events of one failed use of an available endpoint.
fn cooled(id: i64) -> Vec<Audit> {
    vec![
        ev("report", id, "available", "cooling", CR),
        ev("state_changed", id, "available", "cooling", CR),
    ]
}

/// The events of a failed trial lease, starting at the deadline.
fn trial_failed(id: i64) -> Vec<Audit> {
    vec![
        ev("state_changed", id, "cooling", "probe_allowed", CR),
        ev("trial_admitted", id, "probe_allowed", "probe_allowed", ""),
        ev("report", id, "probe_allowed", "cooling", CR),
        ev("state_changed", id, "probe_allowed", "cooling", CR),
    ]
}

/// The events of a successful trial lease, starting at the deadline.
fn trial_succeeded(id: i64) -> Vec<Audit> {
    vec![
        ev("state_changed", id, "cooling", "probe_allowed", CR),
        ev("trial_admitted", id, "probe_allowed", "probe_allowed", ""),
        ev("report", id, "probe_allowed", "available", ""),
        ev("state_changed", id, "probe_allowed", "available", ""),
    ]
}

/// A stored deadline `d` from when it was written: the store dates it by its own clock
/// (the system's, not the paused one), a moment ago.
fn stored_in(until: Option<SystemTime>, d: Duration) {
    let until = until.expect("a stored deadline");
    let now = SystemTime::now();
    assert!(
        until <= now + d && until + 5 * S > now + d,
        "{until:?} is not {d:?} from about now ({now:?})"
    );
}

/// A duration `want` less what real time has passed since (a few seconds at most).
fn near(got: Option<Duration>, want: Duration) {
    let got = got.expect("a deadline");
    assert!(
        got <= want && got + 5 * S > want,
        "{got:?} is not about {want:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn failure_cools_the_endpoint_and_the_next_call_goes_elsewhere() {
    let mut vp = vpool(vec![FailsAlways, SucceedsAlways, SucceedsAlways]);
    added(&mut vp);
    let c = vp.call().unwrap();
    assert_eq!(
        (c.endpoint, c.ok, c.trial, c.state),
        (1, false, false, State::Cooling)
    );
    assert_eq!(vp.audit(), cooled(1));
    let row = vp.row(1);
    assert_eq!(row.state, State::Cooling);
    assert_eq!(row.reason, Some(Reason::ConnectRefused));
    assert_eq!(row.phase, Some(Phase::Connect));
    assert_eq!((row.streak, row.reason_streak), (1, 1));
    assert_eq!(row.cooldown_ms, Some(60_000));
    stored_in(row.cooldown_until, BASE);

    advance(BASE - MS).await;
    assert_eq!(vp.calls(6), vec![2, 3, 2, 3, 2, 3]);
    // Quiet successes on healthy endpoints write nothing.
    assert_eq!(vp.audit(), vec![]);
    assert_eq!(vp.row(1).state, State::Cooling);
}

#[tokio::test(start_paused = true)]
async fn after_the_deadline_exactly_one_call_is_the_trial_and_success_restores() {
    let mut vp = vpool(vec![
        FailsNTimesThenSucceeds(1),
        SucceedsAlways,
        SucceedsAlways,
    ]);
    added(&mut vp);
    assert_eq!(vp.call().unwrap().endpoint, 1);
    assert_eq!(vp.audit(), cooled(1));
    advance(BASE).await;
    // Hold the trial lease while others call.
    let trial = vp.lease().unwrap();
    assert_eq!((trial.endpoint, trial.trial), (1, true));
    let others: Vec<_> = (0..6).map(|_| vp.call().unwrap()).collect();
    assert!(
        others.iter().all(|c| !c.trial && c.endpoint != 1),
        "{others:?}"
    );
    let c = vp.finish(&trial);
    assert_eq!((c.ok, c.state), (true, State::Available));
    let events = vp.new_events();
    let audit: Vec<Audit> = events.iter().map(Audit::from).collect();
    assert_eq!(audit, trial_succeeded(1));
    // The admission and the report name the trial lease.
    assert_eq!(events[1].lease.as_deref(), Some(trial.lease.as_str()));
    assert_eq!(events[2].lease.as_deref(), Some(trial.lease.as_str()));
    assert_eq!(events[3].lease.as_deref(), Some(trial.lease.as_str()));
    let row = vp.row(1);
    assert_eq!(
        (
            row.state,
            row.streak,
            row.reason_streak,
            row.reason,
            row.phase
        ),
        (State::Available, 0, 0, None, None)
    );
    assert_eq!((row.cooldown_ms, row.cooldown_until), (None, None));
    // Back in rotation, never as a trial.
    let mut next: Vec<_> = (0..3).map(|_| vp.call().unwrap()).collect();
    assert!(next.iter().all(|c| !c.trial && c.ok));
    next.sort_by_key(|c| c.endpoint);
    assert_eq!(
        next.iter().map(|c| c.endpoint).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(vp.audit(), vec![]);
}

#[tokio::test(start_paused = true)]
async fn repeated_failure_grows_the_cooldown_up_to_max() {
    let mut vp = VirtualPool::new(
        config(Mode::StaticNoPing, BASE, 8 * BASE),
        vec![FailsAlways, SucceedsAlways],
    );
    added(&mut vp);
    assert_eq!(vp.call().unwrap().endpoint, 1);
    assert_eq!(vp.audit(), cooled(1));
    let mut lens = vec![vp.row(1).cooldown_ms.unwrap()];
    for round in 2..=7u32 {
        let len = Duration::from_millis(*lens.last().unwrap());
        advance(len - MS).await;
        assert_eq!(
            vp.call().unwrap().endpoint,
            2,
            "round {round}: 1 still cooling"
        );
        advance(MS).await;
        let c = vp.call().unwrap();
        assert_eq!(
            (c.endpoint, c.trial, c.ok),
            (1, true, false),
            "round {round}"
        );
        assert_eq!(vp.audit(), trial_failed(1), "round {round}");
        let row = vp.row(1);
        assert_eq!((row.state, row.streak), (State::Cooling, round));
        let ms = row.cooldown_ms.unwrap();
        stored_in(row.cooldown_until, Duration::from_millis(ms));
        assert_eq!(vp.remaining(1), Some(Duration::from_millis(ms)));
        lens.push(ms);
    }
    assert_eq!(
        lens,
        vec![60_000, 120_000, 240_000, 480_000, 480_000, 480_000, 480_000]
    );
}

#[tokio::test(start_paused = true)]
async fn all_cooling_is_pool_exhausted_with_the_time_to_the_soonest_deadline() {
    let mut vp = vpool(vec![FailsAlways, FailsAlways]);
    added(&mut vp);
    assert_eq!(vp.call().unwrap().endpoint, 1); // t0: 1 cools until t0+60
    advance(10 * S).await;
    assert_eq!(vp.call().unwrap().endpoint, 2); // t0+10: 2 cools until t0+70
    let exhausted = |vp: &mut VirtualPool| match vp.call() {
        Err(PoolError::Exhausted {
            pool, retry_after, ..
        }) => {
            assert_eq!(pool, POOL);
            retry_after
        }
        other => panic!("expected pool_exhausted, got {other:?}"),
    };
    assert_eq!(exhausted(&mut vp), Some(50 * S));
    assert!(vp.pools.exhausted(POOL));
    advance(49 * S + 999 * MS).await;
    assert_eq!(exhausted(&mut vp), Some(MS));
    advance(MS).await; // t0+60: 1's trial, fails again (120 s, until t0+180)
    let c = vp.call().unwrap();
    assert_eq!((c.endpoint, c.trial, c.ok), (1, true, false));
    assert_eq!(exhausted(&mut vp), Some(10 * S));
    advance(10 * S).await; // t0+70: 2's trial, fails again (until t0+190)
    let c = vp.call().unwrap();
    assert_eq!((c.endpoint, c.trial, c.ok), (2, true, false));
    assert_eq!(exhausted(&mut vp), Some(110 * S));
    let mut want = cooled(1);
    want.extend(cooled(2));
    want.extend(trial_failed(1));
    want.extend(trial_failed(2));
    assert_eq!(vp.audit(), want, "refusals write no events");
}

#[tokio::test(start_paused = true)]
async fn round_robin_spreads_calls_over_available_endpoints() {
    // 3 fails on its own 4th call.
    let mut vp = vpool(vec![
        SucceedsAlways,
        SucceedsAlways,
        Custom(Box::new(|n| n != 4)),
        SucceedsAlways,
    ]);
    added(&mut vp);
    let used = vp.calls(12);
    assert_eq!(used, vec![1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]);
    assert_eq!(vp.audit(), vec![]);
    assert_eq!(vp.calls(3), vec![1, 2, 3]);
    assert_eq!(vp.audit(), cooled(3));
    assert_eq!(vp.calls(9), vec![4, 1, 2, 4, 1, 2, 4, 1, 2]);
    // Held leases count: the least-leased endpoint goes first.
    let a = vp.lease().unwrap();
    let b = vp.lease().unwrap();
    let c = vp.lease().unwrap();
    let mut held = vec![a.endpoint, b.endpoint, c.endpoint];
    held.sort();
    assert_eq!(held, vec![1, 2, 4]);
    let d = vp.lease().unwrap();
    assert_eq!(d.endpoint, a.endpoint, "all hold one: back to the first");
}

#[tokio::test(start_paused = true)]
async fn succeeds_only_on_its_kth_call() {
    let mut vp = vpool(vec![SucceedsOnlyOn(3)]);
    added(&mut vp);
    let c = vp.call().unwrap();
    assert_eq!((c.trial, c.ok), (false, false));
    advance(BASE).await;
    let c = vp.call().unwrap();
    assert_eq!((c.trial, c.ok), (true, false));
    assert_eq!(vp.row(1).cooldown_ms, Some(120_000));
    advance(2 * BASE).await;
    let c = vp.call().unwrap();
    assert_eq!((c.trial, c.ok, c.state), (true, true, State::Available));
    assert_eq!(vp.row(1).streak, 0);
    // The 4th call fails: the cooldown starts again at base.
    let c = vp.call().unwrap();
    assert_eq!((c.trial, c.ok), (false, false));
    let row = vp.row(1);
    assert_eq!((row.streak, row.cooldown_ms), (1, Some(60_000)));
    let mut want = cooled(1);
    want.extend(trial_failed(1));
    want.extend(trial_succeeded(1));
    want.extend(cooled(1));
    assert_eq!(vp.audit(), want);
}

#[tokio::test(start_paused = true)]
async fn late_report_is_logged_and_does_not_extend_the_cooldown() {
    let mut vp = vpool(vec![FailsAlways]);
    added(&mut vp);
    let a = vp.lease().unwrap();
    let b = vp.lease().unwrap();
    assert_eq!((a.endpoint, b.endpoint), (1, 1));
    vp.finish(&a);
    let row = vp.row(1);
    advance(TTL - S).await;
    let c = vp.finish(&b);
    assert_eq!(c.state, State::Cooling);
    let events = vp.new_events();
    let mut want = cooled(1);
    want.push(ev("report", 1, "cooling", "cooling", CR));
    assert_eq!(events.iter().map(Audit::from).collect::<Vec<_>>(), want);
    assert_eq!(events[2].lease.as_deref(), Some(b.lease.as_str()));
    assert_eq!(
        events[2].detail.as_deref(),
        Some("late result ignored: endpoint is cooling")
    );
    let after = vp.row(1);
    assert_eq!(
        (after.streak, after.cooldown_ms, after.cooldown_until),
        (row.streak, row.cooldown_ms, row.cooldown_until)
    );
    assert_eq!(vp.remaining(1), Some(BASE - TTL + S));
}

#[tokio::test(start_paused = true)]
async fn trial_lease_expiry_is_audited_and_the_next_call_is_the_trial() {
    let mut vp = vpool(vec![FailsNTimesThenSucceeds(1), SucceedsAlways]);
    added(&mut vp);
    vp.call().unwrap();
    advance(BASE).await;
    let t = vp.lease().unwrap();
    assert!(t.trial);
    advance(TTL).await;
    vp.tick();
    let c = vp.call().unwrap();
    assert_eq!((c.endpoint, c.trial, c.ok), (1, true, true));
    let mut want = cooled(1);
    want.extend([
        ev("state_changed", 1, "cooling", "probe_allowed", CR),
        ev("trial_admitted", 1, "probe_allowed", "probe_allowed", ""),
        ev("trial_abandoned", 1, "probe_allowed", "probe_allowed", ""),
        ev("trial_admitted", 1, "probe_allowed", "probe_allowed", ""),
        ev("report", 1, "probe_allowed", "available", ""),
        ev("state_changed", 1, "probe_allowed", "available", ""),
    ]);
    assert_eq!(vp.audit(), want);
}

// ---- restart ----------------------------------------------------------------------

fn auth() -> Failure {
    Failure::new(Reason::ProxyAuthRejected, Some(Phase::ProxyHandshake))
}

#[tokio::test(start_paused = true)]
async fn restart_restores_states_streaks_and_clamped_deadlines() {
    let mut vp = vpool((0..7).map(|_| SucceedsAlways).collect());
    let r = vp.failure.clone();
    // t0: 1, 2, 3, 6 fail (60 s).
    for id in [1, 2, 3, 6] {
        vp.fail(id, r.clone());
    }
    advance(BASE).await; // t0+60
    vp.fail(1, r.clone()); // streak 2: 120 s, until t0+180
    vp.fail(7, auth()); // auth ×1: 60 s
    advance(2 * BASE).await; // t0+180
    vp.fail(1, r.clone()); // streak 3: 240 s, until t0+420
    vp.fail(2, r.clone()); // streak 2: 120 s, until t0+300
    vp.fail(3, r.clone()); // streak 2: 120 s, until t0+300
    vp.fail(7, auth()); // auth ×2 in a row: 120 s, until t0+300
    assert_eq!(vp.health(7).reason_streak, 2);
    assert_eq!(
        vp.input(
            4,
            Input::Disable {
                detail: Some("maintenance".into())
            },
            None
        ),
        proxypool::health::Step::Changed {
            from: State::Available,
            to: State::Disabled
        }
    );
    vp.tick(); // 6 is probe_allowed since t0+60
    advance(30 * S).await; // t0+210
    let before: Vec<_> = vp.ids.iter().map(|&id| vp.health(id)).collect();
    let remaining: Vec<_> = vp.ids.iter().map(|&id| vp.remaining(id)).collect();
    assert_eq!(
        remaining,
        vec![
            Some(210 * S),
            Some(90 * S),
            Some(90 * S),
            None,
            None,
            None,
            Some(90 * S)
        ]
    );

    // Stop: drop memory and the connection, keep the file.
    let VirtualPool {
        dir,
        path,
        cfg,
        store,
        pools,
        clock,
        ..
    } = vp;
    drop(pools);
    drop(store);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        // The stored deadlines were dated by the system clock, which the paused test
        // clock left behind: move them by the 30 s the pool lived since the last writes.
        c.execute(
            "UPDATE endpoints SET cooldown_until=strftime('%Y-%m-%dT%H:%M:%fZ', cooldown_until, '-30 seconds') \
             WHERE cooldown_until IS NOT NULL",
            [],
        )
        .unwrap();
        c.execute(
            "UPDATE endpoints SET cooldown_until=?1 WHERE id=2",
            ["2100-01-01T00:00:00.000Z"],
        )
        .unwrap();
        c.execute(
            "UPDATE endpoints SET cooldown_until=?1 WHERE id=3",
            ["2000-01-01T00:00:00.000Z"],
        )
        .unwrap();
    }

    // Start again at the same moment.
    let mut store = Store::open(&path).unwrap();
    let mut pools = Pools::new([cfg]);
    let (now, _) = clock.now();
    let rows = store.list(None, None).unwrap();
    assert_eq!(rows.len(), 7);
    for row in &rows {
        pools.insert_row(row, now);
    }
    for (i, b) in before.iter().enumerate() {
        let h = pools.health(rows[i].id).unwrap();
        let id = rows[i].id;
        assert_eq!(
            (
                h.state,
                h.claimed,
                h.streak,
                h.reason_streak,
                h.reason,
                h.phase,
                h.cooldown
            ),
            (
                b.state,
                false,
                b.streak,
                b.reason_streak,
                b.reason,
                b.phase,
                b.cooldown
            ),
            "endpoint {id}"
        );
    }
    assert_eq!(
        pools.health(4).unwrap().detail.as_deref(),
        Some("maintenance")
    );
    assert!(pools.health(4).unwrap().operator_disabled());
    let rem = |p: &Pools, id| p.health(id).unwrap().deadline.map(|d| d - now);
    // Normal: what was left.
    near(rem(&pools, 1), 210 * S);
    near(rem(&pools, 7), 90 * S);
    // Year 2100: clamped to its own length, not 73 years.
    assert_eq!(rem(&pools, 2), Some(120 * S));
    // In the past: due now.
    assert_eq!(rem(&pools, 3), Some(Duration::ZERO));
    assert_eq!(pools.health(6).unwrap().state, State::ProbeAllowed);

    // Time moves on: 3 becomes probe_allowed at once (a persisted transition).
    advance(MS).await;
    let (now, _) = clock.now();
    let w = pools.advance(now);
    store.write(&w).unwrap();
    assert_eq!(pools.health(3).unwrap().state, State::ProbeAllowed);
    assert_eq!(store.get(3).unwrap().unwrap().state, State::ProbeAllowed);
    assert_eq!(pools.health(2).unwrap().state, State::Cooling);
    // The claim was never persisted: 6's attempt is admitted (once).
    let (won, _) = pools.try_claim(6, now);
    assert!(won);
    assert!(!pools.try_claim(6, now).0);
    // 7 keeps its auth count: the third rejection in a row disables it.
    advance(90 * S - MS).await;
    let (now, wall) = clock.now();
    let (won, w) = pools.try_claim(7, now);
    store.write(&w).unwrap();
    assert!(won);
    let (st, w) = pools.probe_result(7, Outcome::Failure(auth()), true, None, now, wall);
    store.write(&w).unwrap();
    assert_eq!(st, Ok(State::Disabled));
    let row7 = store.get(7).unwrap().unwrap();
    assert_eq!(
        (row7.state, row7.reason, row7.streak, row7.reason_streak),
        (State::Disabled, Some(Reason::ProxyAuthRejected), 3, 3)
    );
    // Endpoint 2 runs its clamped 120 s, not until 2100.
    assert_eq!(pools.health(2).unwrap().state, State::Cooling);
    advance(30 * S - MS).await;
    let (now, _) = clock.now();
    pools.advance(now);
    assert_eq!(pools.health(2).unwrap().state, State::Cooling);
    advance(MS).await;
    let (now, _) = clock.now();
    pools.advance(now);
    assert_eq!(pools.health(2).unwrap().state, State::ProbeAllowed);
    drop(dir);
}

#[tokio::test(start_paused = true)]
async fn engine_restart_keeps_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("engine.db");
    let cfg = config(Mode::StaticNoPing, BASE, MAX);
    let new = |i: u8| NewEndpoint {
        url: proxypool::endpoint::ProxyUrl::parse(&format!("http://u:p@10.1.0.{i}:3128")).unwrap(),
        pool: POOL.into(),
        label: None,
        source: Some("cli".into()),
        state: State::Available,
        tags: Default::default(),
    };
    let engine = Engine::open(Store::open(&path).unwrap(), [cfg.clone()]).unwrap();
    let ids = engine.add(vec![new(1), new(2), new(3)]).await.unwrap();
    assert_eq!(ids, vec![1, 2, 3]);
    let g = engine.lease(POOL, TTL, None, Duration::ZERO).await.unwrap();
    assert_eq!(g.endpoint, 1);
    let st = engine
        .report(&g.lease, Outcome::Failure(common::vpool::failure()))
        .await
        .unwrap();
    assert_eq!(st, State::Cooling);
    engine
        .input(2, Input::Disable { detail: None }, None, Some("op".into()))
        .await
        .unwrap();
    engine.flush().await.unwrap();
    let before: Vec<_> = ids.iter().map(|&id| engine.health(id).unwrap()).collect();
    let events_before = engine.events(None, 0, 1000).await.unwrap();
    drop(engine);

    let engine = Engine::open(Store::open(&path).unwrap(), [cfg]).unwrap();
    for (i, b) in before.iter().enumerate() {
        let h = engine.health(ids[i]).unwrap();
        assert_eq!(
            (h.state, h.streak, h.reason, h.phase, h.cooldown),
            (b.state, b.streak, b.reason, b.phase, b.cooldown),
            "endpoint {}",
            ids[i]
        );
    }
    // The cooldown resumes from the stored wall-clock deadline (real clock: a little
    // less than 60 s may be left, never more).
    let left = engine.health(1).unwrap().deadline.unwrap() - Instant::now();
    assert!(left <= BASE && left > BASE - 5 * S, "{left:?}");
    assert_eq!(engine.health(2).unwrap().reason, Some(Reason::Operator));
    // Nothing was lost or added by the restart.
    let events_after = engine.events(None, 0, 1000).await.unwrap();
    assert_eq!(events_after, events_before);
    let kinds: Vec<_> = events_after
        .iter()
        .map(|e| (e.kind.as_str(), e.endpoint.unwrap()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("added", 1),
            ("added", 2),
            ("added", 3),
            ("report", 1),
            ("state_changed", 1),
            ("state_changed", 2),
        ]
    );
    // Leases skip 1 (cooling) and 2 (disabled) until 1's deadline.
    let g = engine.lease(POOL, TTL, None, Duration::ZERO).await.unwrap();
    assert_eq!((g.endpoint, g.trial), (3, false));
    engine.release(&g.lease).await.unwrap();
    advance(left).await;
    let g = engine.lease(POOL, TTL, None, Duration::ZERO).await.unwrap();
    assert_eq!((g.endpoint, g.trial), (1, true));
    let st = engine.report(&g.lease, Outcome::Success).await.unwrap();
    assert_eq!(st, State::Available);
    engine.flush().await.unwrap();
    drop(engine);
    let store = Store::open(&path).unwrap();
    let row = store.get(1).unwrap().unwrap();
    assert_eq!((row.state, row.streak), (State::Available, 0));
}
