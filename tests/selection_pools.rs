//! How a lease is chosen (docs/selection.md), on `Pools` directly under the paused tokio
//! clock: pacing per (endpoint, host) through real leases, releases and reports; tags;
//! `fastest` and `random`; slow start. Time only moves through `tokio::time::advance`.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use proxypool::config::{Mode, PaceConfig, PoolConfig, Select, SiteRule};
use proxypool::endpoint::EndpointId;
use proxypool::health::{Failure, Phase, Reason, State};
use proxypool::pool::{Outcome, PoolError, Pools, ReportOn, Want};
use proxypool::protocol::Grant;
use proxypool::store::EndpointRow;
use proxypool::tags::Tags;
use tokio::time::advance;

use common::vpool::{endpoint_row, pool_config, Clock, TTL};

const SHOP: &str = "shop.example";
const OTHER: &str = "other.example";
const S: Duration = Duration::from_secs(1);

fn row(id: EndpointId, tags: &[&str]) -> EndpointRow {
    EndpointRow {
        tags: Tags::parse_args(tags).unwrap(),
        ..endpoint_row(id, "p", State::Available)
    }
}

fn cfg(f: impl FnOnce(&mut PoolConfig)) -> PoolConfig {
    let mut c = pool_config(
        "p",
        Mode::StaticNoPing,
        Duration::from_secs(60),
        Duration::from_secs(600),
    );
    f(&mut c);
    c
}

fn pace(interval: Duration, in_flight: u32, slow_down: bool) -> PaceConfig {
    PaceConfig {
        interval,
        in_flight,
        wait: Duration::ZERO,
        slow_down,
        sites: Default::default(),
    }
}

/// Pool `p` with endpoints 1..=n (untagged).
fn pools(c: PoolConfig, n: i64, clock: &Clock) -> Pools {
    let mut p = Pools::new([c]);
    p.seed(23);
    let (now, _) = clock.now();
    for id in 1..=n {
        p.insert_row(&row(id, &[]), now);
    }
    p
}

fn want(host: Option<&str>) -> Want {
    Want::parse(host, None).unwrap()
}

fn lease(p: &mut Pools, host: Option<&str>, clock: &Clock) -> Result<Grant, PoolError> {
    let (now, _) = clock.now();
    p.lease_with("p", TTL, None, &want(host), now).0
}

fn release(p: &mut Pools, g: &Grant, clock: &Clock) {
    let (now, _) = clock.now();
    p.release(&g.lease, now).0.unwrap();
}

fn report(p: &mut Pools, g: &Grant, o: Outcome, took: Option<Duration>, clock: &Clock) -> State {
    let (now, wall) = clock.now();
    let on = ReportOn {
        duration: took,
        ..ReportOn::default()
    };
    p.report_with(&g.lease, o, &on, now, wall).0.unwrap().state
}

/// The `paced` answer's `retry_after`, or a panic naming what came instead.
#[track_caller]
fn paced(r: Result<Grant, PoolError>) -> Option<Duration> {
    match r {
        Err(PoolError::Paced {
            retry_after, host, ..
        }) => {
            assert_eq!(host, SHOP);
            retry_after
        }
        other => panic!("expected paced, got {other:?}"),
    }
}

fn too_many(status: u16, retry_after: Option<Duration>) -> Outcome {
    Outcome::Failure(Failure {
        status: Some(status),
        retry_after,
        ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
    })
}

#[tokio::test(start_paused = true)]
async fn an_interval_spaces_the_uses_of_each_endpoint_for_one_host() {
    let clock = Clock::new();
    let mut p = pools(cfg(|c| c.pace = Some(pace(2 * S, 0, false))), 2, &clock);
    let a = lease(&mut p, Some(SHOP), &clock).unwrap();
    let b = lease(&mut p, Some(SHOP), &clock).unwrap();
    assert_ne!(
        a.endpoint, b.endpoint,
        "the second use goes to the other endpoint"
    );
    // The lease ending does not make its endpoint ready: the interval counts from the lease.
    release(&mut p, &a, &clock);
    release(&mut p, &b, &clock);
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), Some(2 * S));
    // Another host, and a lease without a destination, are not paced.
    let o = lease(&mut p, Some(OTHER), &clock).unwrap();
    let n = lease(&mut p, None, &clock).unwrap();
    release(&mut p, &o, &clock);
    release(&mut p, &n, &clock);
    advance(1500 * Duration::from_millis(1)).await;
    assert_eq!(
        paced(lease(&mut p, Some(SHOP), &clock)),
        Some(Duration::from_millis(500))
    );
    advance(Duration::from_millis(500)).await;
    let c = lease(&mut p, Some(SHOP), &clock).unwrap();
    let d = lease(&mut p, Some(SHOP), &clock).unwrap();
    assert_ne!(c.endpoint, d.endpoint);
    // `host:port` destinations share their host's pace.
    assert!(paced(lease(&mut p, Some("shop.example:8443"), &clock)).is_some());
}

#[tokio::test(start_paused = true)]
async fn in_flight_caps_live_leases_until_one_ends() {
    let clock = Clock::new();
    let mut p = pools(
        cfg(|c| c.pace = Some(pace(Duration::ZERO, 1, false))),
        2,
        &clock,
    );
    let a = lease(&mut p, Some(SHOP), &clock).unwrap();
    let _b = lease(&mut p, Some(SHOP), &clock).unwrap();
    // Only a lease ending frees one: no time to come back at.
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), None);
    // Time alone does not help (within the leases' ttl).
    advance(TTL / 2).await;
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), None);
    report(&mut p, &a, Outcome::Success, None, &clock);
    let c = lease(&mut p, Some(SHOP), &clock).unwrap();
    assert_eq!(c.endpoint, a.endpoint);
    // Without a destination the cap on pairs does not apply.
    lease(&mut p, None, &clock).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_site_override_paces_its_host_only() {
    let clock = Clock::new();
    let mut c = cfg(|_| {});
    let mut pc = pace(S, 0, false);
    pc.sites.insert(
        SHOP.into(),
        SiteRule {
            interval: Some(12 * S),
            in_flight: None,
        },
    );
    c.pace = Some(pc);
    let mut p = pools(c, 1, &clock);
    let a = lease(&mut p, Some(SHOP), &clock).unwrap();
    let o = lease(&mut p, Some(OTHER), &clock).unwrap();
    release(&mut p, &a, &clock);
    release(&mut p, &o, &clock);
    advance(S).await;
    let o = lease(&mut p, Some(OTHER), &clock).unwrap();
    release(&mut p, &o, &clock);
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), Some(11 * S));
    advance(11 * S).await;
    lease(&mut p, Some(SHOP), &clock).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_429_with_slow_down_widens_the_pair_instead_of_banning_it() {
    let clock = Clock::new();
    let mut p = pools(cfg(|c| c.pace = Some(pace(2 * S, 0, true))), 1, &clock);
    let a = lease(&mut p, Some(SHOP), &clock).unwrap();
    let state = report(&mut p, &a, too_many(429, Some(30 * S)), None, &clock);
    assert_eq!(state, State::Available);
    assert!(p.pairs_of(a.endpoint).is_empty(), "no pair is banned");
    // Not before the Retry-After (longer than the doubled 4 s).
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), Some(30 * S));
    let o = lease(&mut p, Some(OTHER), &clock).unwrap();
    release(&mut p, &o, &clock);
    advance(30 * S).await;
    // Spaced 4 s now, then 8 s after a second 429 without Retry-After.
    let b = lease(&mut p, Some(SHOP), &clock).unwrap();
    release(&mut p, &b, &clock);
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), Some(4 * S));
    advance(4 * S).await;
    let c = lease(&mut p, Some(SHOP), &clock).unwrap();
    report(&mut p, &c, too_many(429, None), None, &clock);
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), Some(8 * S));
    // Four answers at ×4 bring it back to ×2, four more to the interval.
    let mut spacings = Vec::new();
    for _ in 0..9 {
        advance(16 * S).await;
        let g = lease(&mut p, Some(SHOP), &clock).unwrap();
        report(&mut p, &g, Outcome::Success, None, &clock);
        spacings.push(paced(lease(&mut p, Some(SHOP), &clock)).unwrap());
    }
    let want: Vec<Duration> = [8, 8, 8, 8, 4, 4, 4, 4, 2].map(|s| s * S).to_vec();
    assert_eq!(spacings, want);
}

#[tokio::test(start_paused = true)]
async fn without_slow_down_a_429_bans_the_pair_and_a_bare_503_always_does() {
    let clock = Clock::new();
    let mut p = pools(
        cfg(|c| c.pace = Some(pace(Duration::ZERO, 0, false))),
        1,
        &clock,
    );
    let a = lease(&mut p, Some(SHOP), &clock).unwrap();
    report(&mut p, &a, too_many(429, None), None, &clock);
    assert_eq!(p.pairs_of(a.endpoint).len(), 1, "the pair is banned");
    assert!(matches!(
        lease(&mut p, Some(SHOP), &clock),
        Err(PoolError::Exhausted { .. })
    ));

    let mut p = pools(
        cfg(|c| c.pace = Some(pace(Duration::ZERO, 0, true))),
        1,
        &clock,
    );
    let a = lease(&mut p, Some(SHOP), &clock).unwrap();
    report(&mut p, &a, too_many(503, None), None, &clock);
    assert_eq!(
        p.pairs_of(a.endpoint).len(),
        1,
        "503 without Retry-After is a ban"
    );
}

#[tokio::test(start_paused = true)]
async fn a_paced_session_waits_for_its_endpoint_rather_than_moving() {
    let clock = Clock::new();
    let mut p = pools(cfg(|c| c.pace = Some(pace(5 * S, 0, false))), 2, &clock);
    let (now, _) = clock.now();
    let w = want(Some(SHOP));
    let a = p.lease_with("p", TTL, Some("s1"), &w, now).0.unwrap();
    release(&mut p, &a, &clock);
    let again = p.lease_with("p", TTL, Some("s1"), &w, now).0;
    assert_eq!(paced(again), Some(5 * S));
    advance(5 * S).await;
    let (now, _) = clock.now();
    let b = p.lease_with("p", TTL, Some("s1"), &w, now).0.unwrap();
    assert_eq!(b.endpoint, a.endpoint);
}

#[tokio::test(start_paused = true)]
async fn tags_select_endpoints_and_an_unknown_key_is_an_error() {
    let clock = Clock::new();
    let mut p = Pools::new([cfg(|_| {})]);
    let (now, _) = clock.now();
    p.insert_row(&row(1, &["country=us", "tier=dc"]), now);
    p.insert_row(&row(2, &["country=de"]), now);
    p.insert_row(&row(3, &[]), now);
    let tagged = |t: &[&str]| Want::default().with_tags(Tags::parse_args(t).unwrap());
    for _ in 0..5 {
        let g = p
            .lease_with("p", TTL, None, &tagged(&["country=de"]), now)
            .0
            .unwrap();
        assert_eq!(g.endpoint, 2);
        p.release(&g.lease, now).0.unwrap();
        let g = p
            .lease_with("p", TTL, None, &tagged(&["tier=dc", "country=us"]), now)
            .0
            .unwrap();
        assert_eq!(g.endpoint, 1);
        p.release(&g.lease, now).0.unwrap();
    }
    // A value nobody carries: nothing fits.
    let r = p
        .lease_with("p", TTL, None, &tagged(&["country=fr"]), now)
        .0;
    assert!(matches!(r, Err(PoolError::Exhausted { .. })), "{r:?}");
    // A key nobody carries: the caller's mistake, named with the keys in use.
    let r = p.lease_with("p", TTL, None, &tagged(&["contry=us"]), now).0;
    let e = r.unwrap_err();
    assert!(matches!(e, PoolError::UnknownTag { .. }));
    assert!(
        e.to_string()
            .contains("\"contry\" (keys in use: country, tier)"),
        "{e}"
    );
    // New tags take effect at once.
    p.update_tags(3, &Tags::parse_args(&["country=de"]).unwrap());
    let mut seen = Vec::new();
    for _ in 0..4 {
        let g = p
            .lease_with("p", TTL, None, &tagged(&["country=de"]), now)
            .0
            .unwrap();
        seen.push(g.endpoint);
    }
    seen.sort();
    assert_eq!(seen, [2, 2, 3, 3]);
}

/// Lease `n` times from a fresh pool state, reporting each use with the endpoint's
/// latency; returns how many leases each endpoint got.
fn shares(
    p: &mut Pools,
    n: usize,
    latency: &HashMap<EndpointId, u64>,
    clock: &Clock,
) -> HashMap<EndpointId, usize> {
    let mut got = HashMap::new();
    for _ in 0..n {
        let g = lease(p, None, clock).unwrap();
        *got.entry(g.endpoint).or_default() += 1;
        let took = latency
            .get(&g.endpoint)
            .map(|ms| Duration::from_millis(*ms));
        report(p, &g, Outcome::Success, took, clock);
    }
    got
}

#[tokio::test(start_paused = true)]
async fn fastest_prefers_the_fast_endpoint_and_follows_it_when_it_slows() {
    let clock = Clock::new();
    let mut p = pools(cfg(|c| c.select = Select::Fastest), 2, &clock);
    let mut lat = HashMap::from([(1, 20), (2, 400)]);
    // Measure both.
    shares(&mut p, 20, &lat, &clock);
    let got = shares(&mut p, 1000, &lat, &clock);
    let fast = got.get(&1).copied().unwrap_or(0);
    assert!(fast >= 700, "the fast endpoint got {fast} of 1000: {got:?}");
    assert!(
        got.get(&2).copied().unwrap_or(0) > 0,
        "the slow one is still sampled"
    );
    // The fast one slows down past the other: within a short while the other leads.
    lat.insert(1, 2000);
    shares(&mut p, 100, &lat, &clock);
    let got = shares(&mut p, 1000, &lat, &clock);
    let now_fast = got.get(&2).copied().unwrap_or(0);
    assert!(
        now_fast >= 700,
        "after the slow-down endpoint 2 got {now_fast}: {got:?}"
    );
}

/// Two endpoints, the smallest pool where a biased draw shows: a duel of two uniform
/// draws (with replacement) is won by the fast one unless both draws are the slow one,
/// three in four; a single draw of `random` is a coin. The bounds are 5 standard
/// deviations of the binomial either side.
#[tokio::test(start_paused = true)]
async fn sampling_draws_stay_uniform_in_a_pool_of_two() {
    let clock = Clock::new();
    let mut p = pools(cfg(|c| c.select = Select::Fastest), 2, &clock);
    let lat = HashMap::from([(1, 20), (2, 400)]);
    shares(&mut p, 20, &lat, &clock);
    let got = shares(&mut p, 4000, &lat, &clock);
    let fast = got.get(&1).copied().unwrap_or(0);
    assert!(
        (2863..=3137).contains(&fast),
        "fastest: the fast one won {fast} of 4000 duels, 3000 expected: {got:?}"
    );
    let mut p = pools(cfg(|c| c.select = Select::Random), 2, &clock);
    let got = shares(&mut p, 4000, &HashMap::new(), &clock);
    let one = got.get(&1).copied().unwrap_or(0);
    assert!(
        (1842..=2158).contains(&one),
        "random: endpoint 1 got {one} of 4000, 2000 expected: {got:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn fastest_weighs_recent_failures_and_scores_the_unmeasured_as_the_median() {
    let clock = Clock::new();
    let c = cfg(|c| {
        c.select = Select::Fastest;
        // Failures never cool here: the test is about the score.
        c.policy.fall = 1000;
    });
    let mut p = pools(c, 3, &clock);
    // 1 and 2 alike fast; 2 fails half of the time; 3 never measured.
    for i in 0..200 {
        let g = lease(&mut p, None, &clock).unwrap();
        let o = if g.endpoint == 2 && i % 2 == 0 {
            Outcome::Failure(Failure::new(
                Reason::SlowResponse,
                Some(Phase::ResponseBody),
            ))
        } else {
            Outcome::Success
        };
        let took = (g.endpoint != 3).then_some(Duration::from_millis(50));
        assert_eq!(report(&mut p, &g, o, took, &clock), State::Available);
    }
    let got = shares(&mut p, 900, &HashMap::from([(1, 50), (2, 50)]), &clock);
    let (a, b, c) = (
        got[&1],
        got.get(&2).copied().unwrap_or(0),
        got.get(&3).copied().unwrap_or(0),
    );
    assert!(a > b, "the endpoint that fails less wins more: {got:?}");
    assert!(
        c > 100,
        "an unmeasured endpoint is neither favoured nor shunned: {got:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn random_spreads_leases_over_every_endpoint() {
    let clock = Clock::new();
    let mut p = pools(cfg(|c| c.select = Select::Random), 4, &clock);
    let got = shares(&mut p, 2000, &HashMap::new(), &clock);
    for id in 1..=4 {
        let n = got[&id];
        assert!(
            (400..=600).contains(&n),
            "endpoint {id}: {n} of 2000: {got:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn slow_start_raises_a_new_endpoints_share_from_a_tenth_to_full() {
    let clock = Clock::new();
    let c = cfg(|c| {
        c.select = Select::Random;
        c.slow_start = 30 * S;
    });
    let mut p = pools(c, 9, &clock);
    advance(100 * S).await;
    let (now, _) = clock.now();
    p.insert_row(&row(10, &[]), now);
    let share = |p: &mut Pools| {
        let got = shares(p, 4000, &HashMap::new(), &clock);
        got.get(&10).copied().unwrap_or(0) as f64 / 4000.0
    };
    // Drawn one time in ten, taken with its weight: 0.1 × 0.1 against 0.9 at first.
    let at_0 = share(&mut p);
    advance(15 * S).await;
    let at_15 = share(&mut p);
    advance(15 * S).await;
    let at_30 = share(&mut p);
    assert!(at_0 < 0.03, "new: {at_0}");
    assert!((0.03..0.08).contains(&at_15), "half-way: {at_15}");
    assert!((0.07..0.13).contains(&at_30), "full weight: {at_30}");
    // Least leased honours it too: a new endpoint is passed over while older ones wait.
    let c = cfg(|c| c.slow_start = 30 * S);
    let mut p = pools(c, 9, &clock);
    advance(100 * S).await;
    let (now, _) = clock.now();
    p.insert_row(&row(10, &[]), now);
    let got = shares(&mut p, 4000, &HashMap::new(), &clock);
    let new = got.get(&10).copied().unwrap_or(0);
    let old = got[&1];
    assert!(new * 3 < old, "new {new}, an old one {old}: {got:?}");
}

/// A 429 asking for a year of quiet (`Retry-After: 365d`) holds the pair back no longer
/// than the pool's cooldown `max` (600 s here), like a cooldown; and `enable ID
/// --destination HOST` clears it at once.
#[tokio::test(start_paused = true)]
async fn a_slow_down_is_capped_like_a_cooldown_and_enable_clears_it() {
    let clock = Clock::new();
    let mut p = pools(cfg(|c| c.pace = Some(pace(2 * S, 0, true))), 2, &clock);
    let year = 365 * 24 * 3600 * S;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let g = lease(&mut p, Some(SHOP), &clock).unwrap();
        report(&mut p, &g, too_many(429, Some(year)), None, &clock);
        ids.push(g.endpoint);
    }
    assert_ne!(ids[0], ids[1]);
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), Some(600 * S));
    let (now, _) = clock.now();
    let (state, writes) = p.enable_pair(ids[0], SHOP, now);
    assert_eq!(state.unwrap(), State::Available);
    let said = format!("{writes:?}");
    assert!(!said.contains("nothing to change"), "{said}");
    assert!(said.contains("slow"), "{said}");
    let g = lease(&mut p, Some(SHOP), &clock).unwrap();
    assert_eq!(g.endpoint, ids[0], "cleared: usable for the host at once");
    release(&mut p, &g, &clock);
    // The other endpoint's pair is still held back, until its capped end.
    advance(600 * S).await;
    let g = lease(&mut p, Some(SHOP), &clock).unwrap();
    release(&mut p, &g, &clock);
}

/// Three live leases of a host at `in_flight = 1`, then 70,000 leases of other hosts (more
/// than the 65,536 hosts pacing keeps): the host's state is live, so it is never the one
/// forgotten, and a fourth lease for it is still refused.
#[tokio::test(start_paused = true)]
async fn live_pacing_state_is_never_forgotten_for_bogus_hosts() {
    let clock = Clock::new();
    let mut p = pools(
        cfg(|c| c.pace = Some(pace(Duration::ZERO, 1, false))),
        3,
        &clock,
    );
    let held: Vec<Grant> = (0..3)
        .map(|_| lease(&mut p, Some(SHOP), &clock).unwrap())
        .collect();
    assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), None);
    for i in 0..70_000 {
        let g = lease(&mut p, Some(&format!("bogus-{i}.example")), &clock).unwrap();
        release(&mut p, &g, &clock);
    }
    for _ in 0..3 {
        assert_eq!(paced(lease(&mut p, Some(SHOP), &clock)), None);
    }
    for g in &held {
        release(&mut p, g, &clock);
    }
    let g = lease(&mut p, Some(SHOP), &clock).unwrap();
    release(&mut p, &g, &clock);
}

/// One address spelt six ways is one host for pacing, one destination for bans and one
/// target: none of them is evaded by spelling it otherwise.
#[tokio::test(start_paused = true)]
async fn one_address_spelt_six_ways_is_one_place() {
    const SPELLINGS: [&str; 6] = [
        "127.1",
        "2130706433",
        "0x7f.0.0.1",
        "0177.0.0.1",
        "127.000.000.001",
        "[::ffff:7f00:1]",
    ];
    let clock = Clock::new();
    // Pacing: one live lease of 127.0.0.1 at in_flight = 1 holds its only endpoint.
    let mut p = pools(
        cfg(|c| c.pace = Some(pace(Duration::ZERO, 1, false))),
        1,
        &clock,
    );
    let g = lease(&mut p, Some("127.0.0.1"), &clock).unwrap();
    for s in SPELLINGS {
        match lease(&mut p, Some(s), &clock) {
            Err(PoolError::Paced { host, .. }) => assert_eq!(host, "127.0.0.1", "{s}"),
            other => panic!("{s}: {other:?}"),
        }
    }
    release(&mut p, &g, &clock);
    // Bans: a 403 reported for one spelling bans the pair for all of them.
    let mut p = pools(cfg(|_| {}), 1, &clock);
    let g = lease(&mut p, Some("127.0.0.1"), &clock).unwrap();
    let ban = Outcome::Failure(Failure {
        status: Some(403),
        ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
    });
    report(&mut p, &g, ban, None, &clock);
    for s in SPELLINGS {
        assert!(
            matches!(
                lease(&mut p, Some(s), &clock),
                Err(PoolError::Exhausted { .. })
            ),
            "{s}"
        );
    }
    // Targets: down for one spelling is down for all of them.
    let mut p = pools(cfg(|_| {}), 2, &clock);
    for _ in 0..2 {
        let g = lease(&mut p, Some("127.0.0.1:8080"), &clock).unwrap();
        let (now, wall) = clock.now();
        let f = Failure::new(Reason::UpstreamUnreachable, Some(Phase::ProxyHandshake));
        let on = ReportOn::default();
        p.report_with(&g.lease, Outcome::Failure(f), &on, now, wall)
            .0
            .unwrap();
    }
    for s in SPELLINGS {
        let r = lease(&mut p, Some(&format!("{s}:8080")), &clock);
        assert!(
            matches!(r, Err(PoolError::DestinationDown { .. })),
            "{s}: {r:?}"
        );
    }
}
