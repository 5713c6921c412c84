//! An origin certificate that fails verification through one proxy (docs/intercept.md,
//! "A proxy that tampers with TLS"): judged by contrast on real `Pools` and SQLite on a
//! paused clock. Another endpoint verifying the origin afterwards makes it the proxy's
//! fault, endpoint-wide; every endpoint failing it makes the target down and cools
//! nobody.

mod common;

use std::time::Duration;

use common::vpool::{config, Script, VirtualPool, POOL, TTL};
use proxypool::config::Mode;
use proxypool::health::blame::Blame;
use proxypool::health::{Failure, Phase, Reason, State};
use proxypool::pool::{Outcome, PoolError, ReportOn, Reported, Want};
use proxypool::protocol::Grant;
use proxypool::store::EventRow;

const SHOP: &str = "shop.example:443";

fn pool(n: usize) -> VirtualPool {
    let cfg = config(
        Mode::StaticNoPing,
        Duration::from_secs(60),
        Duration::from_secs(1800),
    );
    VirtualPool::new(cfg, (0..n).map(|_| Script::SucceedsAlways).collect())
}

/// A certificate of no trusted chain, as the gateway's own verification reports it.
fn bad_certificate() -> Outcome {
    let mut f = Failure::new(Reason::TlsFailed, Some(Phase::DestinationTls));
    f.detail = Some("invalid peer certificate: UnknownIssuer".into());
    f.substituted = true;
    Outcome::Failure(f)
}

/// A client's report of a TLS failure with the destination: it says no more than that.
fn client_tls_failure() -> Outcome {
    let mut f = Failure::new(Reason::TlsFailed, Some(Phase::DestinationTls));
    f.detail = Some("SSLEOFError: EOF occurred in violation of protocol".into());
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

fn lease(vp: &mut VirtualPool) -> Result<Grant, PoolError> {
    let (now, _) = vp.now();
    let want = Want::parse(Some(SHOP), None).unwrap();
    let (r, w) = vp.pools.lease_with(POOL, TTL, None, &want, now);
    vp.persist(&w);
    r
}

fn kinds(events: &[EventRow], kind: &str) -> Vec<EventRow> {
    events.iter().filter(|e| e.kind == kind).cloned().collect()
}

#[tokio::test(start_paused = true)]
async fn a_certificate_another_endpoint_verifies_afterwards_cools_the_first_endpoint_wide() {
    let mut vp = pool(3);
    let g1 = lease(&mut vp).unwrap();
    let tamperer = g1.endpoint;
    // Alone it proves nothing: the origin's own certificate may be bad.
    assert_eq!(
        report(&mut vp, &g1, bad_certificate()).blame,
        Some(Blame::Pending)
    );
    assert_eq!(vp.row(tamperer).state, State::Available);
    let g2 = lease(&mut vp).unwrap();
    assert_ne!(g2.endpoint, tamperer, "pending: the others first");
    assert_eq!(report(&mut vp, &g2, Outcome::Success).blame, None);
    // The origin verified through another endpoint: the first presented someone else's
    // certificate, which it does for every site.
    let row = vp.row(tamperer);
    assert_eq!(row.state, State::Cooling);
    assert_eq!(row.reason, Some(Reason::TlsFailed));
    assert_eq!(row.phase, Some(Phase::DestinationTls));
    assert!(
        vp.store.pairs_of(tamperer).unwrap().is_empty(),
        "endpoint-wide, not a pair"
    );
    let events = vp.new_events();
    let changed = kinds(&events, "state_changed");
    assert_eq!(changed.len(), 1, "{events:?}");
    assert_eq!(changed[0].endpoint, Some(tamperer));
    assert_eq!(changed[0].blame.as_deref(), Some("endpoint"));
    let detail = changed[0].detail.as_deref().unwrap();
    assert!(
        detail.contains(&format!("endpoint {} verified", g2.endpoint))
            && detail.contains("tampers"),
        "{detail}"
    );
    // It serves no other site either while it cools.
    for _ in 0..6 {
        let (now, _) = vp.now();
        let (r, w) = vp.pools.lease(POOL, TTL, None, now);
        vp.persist(&w);
        let g = r.unwrap();
        assert_ne!(g.endpoint, tamperer);
        vp.pools.release(&g.lease, now).0.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_certificate_every_endpoint_fails_is_the_origins_own_and_cools_nobody() {
    let mut vp = pool(3);
    let g1 = lease(&mut vp).unwrap();
    assert_eq!(
        report(&mut vp, &g1, bad_certificate()).blame,
        Some(Blame::Pending)
    );
    let g2 = lease(&mut vp).unwrap();
    assert_ne!(g2.endpoint, g1.endpoint);
    assert_eq!(
        report(&mut vp, &g2, bad_certificate()).blame,
        Some(Blame::Target)
    );
    // Down, and said to be down for its certificate.
    match lease(&mut vp) {
        Err(PoolError::DestinationDown {
            target,
            certificate,
            ..
        }) => {
            assert_eq!(target, SHOP);
            assert!(certificate, "down for its certificate");
        }
        other => panic!("expected destination_down, got {other:?}"),
    }
    for &id in &vp.ids {
        assert_eq!(vp.row(id).state, State::Available, "endpoint {id}");
        assert!(vp.store.pairs_of(id).unwrap().is_empty(), "endpoint {id}");
    }
    let events = vp.new_events();
    let down = kinds(&events, "target_down");
    assert_eq!(down.len(), 1, "{events:?}");
    assert_eq!(down[0].reason.as_deref(), Some("tls_failed"));
    // Later a success through any endpoint confirms nobody: the pending failures became
    // the target's when it went down.
    tokio::time::advance(Duration::from_secs(3)).await;
    let trial = lease(&mut vp).unwrap();
    report(&mut vp, &trial, Outcome::Success);
    for &id in &vp.ids {
        assert_eq!(vp.row(id).state, State::Available, "endpoint {id}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_target_is_not_down_for_its_certificate() {
    let mut vp = pool(2);
    for _ in 0..2 {
        let g = lease(&mut vp).unwrap();
        let f = Failure::new(Reason::UpstreamUnreachable, Some(Phase::ProxyHandshake));
        report(&mut vp, &g, Outcome::Failure(f));
    }
    match lease(&mut vp) {
        Err(PoolError::DestinationDown { certificate, .. }) => assert!(!certificate),
        other => panic!("expected destination_down, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_pool_of_one_has_no_contrast_and_only_its_pair_cools() {
    let mut vp = pool(1);
    let g = lease(&mut vp).unwrap();
    let id = g.endpoint;
    assert_eq!(
        report(&mut vp, &g, bad_certificate()).blame,
        Some(Blame::Pair)
    );
    assert_eq!(vp.row(id).state, State::Available, "one site's certificate");
    let pairs = vp.store.pairs_of(id).unwrap();
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    assert_eq!(pairs[0].record.destination, SHOP);
    assert_eq!(pairs[0].record.health.reason, Some(Reason::TlsFailed));
}

#[tokio::test(start_paused = true)]
async fn a_clients_tls_failure_others_get_past_cools_only_its_pair() {
    let mut vp = pool(3);
    let g1 = lease(&mut vp).unwrap();
    let flaky = g1.endpoint;
    assert_eq!(
        report(&mut vp, &g1, client_tls_failure()).blame,
        Some(Blame::Pending)
    );
    let g2 = lease(&mut vp).unwrap();
    report(&mut vp, &g2, Outcome::Success);
    assert_eq!(vp.row(flaky).state, State::Available, "not endpoint-wide");
    let pairs = vp.store.pairs_of(flaky).unwrap();
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    assert_eq!(pairs[0].record.destination, SHOP);
    assert_eq!(pairs[0].record.health.state, State::Cooling);
}

#[tokio::test(start_paused = true)]
async fn a_tunnel_through_another_endpoint_proves_no_certificate() {
    let mut vp = pool(3);
    let g1 = lease(&mut vp).unwrap();
    let suspect = g1.endpoint;
    report(&mut vp, &g1, bad_certificate());
    // Another endpoint's tunnel to the same target opens: nothing was verified.
    let g2 = lease(&mut vp).unwrap();
    assert_ne!(g2.endpoint, suspect);
    let (now, wall) = vp.now();
    let (r, w) = vp.pools.reached(&g2.lease, now, wall);
    vp.persist(&w);
    r.unwrap();
    assert_eq!(vp.row(suspect).state, State::Available, "still pending");
    // An answer through it does.
    report(&mut vp, &g2, Outcome::Success);
    assert_eq!(vp.row(suspect).state, State::Cooling);
}
