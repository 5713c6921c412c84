//! Pacing as tables: each case a config and steps at exact times (milliseconds from the
//! start), each step what is done and what a check of the endpoint must then say.

use std::time::Duration;

use tokio::time::Instant;

use super::host::Pair;
use super::*;
use crate::config::{PaceConfig, SiteRule};

const SHOP: &str = "shop.example";
const OTHER: &str = "other.example";

#[derive(Debug, Clone, Copy)]
enum Op {
    /// A lease of the endpoint for the host (after checking it is ready).
    Use,
    /// Its lease ended.
    End,
    /// The host answered 429, with this Retry-After in ms.
    Slow(Option<u64>),
    /// The host answered.
    Ok,
    /// Only check.
    Look,
}

/// What a check says: ready, or blocked until this ms (`None`: until a release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Ready,
    Until(Option<u64>),
}

/// The lease path by host name, as a lease takes it: one `visit`, then the handle.
impl Pace {
    fn record_named(&mut self, host: &str, id: EndpointId, now: Instant) -> bool {
        let v = self.visit(host, now);
        self.record(v, host, id, now).is_some()
    }

    fn end_named(&mut self, host: &str, id: EndpointId) {
        if let Some(r) = self.held(host) {
            self.end(r, id);
        }
    }

    /// Whether any pair of `host` is held.
    fn prepare_named(&mut self, host: &str, now: Instant) -> bool {
        let v = self.visit(host, now);
        matches!(v, Visit::Held(r) if !self.host(r).unwrap().pairs.is_empty())
    }

    fn gate_named(&self, host: &str, now: Instant) -> Option<Gate<'_>> {
        self.gate(Visit::Held(self.held(host)?), now)
    }

    fn dry_named(
        &self,
        host: &str,
        generation: u64,
        sig: u64,
        now: Instant,
    ) -> Option<Option<u64>> {
        self.dry(Visit::Held(self.held(host)?), generation, sig, now)
    }

    fn set_dry_named(&mut self, host: &str, dry: Dry) {
        if let Some(r) = self.held(host) {
            self.set_dry(Visit::Held(r), dry);
        }
    }

    fn held(&self, host: &str) -> Option<HostRef> {
        let &slot = self.index.get(host)?;
        Some(HostRef {
            slot,
            gen: self.slots[slot as usize].gen,
        })
    }
}

fn pace(interval: u64, in_flight: u32, slow_down: bool) -> PaceConfig {
    PaceConfig {
        interval: Duration::from_millis(interval),
        in_flight,
        wait: Duration::from_secs(10),
        slow_down,
        sites: Default::default(),
    }
}

/// `cfg` with `host` spaced by `interval` ms of its own.
fn spaced_site(mut cfg: PaceConfig, host: &str, interval: u64) -> PaceConfig {
    cfg.sites.insert(
        host.into(),
        SiteRule {
            interval: Some(Duration::from_millis(interval)),
            in_flight: None,
        },
    );
    cfg
}

fn check(p: &mut Pace, host: &str, id: EndpointId, t: Instant) -> Want {
    let base = p.origin;
    p.prepare_named(host, t);
    match p.gate_named(host, t).map(|g| g.check(id)) {
        None | Some(Check::Ready) => Want::Ready,
        Some(Check::Blocked(at)) => Want::Until(at.map(|ms| {
            let t = p.instant(ms);
            (t - base).as_millis() as u64
        })),
    }
}

/// Run `steps` (ms, host, endpoint, op, what a check says right after the op).
fn run(name: &str, cfg: PaceConfig, steps: &[(u64, &str, EndpointId, Op, Want)]) {
    let t0 = Instant::now();
    let mut p = Pace::new(Some(cfg), 1000, 100_000, t0);
    for (i, &(ms, host, id, op, want)) in steps.iter().enumerate() {
        let t = t0 + Duration::from_millis(ms);
        match op {
            Op::Use => {
                assert_eq!(
                    check(&mut p, host, id, t),
                    Want::Ready,
                    "{name} step {i}: a use needs a ready pair"
                );
                p.record_named(host, id, t);
            }
            Op::End => p.end_named(host, id),
            Op::Slow(after) => {
                p.slow_down(host, id, after.map(Duration::from_millis), t);
            }
            Op::Ok => p.success(host, id),
            Op::Look => {}
        }
        assert_eq!(
            check(&mut p, host, id, t),
            want,
            "{name} step {i} at {ms} ms"
        );
    }
}

#[test]
fn interval_spaces_uses_of_one_endpoint_for_one_host() {
    use Op::*;
    use Want::*;
    run(
        "interval 2s",
        pace(2000, 0, false),
        &[
            (0, SHOP, 1, Use, Until(Some(2000))),
            // The lease ending does not move the next use: the interval counts from
            // the lease.
            (300, SHOP, 1, End, Until(Some(2000))),
            (1999, SHOP, 1, Look, Until(Some(2000))),
            // Another endpoint, and another host, are not held back.
            (1000, SHOP, 2, Look, Ready),
            (1000, OTHER, 1, Look, Ready),
            (2000, SHOP, 1, Look, Ready),
            (2000, SHOP, 1, Use, Until(Some(4000))),
        ],
    );
}

#[test]
fn in_flight_caps_live_leases_until_one_ends() {
    use Op::*;
    use Want::*;
    run(
        "in_flight 1",
        pace(0, 1, false),
        &[
            (0, SHOP, 1, Use, Until(None)),
            (60_000, SHOP, 1, Look, Until(None)),
            (60_000, SHOP, 2, Look, Ready),
            (60_001, SHOP, 1, End, Ready),
        ],
    );
    run(
        "in_flight 2 with interval 1s",
        pace(1000, 2, false),
        &[
            (0, SHOP, 1, Use, Until(Some(1000))),
            // Two live: the interval passing frees nothing, only an end does (no time to
            // come back at is told).
            (1000, SHOP, 1, Use, Until(None)),
            (2500, SHOP, 1, Look, Until(None)),
            (2600, SHOP, 1, End, Ready),
        ],
    );
    run(
        "in_flight 1 with interval 5s",
        pace(5000, 1, false),
        &[
            (0, SHOP, 1, Use, Until(None)),
            (4000, SHOP, 1, Look, Until(None)),
            // Ended early: now the interval is what holds it, until 5 s.
            (4100, SHOP, 1, End, Until(Some(5000))),
            (5000, SHOP, 1, Look, Ready),
        ],
    );
}

#[test]
fn slow_down_widens_up_to_16x_and_at_least_retry_after() {
    use Op::*;
    use Want::*;
    run(
        "429s through one endpoint",
        pace(2000, 0, true),
        &[
            (0, SHOP, 1, Use, Until(Some(2000))),
            // ×2: 4 s from the answer.
            (100, SHOP, 1, Slow(None), Until(Some(4100))),
            (4100, SHOP, 1, Use, Until(Some(8100))),
            // ×4: 8 s.
            (4200, SHOP, 1, Slow(None), Until(Some(12_200))),
            // ×8, ×16, and ×16 stays the most.
            (12_200, SHOP, 1, Slow(None), Until(Some(28_200))),
            (28_200, SHOP, 1, Slow(None), Until(Some(60_200))),
            (60_200, SHOP, 1, Slow(None), Until(Some(92_200))),
            // Another endpoint for the host is not slowed.
            (60_200, SHOP, 2, Look, Ready),
        ],
    );
    run(
        "a Retry-After longer than the widening wins",
        pace(2000, 0, true),
        &[
            (0, SHOP, 1, Slow(Some(120_000)), Until(Some(120_000))),
            (120_000, SHOP, 1, Use, Until(Some(124_000))),
        ],
    );
    run(
        "no interval: the widening starts from 1 s",
        pace(0, 0, true),
        &[
            (0, SHOP, 1, Slow(None), Until(Some(2000))),
            (2000, SHOP, 1, Use, Until(Some(4000))),
        ],
    );
}

#[test]
fn successes_narrow_a_widened_spacing_again() {
    use Op::*;
    use Want::*;
    let mut steps = vec![
        (0, SHOP, 1, Slow(None), Until(Some(4000))),
        (4000, SHOP, 1, Slow(None), Until(Some(12_000))),
    ];
    // ×4 now: four successes later ×2, four more ×1 (a use is spaced by what held when
    // it was granted; the success after it narrows the next).
    let mut t = 12_000;
    for (spacing, n) in [(8000, 4), (4000, 4)] {
        for _ in 0..n {
            steps.push((t, SHOP, 1, Use, Until(Some(t + spacing))));
            steps.push((t, SHOP, 1, Ok, Until(Some(t + spacing))));
            t += spacing;
        }
    }
    steps.push((t, SHOP, 1, Use, Until(Some(t + 2000))));
    run("narrowing", pace(2000, 0, true), &steps);
}

#[test]
fn a_site_override_paces_its_host_only() {
    use Op::*;
    use Want::*;
    let mut cfg = pace(2000, 0, false);
    cfg.sites.insert(
        SHOP.into(),
        SiteRule {
            interval: Some(Duration::from_secs(12)),
            in_flight: Some(1),
        },
    );
    run(
        "shop.example every 12 s, one at a time",
        cfg,
        &[
            (0, SHOP, 1, Use, Until(None)),
            (0, OTHER, 1, Use, Until(Some(2000))),
            (12_000, SHOP, 1, Look, Until(None)),
            (12_000, SHOP, 1, End, Ready),
            (2000, OTHER, 1, Look, Ready),
        ],
    );
}

#[test]
fn nothing_is_held_when_nothing_binds() {
    let t0 = Instant::now();
    let mut p = Pace::new(Some(pace(0, 0, false)), 10, 10, t0);
    for id in 0..100 {
        assert!(!p.record_named(SHOP, id, t0), "no count to keep");
    }
    assert_eq!((p.hosts(), p.pairs()), (0, 0));
    let mut off = Pace::new(None, 10, 10, t0);
    assert!(!off.record_named(SHOP, 1, t0));
    assert_eq!(off.slow_down(SHOP, 1, None, t0), None);
    assert_eq!((off.hosts(), off.pairs()), (0, 0));
}

#[test]
fn idle_pairs_are_forgotten_and_hosts_are_bounded() {
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let mut p = Pace::new(Some(pace(1000, 1, false)), 2, 1000, t0);
    p.record_named(SHOP, 1, t0);
    p.record_named(SHOP, 2, t0);
    assert_eq!(p.pairs(), 2);
    p.end_named(SHOP, 1);
    // Ready and idle at 1000: forgotten when a new pair finds the host's table full.
    let mut id = 3;
    while p.pair(SHOP, 1, ms(1000)).is_some() {
        p.record_named(SHOP, id, ms(1000));
        id += 1;
        assert!(id < 10, "pair 1 never forgotten");
    }
    assert_eq!(
        p.pair(SHOP, 2, ms(1000)),
        Some((0, 1, 0)),
        "in flight: kept"
    );
    assert_eq!(
        p.pair(SHOP, 3, ms(1000)),
        Some((1000, 1, 0)),
        "spaced: kept"
    );
    // A slowed pair is kept while ready: it remembers its widening.
    let mut s = Pace::new(Some(pace(1000, 0, true)), 2, 1000, t0);
    s.slow_down(SHOP, 1, None, t0);
    for id in 2..100 {
        s.record_named(SHOP, id, ms(60_000 + id as u64 * 1000));
        s.end_named(SHOP, id);
    }
    assert!(s.pairs() < 10, "the others were forgotten: {}", s.pairs());
    assert_eq!(
        s.pair(SHOP, 1, ms(200_000)),
        Some((0, 0, 1)),
        "kept while slowed"
    );
    // One use of each of 10,000 endpoints, each spaced out by the next: what is held
    // stays bounded, not one pair per endpoint ever used.
    let mut b = Pace::new(Some(pace(1000, 0, false)), 2, 1_000_000, t0);
    for id in 0..10_000 {
        b.record_named(SHOP, id, ms(id as u64 * 1000));
        b.end_named(SHOP, id);
        assert!(b.pairs() <= 3, "{} pairs held after {id}", b.pairs());
    }
    // Hosts past the cap: the least recently used idle one goes, counted.
    let mut h = Pace::new(Some(pace(1000, 1, false)), 2, 1000, t0);
    h.record_named(SHOP, 1, t0);
    h.end_named(SHOP, 1);
    h.record_named(OTHER, 1, ms(500));
    h.record_named("third.example", 1, ms(1000));
    assert_eq!((h.hosts(), h.dropped()), (2, 1));
    assert!(
        h.pair(SHOP, 1, ms(1000)).is_none(),
        "idle at 1000: forgotten"
    );
    // Live hosts (a lease in flight, an interval running) are never the ones forgotten:
    // past the cap they stay, up to twice it...
    h.record_named("fourth.example", 1, ms(1000));
    h.record_named("fifth.example", 1, ms(1000));
    assert_eq!((h.hosts(), h.dropped()), (4, 1));
    assert_eq!(
        check(&mut h, OTHER, 1, ms(1000)),
        Want::Until(None),
        "OTHER's lease still counts"
    );
    // ...and past that a host not held is refused (asked again a second later), rather
    // than live state forgotten.
    assert_eq!(h.visit("sixth.example", ms(1000)), Visit::Full);
    let g = h
        .gate(Visit::Full, ms(1000))
        .expect("a gate that holds everyone back");
    assert_eq!(g.check(7), Check::Blocked(Some(2000)));
    assert_eq!(h.record(Visit::Full, "sixth.example", 7, ms(1000)), None);
    // Once OTHER's lease ended and its interval ran out, it is the one that goes.
    h.end_named(OTHER, 1);
    assert_eq!(h.visit("sixth.example", ms(1500)), Visit::Fresh);
    assert_eq!((h.hosts(), h.dropped()), (3, 2));
    // Live pairs past the cap are kept too, up to twice it; past that an endpoint with
    // no pair for the host is not ready for it, until idle pairs can go.
    let mut q = Pace::new(Some(pace(1000, 0, false)), 100, 3, t0);
    for id in 0..3 {
        q.record_named(SHOP, id, t0);
    }
    for id in 9..12 {
        q.record_named(OTHER, id, t0);
    }
    assert_eq!((q.hosts(), q.pairs(), q.dropped()), (2, 6, 0));
    assert_eq!(check(&mut q, OTHER, 12, t0), Want::Until(Some(1000)));
    assert_eq!(check(&mut q, SHOP, 12, t0), Want::Until(Some(1000)));
    assert_eq!(check(&mut q, OTHER, 9, t0), Want::Until(Some(1000)));
    // At 1000 every pair is idle: the next lookup tidies them, and new pairs fit again.
    assert_eq!(check(&mut q, OTHER, 12, ms(1000)), Want::Ready);
    assert!(q.pairs() < 6, "{} pairs held", q.pairs());
    for id in [0, 1, 2, 9, 10, 11] {
        q.remove_endpoint(id);
    }
    assert_eq!(q.pairs(), 0);
}

/// Pairs that say nothing any more count towards `max_pairs` until a tidy: past the cap
/// hosts forget them first, in turn, and hosts are dropped only when live pairs are past
/// the cap. (Dropping a host forgets its pairs: its next uses would not be spaced.)
#[test]
fn past_the_pair_cap_idle_pairs_go_before_any_host() {
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    // SHOP spaces uses by 1 s, OTHER by 100 ms.
    let cfg = spaced_site(pace(1000, 0, false), OTHER, 100);
    let mut p = Pace::new(Some(cfg), 100, 100, t0);
    for id in 0..60 {
        p.record_named(SHOP, id, t0);
    }
    for id in 0..40 {
        p.record_named(OTHER, id, ms(500));
    }
    // At 700 ms SHOP, the least recently used, still spaces its 60 pairs; OTHER's 40 say
    // nothing. A third host passes the cap: OTHER's pairs go, SHOP stays whole.
    for id in 0..20 {
        p.record_named("third.example", id, ms(700));
        assert!(p.pairs() <= 101, "{} pairs held", p.pairs());
    }
    assert_eq!(p.dropped(), 0);
    assert_eq!(p.pairs(), 80);
    for id in 0..60 {
        assert_eq!(
            check(&mut p, SHOP, id, ms(700)),
            Want::Until(Some(1000)),
            "SHOP's pair {id} still spaced"
        );
    }
    // OTHER, left with nothing, is let go (not counted as dropped).
    assert_eq!(p.hosts(), 2);
    // Live pairs past the cap: no host is forgotten for them; they are kept up to twice
    // the cap, then a new pair waits until idle ones can go.
    let mut id = 20;
    while check(&mut p, "third.example", id, ms(700)) == Want::Ready {
        p.record_named("third.example", id, ms(700));
        id += 1;
        assert!(id < 300, "never full");
    }
    assert_eq!(p.dropped(), 0, "nothing live forgotten");
    assert_eq!(p.pairs(), 200);
    assert_eq!(
        check(&mut p, "third.example", id, ms(700)),
        Want::Until(Some(1700)),
        "no room: asked again a second later"
    );
    for id in 0..60 {
        assert_eq!(check(&mut p, SHOP, id, ms(700)), Want::Until(Some(1000)));
    }
    // SHOP's pairs are idle at 1000: they make room.
    assert_eq!(check(&mut p, "third.example", id, ms(1000)), Want::Ready);
    assert!(p.pairs() <= 140, "{} pairs held", p.pairs());
    // Hosts whose pairs all went stale, past the cap: forgotten without a drop, and the
    // count never runs far past the cap.
    let mut q = Pace::new(Some(pace(1, 0, false)), 65_536, 100, t0);
    for i in 0..10_000u64 {
        q.record_named(
            &format!("h{}.example", i % 500),
            i as EndpointId,
            ms(10 * i),
        );
        assert!(q.pairs() <= 100 + 500, "{} pairs after {i}", q.pairs());
    }
    assert_eq!(q.dropped(), 0, "nothing live was ever past the cap");
    assert!(q.hosts() <= 101, "{} hosts held", q.hosts());
}

#[test]
fn nothing_ready_is_remembered_until_something_changes() {
    let t0 = Instant::now();
    let mut p = Pace::new(Some(pace(2000, 1, false)), 10, 10, t0);
    p.record_named(SHOP, 1, t0);
    let dry = Dry {
        generation: 7,
        sig: 42,
        until: Some(2000),
    };
    p.set_dry_named(SHOP, dry);
    let at = |ms| t0 + Duration::from_millis(ms);
    assert_eq!(p.dry_named(SHOP, 7, 42, at(1999)), Some(Some(2000)));
    assert_eq!(p.dry_named(SHOP, 7, 42, at(2000)), None, "its time came");
    assert_eq!(p.dry_named(SHOP, 8, 42, at(10)), None, "the pool changed");
    assert_eq!(p.dry_named(SHOP, 7, 43, at(10)), None, "another question");
    assert_eq!(p.dry_named(OTHER, 7, 42, at(10)), None);
    p.end_named(SHOP, 1);
    assert_eq!(
        p.dry_named(SHOP, 7, 42, at(30)),
        None,
        "a release may have made one ready"
    );
}

#[test]
fn reload_gives_held_hosts_their_new_rule() {
    let t0 = Instant::now();
    let mut p = Pace::new(Some(pace(2000, 0, false)), 10, 10, t0);
    p.record_named(SHOP, 1, t0);
    p.set_config(Some(pace(5000, 0, false)));
    p.record_named(SHOP, 2, t0);
    // No in-flight cap: the lease is not counted, its end is not told.
    assert_eq!(p.pair(SHOP, 2, t0), Some((5000, 0, 0)));
    p.set_config(Some(pace(5000, 1, false)));
    assert!(p.record_named(SHOP, 3, t0), "counted under a cap");
    assert_eq!(p.pair(SHOP, 3, t0), Some((5000, 1, 0)));
    assert_eq!(p.wait(), Duration::from_secs(10));
    assert!(p.cfg.is_some() && !p.slows_down());
}

/// A pair's size: the budget is 64 bytes per paced pair, map and queues included (see
/// BENCHMARKS.md for the measured total).
#[test]
fn a_pair_is_small() {
    assert_eq!(std::mem::size_of::<Pair>(), 8);
    assert_eq!(std::mem::size_of::<(EndpointId, Pair)>(), 16);
}

/// A pair's ready time is 32 bits of ms: past 24.8 days of uptime the origin moves and
/// every held time with it, so spacing holds across the move and after it.
#[test]
fn times_survive_the_origin_moving_forward() {
    let t0 = Instant::now();
    let mut p = Pace::new(Some(pace(2000, 0, true)), 1000, 100_000, t0);
    let day = Duration::from_secs(24 * 3600);
    // Just before the move: a pair spaced 2 s, another slowed for a minute.
    let before = t0 + Duration::from_millis(REBASE_AT - 1000);
    p.prepare_named(SHOP, before);
    p.record_named(SHOP, 1, before);
    p.slow_down(SHOP, 2, Some(Duration::from_secs(60)), before);
    // The next use moves the origin.
    let after = before + Duration::from_millis(1500);
    assert_eq!(
        check(&mut p, SHOP, 1, after),
        Want::Until(Some(REBASE_AT + 1000))
    );
    assert!(p.origin > t0, "the origin moved");
    assert_eq!(
        check(&mut p, SHOP, 1, after + Duration::from_millis(500)),
        Want::Ready
    );
    let blocked = p.gate_named(SHOP, after).unwrap().check(2);
    let Check::Blocked(Some(ms)) = blocked else {
        panic!("{blocked:?}")
    };
    assert_eq!(p.instant(ms), before + Duration::from_secs(60));
    // Long after, uses are spaced as ever.
    let late = t0 + 60 * day;
    p.prepare_named(SHOP, late);
    p.record_named(SHOP, 3, late);
    let blocked = p.gate_named(SHOP, late).unwrap().check(3);
    let Check::Blocked(Some(ms)) = blocked else {
        panic!("{blocked:?}")
    };
    assert_eq!(p.instant(ms), late + Duration::from_secs(2));
    // A Retry-After beyond 16 days holds for 16 days.
    let r = p.slow_down(SHOP, 4, Some(400 * day), late).unwrap();
    assert_eq!(r.until, 16 * day);
}

/// A site's host in the config and a lease's destination name one host the same way.
#[test]
fn site_hosts_are_normalised_as_destinations_are() {
    for raw in [
        "Shop.Example",
        "shop.example.",
        "127.0.0.1",
        "[::1]",
        "2001:DB8::1",
        "a-b_c.example",
        "127.1",
        "0x7f.0.0.1",
        "2130706433",
        "[::ffff:7f00:1]",
        "1.2.3.256",
    ] {
        assert_eq!(
            crate::config::pace::site_host(raw).ok(),
            crate::pool::destinations::normalize(raw).ok(),
            "{raw}"
        );
    }
}

/// A lease keeps its host's handle; the host is never dropped while the lease lives (it
/// is live). Once it is idle and dropped, and its slot taken by another host, the old
/// handle is recognised by the slot's generation and touches nothing of the new host.
#[test]
fn a_handle_to_a_dropped_host_finds_nothing() {
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let mut p = Pace::new(Some(pace(1000, 1, false)), 1, 1000, t0);
    let v = p.visit(SHOP, t0);
    assert_eq!(v, Visit::Fresh);
    let shop = p.record(v, SHOP, 1, t0).expect("counted");
    // One host at most, but SHOP is live: OTHER is held beside it.
    let v = p.visit(OTHER, ms(500));
    let other = p.record(v, OTHER, 1, ms(500)).expect("counted");
    assert_eq!((p.hosts(), p.dropped()), (2, 0));
    p.end(shop, 1);
    p.end(other, 1);
    // At 1000 SHOP is idle: a third host drops it and takes its slot.
    let v = p.visit("third.example", ms(1000));
    let third = p.record(v, "third.example", 1, ms(1000)).expect("counted");
    assert_eq!((p.hosts(), p.dropped()), (2, 1));
    assert_eq!(shop.slot, third.slot, "the slot is reused");
    assert_ne!(shop.gen, third.gen);
    p.end(shop, 1);
    assert_eq!(
        p.pair("third.example", 1, ms(1000)),
        Some((1000, 1, 0)),
        "untouched"
    );
    p.end(third, 1);
    assert_eq!(p.pair("third.example", 1, ms(1000)), Some((1000, 0, 0)));
    // A host visited again is found by the same handle.
    assert_eq!(p.visit("third.example", ms(1000)), Visit::Held(third));
}

/// Where no rule binds and no host is held, a lease is not looked up at all; a slowed
/// pair makes its host held, and then only that host is.
#[test]
fn nothing_is_looked_up_where_nothing_binds() {
    let t0 = Instant::now();
    let mut p = Pace::new(Some(pace(0, 0, true)), 10, 10, t0);
    assert_eq!(p.visit(SHOP, t0), Visit::Skip);
    let mut off = Pace::new(None, 10, 10, t0);
    assert_eq!(off.visit(SHOP, t0), Visit::Skip);
    p.slow_down(SHOP, 1, None, t0);
    let Visit::Held(r) = p.visit(SHOP, t0) else {
        panic!("a slowed host is held")
    };
    assert_eq!(
        p.visit(OTHER, t0),
        Visit::Skip,
        "another host binds nothing"
    );
    // Its use is recorded (spaced by the widening) though the rule binds nothing.
    let at = t0 + Duration::from_secs(2);
    let v = p.visit(SHOP, at);
    assert_eq!(v, Visit::Held(r));
    assert_eq!(p.record(v, SHOP, 1, at), None, "no cap: nothing to count");
    assert_eq!(p.pair(SHOP, 1, at), Some((2000, 0, 1)));
    // A site that binds makes the pool look up every host.
    let cfg = spaced_site(pace(0, 0, false), SHOP, 1000);
    let mut s = Pace::new(Some(cfg), 10, 10, t0);
    assert_eq!(s.visit(OTHER, t0), Visit::Fresh);
    assert_eq!(
        s.record(Visit::Fresh, OTHER, 1, t0),
        None,
        "its rule binds nothing"
    );
    s.record(Visit::Fresh, SHOP, 1, t0);
    assert_eq!(s.pair(SHOP, 1, t0), Some((1000, 0, 0)), "recorded");
}

/// Successes narrow only widened pairs, and are not looked up while none is: the count
/// of widened pairs follows slow-downs, narrowing, removal and dropped hosts.
#[test]
fn the_widened_count_follows_every_change() {
    let t0 = Instant::now();
    let mut p = Pace::new(Some(pace(1000, 0, true)), 1, 1000, t0);
    p.slow_down(SHOP, 1, None, t0);
    p.slow_down(SHOP, 2, None, t0);
    assert_eq!(p.widened, 2);
    for _ in 0..CALM_AFTER {
        p.success(SHOP, 1);
    }
    assert_eq!((p.widened, p.pair(SHOP, 1, t0).map(|x| x.2)), (1, Some(0)));
    p.remove_endpoint(2);
    assert_eq!(p.widened, 0);
    p.slow_down(SHOP, 3, None, t0);
    // SHOP is live while its pairs are held back (2 s): OTHER is held beside it.
    p.slow_down(OTHER, 1, None, t0);
    assert_eq!((p.widened, p.dropped()), (2, 0));
    // Once they are not, both are dropped for a third host (one host at most): their
    // widened pairs go with them.
    let later = t0 + Duration::from_secs(2);
    p.slow_down("third.example", 1, None, later);
    assert_eq!((p.widened, p.dropped()), (1, 2));
}

/// A slow-down holds a pair back at most the pool's cooldown `max` (its interval, when
/// that is longer), however long the Retry-After, and widens its spacing no further;
/// clearing it makes the pair usable at once, its leases in flight still counted.
#[test]
fn a_slow_down_is_capped_like_a_cooldown_and_cleared() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let year = Some(s(365 * 24 * 3600));
    let mut p = Pace::new(Some(pace(1000, 1, true)), 10, 100, t0);
    p.set_max_hold(s(60));
    // (endpoint, slow-downs, Retry-After) → (spacing, next use in).
    let rows = [
        (1, 1, year, (s(2), s(60))),
        (2, 1, None, (s(2), s(2))),
        (3, 4, None, (s(16), s(16))),
        (4, 6, Some(s(5)), (s(16), s(16))),
    ];
    for (id, n, after, (spacing, until)) in rows {
        let mut last = None;
        for _ in 0..n {
            last = p.slow_down(SHOP, id, after, t0);
        }
        let r = last.unwrap();
        assert_eq!((r.spacing, r.until), (spacing, until), "endpoint {id}");
        let shown = p.slowed(SHOP, id, t0).unwrap();
        assert_eq!(
            (shown.spacing, shown.until),
            (spacing, until),
            "endpoint {id}"
        );
    }
    assert_eq!(check(&mut p, SHOP, 1, t0), Want::Until(Some(60_000)));
    // A cap below the widened spacing holds the spacing too.
    p.set_max_hold(s(10));
    assert_eq!(p.slowed(SHOP, 3, t0).unwrap().spacing, s(10));
    // An interval longer than the cap stays the interval.
    let mut long = Pace::new(Some(pace(120_000, 0, true)), 10, 100, t0);
    long.set_max_hold(s(60));
    assert_eq!(long.slow_down(SHOP, 1, year, t0).unwrap().until, s(120));
    // Cleared: usable at once, not slowed, counted as before.
    assert_eq!(p.widened, 4);
    p.record_named(SHOP, 2, t0 + s(2));
    let was = p.clear(SHOP, 2, t0 + s(2)).expect("slowed");
    assert_eq!(was.spacing, s(2));
    assert_eq!(p.slowed(SHOP, 2, t0 + s(2)), None);
    assert_eq!(p.widened, 3);
    assert_eq!(
        check(&mut p, SHOP, 2, t0 + s(2)),
        Want::Until(None),
        "its lease in flight still counts"
    );
    p.end_named(SHOP, 2);
    assert_eq!(check(&mut p, SHOP, 2, t0 + s(2)), Want::Ready);
    assert!(p.clear(SHOP, 1, t0).is_some());
    assert_eq!(check(&mut p, SHOP, 1, t0), Want::Ready);
    assert!(p.clear(SHOP, 1, t0).is_none(), "nothing left to clear");
    assert!(p.clear(OTHER, 1, t0).is_none(), "a host not held");
}
