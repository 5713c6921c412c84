//! Memory of banned (endpoint, destination) pairs, measured with a counting global
//! allocator (live bytes before and after). Budget: ≤ 200 bytes per banned pair.
//! One test in this binary, so no other test allocates while it measures.

mod common;

use std::time::Duration;

use proxypool::event_kind::EventKind;
use proxypool::health::{Failure, Input, Phase, Policy, Reason};
use proxypool::pool::destinations::{Destinations, PairInput, DEFAULT_MAX_PAIRS};
use proxypool::store::pairs::PairWrite;
use proxypool::store::NewEvent;
use tokio::time::Instant;

use common::counting::{live, Counting};

#[global_allocator]
static A: Counting = Counting;

/// Ban `per_dest[i]` endpoints for destination i; returns live bytes per banned pair.
fn bytes_per_pair(per_dest: &[usize]) -> f64 {
    let policy = Policy::default();
    let now = Instant::now();
    let names: Vec<String> = (0..per_dest.len())
        .map(|i| format!("site-{i}.example"))
        .collect();
    let before = live();
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    let mut n = 0;
    for (name, &count) in names.iter().zip(per_dest) {
        for e in 0..count as i64 {
            let failure = Failure {
                status: Some(403),
                detail: Some("HTTP 403".into()),
                ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
            };
            let what = PairInput {
                input: Input::Failure {
                    failure,
                    trial: false,
                },
                status: Some(403),
                act: Some(NewEvent::new(EventKind::Report)),
            };
            let r = d.apply(
                name,
                e,
                what,
                &policy,
                // Spread deadlines as real traffic does.
                now + Duration::from_millis(n as u64 % 10_000),
                0.0,
            );
            drop(r);
            n += 1;
        }
    }
    assert_eq!(d.banned(), n);
    let live = live() - before;
    drop(d);
    live as f64 / n as f64
}

#[test]
fn banned_pairs_stay_under_200_bytes_each() {
    // The scenario: 5,000 banned for D and 10,000 across 100 other destinations.
    let mut scenario = vec![5_000];
    scenario.extend(std::iter::repeat_n(100, 100));
    let cases: [(&str, Vec<usize>); 4] = [
        ("5,000 for D + 10,000 over 100 others", scenario),
        ("100,000 in one destination", vec![100_000]),
        ("120,000 over 10,000 destinations", vec![12; 10_000]),
        ("1,000,000 (the cap) over 1,000", vec![1_000; 1_000]),
    ];
    for (name, per_dest) in cases {
        let b = bytes_per_pair(&per_dest);
        println!("{name}: {b:.1} bytes per banned pair");
        assert!(b <= 200.0, "{name}: {b:.1} bytes per pair");
    }
    junk_past_the_cap();
}

fn ban(d: &mut Destinations, name: &str, e: i64, now: Instant) -> Vec<PairWrite> {
    let failure = Failure {
        status: Some(403),
        ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
    };
    let input = Input::Failure {
        failure,
        trial: false,
    };
    let what = PairInput {
        input,
        status: Some(403),
        act: Some(NewEvent::new(EventKind::Report)),
    };
    d.apply(name, e, what, &Policy::default(), now, 0.0).writes
}

/// The junk: 1,020,000 bans on distinct bogus hosts, past the cap of 1,000,000.
/// Every one is recorded (the pair failed least recently gives way, its row deleted), a
/// real ban afterwards too, and memory stays bounded by the cap: a pair alone on its
/// destination also pays for that destination's view (about 480 bytes in all).
fn junk_past_the_cap() {
    let now = Instant::now();
    let before = live();
    let mut d = Destinations::new("default", DEFAULT_MAX_PAIRS);
    let mut deleted = 0;
    for i in 0..1_020_000 {
        let w = ban(&mut d, &format!("junk-{i}.invalid"), i % 3, now);
        deleted += w
            .iter()
            .filter(|w| matches!(w, PairWrite::Delete { .. }))
            .count();
    }
    assert_eq!((d.len(), deleted), (DEFAULT_MAX_PAIRS, 20_000));
    let w = ban(&mut d, "shop.example", 1, now);
    assert!(
        w.iter().any(|w| matches!(w, PairWrite::Upsert(..))),
        "{w:?}"
    );
    assert!(d.pair("shop.example", 1).is_some(), "the real ban is held");
    assert!(
        d.pair("junk-0.invalid", 0).is_none(),
        "the oldest junk went"
    );
    let b = (live() - before) as f64 / d.len() as f64;
    println!("1,020,000 junk bans past the cap: {b:.1} bytes per pair held");
    assert!(b <= 520.0, "{b:.1} bytes per pair");
}
