//! Blame on the pool level (docs/blame.md): real `Pools` and SQLite on a paused clock.
//! Whom a failure counts against, targets that go down and come back with exactly one
//! trial, contrast, escalation, and what a tunnel proves.

mod common;

use std::time::Duration;

use common::vpool::{config, Script, VirtualPool, POOL, TTL};
use proxypool::config::Mode;
use proxypool::health::blame::Blame;
use proxypool::health::{Failure, Phase, Reason, State};
use proxypool::pool::{Outcome, PoolError, ReportOn, Reported, Want};
use proxypool::protocol::Grant;
use proxypool::store::EventRow;

const DEAD: &str = "no-such-host.invalid:443";
const SHOP: &str = "shop.example:443";

fn pool(n: usize) -> VirtualPool {
    let cfg = config(
        Mode::StaticNoPing,
        Duration::from_secs(60),
        Duration::from_secs(1800),
    );
    VirtualPool::new(cfg, (0..n).map(|_| Script::SucceedsAlways).collect())
}

fn unreachable() -> Outcome {
    let mut f = Failure::new(Reason::UpstreamUnreachable, Some(Phase::ProxyHandshake));
    f.status = Some(502);
    Outcome::Failure(f)
}

fn report(vp: &mut VirtualPool, g: &Grant, outcome: Outcome) -> Reported {
    let (now, wall) = vp.now();
    let (r, w) = vp
        .pools
        .report_with(&g.lease, outcome, &ReportOn::default(), now, wall);
    vp.persist(&w);
    r.unwrap()
}

fn lease_with(
    vp: &mut VirtualPool,
    destination: &str,
    session: Option<&str>,
) -> Result<Grant, PoolError> {
    let (now, _) = vp.now();
    let want = Want::parse(Some(destination), None).unwrap();
    let (r, w) = vp.pools.lease_with(POOL, TTL, session, &want, now);
    vp.persist(&w);
    r
}

fn kinds(events: &[EventRow], kind: &str) -> Vec<EventRow> {
    events.iter().filter(|e| e.kind == kind).cloned().collect()
}

fn all_available_and_unbanned(vp: &VirtualPool) {
    for &id in &vp.ids {
        assert_eq!(vp.row(id).state, State::Available, "endpoint {id}");
        assert!(
            vp.store.pairs_of(id).unwrap().is_empty(),
            "endpoint {id} has pairs"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn two_endpoints_failing_a_target_make_it_down_and_cool_nobody() {
    let mut vp = pool(3);
    let g1 = lease_with(&mut vp, DEAD, None).unwrap();
    assert_eq!(
        report(&mut vp, &g1, unreachable()).blame,
        Some(Blame::Pending)
    );
    // The next lease for the target prefers another endpoint.
    let g2 = lease_with(&mut vp, DEAD, None).unwrap();
    assert_ne!(g2.endpoint, g1.endpoint, "pending: prefer the others");
    assert_eq!(
        report(&mut vp, &g2, unreachable()).blame,
        Some(Blame::Target)
    );
    // Down: refused at once, with the time until its trial (2 s, ± 10 %).
    match lease_with(&mut vp, DEAD, None) {
        Err(PoolError::DestinationDown {
            target,
            retry_after,
            ..
        }) => {
            assert_eq!(target, DEAD);
            assert!(
                (Duration::from_millis(1800)..=Duration::from_millis(2200)).contains(&retry_after),
                "{retry_after:?}"
            );
        }
        other => panic!("expected destination_down, got {other:?}"),
    }
    // Every other place still leases, from every endpoint, and nobody was cooled.
    let other = lease_with(&mut vp, SHOP, None).unwrap();
    vp.pools.release(&other.lease, vp.now().0).0.unwrap();
    assert!(vp.lease().is_ok());
    all_available_and_unbanned(&vp);
    let events = vp.new_events();
    let reports = kinds(&events, "report");
    assert_eq!(
        reports
            .iter()
            .map(|e| e.blame.as_deref())
            .collect::<Vec<_>>(),
        [Some("pending"), Some("target")]
    );
    assert!(reports
        .iter()
        .all(|e| e.destination.as_deref() == Some(DEAD)));
    let down = kinds(&events, "target_down");
    assert_eq!(down.len(), 1, "{events:?}");
    assert_eq!(down[0].destination.as_deref(), Some(DEAD));
    assert_eq!(down[0].endpoint, None);
    assert!(down[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("2 endpoints failed it"));
    assert!(kinds(&events, "state_changed").is_empty(), "{events:?}");
    let status = &vp.pools.status(Some(POOL), vp.now().0).unwrap()[0];
    assert_eq!(status.targets_down, 1);
    assert_eq!(status.down_targets[0].target, DEAD);
}

#[tokio::test(start_paused = true)]
async fn a_down_target_admits_exactly_one_trial_at_its_deadline_however_many_ask() {
    let mut vp = pool(3);
    for _ in 0..2 {
        let g = lease_with(&mut vp, DEAD, None).unwrap();
        report(&mut vp, &g, unreachable());
    }
    // The target's cooldown: 2 s ± 10 %.
    tokio::time::advance(Duration::from_millis(2200)).await;
    let answers: Vec<_> = (0..100).map(|_| lease_with(&mut vp, DEAD, None)).collect();
    let trials: Vec<&Grant> = answers.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(trials.len(), 1, "a 100-way stampede gets ONE trial");
    let trial = trials[0].clone();
    assert!(trial.trial);
    assert_eq!(trial.scope.as_deref(), Some("target"));
    assert!(answers
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| matches!(e, PoolError::DestinationDown { .. })));
    // It fails the same way: nobody is blamed, the target's cooldown doubles.
    assert_eq!(
        report(&mut vp, &trial, unreachable()).blame,
        Some(Blame::Target)
    );
    match lease_with(&mut vp, DEAD, None) {
        Err(PoolError::DestinationDown { retry_after, .. }) => assert!(
            (Duration::from_millis(3600)..=Duration::from_millis(4400)).contains(&retry_after),
            "{retry_after:?}"
        ),
        other => panic!("{other:?}"),
    }
    // The next trial gets through: up again (target_up), and leases go on as usual.
    tokio::time::advance(Duration::from_millis(4400)).await;
    let trial = lease_with(&mut vp, DEAD, None).unwrap();
    assert_eq!(trial.scope.as_deref(), Some("target"));
    assert!(matches!(
        lease_with(&mut vp, DEAD, None),
        Err(PoolError::DestinationDown { .. })
    ));
    assert_eq!(report(&mut vp, &trial, Outcome::Success).blame, None);
    let g = lease_with(&mut vp, DEAD, None).unwrap();
    assert!(!g.trial);
    let events = vp.new_events();
    let up = kinds(&events, "target_up");
    assert_eq!(up.len(), 1, "{events:?}");
    assert_eq!(up[0].endpoint, Some(trial.endpoint));
    assert_eq!(
        kinds(&events, "target_down").len(),
        2,
        "went down, then its trial failed"
    );
    assert_eq!(kinds(&events, "trial_admitted").len(), 2);
    all_available_and_unbanned(&vp);
}

#[tokio::test(start_paused = true)]
async fn a_target_trial_given_back_without_an_answer_is_the_next_leases() {
    let mut vp = pool(2);
    for _ in 0..2 {
        let g = lease_with(&mut vp, DEAD, None).unwrap();
        report(&mut vp, &g, unreachable());
    }
    tokio::time::advance(Duration::from_millis(2200)).await;
    let trial = lease_with(&mut vp, DEAD, None).unwrap();
    let (now, _) = vp.now();
    vp.pools.release(&trial.lease, now).0.unwrap();
    let again = lease_with(&mut vp, DEAD, None).unwrap();
    assert_eq!(
        again.scope.as_deref(),
        Some("target"),
        "released: the trial again"
    );
    // A failure that is the endpoint's own is judged as such; the target's trial goes on.
    let refused = Outcome::Failure(Failure::new(Reason::ConnectRefused, Some(Phase::Connect)));
    assert_eq!(
        report(&mut vp, &again, refused).blame,
        Some(Blame::Endpoint)
    );
    assert_eq!(vp.row(again.endpoint).state, State::Cooling);
    let last = lease_with(&mut vp, DEAD, None).unwrap();
    assert_eq!(last.scope.as_deref(), Some("target"));
}

#[tokio::test(start_paused = true)]
async fn a_target_others_reach_cools_only_the_pair_of_the_endpoint_that_cannot() {
    let mut vp = pool(3);
    let g1 = lease_with(&mut vp, SHOP, None).unwrap();
    let bad = g1.endpoint;
    assert_eq!(
        report(&mut vp, &g1, unreachable()).blame,
        Some(Blame::Pending)
    );
    // Another endpoint gets through: the pending failure is now the pair's.
    let g2 = lease_with(&mut vp, SHOP, None).unwrap();
    assert_ne!(g2.endpoint, bad);
    assert_eq!(report(&mut vp, &g2, Outcome::Success).blame, None);
    let pairs = vp.store.pairs_of(bad).unwrap();
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    assert_eq!(pairs[0].record.destination, SHOP);
    assert_eq!(pairs[0].record.health.state, State::Cooling);
    assert_eq!(
        pairs[0].record.health.reason,
        Some(Reason::UpstreamUnreachable)
    );
    assert_eq!(vp.row(bad).state, State::Available);
    let events = vp.new_events();
    let changed = kinds(&events, "state_changed");
    assert_eq!(changed.len(), 1, "{events:?}");
    assert_eq!(changed[0].blame.as_deref(), Some("pair"));
    assert!(changed[0]
        .detail
        .as_deref()
        .unwrap()
        .contains(&format!("endpoint {} reached the target", g2.endpoint)));
    // From now on its failures there are its pair's at once, and leases skip it.
    for _ in 0..10 {
        let g = lease_with(&mut vp, SHOP, None).unwrap();
        assert_ne!(g.endpoint, bad);
        let (now, _) = vp.now();
        vp.pools.release(&g.lease, now).0.unwrap();
    }
    // Another port of the same host is another target: the endpoint serves it.
    let seen: Vec<_> = (0..6)
        .map(|_| {
            let g = lease_with(&mut vp, "shop.example:80", None).unwrap();
            let (now, _) = vp.now();
            vp.pools.release(&g.lease, now).0.unwrap();
            g.endpoint
        })
        .collect();
    assert!(seen.contains(&bad), "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_that_fails_three_targets_others_reach_cools_endpoint_wide() {
    let mut vp = pool(2);
    let (good, bad) = (vp.ids[0], vp.ids[1]);
    let refused = || {
        let mut f = Failure::new(Reason::ProxyRejected, Some(Phase::ProxyHandshake));
        f.status = Some(403);
        Outcome::Failure(f)
    };
    for (i, t) in ["a.example:443", "b.example:443", "c.example:443"]
        .iter()
        .enumerate()
    {
        // The good one reaches the target first, then the bad one refuses it.
        let g = lease_with(&mut vp, t, None).unwrap();
        let g = if g.endpoint == good {
            g
        } else {
            let other = lease_with(&mut vp, t, None).unwrap();
            let (now, _) = vp.now();
            vp.pools.release(&g.lease, now).0.unwrap();
            other
        };
        assert_eq!(g.endpoint, good);
        report(&mut vp, &g, Outcome::Success);
        let b = lease_with(&mut vp, t, None).unwrap();
        assert_eq!(b.endpoint, bad);
        assert_eq!(report(&mut vp, &b, refused()).blame, Some(Blame::Pair));
        assert_eq!(
            vp.row(bad).state,
            State::Available,
            "a success from before the refusal is no contrast"
        );
        // The good one reaches it again after the refusal: that is the contrast.
        let g = lease_with(&mut vp, t, None).unwrap();
        assert_eq!(g.endpoint, good, "the refused pair is skipped");
        report(&mut vp, &g, Outcome::Success);
        let want = if i < 2 {
            State::Available
        } else {
            State::Cooling
        };
        assert_eq!(vp.row(bad).state, want, "after {} targets", i + 1);
    }
    let row = vp.row(bad);
    assert_eq!(row.reason, Some(Reason::UpstreamUnreachable));
    assert!(row.detail.unwrap().contains("failed 3 distinct targets"));
    assert_eq!(vp.row(good).state, State::Available);
}

#[tokio::test(start_paused = true)]
async fn failures_on_targets_nobody_reaches_never_cool_an_endpoint() {
    let mut vp = pool(3);
    for i in 0..500 {
        let t = format!("host-{i}.invalid:443");
        loop {
            match lease_with(&mut vp, &t, None) {
                Ok(g) => {
                    let r = report(&mut vp, &g, unreachable());
                    assert!(
                        matches!(r.blame, Some(Blame::Pending | Blame::Target)),
                        "{r:?}"
                    );
                }
                Err(PoolError::DestinationDown { .. }) => break,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    all_available_and_unbanned(&vp);
    let status = &vp.pools.status(Some(POOL), vp.now().0).unwrap()[0];
    assert_eq!(status.targets_down, 500);
    assert_eq!(status.down_targets.len(), 50, "status lists at most 50");
}

#[tokio::test(start_paused = true)]
async fn a_pool_of_one_has_no_contrast_and_its_pair_cools() {
    let mut vp = pool(1);
    let g = lease_with(&mut vp, SHOP, None).unwrap();
    assert_eq!(report(&mut vp, &g, unreachable()).blame, Some(Blame::Pair));
    let pairs = vp.store.pairs_of(g.endpoint).unwrap();
    assert_eq!(pairs[0].record.destination, SHOP);
    assert!(matches!(
        lease_with(&mut vp, SHOP, None),
        Err(PoolError::Exhausted { .. })
    ));
}

fn ban() -> Outcome {
    let mut f = Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead));
    f.status = Some(403);
    Outcome::Failure(f)
}

/// Ban `SHOP`'s host for the session's endpoint (report by session, as from inside an
/// HTTPS tunnel), then wait out the pair's cooldown: the next lease is its trial.
fn banned_then_due(vp: &mut VirtualPool) -> Grant {
    let g = lease_with(vp, SHOP, Some("s1")).unwrap();
    let (now, wall) = vp.now();
    vp.pools.release(&g.lease, now).0.unwrap();
    let (r, w) = vp.pools.report_session(
        POOL,
        "s1",
        ban(),
        &ReportOn::to(Some("shop.example")),
        now,
        wall,
    );
    vp.persist(&w);
    assert_eq!(r.unwrap().blame, Some(Blame::Pair));
    g
}

async fn trial_after_cooldown(vp: &mut VirtualPool, cooldown: Duration) -> Grant {
    tokio::time::advance(cooldown).await;
    vp.tick();
    let trial = lease_with(vp, SHOP, Some("s1")).unwrap();
    assert_eq!(
        trial.scope.as_deref(),
        Some("destination"),
        "the pair's trial"
    );
    trial
}

#[tokio::test(start_paused = true)]
async fn a_tunnel_never_decides_a_ban_and_bans_reported_by_session_back_off() {
    let mut vp = pool(1);
    let first = banned_then_due(&mut vp);
    let id = first.endpoint;
    let pair = |vp: &VirtualPool| {
        let p = vp.store.pairs_of(id).unwrap();
        assert_eq!(p.len(), 1, "{p:?}");
        p[0].record.clone()
    };
    assert_eq!(
        (pair(&vp).health.state, pair(&vp).health.streak),
        (State::Cooling, 1)
    );
    let trial = trial_after_cooldown(&mut vp, Duration::from_secs(60)).await;
    // The tunnel opened: the endpoint works, the pair's trial is NOT decided.
    let (now, wall) = vp.now();
    let (r, w) = vp.pools.reached(&trial.lease, now, wall);
    vp.persist(&w);
    assert_eq!(r.unwrap(), State::Available);
    assert_eq!(pair(&vp).health.state, State::ProbeAllowed);
    // The client saw a 403 inside, closed the tunnel, then reported by session.
    let (now, _) = vp.now();
    vp.pools.release(&trial.lease, now).0.unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    let (now, wall) = vp.now();
    let (r, w) = vp.pools.report_session(
        POOL,
        "s1",
        ban(),
        &ReportOn::to(Some("shop.example")),
        now,
        wall,
    );
    vp.persist(&w);
    assert_eq!(r.unwrap().blame, Some(Blame::Pair));
    let p = pair(&vp);
    assert_eq!(
        (p.health.state, p.health.streak),
        (State::Cooling, 2),
        "the ban backs off"
    );
    assert_eq!(p.health.cooldown_ms, Some(120_000));
}

#[tokio::test(start_paused = true)]
async fn a_ban_trial_with_no_verdict_is_given_back_with_its_streak() {
    let mut vp = pool(1);
    let first = banned_then_due(&mut vp);
    let id = first.endpoint;
    let trial = trial_after_cooldown(&mut vp, Duration::from_secs(60)).await;
    let (now, wall) = vp.now();
    let w = vp.pools.reached(&trial.lease, now, wall).1;
    vp.persist(&w);
    vp.pools.release(&trial.lease, now).0.unwrap();
    // Held for verdict_window (10 s): no lease for the host through it meanwhile.
    tokio::time::advance(Duration::from_secs(9)).await;
    vp.tick();
    assert!(matches!(
        lease_with(&mut vp, SHOP, None),
        Err(PoolError::Exhausted { .. })
    ));
    tokio::time::advance(Duration::from_secs(1)).await;
    vp.tick();
    let events = vp.new_events();
    let abandoned = kinds(&events, "trial_abandoned");
    assert_eq!(abandoned.len(), 1, "{events:?}");
    assert!(abandoned[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("verdict_window"));
    let p = &vp.store.pairs_of(id).unwrap()[0].record;
    assert_eq!(
        (p.health.state, p.health.streak),
        (State::ProbeAllowed, 1),
        "streak kept"
    );
    // The next lease for the host is its trial again; an answer from the destination
    // (a plain-HTTP page, a scraper's success report) decides it.
    let again = lease_with(&mut vp, SHOP, None).unwrap();
    assert_eq!(again.scope.as_deref(), Some("destination"));
    report(&mut vp, &again, Outcome::Success);
    assert!(vp.store.pairs_of(id).unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_probe_target_that_is_down_cools_nobody_and_is_retried_through_one_endpoint() {
    let mut cfg = config(
        Mode::Static,
        Duration::from_secs(60),
        Duration::from_secs(1800),
    );
    cfg.probe.url = Some("https://shop.example/".into());
    let mut vp = VirtualPool::new(cfg, (0..3).map(|_| Script::SucceedsAlways).collect());
    // Static pools start probe_allowed: make them available first (probes that pass).
    for &id in &vp.ids.clone() {
        let (now, wall) = vp.now();
        let (ok, w) = vp.pools.try_claim(id, now);
        vp.persist(&w);
        assert!(ok);
        let (r, w) = vp
            .pools
            .probe_result(id, Outcome::Success, true, None, now, wall);
        vp.persist(&w);
        assert_eq!(r.unwrap(), State::Available);
    }
    // The site goes down: the next periodic checks fail to reach it.
    tokio::time::advance(Duration::from_secs(120)).await;
    let probe_fail = |vp: &mut VirtualPool, id| {
        let (now, wall) = vp.now();
        let admitted = vp.pools.probe_admit(id, now);
        if admitted.is_err() {
            return None;
        }
        let (r, w) = vp
            .pools
            .probe_result(id, unreachable(), false, None, now, wall);
        vp.persist(&w);
        Some(r.unwrap())
    };
    let (a, b, c) = (vp.ids[0], vp.ids[1], vp.ids[2]);
    assert_eq!(probe_fail(&mut vp, a), Some(State::Available), "pending");
    assert_eq!(
        probe_fail(&mut vp, b),
        Some(State::Available),
        "the target is down"
    );
    assert_eq!(
        probe_fail(&mut vp, c),
        None,
        "nothing else is probed while it is down"
    );
    let events = vp.new_events();
    let failures = kinds(&events, "probe_failure");
    assert_eq!(
        failures
            .iter()
            .map(|e| e.blame.as_deref())
            .collect::<Vec<_>>(),
        [Some("pending"), Some("target")]
    );
    assert_eq!(
        kinds(&events, "target_down")[0].destination.as_deref(),
        Some("shop.example:443")
    );
    all_available_and_unbanned(&vp);
    // At its deadline ONE probe is admitted: the target's trial. It passes: target up,
    // and probing resumes for everyone.
    tokio::time::advance(Duration::from_millis(2200)).await;
    let now = vp.now().0;
    assert!(vp.pools.probe_admit(c, now).is_ok());
    assert!(vp.pools.probe_admit(a, now).is_err(), "one trial at a time");
    let (now, wall) = vp.now();
    let (r, w) = vp
        .pools
        .probe_result(c, Outcome::Success, false, None, now, wall);
    vp.persist(&w);
    assert_eq!(r.unwrap(), State::Available);
    assert!(vp.pools.probe_admit(a, now).is_ok());
    assert_eq!(kinds(&vp.new_events(), "target_up").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_probe_failure_others_prove_wrong_is_the_endpoints() {
    let mut cfg = config(
        Mode::Static,
        Duration::from_secs(60),
        Duration::from_secs(1800),
    );
    cfg.probe.url = Some("https://shop.example/".into());
    let mut vp = VirtualPool::new(cfg, (0..2).map(|_| Script::SucceedsAlways).collect());
    let (a, b) = (vp.ids[0], vp.ids[1]);
    for id in [a, b] {
        let (now, wall) = vp.now();
        let w = vp.pools.try_claim(id, now).1;
        vp.persist(&w);
        let w = vp
            .pools
            .probe_result(id, Outcome::Success, true, None, now, wall)
            .1;
        vp.persist(&w);
    }
    // b reached the probe target just now; a cannot. A success from before is no
    // contrast (the site may have gone away since): pending.
    let (now, wall) = vp.now();
    let (r, w) = vp
        .pools
        .probe_result(a, unreachable(), false, None, now, wall);
    vp.persist(&w);
    assert_eq!(r.unwrap(), State::Available);
    let events = vp.new_events();
    let f = kinds(&events, "probe_failure");
    assert_eq!(f.last().unwrap().blame.as_deref(), Some("pending"));
    // b's next check passes after it: a's failure was its own, a cools.
    tokio::time::advance(Duration::from_secs(1)).await;
    let (now, wall) = vp.now();
    let w = vp
        .pools
        .probe_result(b, Outcome::Success, false, None, now, wall)
        .1;
    vp.persist(&w);
    assert_eq!(vp.row(a).state, State::Cooling);
    let events = vp.new_events();
    let changed = kinds(&events, "state_changed");
    assert_eq!(changed.last().unwrap().blame.as_deref(), Some("endpoint"));
}

#[tokio::test(start_paused = true)]
async fn a_hundred_thousand_bogus_targets_cool_nobody_and_stay_within_the_cap() {
    let mut vp = pool(3);
    let (now, wall) = vp.now();
    for i in 0..100_000 {
        let want = Want::parse(Some(&format!("bogus-{i}.invalid:443")), None).unwrap();
        // Twice, as the gateway's retries would: pending, then down.
        for _ in 0..2 {
            let (g, _) = vp.pools.lease_with(POOL, TTL, None, &want, now);
            let g = g.unwrap();
            let (r, _) =
                vp.pools
                    .report_with(&g.lease, unreachable(), &ReportOn::default(), now, wall);
            assert!(matches!(
                r.unwrap().blame,
                Some(Blame::Pending | Blame::Target)
            ));
        }
    }
    for &id in &vp.ids {
        assert_eq!(vp.pools.health(id).unwrap().state, State::Available);
        assert!(vp.pools.pairs_of(id).is_empty());
    }
    let status = &vp.pools.status(Some(POOL), now).unwrap()[0];
    // The table keeps the most recent 65,536 targets; the rest were forgotten.
    assert_eq!(status.targets_down, 65_536);
    assert!(vp.lease().is_ok());
}

/// A site on five ports, each reached once through one of three endpoints, goes down:
/// two uses of each port fail through two endpoints each, as the gateway's retries would.
/// The successes from before the outage are no contrast (the site went away since): no
/// endpoint and no pair cools, every port is down, and another site leases at once.
#[tokio::test(start_paused = true)]
async fn a_site_that_goes_down_after_being_reached_cools_no_endpoint() {
    let mut vp = pool(3);
    let ports: Vec<String> = (0..5)
        .map(|i| format!("shop.example:{}", 8080 + i))
        .collect();
    for t in &ports {
        let g = lease_with(&mut vp, t, None).unwrap();
        assert_eq!(report(&mut vp, &g, Outcome::Success).blame, None);
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    for t in &ports {
        for _ in 0..2 {
            // One client request: a lease, its failure, the next upstream, its failure.
            for _ in 0..2 {
                match lease_with(&mut vp, t, None) {
                    Ok(g) => {
                        let r = report(&mut vp, &g, unreachable());
                        assert!(
                            matches!(r.blame, Some(Blame::Pending | Blame::Target)),
                            "{t}: {r:?}"
                        );
                    }
                    Err(PoolError::DestinationDown { .. }) => break,
                    Err(e) => panic!("{t}: {e:?}"),
                }
            }
        }
    }
    all_available_and_unbanned(&vp);
    let status = &vp.pools.status(Some(POOL), vp.now().0).unwrap()[0];
    assert_eq!(status.targets_down, 5, "{status:?}");
    let events = vp.new_events();
    assert!(kinds(&events, "state_changed").is_empty(), "{events:?}");
    // A healthy site is served, by every endpoint in turn.
    let seen: std::collections::BTreeSet<_> = (0..6)
        .map(|_| {
            let g = lease_with(&mut vp, "healthy.example:443", None).unwrap();
            let (now, _) = vp.now();
            vp.pools.release(&g.lease, now).0.unwrap();
            g.endpoint
        })
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
}

/// Successes before a failure never contrast it; a success through another endpoint
/// after it does (the failing endpoint's pair cools then), and an endpoint that fails
/// three targets others reach after it still cools endpoint-wide.
#[tokio::test(start_paused = true)]
async fn only_a_success_after_the_failure_contrasts_it() {
    let mut vp = pool(3);
    let bad = vp.ids[2];
    for (i, t) in ["a.example:443", "b.example:443", "c.example:443"]
        .iter()
        .enumerate()
    {
        // Reached before (through anyone), then the bad endpoint fails it: pending.
        let g = lease_with(&mut vp, t, None).unwrap();
        report(&mut vp, &g, Outcome::Success);
        let g = loop {
            let g = lease_with(&mut vp, t, None).unwrap();
            if g.endpoint == bad {
                break g;
            }
            let (now, _) = vp.now();
            vp.pools.release(&g.lease, now).0.unwrap();
        };
        assert_eq!(
            report(&mut vp, &g, unreachable()).blame,
            Some(Blame::Pending),
            "a success from before is no contrast"
        );
        assert!(vp.store.pairs_of(bad).unwrap().len() == i);
        // Another endpoint gets through after it: now it is the pair's.
        let g = lease_with(&mut vp, t, None).unwrap();
        assert_ne!(g.endpoint, bad, "the pending endpoint is passed over");
        report(&mut vp, &g, Outcome::Success);
        assert_eq!(vp.store.pairs_of(bad).unwrap().len(), i + 1);
        let want = if i < 2 {
            State::Available
        } else {
            State::Cooling
        };
        assert_eq!(vp.row(bad).state, want, "after {} targets", i + 1);
    }
    assert!(vp
        .row(bad)
        .detail
        .unwrap()
        .contains("failed 3 distinct targets"));
}

/// Escalation never counts a target that turned out to be down: an endpoint whose failures
/// on two targets were confirmed by a later success, whose targets then went down, is not
/// escalated by a third.
#[tokio::test(start_paused = true)]
async fn a_target_that_went_down_takes_back_its_strikes() {
    let mut vp = pool(3);
    let bad = vp.ids[2];
    let lease_through = |vp: &mut VirtualPool, t: &str, want: bool| loop {
        let g = lease_with(vp, t, None).unwrap();
        if (g.endpoint == bad) == want {
            break g;
        }
        let (now, _) = vp.now();
        vp.pools.release(&g.lease, now).0.unwrap();
    };
    for t in ["a.example:443", "b.example:443"] {
        let g = lease_through(&mut vp, t, true);
        assert_eq!(
            report(&mut vp, &g, unreachable()).blame,
            Some(Blame::Pending)
        );
        let g = lease_through(&mut vp, t, false);
        report(&mut vp, &g, Outcome::Success);
        // Then the target goes away: two others fail it, it is down.
        for _ in 0..2 {
            let g = lease_through(&mut vp, t, false);
            report(&mut vp, &g, unreachable());
        }
        assert!(matches!(
            lease_with(&mut vp, t, None),
            Err(PoolError::DestinationDown { .. })
        ));
    }
    let t = "c.example:443";
    let g = lease_through(&mut vp, t, true);
    report(&mut vp, &g, unreachable());
    let g = lease_through(&mut vp, t, false);
    report(&mut vp, &g, Outcome::Success);
    assert_eq!(
        vp.row(bad).state,
        State::Available,
        "two of its three targets turned out to be down"
    );
}

/// A client takes a down target's trial with a ttl of a year and reports nothing. The
/// answer while the trial is out says so (not "next trial in 2000 ms"), the trial is
/// handed back after the pool's trial hold (its probe `timeout` and 5 s), whatever the
/// ttl, and
/// the next use is the trial. The held lease's late report or release then decides
/// nothing about the new trial.
#[tokio::test(start_paused = true)]
async fn a_held_target_trial_is_handed_back_after_the_trial_hold() {
    let mut vp = pool(3);
    let hold = vp.cfg.probe.timeout + Duration::from_secs(5);
    for _ in 0..2 {
        let g = lease_with(&mut vp, DEAD, None).unwrap();
        report(&mut vp, &g, unreachable());
    }
    tokio::time::advance(Duration::from_millis(2200)).await;
    let year = Duration::from_secs(365 * 24 * 3600);
    let want = Want::parse(Some(DEAD), None).unwrap();
    let (now, _) = vp.now();
    let (held, w) = vp.pools.lease_with(POOL, year, None, &want, now);
    vp.persist(&w);
    let held = held.unwrap();
    assert_eq!(held.scope.as_deref(), Some("target"));
    match lease_with(&mut vp, DEAD, None) {
        Err(e @ PoolError::DestinationDown { .. }) => {
            let PoolError::DestinationDown { retry_after, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*retry_after, hold, "until the trial is handed back: {e}");
            let text = e.to_string();
            assert!(text.contains("trial is under way"), "{text}");
            assert!(!text.contains("next trial in"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    tokio::time::advance(hold - Duration::from_millis(1)).await;
    vp.tick();
    assert!(matches!(
        lease_with(&mut vp, DEAD, None),
        Err(PoolError::DestinationDown { .. })
    ));
    tokio::time::advance(Duration::from_millis(1)).await;
    vp.tick();
    let events = vp.new_events();
    let back = kinds(&events, "trial_abandoned");
    assert_eq!(back.len(), 1, "{events:?}");
    assert_eq!(back[0].destination.as_deref(), Some(DEAD));
    assert!(back[0]
        .detail
        .as_deref()
        .unwrap()
        .contains("did not decide"));
    // The next use is the trial, though the first lease lives on for a year.
    let next = lease_with(&mut vp, DEAD, None).unwrap();
    assert_eq!(next.scope.as_deref(), Some("target"));
    // The held lease's late release is not the new trial's: it stays out.
    let (now, _) = vp.now();
    vp.pools.release(&held.lease, now).0.unwrap();
    assert!(matches!(
        lease_with(&mut vp, DEAD, None),
        Err(PoolError::DestinationDown { .. })
    ));
    assert_eq!(report(&mut vp, &next, Outcome::Success).blame, None);
    assert!(!lease_with(&mut vp, DEAD, None).unwrap().trial);
}
