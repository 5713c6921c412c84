//! Pair storage against a real SQLite file (WAL), including the upgrade of a database
//! built by migrations 01–02.

use std::time::Duration;

use super::*;
use crate::endpoint::ProxyUrl;
use crate::event_kind::EventKind;
use crate::store::sqlite::MIGRATIONS_DIR;
use crate::store::{NewEndpoint, NewEvent, StoredHealth};

fn store() -> (tempfile::TempDir, Sqlite, EndpointId, EndpointId) {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sqlite::open(&dir.path().join("t.db")).unwrap();
    let ids = s
        .add_endpoints(&[
            NewEndpoint {
                url: ProxyUrl::parse("http://u:pw@a:1").unwrap(),
                pool: "default".into(),
                label: None,
                source: None,
                state: State::Available,
                tags: Default::default(),
            },
            NewEndpoint {
                url: ProxyUrl::parse("socks5://b:2").unwrap(),
                pool: "other".into(),
                label: None,
                source: None,
                state: State::Available,
                tags: Default::default(),
            },
        ])
        .unwrap();
    (dir, s, ids[0], ids[1])
}

fn cooling(endpoint: EndpointId, destination: &str, streak: u32) -> PairRecord {
    PairRecord {
        endpoint,
        destination: destination.into(),
        from: State::Cooling,
        trial: None,
        status: Some(403),
        health: StoredHealth {
            state: State::Cooling,
            reason: Some(Reason::DestinationStatus),
            phase: Some(Phase::ResponseHead),
            detail: Some("HTTP 403".into()),
            streak,
            reason_streak: streak,
            cooldown_ms: Some(60_000),
            cooldown_left: Some(Duration::from_secs(60)),
        },
    }
}

/// A record as read back, for comparison: the time left has run on a little since it was
/// written, so it is checked apart (within the cooldown's length, not much less).
fn settled(mut r: PairRecord) -> PairRecord {
    if let Some(left) = r.health.cooldown_left.take() {
        let len = Duration::from_millis(r.health.cooldown_ms.unwrap());
        assert!(
            left <= len && left + Duration::from_secs(30) > len,
            "{left:?}"
        );
    }
    r
}

fn ev(kind: EventKind, from: State, to: State) -> NewEvent {
    NewEvent {
        from: Some(from),
        to: Some(to),
        reason: Some(Reason::DestinationStatus),
        lease: Some("l-1".into()),
        ..NewEvent::new(kind)
    }
}

/// (kind, endpoint, destination, status) of an event.
type EventCols = (String, Option<i64>, Option<String>, Option<u16>);

/// Every event, in order.
fn events(s: &Sqlite) -> Vec<EventCols> {
    let mut st = s
        .conn
        .prepare("SELECT kind, endpoint, destination, status FROM events ORDER BY id")
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn upsert_update_delete_each_with_its_event() {
    let (_d, mut s, a, b) = store();
    s.write_pairs(&[
        PairWrite::Upsert(
            cooling(a, "shop.example", 1),
            ev(EventKind::StateChanged, State::Available, State::Cooling),
        ),
        PairWrite::Upsert(
            cooling(b, "shop.example", 1),
            ev(EventKind::StateChanged, State::Available, State::Cooling),
        ),
        PairWrite::Upsert(
            cooling(a, "news.example", 1),
            ev(EventKind::StateChanged, State::Available, State::Cooling),
        ),
    ])
    .unwrap();
    // The same pair again is an update, not a second row.
    let mut again = cooling(a, "shop.example", 2);
    again.health.state = State::Disabled;
    again.from = State::Disabled;
    again.health.cooldown_ms = None;
    again.health.cooldown_left = None;
    s.write_pairs(&[PairWrite::Upsert(
        again.clone(),
        ev(
            EventKind::StateChanged,
            State::ProbeAllowed,
            State::Disabled,
        ),
    )])
    .unwrap();

    let all = s.pairs().unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(
        settled(all[0].record.clone()),
        settled(cooling(a, "news.example", 1))
    );
    assert_eq!(all[0].pool, "default");
    assert_eq!(settled(all[1].record.clone()), again);
    assert_eq!(all[2].pool, "other");
    assert_eq!(
        s.pairs_of(a)
            .unwrap()
            .iter()
            .map(|p| p.record.destination.as_str())
            .collect::<Vec<_>>(),
        ["news.example", "shop.example"]
    );
    assert_eq!(
        s.pairs_for("shop.example")
            .unwrap()
            .iter()
            .map(|p| p.record.endpoint)
            .collect::<Vec<_>>(),
        [a, b]
    );

    s.write_pairs(&[
        PairWrite::Event {
            destination: "news.example".into(),
            status: Some(200),
            event: NewEvent {
                endpoint: Some(a),
                ..NewEvent::new(EventKind::Report)
            },
        },
        PairWrite::Delete {
            endpoint: a,
            destination: "news.example".into(),
            from: State::ProbeAllowed,
            trial: None,
            event: ev(
                EventKind::StateChanged,
                State::ProbeAllowed,
                State::Available,
            ),
        },
    ])
    .unwrap();
    assert_eq!(s.pairs_of(a).unwrap().len(), 1);
    let evs = events(&s);
    let pair_events: Vec<_> = evs.iter().filter(|e| e.2.is_some()).collect();
    assert_eq!(pair_events.len(), 6, "{evs:?}");
    assert_eq!(
        *pair_events[4],
        (
            "report".to_string(),
            Some(a),
            Some("news.example".to_string()),
            Some(200)
        )
    );
    assert_eq!(
        *pair_events[5],
        (
            "state_changed".to_string(),
            Some(a),
            Some("news.example".to_string()),
            None
        )
    );
    assert_eq!(pair_events[0].3, Some(403));
    // Endpoint events keep a NULL destination.
    assert!(evs.iter().any(|e| e.0 == "added" && e.2.is_none()));
}

#[test]
fn a_pair_of_an_unknown_endpoint_writes_nothing() {
    let (_d, mut s, a, _) = store();
    let before = events(&s).len();
    let err = s
        .write_pairs(&[
            PairWrite::Upsert(
                cooling(a, "ok.example", 1),
                ev(EventKind::StateChanged, State::Available, State::Cooling),
            ),
            PairWrite::Upsert(
                cooling(9_999, "x.example", 1),
                ev(EventKind::StateChanged, State::Available, State::Cooling),
            ),
        ])
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    assert_eq!(s.pairs().unwrap(), []);
    assert_eq!(events(&s).len(), before, "all or nothing");
}

#[test]
fn removing_an_endpoint_removes_its_pairs() {
    let (_d, mut s, a, b) = store();
    s.write_pairs(&[
        PairWrite::Upsert(
            cooling(a, "x.example", 1),
            ev(EventKind::StateChanged, State::Available, State::Cooling),
        ),
        PairWrite::Upsert(
            cooling(b, "x.example", 1),
            ev(EventKind::StateChanged, State::Available, State::Cooling),
        ),
    ])
    .unwrap();
    s.remove(&[a]).unwrap();
    let left = s.pairs().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].record.endpoint, b);
    // Deleting a pair that went with its endpoint is not an error.
    s.write_pairs(&[PairWrite::Delete {
        endpoint: a,
        destination: "x.example".into(),
        from: State::Disabled,
        trial: None,
        event: ev(EventKind::StateChanged, State::Disabled, State::Available),
    }])
    .unwrap();
}

#[test]
fn an_available_pair_is_refused_by_the_schema() {
    let (_d, s, a, _) = store();
    let err = s
        .conn
        .execute(
            "INSERT INTO destination_pairs (endpoint, destination, state, state_changed_at) \
             VALUES (?1, 'x', 'available', 'now')",
            [a],
        )
        .unwrap_err();
    assert!(err.to_string().contains("CHECK"), "{err}");
}

#[test]
fn migration_upgrades_a_database_built_by_01_and_02() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let conn = crate::store::sqlite::built_to(&path, 2);
        conn.execute(
            "INSERT INTO endpoints (id, pool, scheme, host, port, state, state_changed_at, created_at) \
             VALUES (7, 'default', 'http', 'h', 1, 'cooling', 'x', 'x')",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO events (at, endpoint, kind) VALUES ('x', 7, 'added')",
            [],
        )
        .unwrap();
    }
    let mut s = Sqlite::open(&path).unwrap();
    assert_eq!(
        s.schema_version().unwrap(),
        MIGRATIONS_DIR.dirs().count() as i64
    );
    assert_eq!(
        events(&s),
        [("added".to_string(), Some(7), None, None)],
        "old events survive with NULL destination and status"
    );
    s.write_pairs(&[PairWrite::Upsert(
        cooling(7, "site.example", 1),
        ev(EventKind::StateChanged, State::Available, State::Cooling),
    )])
    .unwrap();
    drop(s);
    // Reopening (a restart) loads the pair back.
    let s = Sqlite::open(&path).unwrap();
    let rows = s.pairs().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        settled(rows[0].record.clone()),
        settled(cooling(7, "site.example", 1))
    );
}

#[test]
fn pair_writes_ride_the_group_commit() {
    let (_d, mut s, a, _) = store();
    let results = s
        .write_groups(&[
            vec![crate::store::Write::Pair(PairWrite::Upsert(
                cooling(a, "g.example", 1),
                ev(EventKind::StateChanged, State::Available, State::Cooling),
            ))],
            // A batch that fails alone (unknown endpoint) leaves the other committed.
            vec![crate::store::Write::Pair(PairWrite::Upsert(
                cooling(424_242, "g.example", 1),
                ev(EventKind::StateChanged, State::Available, State::Cooling),
            ))],
        ])
        .unwrap();
    assert!(results[0].is_ok());
    assert!(matches!(results[1], Err(StoreError::NotFound(_))));
    assert_eq!(s.pairs().unwrap().len(), 1);
}

#[test]
fn a_failing_batch_leaves_nothing_of_its_earlier_writes() {
    let (_d, mut s, a, _) = store();
    let upsert = |id, host: &str| {
        crate::store::Write::Pair(PairWrite::Upsert(
            cooling(id, host, 1),
            ev(EventKind::StateChanged, State::Available, State::Cooling),
        ))
    };
    let results = s
        .write_groups(&[
            // Its first write applies, its second fails: the first is undone with it.
            vec![upsert(a, "one.example"), upsert(424_242, "one.example")],
            // The batch after it commits.
            vec![upsert(a, "two.example")],
        ])
        .unwrap();
    assert!(matches!(results[0], Err(StoreError::NotFound(_))));
    assert!(results[1].is_ok());
    let hosts: Vec<String> = s
        .pairs()
        .unwrap()
        .into_iter()
        .map(|p| p.record.destination)
        .collect();
    assert_eq!(hosts, ["two.example"]);
    // And the transaction is clean for the next commit.
    let results = s.write_groups(&[vec![upsert(a, "three.example")]]).unwrap();
    assert!(results[0].is_ok());
    assert_eq!(s.pairs().unwrap().len(), 2);
}
