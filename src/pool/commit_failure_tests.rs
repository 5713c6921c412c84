//! A commit that fails (a full disk) leaves memory as the store has it, and a deadline
//! transition that could not be written is written once the disk has room again.

use std::sync::Arc;
use std::time::Duration;

use super::engine::{Engine, EngineError};
use super::Outcome;
use crate::config::PoolConfig;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Failure, Phase, Reason, State};
use crate::store::{EventRow, NewEndpoint, Store};

fn refused() -> Outcome {
    Outcome::Failure(Failure {
        reason: Some(Reason::ConnectRefused),
        phase: Some(Phase::Connect),
        ..Default::default()
    })
}

async fn open(dir: &tempfile::TempDir) -> (Arc<Engine>, EndpointId) {
    let mut store = Store::open(&dir.path().join("pp.db")).unwrap();
    let ids = store
        .add_endpoints(&[NewEndpoint {
            url: ProxyUrl::parse("http://10.20.0.1:3128").unwrap(),
            pool: "default".into(),
            label: None,
            source: None,
            state: State::Available,
            tags: Default::default(),
        }])
        .unwrap();
    let engine = Engine::open(store, [PoolConfig::builtin("default")]).unwrap();
    (engine, ids[0])
}

async fn stored(engine: &Engine, id: EndpointId) -> State {
    engine.row(id).await.unwrap().unwrap().state
}

/// Every `state_changed` starts where the previous one ended: no gap in the log.
fn assert_chain(events: &[EventRow], first: State) {
    let mut at = first.as_str().to_string();
    for e in events.iter().filter(|e| e.kind == "state_changed") {
        assert_eq!(e.from.as_deref(), Some(at.as_str()), "gap before {e:?}");
        at = e.to.clone().unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_report_whose_commit_fails_changes_nothing_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, id) = open(&dir).await;
    let ttl = Duration::from_secs(3600);
    let g = engine
        .lease("default", ttl, None, Duration::ZERO)
        .await
        .unwrap();
    engine
        .writer()
        .call(|s| s.fail_next_commits(1))
        .await
        .unwrap();
    let r = engine.report(&g.lease, refused()).await;
    assert!(matches!(r, Err(EngineError::Store(_))), "{r:?}");
    let h = engine.health(id).unwrap();
    assert_eq!((h.state, h.streak), (State::Available, 0), "{h:?}");
    assert_eq!(stored(&engine, id).await, State::Available);
    let events = engine.events(Some(id), 0, 100).await.unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.kind != "report" && e.kind != "state_changed"),
        "{events:?}"
    );

    // The disk has room again: the same failure now lands, in memory and on disk.
    let g = engine
        .lease("default", ttl, None, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        engine.report(&g.lease, refused()).await.unwrap(),
        State::Cooling
    );
    assert_eq!(stored(&engine, id).await, State::Cooling);
    assert_eq!(engine.health(id).unwrap().streak, 1);
    assert_chain(
        &engine.events(Some(id), 0, 100).await.unwrap(),
        State::Available,
    );
}

#[tokio::test(start_paused = true)]
async fn a_deadline_transition_that_failed_to_persist_is_retried_until_it_lands() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, id) = open(&dir).await;
    let g = engine
        .lease("default", Duration::from_secs(3600), None, Duration::ZERO)
        .await
        .unwrap();
    engine.report(&g.lease, refused()).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let timer = tokio::spawn(engine.clone().run_timer(async {
        let _ = stopped.await;
    }));
    engine
        .writer()
        .call(|s| s.fail_next_commits(3))
        .await
        .unwrap();
    // Well past any cooldown of the default policy (max 30m plus jitter).
    let mut landed = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let failing = engine.writer().call(|s| s.failing_commits()).await.unwrap();
        let row = stored(&engine, id).await;
        if failing == 0 && row != State::Cooling {
            assert_eq!(engine.health(id).unwrap().state, row);
            landed = true;
            break;
        }
        // While the disk refuses, memory stays as the store has it.
        if failing > 0 {
            assert_eq!(row, State::Cooling);
        }
    }
    assert!(landed, "the end of the cooldown was never written");
    let events = engine.events(Some(id), 0, 100).await.unwrap();
    assert_chain(&events, State::Available);
    let ends = events
        .iter()
        .filter(|e| e.kind == "state_changed" && e.from.as_deref() == Some("cooling"))
        .count();
    assert_eq!(ends, 1, "{events:?}");
    let _ = stop.send(());
    timer.await.unwrap();
}

fn banned_by_the_site() -> Outcome {
    Outcome::Failure(Failure {
        reason: Some(Reason::DestinationStatus),
        phase: Some(Phase::ResponseHead),
        status: Some(403),
        ..Default::default()
    })
}

/// A destination's ban whose commit failed (a full disk) exists nowhere: not in memory,
/// where it would refuse leases for the site that `show` and `list --destination` never
/// explain, nor as events for a pair the store never had. One that lands is in both.
#[tokio::test(start_paused = true)]
async fn a_pair_ban_whose_commit_fails_is_not_kept_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, id) = open(&dir).await;
    let ttl = Duration::from_secs(3600);
    let site = super::Want::parse(Some("shop.example"), None).unwrap();
    let on = super::ReportOn::to(Some("shop.example"));
    let g = engine
        .lease_with("default", ttl, None, Duration::ZERO, &site)
        .await
        .unwrap();
    engine
        .writer()
        .call(|s| s.fail_next_commits(1))
        .await
        .unwrap();
    let r = engine.report_on(&g.lease, banned_by_the_site(), &on).await;
    assert!(matches!(r, Err(EngineError::Store(_))), "{r:?}");
    assert!(engine.pairs_of(id).is_empty(), "{:?}", engine.pairs_of(id));
    assert_eq!(engine.pair_bans("default"), 0);
    let stored_pairs = engine.writer().call(move |s| s.pairs_of(id)).await.unwrap();
    assert!(stored_pairs.unwrap().is_empty());
    // The site is still leasable through the endpoint, as the store says.
    let g = engine
        .lease_with("default", ttl, None, Duration::ZERO, &site)
        .await
        .expect("a ban that was never stored refused the lease");
    // With room on the disk the same ban lands in memory and in the store.
    engine
        .report_on(&g.lease, banned_by_the_site(), &on)
        .await
        .unwrap();
    assert_eq!(engine.pairs_of(id).len(), 1);
    let stored_pairs = engine.writer().call(move |s| s.pairs_of(id)).await.unwrap();
    assert_eq!(stored_pairs.unwrap().len(), 1);
    let r = engine
        .lease_with("default", ttl, None, Duration::ZERO, &site)
        .await;
    assert!(r.is_err(), "banned for the site: {r:?}");
    // Memory put back after another failed commit keeps the stored ban.
    engine
        .writer()
        .call(|s| s.fail_next_commits(1))
        .await
        .unwrap();
    let g = engine
        .lease("default", ttl, None, Duration::ZERO)
        .await
        .unwrap();
    let r = engine.report_on(&g.lease, banned_by_the_site(), &on).await;
    assert!(r.is_err());
    assert_eq!(engine.pairs_of(id).len(), 1, "the stored ban came back");
}
