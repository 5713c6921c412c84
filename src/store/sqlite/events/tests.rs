//! An endpoint's events read through its chain (migration 09) against a full scan of the
//! table, on a real SQLite file: live and removed endpoints, late events, imports, pruning,
//! and a database built before the chain and then migrated.

use std::time::{Duration, SystemTime};

use super::*;
use crate::endpoint::ProxyUrl;
use crate::event_kind::EventKind;
use crate::store::{EventFilter, NewEndpoint};

fn ep(i: usize) -> NewEndpoint {
    NewEndpoint {
        url: ProxyUrl::parse(&format!("http://u:pw@10.1.{}.{}:8080", i / 200, i % 200)).unwrap(),
        pool: "default".into(),
        label: None,
        source: Some("cli".into()),
        state: State::Available,
        tags: Default::default(),
    }
}

fn event(endpoint: EndpointId, n: usize) -> NewEvent {
    NewEvent {
        endpoint: Some(endpoint),
        detail: Some(format!("event {n}")),
        ..NewEvent::new(EventKind::Report)
    }
}

fn write_event(s: &mut Sqlite, ev: &NewEvent) {
    s.write(&[crate::store::Write::Event(ev.clone())]).unwrap();
}

/// Every event of `endpoint`, oldest first, by scanning the whole table.
fn scanned(s: &Sqlite, endpoint: EndpointId) -> Vec<i64> {
    let mut st = s
        .conn
        .prepare("SELECT id FROM events WHERE endpoint = ?1 ORDER BY id")
        .unwrap();
    let ids = st.query_map([endpoint], |r| r.get(0)).unwrap();
    ids.collect::<Result<_, _>>().unwrap()
}

fn ids(v: &[EventRow]) -> Vec<i64> {
    v.iter().map(|e| e.id).collect()
}

/// Each read by endpoint gives what a scan of the table gives.
fn assert_reads_match(s: &Sqlite, endpoints: impl IntoIterator<Item = EndpointId>) {
    for e in endpoints {
        let all = scanned(s, e);
        assert_eq!(
            ids(&s.events(Some(e), 0, usize::MAX >> 1).unwrap()),
            all,
            "endpoint {e}"
        );
        for after in all.iter().copied().chain([0]) {
            let want: Vec<i64> = all.iter().copied().filter(|&i| i > after).take(2).collect();
            assert_eq!(
                ids(&s.events(Some(e), after, 2).unwrap()),
                want,
                "{e} after {after}"
            );
        }
        let mut newest: Vec<i64> = all.iter().rev().take(3).copied().collect();
        assert_eq!(
            ids(&s.recent_events(Some(e), 3).unwrap()),
            newest,
            "{e} recent"
        );
        newest.reverse();
        let f = EventFilter {
            endpoint: Some(e),
            ..EventFilter::default()
        };
        assert_eq!(ids(&s.last_events_matching(&f, 3).unwrap()), newest);
        assert_eq!(ids(&s.events_matching(&f, 0, 1000).unwrap()), all);
        let reports = EventFilter {
            kinds: vec!["report".into()],
            ..f
        };
        let want: Vec<i64> = s
            .events_matching(&EventFilter::default(), 0, 100_000)
            .unwrap()
            .into_iter()
            .filter(|r| r.endpoint == Some(e) && r.kind == "report")
            .map(|r| r.id)
            .collect();
        assert_eq!(ids(&s.events_matching(&reports, 0, 1000).unwrap()), want);
    }
}

#[test]
fn an_endpoints_events_are_its_chain_live_removed_imported_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sqlite::open(&dir.path().join("t.db")).unwrap();
    let ids: Vec<EndpointId> = s
        .add_endpoints(&(0..6).map(ep).collect::<Vec<_>>())
        .unwrap();
    // Events of several endpoints interleaved, and pool-level ones between them.
    for n in 0..60 {
        write_event(&mut s, &event(ids[n * 7 % 6], n));
        if n % 9 == 0 {
            write_event(&mut s, &NewEvent::new(EventKind::SniffSuccess));
        }
    }
    // Removing an endpoint moves the head of its chain to `removed_endpoints`.
    s.remove(&[ids[1]]).unwrap();
    // An event about an endpoint already removed (a report on its way) joins its chain.
    write_event(&mut s, &event(ids[1], 100));
    // Endpoints added later, one by one and by import, start chains of their own.
    let later = s.add_endpoints(&[ep(50)]).unwrap();
    write_event(&mut s, &event(later[0], 101));
    assert!(
        later[0] > ids[5],
        "a removed endpoint's id is not handed out again"
    );
    let everything: Vec<EndpointId> = ids.iter().copied().chain(later.iter().copied()).collect();
    assert_reads_match(&s, everything.iter().copied());
    assert_eq!(s.events(Some(999), 0, 10).unwrap(), []);

    // Pruning cuts every chain at the same place: what is left reads the same.
    let cut = s.events(None, 0, 40).unwrap().last().unwrap().id;
    s.conn
        .execute(
            "UPDATE events SET at = '2000-01-01T00:00:00.000Z' WHERE id <= ?1",
            [cut],
        )
        .unwrap();
    let before = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    while s.prune_events(before, 7).unwrap() > 0 {}
    assert!(s.events(None, 0, 1).unwrap()[0].id > cut);
    assert_reads_match(&s, everything.iter().copied());

    // Everything old: ids go on growing after it (no new event takes an id a head still
    // names), and the chains go on from the events that stayed.
    let future = SystemTime::now() + Duration::from_secs(3600);
    while s.prune_events(future, 7).unwrap() > 0 {}
    let left = s.events(None, 0, 100).unwrap();
    assert!(left.len() <= 2, "{left:?}");
    for n in 200..260 {
        write_event(&mut s, &event(everything[n % everything.len()], n));
    }
    assert_reads_match(&s, everything);
}

#[test]
fn pruning_stops_at_the_first_event_young_enough() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Sqlite::open(&dir.path().join("t.db")).unwrap();
    let id = s.add_endpoints(&[ep(0)]).unwrap()[0];
    for n in 0..6 {
        write_event(&mut s, &event(id, n));
    }
    // A clock set back: the fourth event looks older than the third.
    let all = s.events(Some(id), 0, 100).unwrap();
    let old = |i: usize| {
        s.conn
            .execute(
                "UPDATE events SET at = '2000-01-01T00:00:00.000Z' WHERE id = ?1",
                [all[i].id],
            )
            .unwrap();
    };
    for i in [0, 1, 2, 4] {
        old(i);
    }
    let before = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    while s.prune_events(before, 100).unwrap() > 0 {}
    // The first three went; the fourth waits behind the young one and the chain is whole.
    assert_eq!(ids(&s.events(Some(id), 0, 100).unwrap()), ids(&all[3..]));
}

#[test]
fn a_database_from_before_the_chain_reads_the_same_after_migrating() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    {
        let conn = crate::store::sqlite::built_to(&path, 8);
        conn.execute_batch(
            "INSERT INTO endpoints (id, pool, scheme, host, port, user, state, streak, \
               state_changed_at, created_at) VALUES \
               (1, 'default', 'http', 'a', 1, '', 'available', 0, 'x', 'x'), \
               (3, 'default', 'http', 'c', 1, '', 'available', 0, 'x', 'x'); \
             INSERT INTO events (at, endpoint, kind) VALUES \
               ('x', 1, 'added'), ('x', 2, 'added'), ('x', 3, 'added'), ('x', NULL, 'sniff_success'), \
               ('x', 1, 'report'), ('x', 2, 'removed'), ('x', 3, 'report'), ('x', 1, 'report'), \
               ('x', 4, 'added'), ('x', 4, 'removed');",
        )
        .unwrap();
    }
    let mut s = Sqlite::open(&path).unwrap();
    assert_eq!(s.migrated(), Some((8, 10)));
    assert_reads_match(&s, 1..=5);
    let removed: Vec<(i64, i64)> = s
        .conn
        .prepare("SELECT id, last_event FROM removed_endpoints ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(removed, [(2, 6), (4, 10)]);
    // The chains go on from where the migration left them.
    write_event(&mut s, &event(1, 1));
    write_event(&mut s, &event(2, 2));
    assert_eq!(s.add_endpoints(&[ep(9)]).unwrap(), [5]);
    assert_reads_match(&s, 1..=5);
}
