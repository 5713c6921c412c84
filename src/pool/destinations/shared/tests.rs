//! The sharing rule as a table (holder state × what an endpoint asks), then on real
//! pairs under paused time: one cooldown and one trial for the endpoints of an address.

use std::time::Duration;

use super::*;
use crate::event_kind::EventKind;
use crate::health::{Failure, Input, Phase, Reason};
use crate::pool::destinations::tests::policy;
use crate::pool::destinations::PairInput;
use crate::store::NewEvent;
use tokio::time::Instant;

#[test]
fn the_rule_as_a_table() {
    use Usable::*;
    const ME: EndpointId = 1;
    const OTHER: EndpointId = 2;
    // (holder, own answer, what `me` gets, who holds after `me` is banned)
    let table: [(Holder, Usable, Usable, EndpointId); 12] = [
        (None, Available, Available, ME),
        (None, Trial, Trial, ME),
        (None, Banned, Banned, ME),
        (Some((ME, true)), Available, Available, ME),
        (Some((ME, true)), Trial, Trial, ME),
        (Some((ME, false)), Available, Available, ME),
        (Some((OTHER, true)), Available, Banned, OTHER),
        (Some((OTHER, true)), Trial, Banned, OTHER),
        (Some((OTHER, true)), Banned, Banned, OTHER),
        (Some((OTHER, false)), Available, Available, ME),
        (Some((OTHER, false)), Trial, Trial, ME),
        (Some((OTHER, false)), Banned, Banned, ME),
    ];
    for (holder, own, want, after) in table {
        assert_eq!(judge(own, ME, holder), want, "{holder:?} {own:?}");
        assert_eq!(on_ban(ME, holder), after, "{holder:?}");
    }
}

const S: Duration = Duration::from_secs(1);
const HOLD: Duration = Duration::from_secs(15);
const SHOP: &str = "shop.example";

fn ban(d: &mut Destinations, id: EndpointId) {
    let input = Input::Failure {
        failure: Failure {
            status: Some(403),
            ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
        },
        trial: false,
    };
    let ev = Some(NewEvent::new(EventKind::Report));
    let what = PairInput {
        input,
        status: Some(403),
        act: ev,
    };
    d.apply(SHOP, id, what, &policy(), Instant::now(), 0.0);
}

/// Address number `n`, in a /24 of its own.
fn at(n: u32) -> Option<(u32, super::Subnet)> {
    let ip = std::net::IpAddr::from([10, 0, n as u8, 1]);
    Some((n, (ip, 24)))
}

fn usable(d: &Destinations, id: EndpointId) -> Usable {
    let Some(r) = d.lookup(SHOP) else {
        return Usable::Available;
    };
    let u = d.usable(r, id);
    leasable_agrees(d, r, id);
    u
}

/// What a lease's candidate asks (`leasable`) says what `usable` and `in_suspect` say, in
/// every state a test here reaches.
pub(in crate::pool::destinations) fn leasable_agrees(d: &Destinations, r: DestRef, id: EndpointId) {
    let exit = d.exit_number(id);
    let free = d.usable(r, id) == Usable::Available;
    assert_eq!(
        d.leasable([Some(r), None], None, id, exit),
        free,
        "endpoint {id}"
    );
    assert_eq!(
        d.leasable([None, Some(r)], None, id, exit),
        free,
        "endpoint {id}"
    );
    let spared = free && !d.in_suspect(r, id);
    let got = d.leasable([Some(r), None], Some(r), id, exit);
    assert_eq!(got, spared, "endpoint {id}");
}

fn all(d: &Destinations) -> Vec<Usable> {
    (1..=4).map(|id| usable(d, id)).collect()
}

/// Endpoints 1, 2, 3 leave from address 7; endpoint 4 from address 8.
fn pool() -> Destinations {
    let mut d = Destinations::new("p", 1000);
    for id in 1..=3 {
        d.set_exit(id, at(7));
    }
    d.set_exit(4, at(8));
    d
}

#[tokio::test(start_paused = true)]
async fn one_address_one_ban_one_cooldown_one_trial() {
    use Usable::*;
    let p = policy();
    let mut d = pool();
    ban(&mut d, 1);
    assert_eq!(all(&d), [Banned, Banned, Banned, Available]);
    assert_eq!(d.address_bans(), 1);
    tokio::time::advance(10 * S).await;
    d.advance(&p, Instant::now());
    // The holder's pair is due its trial; the others wait for it.
    assert_eq!(all(&d), [Trial, Banned, Banned, Available]);
    // A stampede: the trial is claimed once, whoever asks.
    let r = d.lookup(SHOP).unwrap();
    let mut claimed = Vec::new();
    for _ in 0..100 {
        if let Some((id, _)) = d.claim_trial(r, |_, _| true, None, HOLD, &p, Instant::now()) {
            claimed.push(id);
        }
    }
    assert_eq!(claimed, vec![1]);
    assert_eq!(all(&d), [Banned, Banned, Banned, Available]);
    // The trial succeeds: the address is free for all of them.
    let ok = Input::Success { trial: true };
    d.apply(SHOP, 1, ok.into(), &p, Instant::now(), 0.0);
    assert_eq!(all(&d), [Available; 4]);
    assert_eq!(d.address_bans(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_trial_keeps_every_endpoint_of_the_address_out() {
    use Usable::*;
    let p = policy();
    let mut d = pool();
    ban(&mut d, 2);
    tokio::time::advance(10 * S).await;
    d.advance(&p, Instant::now());
    let r = d.lookup(SHOP).unwrap();
    let (id, _) = d
        .claim_trial(r, |_, _| true, None, HOLD, &p, Instant::now())
        .unwrap();
    assert_eq!(id, 2);
    let fail = Input::Failure {
        failure: Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead)),
        trial: true,
    };
    let what = PairInput {
        input: fail,
        status: Some(403),
        act: None,
    };
    d.apply(SHOP, 2, what, &p, Instant::now(), 0.0);
    assert_eq!(all(&d), [Banned, Banned, Banned, Available]);
    // Its own second cooldown (20 s) is the address's.
    tokio::time::advance(19 * S).await;
    d.advance(&p, Instant::now());
    assert_eq!(all(&d), [Banned, Banned, Banned, Available]);
    tokio::time::advance(S).await;
    d.advance(&p, Instant::now());
    assert_eq!(all(&d), [Banned, Trial, Banned, Available]);
}

#[tokio::test(start_paused = true)]
async fn two_pairs_of_one_address_still_make_one_trial() {
    use Usable::*;
    let p = policy();
    let mut d = pool();
    // Both were banned before either was known to share: 1 holds, 3 waits for it.
    ban(&mut d, 1);
    ban(&mut d, 3);
    tokio::time::advance(10 * S).await;
    d.advance(&p, Instant::now());
    assert_eq!(all(&d), [Trial, Banned, Banned, Available]);
    let r = d.lookup(SHOP).unwrap();
    let mut claimed = Vec::new();
    for _ in 0..10 {
        if let Some((id, _)) = d.claim_trial(r, |_, _| true, None, HOLD, &p, Instant::now()) {
            claimed.push(id);
        }
    }
    assert_eq!(claimed, vec![1], "one trial for the address");
}

#[tokio::test(start_paused = true)]
async fn unknown_and_moved_endpoints_share_nothing() {
    use Usable::*;
    let mut d = pool();
    d.set_exit(3, None);
    ban(&mut d, 1);
    assert_eq!(all(&d), [Banned, Banned, Available, Available]);
    // 2 rotates onto address 8: out of 7's ban at once.
    d.set_exit(2, at(8));
    assert_eq!(all(&d), [Banned, Available, Available, Available]);
    // The holder moves away: the ban was its pair's, it goes with it.
    d.set_exit(3, at(7));
    assert_eq!(usable(&d, 3), Banned);
    d.set_exit(1, at(9));
    assert_eq!(all(&d), [Banned, Available, Available, Available]);
    // The next ban of address 7 holds for it again.
    ban(&mut d, 3);
    d.set_exit(2, at(7));
    assert_eq!(all(&d), [Banned, Banned, Banned, Available]);
    d.clear_exits();
    assert_eq!(all(&d), [Banned, Available, Banned, Available]);
}

#[tokio::test(start_paused = true)]
async fn holders_that_hold_nothing_are_swept() {
    let mut d = Destinations::new("p", 100_000);
    // 1,000 addresses banned and recovered: their holders hold nothing any more.
    for id in 1..=1000 {
        d.set_exit(id, at(id as u32));
        ban(&mut d, id);
        d.enable(SHOP, id);
    }
    assert!(
        d.shared.held.len() <= 2 * d.banned() + 65,
        "{}",
        d.shared.held.len()
    );
    assert_eq!(d.address_bans(), 0);
}
