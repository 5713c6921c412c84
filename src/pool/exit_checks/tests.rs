//! The exit check through the pools, on a paused clock: what a result records, that a
//! failed check cools nothing, and that a move (`exit_changed`) takes an endpoint out of
//! its old address's ban and into its new one's.

use std::time::{Duration, SystemTime};

use super::*;
use crate::config::{ExitConfig, PoolConfig};
use crate::health::{Failure, Phase, Reason};
use crate::pool::{Outcome, Want};
use crate::store::EndpointRow;

const SHOP: &str = "shop.example";

fn pools() -> Pools {
    let cfg = PoolConfig {
        exit: Some(ExitConfig {
            url: Some("http://echo.test/".into()),
            ..ExitConfig::default()
        }),
        ..PoolConfig::builtin("p")
    };
    let mut p = Pools::new([cfg]);
    for id in 1..=3 {
        let url = format!("http://u:pw@10.0.0.{id}:3128");
        p.insert_row(&EndpointRow::fixture(id, &url, "p"), Instant::now());
    }
    p
}

fn ip(s: &str) -> Result<IpAddr, String> {
    Ok(s.parse().unwrap())
}

fn kinds(w: &[Write]) -> Vec<String> {
    w.iter()
        .map(|w| match w {
            Write::Exit { ip, .. } => format!("exit {}", shown(*ip)),
            Write::Event(ev) => format!("{} {}", ev.kind, ev.detail.clone().unwrap_or_default()),
            _ => "other".into(),
        })
        .collect()
}

/// Lease for the shop: the endpoints it can have, in the order given.
fn leasable(p: &mut Pools) -> Vec<EndpointId> {
    let want = Want::parse(Some(SHOP), None).unwrap();
    let mut got = Vec::new();
    let mut leases = Vec::new();
    for _ in 0..6 {
        let (g, _) = p.lease_with("p", Duration::from_secs(60), None, &want, Instant::now());
        if let Ok(g) = g {
            got.push(g.endpoint);
            leases.push(g.lease);
        }
    }
    for l in leases {
        p.release(&l, Instant::now()).0.unwrap();
    }
    got.sort();
    got.dedup();
    got
}

/// A proxy's header naming the address known writes nothing; another address is
/// recorded as a check's would be.
#[tokio::test(start_paused = true)]
async fn what_a_sighting_records() {
    let mut p = pools();
    let now = Instant::now();
    let at = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert_eq!(
        kinds(&p.exit_sighted(1, at("198.51.100.7"), now)),
        ["exit 198.51.100.7", "exit_changed unknown -> 198.51.100.7"]
    );
    assert!(p.exit_sighted(1, at("198.51.100.7"), now).is_empty());
    assert_eq!(
        kinds(&p.exit_sighted(1, at("198.51.100.8"), now)),
        [
            "exit 198.51.100.8",
            "exit_changed 198.51.100.7 -> 198.51.100.8"
        ]
    );
    assert!(p.exit_sighted(99, at("10.9.9.9"), now).is_empty());
}

#[tokio::test(start_paused = true)]
async fn what_a_check_records() {
    let mut p = pools();
    let now = Instant::now();
    let due: Vec<EndpointId> = p
        .exit_due("p", now, 10)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(due, [1, 2, 3], "loaded without an address: checked at once");
    assert_eq!(
        kinds(&p.exit_learned(1, ip("198.51.100.7"), now)),
        ["exit 198.51.100.7", "exit_changed unknown -> 198.51.100.7"]
    );
    assert_eq!(
        kinds(&p.exit_learned(1, ip("198.51.100.7"), now)),
        ["exit 198.51.100.7"]
    );
    let why = Err("the answer holds no address".to_string());
    assert_eq!(
        kinds(&p.exit_learned(1, why.clone(), now)),
        [
            "exit unknown",
            "exit_changed 198.51.100.7 -> unknown: the answer holds no address"
        ]
    );
    assert!(
        p.exit_learned(1, why, now).is_empty(),
        "unknown stays unknown: nothing"
    );
    assert_eq!(p.entries.get(&1).unwrap().health.state, State::Available);
    assert!(
        p.exit_learned(99, ip("10.9.9.9"), now).is_empty(),
        "no such endpoint"
    );
}

#[tokio::test(start_paused = true)]
async fn a_move_leaves_the_old_address_ban() {
    let mut p = pools();
    let now = Instant::now();
    for id in 1..=3 {
        p.exit_learned(id, ip("198.51.100.7"), now);
    }
    assert_eq!(leasable(&mut p), [1, 2, 3]);
    // A ban of endpoint 1 for the shop holds for its whole address.
    let want = Want::parse(Some(SHOP), None).unwrap();
    let ttl = Duration::from_secs(60);
    let g = loop {
        let (g, _) = p.lease_with("p", ttl, None, &want, Instant::now());
        let g = g.unwrap();
        if g.endpoint == 1 {
            break g;
        }
        p.release(&g.lease, Instant::now()).0.unwrap();
    };
    let ban = Failure {
        status: Some(403),
        ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
    };
    let (r, _) = p.report(
        &g.lease,
        Outcome::Failure(ban),
        Instant::now(),
        SystemTime::now(),
    );
    r.unwrap();
    assert!(leasable(&mut p).is_empty(), "one address, one ban");
    // Endpoint 2 rotates: out of the old address's ban at once.
    p.exit_learned(2, ip("203.0.113.9"), Instant::now());
    assert_eq!(leasable(&mut p), [2]);
    // Unknown shares nothing either.
    p.exit_learned(3, Err("down".into()), Instant::now());
    assert_eq!(leasable(&mut p), [2, 3]);
    // Back onto the banned address: under its ban again.
    p.exit_learned(2, ip("198.51.100.7"), Instant::now());
    assert_eq!(leasable(&mut p), [3]);
    // Other hosts never shared anything.
    let (g, _) = p.lease("p", ttl, None, Instant::now());
    assert!(g.is_ok());
}
