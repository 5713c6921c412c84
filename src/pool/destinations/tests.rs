//! Per-destination pairs on paused tokio time: cooldown edges, the single trial, the
//! stampede, restore clamp, recovery, `disable_after` and `fall` on pairs, the cap.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::pair::ticks;
use super::*;
use crate::health::{Cooldown, Failure, Phase, ReasonPolicy};
use crate::store::StoredHealth;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const HOLD: Duration = Duration::from_secs(15);
const SHOP: &str = "shop.example";
const NEWS: &str = "news.example";

/// Cooldowns of 10 s doubling to 80 s, no jitter, one failure to ban: what the tests of
/// pairs, address bans and subnets count with.
pub(in crate::pool::destinations) fn policy() -> Policy {
    Policy {
        cooldown: Cooldown {
            base: 10 * S,
            factor: 2.0,
            max: 80 * S,
            jitter: 0.0,
        },
        reasons: BTreeMap::new(),
        fall: 1,
    }
}

fn ban(status: u16) -> Input {
    Input::Failure {
        failure: Failure {
            status: Some(status),
            detail: Some(format!("HTTP {status}")),
            ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
        },
        trial: false,
    }
}

fn report() -> Option<NewEvent> {
    Some(NewEvent::new(EventKind::Report))
}

/// Report `input` on (id, dest) at the current paused time.
fn on(d: &mut Destinations, p: &Policy, dest: &str, id: EndpointId, input: Input) -> PairStep {
    let status = match &input {
        Input::Failure { failure, .. } => failure.status,
        _ => None,
    };
    let what = PairInput {
        input,
        status,
        act: report(),
    };
    d.apply(dest, id, what, p, Instant::now(), 0.0)
}

fn usable(d: &Destinations, dest: &str, id: EndpointId) -> Usable {
    d.lookup(dest)
        .map_or(Usable::Available, |r| d.usable(r, id))
}

fn kinds(w: &[PairWrite]) -> Vec<&'static str> {
    w.iter()
        .map(|w| match w {
            PairWrite::Upsert(..) => "upsert",
            PairWrite::Delete { .. } => "delete",
            PairWrite::Event { event, .. } => event.kind.as_str(),
            PairWrite::Claim(c) => c.event.kind.as_str(),
            PairWrite::Unclaim(u) => u.event.kind.as_str(),
        })
        .collect()
}

#[test]
fn normalize_table() {
    let ok = [
        ("Example.COM", "example.com"),
        ("  shop.example  ", "shop.example"),
        ("shop.example:443", "shop.example"),
        ("shop.example.", "shop.example"),
        ("a_b.example", "a_b.example"),
        ("[2001:DB8::1]:8080", "2001:db8::1"),
        ("[::1]", "::1"),
        ("2001:0db8:0000::1", "2001:db8::1"),
        ("192.0.2.7:80", "192.0.2.7"),
        ("localhost", "localhost"),
    ];
    for (input, want) in ok {
        assert_eq!(normalize(input).as_deref(), Ok(want), "{input:?}");
    }
    assert_eq!(normalize(""), Err(DestinationError::Empty));
    assert_eq!(normalize("   "), Err(DestinationError::Empty));
    let bad = [
        ("https://shop.example/", "not a URL"),
        ("shop.example/x", "not a URL"),
        ("exa mple.com", "only letters"),
        ("ex@mple.com", "only letters"),
        ("bücher.de", "only letters"),
        ("a..b", "label"),
        (".example", "label"),
        ("host:abc", "not a port"),
        ("host:", "not a port"),
        ("host:0", "out of range"),
        ("host:70000", "out of range"),
        (":80", "no host"),
        ("[::1", "unclosed"),
        ("[zz]", "IPv6"),
        ("[::1]x", "not a port"),
        ("1:2:3", "IPv6"),
    ];
    for (input, want) in bad {
        let err = normalize(input).unwrap_err().to_string();
        assert!(err.contains(want), "{input:?}: {err}");
        assert!(err.contains("destination"), "{err}");
    }
    assert!(normalize(&format!("{}.com", "a".repeat(64))).is_err());
    assert!(normalize(&"a.".repeat(130)).is_err());
}

#[tokio::test(start_paused = true)]
async fn pair_cooldown_then_exactly_one_trial_for_that_destination() {
    let p = policy();
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    let t0 = Instant::now();
    let r = on(&mut d, &p, SHOP, 1, ban(403));
    assert_eq!(
        r.step,
        Step::Changed {
            from: State::Available,
            to: State::Cooling
        }
    );
    assert_eq!(kinds(&r.writes), ["report", "upsert"]);
    match &r.writes[1] {
        PairWrite::Upsert(rec, ev) => {
            assert_eq!(rec.destination, SHOP);
            assert_eq!(rec.status, Some(403));
            assert_eq!(rec.health.cooldown_ms, Some(10_000));
            assert_eq!(rec.health.cooldown_left, Some(10 * S));
            assert_eq!(ev.kind, EventKind::StateChanged);
            assert_eq!(ev.detail.as_deref(), Some("HTTP 403"));
        }
        w => panic!("{w:?}"),
    }
    assert_eq!((d.len(), d.banned(), d.destinations()), (1, 1, 1));
    assert_eq!(d.next_due(), Some(t0 + 10 * S));

    // Deadline − 1 ms: still banned for shop, usable for every other destination.
    tokio::time::advance(10 * S - MS).await;
    assert_eq!(d.advance(&p, Instant::now()), []);
    assert_eq!(usable(&d, SHOP, 1), Usable::Banned);
    assert_eq!(usable(&d, SHOP, 2), Usable::Available);
    assert_eq!(usable(&d, NEWS, 1), Usable::Available);
    assert_eq!(
        d.lookup(NEWS),
        None,
        "no view for a destination without bans"
    );

    // At the deadline exactly one trial for shop.
    tokio::time::advance(MS).await;
    let w = d.advance(&p, Instant::now());
    assert_eq!(kinds(&w), ["upsert"]);
    assert_eq!(usable(&d, SHOP, 1), Usable::Trial);
    let shop = d.lookup(SHOP).unwrap();
    let (id, r) = d
        .claim_trial(
            shop,
            |_, _| true,
            Some("l-1".into()),
            HOLD,
            &p,
            Instant::now(),
        )
        .expect("one trial");
    assert_eq!(id, 1);
    assert_eq!(kinds(&r.writes), ["trial_admitted"]);
    assert!(d
        .claim_trial(shop, |_, _| true, None, HOLD, &p, Instant::now())
        .is_none());
    assert_eq!(
        d.try_claim(shop, 1, None, HOLD, &p, Instant::now()).step,
        Step::Refused
    );
    assert_eq!(usable(&d, SHOP, 1), Usable::Banned, "trial in flight");
    assert_eq!(usable(&d, NEWS, 1), Usable::Available);

    // The trial's success deletes the pair and the view.
    let r = on(&mut d, &p, SHOP, 1, Input::Success { trial: true });
    assert_eq!(
        r.step,
        Step::Changed {
            from: State::ProbeAllowed,
            to: State::Available
        }
    );
    assert_eq!(kinds(&r.writes), ["report", "delete"]);
    assert_eq!((d.len(), d.banned(), d.destinations()), (0, 0, 0));
    assert_eq!(d.lookup(SHOP), None);
    assert_eq!(d.next_due(), None);
}

#[tokio::test(start_paused = true)]
async fn trial_waits_for_an_endpoint_the_caller_accepts_and_abandon_gives_it_back() {
    let p = policy();
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    on(&mut d, &p, SHOP, 1, ban(403));
    on(&mut d, &p, SHOP, 2, ban(403));
    tokio::time::advance(10 * S).await;
    d.advance(&p, Instant::now());
    let shop = d.lookup(SHOP).unwrap();
    // Endpoint 1 is cooling endpoint-wide: its pair's trial waits, 2's goes first.
    let (id, _) = d
        .claim_trial(shop, |_, e| e != 1, None, HOLD, &p, Instant::now())
        .unwrap();
    assert_eq!(id, 2);
    // Only a claim the store confirmed can be given back.
    assert!(d.claim_won(SHOP, 2, 1));
    let r = d.abandon(SHOP, 2, "lease expired", None, &p, Instant::now());
    assert_eq!(r.step, Step::Abandoned);
    assert_eq!(kinds(&r.writes), ["trial_abandoned"]);
    assert_eq!(usable(&d, SHOP, 2), Usable::Trial);
    let (id, _) = d
        .claim_trial(shop, |_, _| true, None, HOLD, &p, Instant::now())
        .unwrap();
    assert_eq!(id, 1, "oldest waiting first");
}

#[tokio::test(start_paused = true)]
async fn stampede_of_500_at_a_pairs_deadline_admits_exactly_one() {
    let p = Arc::new(policy());
    let d = Arc::new(Mutex::new(Destinations::new("default", DEFAULT_MAX_PAIRS)));
    {
        let mut g = d.lock().unwrap();
        on(&mut g, &p, SHOP, 7, ban(429));
        on(&mut g, &p, NEWS, 7, ban(403));
    }
    tokio::time::advance(10 * S).await;
    let mut tasks = Vec::new();
    for i in 0..500 {
        let (d, p) = (d.clone(), p.clone());
        tasks.push(tokio::spawn(async move {
            // The pool lock: every lease advances the deadlines, then claims.
            let mut g = d.lock().unwrap();
            let now = Instant::now();
            let mut writes = g.advance(&p, now);
            let shop = g.lookup(SHOP).unwrap();
            // Half ask for this pair by id (selection met it in the ready queue), half
            // for the destination's next trial.
            let r = if i % 2 == 0 {
                Some(g.try_claim(shop, 7, Some(format!("l-{i}")), HOLD, &p, now))
                    .filter(|r| r.step == Step::Claimed)
            } else {
                g.claim_trial(shop, |_, _| true, None, HOLD, &p, now)
                    .map(|(_, r)| r)
            };
            writes.extend(r.into_iter().flat_map(|r| r.writes));
            kinds(&writes)
                .iter()
                .filter(|k| **k == "trial_admitted")
                .count()
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, 1, "exactly one trial_admitted");
    let g = d.lock().unwrap();
    assert_eq!(usable(&g, SHOP, 7), Usable::Banned);
    assert_eq!(
        usable(&g, NEWS, 7),
        Usable::Trial,
        "news keeps its own trial"
    );
}

#[tokio::test(start_paused = true)]
async fn restore_takes_what_the_store_read_as_left() {
    let now = Instant::now();
    let rec = |endpoint, left: Duration| PairRecord {
        endpoint,
        destination: "Shop.Example".into(),
        from: State::Cooling,
        trial: None,
        health: StoredHealth {
            state: State::Cooling,
            reason: Some(Reason::DestinationStatus),
            phase: Some(Phase::ResponseHead),
            detail: None,
            streak: 2,
            reason_streak: 2,
            cooldown_ms: Some(60_000),
            cooldown_left: Some(left),
        },
        status: Some(403),
    };
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    // Never longer than its own length.
    d.restore(&rec(1, 600 * S), None, now).unwrap();
    // Ordinary remaining time.
    d.restore(&rec(2, 20 * S), None, now).unwrap();
    // Already past: due at once.
    d.restore(&rec(3, Duration::ZERO), None, now).unwrap();
    let pair = |id| d.pair(SHOP, id).unwrap().health;
    assert_eq!(pair(1).deadline, Some(now + 60 * S));
    assert_eq!(pair(2).deadline, Some(now + 20 * S));
    assert_eq!(pair(3).deadline, Some(now));
    assert_eq!(pair(2).streak, 2);
    assert_eq!(d.next_due(), Some(now));
    let w = d.advance(&policy(), now);
    assert_eq!(kinds(&w), ["upsert"]);
    assert_eq!(usable(&d, SHOP, 3), Usable::Trial);
    assert_eq!(usable(&d, SHOP, 2), Usable::Banned);
    let mut pa = rec(4, S);
    pa.health.state = State::ProbeAllowed;
    pa.health.cooldown_left = None;
    d.restore(&pa, None, now).unwrap();
    assert_eq!(usable(&d, SHOP, 4), Usable::Trial);
    // Another daemon holds the trial of a fifth: not ours to take until it lapses.
    let mut held = rec(6, S);
    held.health.state = State::ProbeAllowed;
    held.health.cooldown_left = None;
    let claim = crate::store::RowClaim {
        epoch: 3,
        left: 5 * S,
    };
    d.restore(&held, Some(claim), now).unwrap();
    assert!(d.claimed_remotely(SHOP, 6));
    assert_eq!(usable(&d, SHOP, 6), Usable::Banned);
    let bad = PairRecord {
        destination: "not a host".into(),
        ..rec(5, S)
    };
    assert!(d.restore(&bad, None, now).is_err());
    assert_eq!(d.banned(), 5);
}

#[tokio::test(start_paused = true)]
async fn late_failure_does_not_extend_and_enable_clears_the_pair() {
    let p = policy();
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    let t0 = Instant::now();
    on(&mut d, &p, SHOP, 1, ban(403));
    tokio::time::advance(5 * S).await;
    let r = on(&mut d, &p, SHOP, 1, ban(403));
    assert_eq!(r.step, Step::Recorded { late: true });
    assert_eq!(kinds(&r.writes), ["report"]);
    assert_eq!(d.next_due(), Some(t0 + 10 * S));

    let r = d.enable(SHOP, 1);
    assert_eq!(kinds(&r.writes), ["delete"]);
    assert_eq!(r.state, State::Available);
    assert_eq!((d.len(), d.next_due()), (0, None));
    let r = d.enable(SHOP, 1);
    assert_eq!(r.step, Step::Refused);
    assert_eq!(
        kinds(&r.writes),
        ["operator"],
        "an operator act always leaves a row"
    );
}

#[tokio::test(start_paused = true)]
async fn disable_after_per_reason_on_pairs() {
    let mut p = policy();
    p.reasons.insert(
        Reason::DestinationStatus,
        ReasonPolicy {
            disable_after: Some(2),
            ..Default::default()
        },
    );
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    on(&mut d, &p, SHOP, 1, ban(403));
    // Another reason on another pair of the same endpoint does not count.
    on(&mut d, &p, NEWS, 1, ban(403));
    tokio::time::advance(10 * S).await;
    d.advance(&p, Instant::now());
    let shop = d.lookup(SHOP).unwrap();
    assert_eq!(
        d.try_claim(shop, 1, None, HOLD, &p, Instant::now()).step,
        Step::Claimed
    );
    let mut trial = ban(403);
    if let Input::Failure { trial: t, .. } = &mut trial {
        *t = true;
    }
    let r = on(&mut d, &p, SHOP, 1, trial);
    assert_eq!(
        r.step,
        Step::Changed {
            from: State::ProbeAllowed,
            to: State::Disabled
        }
    );
    match &r.writes[1] {
        PairWrite::Upsert(rec, _) => {
            assert_eq!(rec.health.state, State::Disabled);
            assert_eq!(rec.health.reason_streak, 2);
            assert_eq!(rec.health.cooldown_left, None);
        }
        w => panic!("{w:?}"),
    }
    tokio::time::advance(3600 * S).await;
    d.advance(&p, Instant::now());
    assert_eq!(usable(&d, SHOP, 1), Usable::Banned, "disabled stays");
    assert_eq!(usable(&d, NEWS, 1), Usable::Trial);
    assert_eq!(d.pairs_of(1).len(), 2);
    assert_eq!(d.pairs_of(1)[1].health.state, State::Disabled);
}

#[tokio::test(start_paused = true)]
async fn fall_on_pairs_counts_without_banning() {
    let p = Policy {
        fall: 3,
        ..policy()
    };
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    for _ in 0..2 {
        let r = on(&mut d, &p, SHOP, 1, ban(403));
        assert_eq!(r.step, Step::Recorded { late: false });
        assert_eq!(kinds(&r.writes), ["report"], "no state change is written");
        assert_eq!(usable(&d, SHOP, 1), Usable::Available);
    }
    assert_eq!((d.len(), d.banned()), (1, 0));
    // A success resets the count and forgets the pair.
    on(&mut d, &p, SHOP, 1, Input::Success { trial: false });
    assert_eq!((d.len(), d.destinations()), (0, 0));
    for _ in 0..2 {
        on(&mut d, &p, SHOP, 1, ban(403));
    }
    let r = on(&mut d, &p, SHOP, 1, ban(403));
    assert_eq!(kinds(&r.writes), ["report", "upsert"]);
    assert_eq!(usable(&d, SHOP, 1), Usable::Banned);
}

/// At the cap a new ban is never dropped: the pair failed least recently gives way, its
/// row deleted with the ban's own writes (memory and disk stay within the cap), and a
/// pair that keeps failing stays while junk ahead of it goes.
#[tokio::test(start_paused = true)]
async fn at_the_cap_a_new_ban_pushes_out_the_pair_failed_least_recently() {
    let p = policy();
    let mut d = Destinations::new("default", 2);
    on(&mut d, &p, "junk-1.invalid", 1, ban(403));
    tokio::time::advance(MS).await;
    on(&mut d, &p, "junk-2.invalid", 1, ban(403));
    tokio::time::advance(MS).await;
    let r = on(&mut d, &p, SHOP, 2, ban(403));
    assert_eq!(
        r.step,
        Step::Changed {
            from: State::Available,
            to: State::Cooling
        }
    );
    // The real ban is recorded; the oldest junk went, its row deleted.
    assert_eq!(kinds(&r.writes), ["delete", "report", "upsert"]);
    match &r.writes[0] {
        PairWrite::Delete {
            destination, event, ..
        } => {
            assert_eq!(destination, "junk-1.invalid");
            let detail = event.detail.as_deref().unwrap();
            assert!(detail.contains("maximum of 2"), "{detail}");
        }
        w => panic!("{w:?}"),
    }
    assert_eq!(usable(&d, SHOP, 2), Usable::Banned);
    assert_eq!(usable(&d, "junk-1.invalid", 1), Usable::Available);
    assert_eq!((d.len(), d.banned()), (2, 2));
    // The real site fails again (a failure on the banned pair is a late one, but it is a
    // use): junk pushes out the older junk first, and only then the real ban.
    tokio::time::advance(MS).await;
    on(&mut d, &p, SHOP, 2, ban(403));
    tokio::time::advance(MS).await;
    on(&mut d, &p, "junk-3.invalid", 1, ban(403));
    assert_eq!(usable(&d, SHOP, 2), Usable::Banned, "{:?}", d.keys());
    assert_eq!(usable(&d, "junk-2.invalid", 1), Usable::Available);
    assert_eq!(d.len(), 2);
    // An existing pair still moves.
    tokio::time::advance(10 * S).await;
    assert_eq!(kinds(&d.advance(&p, Instant::now())), ["upsert", "upsert"]);
    let rec = PairRecord {
        endpoint: 2,
        destination: "d.example".into(),
        health: StoredHealth {
            state: State::Disabled,
            reason: None,
            phase: None,
            detail: None,
            streak: 1,
            reason_streak: 1,
            cooldown_ms: None,
            cooldown_left: None,
        },
        status: None,
        from: State::Disabled,
        trial: None,
    };
    // What the store holds past the cap is not loaded (it was within it when written).
    assert_eq!(
        d.restore(&rec, None, Instant::now()),
        Err(DestinationError::CapReached {
            pool: "default".into(),
            cap: 2
        })
    );
}

#[tokio::test(start_paused = true)]
async fn removing_an_endpoint_forgets_its_pairs_everywhere() {
    let p = policy();
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    on(&mut d, &p, SHOP, 1, ban(403));
    on(&mut d, &p, NEWS, 1, ban(403));
    on(&mut d, &p, NEWS, 2, ban(403));
    d.remove_endpoint(1);
    assert_eq!((d.len(), d.banned(), d.destinations()), (1, 1, 1));
    assert_eq!(d.lookup(SHOP), None);
    assert_eq!(usable(&d, NEWS, 2), Usable::Banned);
    assert_eq!(d.pairs_of(1), []);
}

#[test]
fn a_pair_is_48_bytes() {
    // The memory budget (≤ 200 bytes per banned pair, tests/pair_memory.rs) rests on it;
    // 8 of them hold the epoch of a trial's claim (docs/fleet.md, "Ownership").
    assert_eq!(std::mem::size_of::<Pair>(), 48);
}

#[tokio::test(start_paused = true)]
async fn deadlines_round_up_never_release_early() {
    let origin = Instant::now();
    let t = origin + Duration::from_micros(10_000_400);
    assert_eq!(ticks(origin, t), 10_001);
    assert!(at(origin, ticks(origin, t)) >= t);
    assert_eq!(ticks(origin, origin + 10 * S), 10_000);
}
