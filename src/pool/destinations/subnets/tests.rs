//! A track as a table (bans over time × the rule), then suspicion on real pairs under
//! paused time: it begins at the `subnet_after`-th address within the window, it is
//! seen by `in_suspect`, and it ends (with its event) when its last ban ends.

use super::*;
use crate::health::{Failure, Input, Phase, Reason};
use crate::pool::destinations::tests::policy;
use crate::pool::destinations::PairInput;

const S: Duration = Duration::from_secs(1);
const RULE: SubnetRule = SubnetRule {
    after: 3,
    window: Duration::from_secs(600),
};

#[tokio::test(start_paused = true)]
async fn a_track_as_a_table() {
    let t0 = Instant::now();
    // (address banned, seconds after t0, becomes suspect now, addresses it counts)
    let table: [(u32, u64, bool, usize); 8] = [
        (1, 0, false, 1),
        (1, 10, false, 1), // the same address again: still one
        (2, 200, false, 2),
        (3, 700, false, 2),  // 1 (last at 10 s) left the window; 2 and 3 are in it
        (4, 710, true, 3),   // three distinct within ten minutes
        (5, 720, false, 4),  // suspect already: counted, no second start
        (2, 5000, false, 4), // once suspect, nothing leaves by age
        (6, 5001, false, 5),
    ];
    let mut t = Track::new("shop.example");
    for (a, at, starts, n) in table {
        let now = t0 + Duration::from_secs(at);
        assert_eq!(t.banned(a, now, RULE), starts, "address {a} at {at}s");
        assert_eq!(t.bans.len(), n, "address {a} at {at}s");
    }
    assert!(t.suspect);
    assert!(!t.ends(|a| a == 6));
    assert!(t.ends(|_| false));
    assert!(
        !t.stale(t0 + Duration::from_secs(99_999), RULE),
        "suspect: ends, not ages"
    );
    let mut quiet = Track::new("x");
    quiet.banned(1, t0, RULE);
    assert!(!quiet.stale(t0 + 599 * S, RULE));
    assert!(quiet.stale(t0 + 600 * S, RULE));
    assert!(!quiet.ends(|_| false), "not suspect: nothing to end");
}

#[tokio::test(start_paused = true)]
async fn a_track_keeps_a_bounded_number_of_addresses() {
    let now = Instant::now();
    let rule = SubnetRule {
        after: 1,
        window: RULE.window,
    };
    let mut t = Track::new("x");
    for a in 0..5000 {
        t.banned(a, now, rule);
    }
    assert_eq!(t.bans.len(), MAX_TRACKED);
}

const SHOP: &str = "shop.example";

fn ban(d: &mut Destinations, id: EndpointId) {
    let input = Input::Failure {
        failure: Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead)),
        trial: false,
    };
    let what = PairInput {
        input,
        status: Some(403),
        act: None,
    };
    d.apply(SHOP, id, what, &policy(), Instant::now(), 0.0);
}

fn kinds(w: &[PairWrite]) -> Vec<String> {
    w.iter()
        .filter_map(|w| match w {
            PairWrite::Event {
                event, destination, ..
            } => Some(format!(
                "{} {destination} {}",
                event.kind,
                event.detail.clone().unwrap_or_default()
            )),
            _ => None,
        })
        .collect()
}

/// Endpoint `n` leaves from 10.1.0.n (one /24) when n ≤ 10, else from 10.2.0.n.
fn pool() -> Destinations {
    let mut d = Destinations::new("p", 1000);
    d.set_subnet_rule(Some(RULE));
    for n in 1..=12u8 {
        let ip = std::net::IpAddr::from([10, if n <= 10 { 1 } else { 2 }, 0, n]);
        let net = std::net::IpAddr::from([10, if n <= 10 { 1 } else { 2 }, 0, 0]);
        d.set_exit(EndpointId::from(n), Some((u32::from(n), (net, 24))));
        let _ = ip;
    }
    d
}

fn suspect(d: &Destinations, id: EndpointId) -> bool {
    let Some(r) = d.lookup(SHOP) else {
        return false;
    };
    super::super::shared::tests::leasable_agrees(d, r, id);
    d.in_suspect(r, id)
}

#[tokio::test(start_paused = true)]
async fn a_subnet_is_suspect_after_three_addresses_and_clears_with_its_last_ban() {
    let mut d = pool();
    ban(&mut d, 1);
    ban(&mut d, 2);
    ban(&mut d, 11);
    assert!(!suspect(&d, 3), "two of one /24 and one of another");
    assert!(kinds(&d.subnet_events(Instant::now())).is_empty());
    ban(&mut d, 3);
    assert!(suspect(&d, 4) && suspect(&d, 10), "the rest of the /24");
    assert!(!suspect(&d, 12), "another /24");
    assert_eq!(
        kinds(&d.subnet_events(Instant::now())),
        ["subnet_suspect shop.example subnet 10.1.0.0/24: 3 addresses banned within 10m"]
    );
    assert_eq!(d.suspect_count(), 1);
    let shown = d.suspect_subnets();
    assert_eq!(
        (shown[0].subnet.as_str(), shown[0].addresses),
        ("10.1.0.0/24", 3)
    );
    // Two of its bans end: still suspect while one holds.
    d.enable(SHOP, 1);
    d.enable(SHOP, 2);
    tokio::time::advance(S).await;
    assert!(kinds(&d.subnet_events(Instant::now())).is_empty());
    assert!(suspect(&d, 4));
    // The last one: it ends, once, with its event.
    d.enable(SHOP, 3);
    tokio::time::advance(S).await;
    let ev = kinds(&d.subnet_events(Instant::now()));
    assert_eq!(
        ev,
        ["subnet_cleared shop.example subnet 10.1.0.0/24: its last ban ended"]
    );
    assert!(!suspect(&d, 4));
    assert_eq!(d.suspect_count(), 0);
    tokio::time::advance(S).await;
    assert!(kinds(&d.subnet_events(Instant::now())).is_empty());
}

#[tokio::test(start_paused = true)]
async fn bans_spread_wider_than_the_window_make_no_suspicion() {
    let mut d = pool();
    ban(&mut d, 1);
    tokio::time::advance(300 * S).await;
    ban(&mut d, 2);
    tokio::time::advance(301 * S).await;
    ban(&mut d, 3);
    assert!(!suspect(&d, 4));
    d.set_subnet_rule(None);
    ban(&mut d, 4);
    ban(&mut d, 5);
    ban(&mut d, 6);
    assert!(!suspect(&d, 7), "off: nothing is suspect");
}
