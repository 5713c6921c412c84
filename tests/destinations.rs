//! Per-destination health (docs/destinations.md) wired end to end through `Pools` and the
//! `Engine`: pair cooldown and single trial on the paused clock, a lease stampede at a pair's
//! deadline, restart with pairs, removal, report by session, schemes, and the audit trail.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::vpool::{config, ev, evd, Script, VirtualPool, POOL, TTL};
use proxypool::config::{Mode, PoolConfig};
use proxypool::endpoint::ProxyUrl;
use proxypool::health::blame::Blame;
use proxypool::health::{Failure, Phase, Reason, State};
use proxypool::pool::engine::{Engine, EngineError};
use proxypool::pool::{Outcome, PoolError, ReportOn, Want};
use proxypool::store::{NewEndpoint, Store};
use tokio::time::{advance, Instant};

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const BASE: Duration = Duration::from_secs(10);
const SHOP: &str = "shop.example";
const NEWS: &str = "news.example";

fn want(d: &str) -> Want {
    Want::parse(Some(d), None).unwrap()
}

fn banned_403() -> Outcome {
    let mut f = Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead));
    f.status = Some(403);
    Outcome::Failure(f)
}

fn on(d: &str) -> ReportOn {
    ReportOn {
        duration: Some(Duration::from_millis(120)),
        ..ReportOn::to(Some(d))
    }
}

struct Rig {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    cfg: PoolConfig,
    engine: Arc<Engine>,
}

/// An engine over a real store with `n` endpoints (`http://10.9.0.i:3128`, ids 1..=n).
async fn rig(mode: Mode, n: u8) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dest.db");
    let cfg = config(mode, BASE, 8 * BASE);
    let engine = Engine::open(Store::open(&path).unwrap(), [cfg.clone()]).unwrap();
    let eps = (1..=n)
        .map(|i| NewEndpoint {
            url: ProxyUrl::parse(&format!("http://u:pw@10.9.0.{i}:3128")).unwrap(),
            pool: POOL.into(),
            label: None,
            source: Some("test".into()),
            state: State::Available,
            tags: Default::default(),
        })
        .collect();
    engine.add(eps).await.unwrap();
    Rig {
        _dir: dir,
        path,
        cfg,
        engine,
    }
}

impl Rig {
    async fn lease(&self, d: Option<&str>) -> proxypool::protocol::Grant {
        let w = d.map(want).unwrap_or_default();
        self.engine
            .lease_with(POOL, TTL, None, Duration::ZERO, &w)
            .await
            .unwrap()
    }

    /// Ban (endpoint 1, `d`) by a 403 on a lease for `d` that got endpoint 1.
    async fn ban_first(&self, d: &str) {
        let g = self.lease(Some(d)).await;
        assert_eq!(g.endpoint, 1);
        let st = self
            .engine
            .report_on(&g.lease, banned_403(), &on(d))
            .await
            .unwrap();
        assert_eq!(
            st.state,
            State::Available,
            "destination-scoped: endpoint stays"
        );
        assert_eq!(st.blame, Some(Blame::Pair), "a ban is the pair's");
    }

    fn pair_state(&self, id: i64, d: &str) -> Option<State> {
        self.engine
            .pairs_of(id)
            .into_iter()
            .find(|p| p.destination == d)
            .map(|p| p.health.state)
    }
}

#[tokio::test(start_paused = true)]
async fn pair_cools_then_admits_exactly_one_trial_while_other_sites_use_the_endpoint() {
    // Static mode: the prober recovers endpoints, yet a pair's trial is still a lease.
    let r = rig(Mode::Static, 3).await;
    r.ban_first(SHOP).await;
    assert_eq!(r.pair_state(1, SHOP), Some(State::Cooling));
    // Other destinations, and leases without one, still get endpoint 1.
    let mut seen_news = Vec::new();
    for _ in 0..3 {
        let g = r.lease(Some(NEWS)).await;
        seen_news.push(g.endpoint);
        r.engine.release(&g.lease).await.unwrap();
    }
    assert!(seen_news.contains(&1), "{seen_news:?}");
    advance(BASE - MS).await;
    for _ in 0..6 {
        let g = r.lease(Some(SHOP)).await;
        assert_ne!(g.endpoint, 1, "deadline − 1 ms: still banned for {SHOP}");
        assert!(!g.trial);
        r.engine.release(&g.lease).await.unwrap();
    }
    advance(MS).await;
    let trial = r.lease(Some(SHOP)).await;
    assert_eq!(
        (trial.endpoint, trial.trial, trial.scope.as_deref()),
        (1, true, Some("destination"))
    );
    assert_eq!(r.pair_state(1, SHOP), Some(State::ProbeAllowed));
    // The trial is in flight: more leases for the shop skip 1; the news site gets it.
    for _ in 0..4 {
        let g = r.lease(Some(SHOP)).await;
        assert_ne!(g.endpoint, 1);
        r.engine.release(&g.lease).await.unwrap();
    }
    // Held, so that round robin reaches endpoint 1 (which holds the trial lease).
    let mut news = Vec::new();
    for _ in 0..3 {
        let g = r.lease(Some(NEWS)).await;
        assert!(!g.trial);
        news.push(g);
    }
    assert!(news.iter().any(|g| g.endpoint == 1), "{news:?}");
    for g in news {
        r.engine.release(&g.lease).await.unwrap();
    }
    let st = r
        .engine
        .report_on(&trial.lease, Outcome::Success, &on(SHOP))
        .await
        .unwrap();
    assert_eq!(st.state, State::Available);
    assert_eq!(st.blame, None, "a success blames nobody");
    assert_eq!(r.pair_state(1, SHOP), None, "a recovered pair is deleted");
    r.engine.flush().await.unwrap();
    let store = Store::open(&r.path).unwrap();
    assert!(store.pairs().unwrap().is_empty());
    let trail: Vec<_> = r
        .engine
        .events(Some(1), 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.destination.is_some())
        .map(|e| (e.kind, e.to, e.status))
        .collect();
    let s = |x: &str| Some(x.to_string());
    assert_eq!(
        trail,
        vec![
            ("report".into(), s("cooling"), Some(403)),
            ("state_changed".into(), s("cooling"), Some(403)),
            // A pair's rows keep the status that banned it until it recovers.
            ("state_changed".into(), s("probe_allowed"), Some(403)),
            ("trial_admitted".into(), s("probe_allowed"), None),
            ("report".into(), s("available"), None),
            ("state_changed".into(), s("available"), None),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_engine_timer_advances_pairs_without_any_call() {
    let r = rig(Mode::StaticNoPing, 2).await;
    r.ban_first(SHOP).await;
    let timer = tokio::spawn(r.engine.clone().run_timer(std::future::pending()));
    advance(BASE - MS).await;
    tokio::task::yield_now().await;
    assert_eq!(r.pair_state(1, SHOP), Some(State::Cooling));
    advance(MS).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    r.engine.flush().await.unwrap();
    assert_eq!(r.pair_state(1, SHOP), Some(State::ProbeAllowed));
    let store = Store::open(&r.path).unwrap();
    let pairs = store.pairs().unwrap();
    assert_eq!(pairs.len(), 1);
    assert_eq!(pairs[0].record.health.state, State::ProbeAllowed);
    timer.abort();
}

#[tokio::test(start_paused = true)]
async fn a_500_way_stampede_at_the_deadline_admits_one_trial() {
    let r = rig(Mode::StaticNoPing, 8).await;
    r.ban_first(SHOP).await;
    advance(BASE).await;
    let mut tasks = Vec::new();
    for _ in 0..500 {
        let e = r.engine.clone();
        tasks.push(tokio::spawn(async move {
            e.lease_with(POOL, TTL, None, Duration::ZERO, &want(SHOP))
                .await
                .unwrap()
        }));
    }
    let mut by_endpoint: HashMap<i64, usize> = HashMap::new();
    let mut trials = Vec::new();
    for t in tasks {
        let g = t.await.unwrap();
        *by_endpoint.entry(g.endpoint).or_default() += 1;
        if g.trial {
            trials.push((g.endpoint, g.scope.clone()));
        }
    }
    assert_eq!(trials, vec![(1, Some("destination".to_string()))]);
    assert_eq!(by_endpoint[&1], 1, "{by_endpoint:?}");
    assert_eq!(by_endpoint.values().sum::<usize>(), 500);
    r.engine.flush().await.unwrap();
    let admitted = r
        .engine
        .events(Some(1), 0, 1000)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == "trial_admitted")
        .count();
    assert_eq!(admitted, 1);
}

#[tokio::test(start_paused = true)]
async fn pairs_survive_a_restart_with_the_clamp_rule_and_go_with_their_endpoint() {
    let r = rig(Mode::StaticNoPing, 3).await;
    r.ban_first(SHOP).await;
    advance(4 * S).await;
    r.engine.flush().await.unwrap();
    let (path, cfg) = (r.path.clone(), r.cfg.clone());
    drop(r.engine);
    // Real wall clock on reopen: at most BASE is left, never more (clamp).
    let engine = Engine::open(Store::open(&path).unwrap(), [cfg]).unwrap();
    let pairs = engine.pairs_of(1);
    assert_eq!(pairs.len(), 1);
    assert_eq!(
        (pairs[0].destination.as_str(), pairs[0].health.state),
        (SHOP, State::Cooling)
    );
    assert_eq!(pairs[0].status, Some(403));
    let left = pairs[0].health.deadline.unwrap() - Instant::now();
    assert!(left <= BASE, "{left:?}");
    for _ in 0..4 {
        let g = engine
            .lease_with(POOL, TTL, None, Duration::ZERO, &want(SHOP))
            .await
            .unwrap();
        assert_ne!(g.endpoint, 1);
        engine.release(&g.lease).await.unwrap();
    }
    engine.remove(vec![1]).await.unwrap();
    assert!(engine.pairs_of(1).is_empty());
    engine.flush().await.unwrap();
    assert!(Store::open(&path).unwrap().pairs().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn scope_decides_whether_the_endpoint_or_the_pair_takes_a_failure() {
    let r = rig(Mode::StaticNoPing, 2).await;
    // Proxy-side failure reported with a destination: the endpoint cools for everyone.
    let g = r.lease(Some(SHOP)).await;
    let f = Outcome::Failure(Failure::new(Reason::ConnectRefused, Some(Phase::Connect)));
    let st = r
        .engine
        .report_on(&g.lease, f, &on(SHOP))
        .await
        .unwrap()
        .state;
    assert_eq!(st, State::Cooling);
    assert!(r.engine.pairs_of(g.endpoint).is_empty());
    // A destination failure without a destination (plain lease) is endpoint-wide too.
    let g2 = r.lease(None).await;
    assert_ne!(g2.endpoint, g.endpoint);
    let st = r.engine.report(&g2.lease, banned_403()).await.unwrap();
    assert_eq!(st, State::Cooling);
    // An endpoint cooling endpoint-wide is never leased, whatever its pairs.
    let err = r
        .engine
        .lease_with(POOL, TTL, None, Duration::ZERO, &want(NEWS))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::Pool(PoolError::Exhausted { .. })),
        "{err}"
    );
    r.engine.flush().await.unwrap();
    let evs = r.engine.events(None, 0, 100).await.unwrap();
    let reports: Vec<_> = evs
        .iter()
        .filter(|e| e.kind == "report")
        .map(|e| (e.destination.clone(), e.status))
        .collect();
    assert_eq!(reports, vec![(None, None), (None, Some(403))]);
}

#[tokio::test(start_paused = true)]
async fn report_by_session_reports_on_the_bound_endpoint_and_a_failure_unbinds_it() {
    let r = rig(Mode::StaticNoPing, 3).await;
    let e = &r.engine;
    let g = e
        .lease_with(POOL, TTL, Some("s1"), Duration::ZERO, &Want::default())
        .await
        .unwrap();
    e.release(&g.lease).await.unwrap();
    let st = e
        .report_session(POOL, "s1", banned_403(), &ReportOn::to(Some(SHOP)))
        .await
        .unwrap()
        .state;
    assert_eq!(st, State::Available);
    assert_eq!(r.pair_state(g.endpoint, SHOP), Some(State::Cooling));
    // Unbound: the session has no endpoint until its next lease.
    let err = e
        .report_session(POOL, "s1", Outcome::Success, &ReportOn::to(None))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::Pool(PoolError::UnknownSession { session, .. }) if session == "s1"),
        "{err}"
    );
    let err = e
        .report_session(POOL, "never", Outcome::Success, &ReportOn::to(None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"never\""), "{err}");
    // The session's next lease for the shop avoids the banned pair.
    let g2 = e
        .lease_with(POOL, TTL, Some("s1"), Duration::ZERO, &want(SHOP))
        .await
        .unwrap();
    assert_ne!(g2.endpoint, g.endpoint);
    // A success keeps the binding.
    e.report_session(POOL, "s1", Outcome::Success, &ReportOn::to(Some(SHOP)))
        .await
        .unwrap();
    e.report_session(POOL, "s1", Outcome::Success, &ReportOn::to(None))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn schemes_filter_leases_and_unknown_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(Mode::StaticNoPing, BASE, BASE);
    let engine = Engine::open(Store::open(&dir.path().join("s.db")).unwrap(), [cfg]).unwrap();
    let eps = ["socks5h://10.8.0.1:1080", "http://10.8.0.2:3128"]
        .iter()
        .map(|u| NewEndpoint {
            url: ProxyUrl::parse(u).unwrap(),
            pool: POOL.into(),
            label: None,
            source: None,
            state: State::Available,
            tags: Default::default(),
        })
        .collect();
    engine.add(eps).await.unwrap();
    let http = Want::parse(None, Some(&["http".into(), "https".into()])).unwrap();
    for _ in 0..4 {
        let g = engine
            .lease_with(POOL, TTL, None, Duration::ZERO, &http)
            .await
            .unwrap();
        assert_eq!(g.endpoint, 2);
        engine.release(&g.lease).await.unwrap();
    }
    let socks4 = Want::parse(None, Some(&["SOCKS4".into()])).unwrap();
    let err = engine
        .lease_with(POOL, TTL, None, Duration::ZERO, &socks4)
        .await
        .unwrap_err();
    // No endpoint of that scheme at all: waiting will not help, and the error names the
    // filter rather than some other endpoint's cooldown.
    assert!(
        matches!(
            &err,
            EngineError::Pool(PoolError::Empty { filter: Some(f), .. }) if f == "socks4"
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("no socks4 endpoint"), "{err}");
    let bad = Want::parse(None, Some(&["gopher".into()])).unwrap_err();
    assert!(bad.to_string().contains("gopher"), "{bad}");
    assert!(Want::parse(None, Some(&[])).is_err());
    let bad = Want::parse(Some("shop.example:443/x"), None).unwrap_err();
    assert!(bad.to_string().contains("shop.example:443/x"), "{bad}");
    assert_eq!(
        Want::parse(Some("Shop.Example:443"), None)
            .unwrap()
            .destination
            .as_deref(),
        Some(SHOP)
    );
}

#[tokio::test(start_paused = true)]
async fn virtual_pool_audit_trail_with_destinations() {
    let mut vp = VirtualPool::new(
        config(Mode::StaticNoPing, BASE, 8 * BASE),
        vec![Script::SucceedsAlways, Script::SucceedsAlways],
    );
    vp.audit();
    let g = vp.lease_for(SHOP).unwrap();
    assert_eq!(g.endpoint, 1);
    assert_eq!(vp.report_for(&g, banned_403(), None), State::Available);
    // The lease's destination scoped the report.
    assert_eq!(
        vp.audit(),
        vec![
            evd(
                "report",
                1,
                SHOP,
                "available",
                "cooling",
                "destination_status"
            ),
            evd(
                "state_changed",
                1,
                SHOP,
                "available",
                "cooling",
                "destination_status"
            ),
        ]
    );
    // A trial released without a report is abandoned, then admitted again.
    advance(BASE).await;
    let t = vp.lease_for(SHOP).unwrap();
    assert_eq!((t.endpoint, t.trial), (1, true));
    let (now, _) = vp.now();
    let (r, w) = vp.pools.release(&t.lease, now);
    r.unwrap();
    vp.persist(&w);
    let t2 = vp.lease_for(SHOP).unwrap();
    assert_eq!((t2.endpoint, t2.trial), (1, true));
    // The trial fails: longer cooldown for the pair only.
    assert_eq!(vp.report_for(&t2, banned_403(), None), State::Available);
    let a = vp.lease_for(NEWS).unwrap();
    let b = vp.lease_for(NEWS).unwrap();
    assert_eq!(
        [a.endpoint, b.endpoint].iter().filter(|&&e| e == 1).count(),
        1,
        "the news site still uses endpoint 1"
    );
    for g in [a, b] {
        assert_eq!(vp.report_for(&g, Outcome::Success, None), State::Available);
    }
    assert_eq!(
        vp.audit(),
        vec![
            evd(
                "state_changed",
                1,
                SHOP,
                "cooling",
                "probe_allowed",
                "destination_status"
            ),
            evd(
                "trial_admitted",
                1,
                SHOP,
                "probe_allowed",
                "probe_allowed",
                ""
            ),
            evd(
                "trial_abandoned",
                1,
                SHOP,
                "probe_allowed",
                "probe_allowed",
                ""
            ),
            evd(
                "trial_admitted",
                1,
                SHOP,
                "probe_allowed",
                "probe_allowed",
                ""
            ),
            evd(
                "report",
                1,
                SHOP,
                "probe_allowed",
                "cooling",
                "destination_status"
            ),
            evd(
                "state_changed",
                1,
                SHOP,
                "probe_allowed",
                "cooling",
                "destination_status"
            ),
        ]
    );
    // An endpoint-scoped failure on a lease for the shop: endpoint row, no destination.
    let g = vp.lease_for(SHOP).unwrap();
    assert_eq!(g.endpoint, 2);
    let f = Outcome::Failure(Failure::new(Reason::ConnectTimeout, Some(Phase::Connect)));
    assert_eq!(vp.report_for(&g, f, None), State::Cooling);
    assert_eq!(
        vp.audit(),
        vec![
            ev("report", 2, "available", "cooling", "connect_timeout"),
            ev(
                "state_changed",
                2,
                "available",
                "cooling",
                "connect_timeout"
            ),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_pair_trial_not_decided_by_its_report_or_expired_is_handed_back() {
    let r = rig(Mode::Sniffing, 2).await;
    r.ban_first(SHOP).await;
    advance(BASE).await;
    let t = r.lease(Some(SHOP)).await;
    assert_eq!((t.endpoint, t.scope.as_deref()), (1, Some("destination")));
    // The report speaks for another site: the shop's pair is not decided by it.
    r.engine
        .report_on(&t.lease, Outcome::Success, &on(NEWS))
        .await
        .unwrap();
    assert_eq!(r.pair_state(1, SHOP), Some(State::ProbeAllowed));
    // Admitted again; this time the lease expires unreported.
    let ttl = Duration::from_secs(5);
    let t = r
        .engine
        .lease_with(POOL, ttl, None, Duration::ZERO, &want(SHOP))
        .await
        .unwrap();
    assert_eq!((t.endpoint, t.trial), (1, true));
    advance(ttl).await;
    let again = r.lease(Some(SHOP)).await;
    assert_eq!((again.endpoint, again.trial), (1, true));
    r.engine.flush().await.unwrap();
    let whys: Vec<_> = r
        .engine
        .events(Some(1), 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "trial_abandoned")
        .map(|e| (e.destination, e.detail))
        .collect();
    let shop = Some(SHOP.to_string());
    assert_eq!(
        whys,
        vec![
            (
                shop.clone(),
                Some("the report did not decide the pair".into())
            ),
            (shop, Some("lease expired".into())),
        ]
    );
}

/// Junk fills the pair cap (a lease and a 403 report on each of many bogus hosts); a real
/// 403 afterwards is recorded all the same (the pair failed least recently gives way),
/// the next lease for the real site skips the banned endpoint, and the database holds no
/// more pairs than the cap: junk does not survive past it.
#[tokio::test(start_paused = true)]
async fn junk_at_the_pair_cap_never_drops_a_real_ban() {
    const CAP: usize = 1_000;
    let mut vp = VirtualPool::new(
        config(Mode::StaticNoPing, BASE, 8 * BASE),
        (0..3).map(|_| Script::SucceedsAlways).collect(),
    );
    vp.pools.cap_pairs(POOL, CAP);
    let (now, wall) = vp.now();
    let mut writes = Vec::new();
    for i in 0..CAP + 20 {
        let (g, w) = vp
            .pools
            .lease_with(POOL, TTL, None, &want(&format!("junk-{i}.invalid")), now);
        writes.extend(w);
        let (r, w) = vp.pools.report_with(
            &g.unwrap().lease,
            banned_403(),
            &ReportOn::default(),
            now,
            wall,
        );
        assert_eq!(r.unwrap().blame, Some(Blame::Pair));
        writes.extend(w);
    }
    vp.persist(&writes);
    assert_eq!(vp.store.pairs().unwrap().len(), CAP);
    let g = vp
        .pools
        .lease_with(POOL, TTL, None, &want(SHOP), now)
        .0
        .unwrap();
    let (r, w) = vp
        .pools
        .report_with(&g.lease, banned_403(), &ReportOn::default(), now, wall);
    vp.persist(&w);
    assert_eq!(r.unwrap().blame, Some(Blame::Pair));
    let shop: Vec<_> = vp
        .store
        .pairs()
        .unwrap()
        .into_iter()
        .filter(|p| p.record.destination == SHOP)
        .collect();
    assert_eq!(shop.len(), 1, "the real ban is recorded");
    assert_eq!(shop[0].record.endpoint, g.endpoint);
    for _ in 0..6 {
        let next = vp
            .pools
            .lease_with(POOL, TTL, None, &want(SHOP), now)
            .0
            .unwrap();
        assert_ne!(next.endpoint, g.endpoint, "the banned endpoint is skipped");
        vp.pools.release(&next.lease, now).0.unwrap();
    }
    assert_eq!(
        vp.store.pairs().unwrap().len(),
        CAP,
        "the database stays within the cap"
    );
    assert!(vp.pools.pair_keys().len() <= CAP);
    let forgotten = vp
        .new_events()
        .into_iter()
        .filter(|e| {
            e.detail
                .as_deref()
                .is_some_and(|d| d.contains("to make room"))
        })
        .count();
    assert_eq!(
        forgotten, 21,
        "one pair forgotten for each ban past the cap"
    );
}
