//! A fleet's group commit: its writes judged one by one against what other daemons wrote
//! (docs/fleet.md, "Ownership"), although they go to the database together; made durable as
//! docs/fleet.md's "Propagation" says: committed apart from its flush, a small transaction
//! behind it waiting for the flush; and, for a role that may not write that transaction's
//! WAL record, whole commits instead. Real binary or store, a private PostgreSQL cluster.

mod common;

use std::time::Duration;

use serde_json::json;

use proxypool::endpoint::ProxyUrl;
use proxypool::event_kind::EventKind;
use proxypool::health::{Phase, Reason, State};
use proxypool::store::{
    Claim, ClaimOn, ClaimResult, EventFilter, HealthRecord, Location, NewEndpoint, NewEvent,
    OpenOptions, RowNow, Store, StoreError, StoredHealth, Write,
};

use common::daemon::Daemon;
use common::fleet::{home, LONG_COOLDOWN};
use common::{postgres, writes};

/// A daemon whose role may not call `pg_logical_emit_message` still writes: every failure
/// is answered, committed and followed by its events, and the log says once why commits
/// are whole. A role that may call it gets no such line.
#[test]
fn a_role_that_may_not_write_the_flush_record_gets_whole_commits() {
    let Some(pg) = postgres::shared() else { return };
    let (db, url) = pg.role_database("plain", "Plain-pw-1");
    pg.sql(
        &db,
        "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC",
    );
    let refused = home(&url, LONG_COOLDOWN);
    let ids = refused.add(&["http://10.80.0.1:3128", "http://10.80.0.2:3128"]);
    let allowed = home(&pg.database(), LONG_COOLDOWN);
    allowed.add(&["http://10.80.1.1:3128", "http://10.80.1.2:3128"]);
    for (h, warned) in [(&refused, true), (&allowed, false)] {
        let d = h.serve();
        cool_two(&d);
        let log = d.log_text();
        let lines = log.matches("refuses pg_logical_emit_message").count();
        assert_eq!(lines, usize::from(warned), "{}", d.log_tail(10));
        assert!(!log.contains("Plain-pw-1"), "{log}");
    }
    // What the refused role's daemon answered is in the database.
    assert_cooled_in(pg, &db, &ids);
}

/// Two leases of `d`, each reported failed and answered cooling.
fn cool_two(d: &Daemon) {
    for _ in 0..2 {
        let g = d.req(json!({"op": "lease", "pool": "default", "ttl": "30s"}));
        assert_eq!(g["ok"], json!(true), "{g}");
        let r = d.req(
            json!({"op": "report", "lease": g["lease"], "outcome": "failure",
            "reason": "connect_refused", "phase": "connect"}),
        );
        assert_eq!(r["state"], "cooling", "{r}\n{}", d.log_tail(10));
    }
}

/// `ids` (two) are cooling in database `db`, with a `state_changed` event each.
fn assert_cooled_in(pg: &postgres::Cluster, db: &str, ids: &[i64]) {
    let changed = pg.sql(
        db,
        "SELECT count(*) FROM events WHERE kind = 'state_changed' AND to_state = 'cooling'",
    );
    assert_eq!(changed, "2");
    let cooling = pg.sql(
        db,
        &format!(
            "SELECT count(*) FROM endpoints WHERE state = 'cooling' AND id IN ({}, {})",
            ids[0], ids[1]
        ),
    );
    assert_eq!(cooling, "2");
}

fn store(url: &str) -> Store {
    let at = Location::parse(std::path::Path::new(url)).unwrap();
    Store::open_at(&at, OpenOptions::default()).unwrap()
}

/// `n` new available endpoints on 10.`net`.0.x, their ids in order.
fn add(s: &mut Store, net: u8, n: usize) -> Vec<i64> {
    let new = |i: usize| NewEndpoint {
        url: ProxyUrl::parse(&format!("http://10.{net}.0.{i}:3128")).unwrap(),
        pool: "default".into(),
        label: None,
        source: None,
        state: State::Available,
        tags: Default::default(),
    };
    s.add_endpoints(&(1..=n).map(new).collect::<Vec<_>>())
        .unwrap()
}

/// A transition of `id` from `from` to `to` (cooling for a minute), deciding `trial`.
fn moved(id: i64, from: State, to: State, trial: Option<i64>) -> Write {
    let cooling = to == State::Cooling;
    Write::Transition(
        HealthRecord {
            id,
            from,
            trial,
            health: StoredHealth {
                state: to,
                reason: cooling.then_some(Reason::ConnectRefused),
                phase: cooling.then_some(Phase::Connect),
                detail: cooling.then(|| "refused".into()),
                streak: u32::from(cooling),
                reason_streak: u32::from(cooling),
                cooldown_ms: cooling.then_some(60_000),
                cooldown_left: cooling.then_some(Duration::from_secs(60)),
            },
        },
        NewEvent {
            endpoint: Some(id),
            from: Some(from),
            to: Some(to),
            ..NewEvent::new(EventKind::StateChanged)
        },
    )
}

fn cooled(id: i64) -> Write {
    moved(id, State::Available, State::Cooling, None)
}

/// The pair of `endpoint` and shop.test cooled (`writes::pair_cooled`).
fn pair_cooled(endpoint: i64, from: State) -> Write {
    Write::Pair(writes::pair_cooled(endpoint, "shop.test", from))
}

/// `id` made `probe_allowed` and its trial claimed; the trial's outcome (cooling) decided
/// under the claim before, which is no longer the slot's.
fn stale_trial(s: &mut Store, id: i64) -> Write {
    s.write(&[moved(id, State::Available, State::ProbeAllowed, None)])
        .unwrap();
    let claim = Write::Claim(Claim {
        on: ClaimOn::Endpoint(id),
        hold: Duration::from_secs(60),
        event: NewEvent::new(EventKind::TrialAdmitted),
    });
    let won = s.write_groups(&[vec![claim]]).unwrap();
    let epoch = match &won[0].as_ref().unwrap().claims[..] {
        [ClaimResult::Won { epoch, .. }] => *epoch,
        other => panic!("the claim is won: {other:?}"),
    };
    moved(id, State::ProbeAllowed, State::Cooling, Some(epoch - 1))
}

/// The endpoints a `state_changed` event was written for, in id order.
fn changed(s: &Store) -> Vec<i64> {
    let filter = EventFilter {
        kinds: vec!["state_changed".into()],
        ..EventFilter::default()
    };
    let mut ids: Vec<i64> = s
        .events_matching(&filter, 0, 1000)
        .unwrap()
        .iter()
        .filter_map(|e| e.endpoint)
        .collect();
    ids.sort_unstable();
    ids
}

/// The batches of one commit go to the database together, and each write is still judged
/// alone: a transition another daemon made first is not written (its row as it is comes
/// back), a trial's result under a stale claim refuses its own batch and no other (the
/// commit is redone batch by batch), and the same endpoint twice in a commit is written
/// once.
#[test]
fn each_transition_of_a_commit_is_judged_alone() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let (mut one, mut two) = (store(&url), store(&url));
    let ids = add(&mut one, 81, 7);
    let [a, b, c, d, e, f, g] = ids[..] else {
        unreachable!()
    };

    // Another daemon cooled b first.
    two.write(&[cooled(b)]).unwrap();
    let r = one
        .write_groups(&[vec![cooled(a)], vec![cooled(b)], vec![cooled(c)]])
        .unwrap();
    let fresh: Vec<_> = r
        .iter()
        .map(|r| r.as_ref().unwrap().fresh.clone())
        .collect();
    assert_eq!((fresh[0].len(), fresh[2].len()), (0, 0), "{fresh:?}");
    match &fresh[1][..] {
        [RowNow::Endpoint(id, Some(row))] => assert_eq!((*id, row.state), (b, State::Cooling)),
        other => panic!("b's row as it is, not {other:?}"),
    }
    assert_eq!(
        changed(&one),
        [a, b, c],
        "b's transition written once, by the first"
    );

    // A trial decided under a claim that is no longer the slot's.
    let late = stale_trial(&mut one, d);
    // With pairs, a row of them and a new one, in batches after the refused one.
    one.write_groups(&[vec![pair_cooled(a, State::Available)]])
        .unwrap();
    let r = one
        .write_groups(&[
            vec![cooled(e)],
            vec![late],
            vec![cooled(f), pair_cooled(f, State::Available)],
            vec![pair_cooled(a, State::Cooling)],
        ])
        .unwrap();
    for i in [0, 2, 3] {
        assert!(r[i].is_ok(), "batch {i}: {r:?}");
    }
    assert!(matches!(r[1], Err(StoreError::StaleClaim { .. })), "{r:?}");
    assert!(
        r[3].as_ref().unwrap().fresh.is_empty(),
        "a's pair updated: {r:?}"
    );
    assert_eq!(one.get(d).unwrap().unwrap().state, State::ProbeAllowed);
    assert_eq!(one.pairs().unwrap().len(), 2);
    assert_eq!(
        changed(&one),
        [a, a, a, b, c, d, e, f, f],
        "d only to probe_allowed"
    );

    // The same endpoint twice: the second finds it moved.
    let r = one
        .write_groups(&[vec![cooled(g)], vec![cooled(g)]])
        .unwrap();
    assert_eq!(r[0].as_ref().unwrap().fresh, []);
    assert_eq!(r[1].as_ref().unwrap().fresh.len(), 1, "{r:?}");
    assert_eq!(changed(&one), [a, a, a, b, c, d, e, f, f, g]);
    for id in [a, b, c, e, f, g] {
        assert_eq!(one.get(id).unwrap().unwrap().state, State::Cooling, "{id}");
    }
}

/// Every guarded write of an endpoint row tells the change the row carried before it, in
/// the group commit's function and in each statement (a transition beside a pair's write,
/// an exit address, a claim, a claim given back), so that a daemon that had not read that
/// change reads the row again (docs/fleet.md, "Propagation"). A write that found its row
/// changed tells none.
#[test]
fn every_write_of_an_endpoint_tells_the_change_its_row_carried_before() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let (mut one, mut two) = (store(&url), store(&url));
    let ids = add(&mut one, 89, 3);
    let [a, b, c] = ids[..] else { unreachable!() };
    let rev = |s: &Store, id: i64| s.get(id).unwrap().unwrap().rev;
    let before = |r: &[Result<proxypool::store::Applied, StoreError>]| {
        r.iter()
            .flat_map(|r| r.as_ref().unwrap().before.clone())
            .collect::<Vec<_>>()
    };

    // The function (transitions and events alone), over another writer's later change.
    two.write(&[Write::Exit {
        id: a,
        ip: Some("192.0.2.1".parse().unwrap()),
    }])
    .unwrap();
    let was = rev(&one, a);
    let r = one.write_groups(&[vec![cooled(a)]]).unwrap();
    assert_eq!(before(&r), [(a, was)]);
    assert_eq!(rev(&one, a), r[0].as_ref().unwrap().seq);

    // The statements: a transition beside a pair's write.
    let was = rev(&one, b);
    let r = one
        .write_groups(&[vec![cooled(b), pair_cooled(b, State::Available)]])
        .unwrap();
    assert_eq!(before(&r), [(b, was)]);

    // An exit address.
    let was = rev(&one, c);
    let r = one
        .write_groups(&[vec![Write::Exit {
            id: c,
            ip: Some("192.0.2.3".parse().unwrap()),
        }]])
        .unwrap();
    assert_eq!(before(&r), [(c, was)]);

    // A claim, and the claim given back.
    one.write(&[moved(c, State::Available, State::ProbeAllowed, None)])
        .unwrap();
    let was = rev(&one, c);
    let claim = Write::Claim(Claim {
        on: ClaimOn::Endpoint(c),
        hold: Duration::from_secs(60),
        event: NewEvent::new(EventKind::TrialAdmitted),
    });
    let r = one.write_groups(&[vec![claim]]).unwrap();
    assert_eq!(before(&r), [(c, was)]);
    let epoch = match &r[0].as_ref().unwrap().claims[..] {
        [ClaimResult::Won { epoch, .. }] => *epoch,
        other => panic!("the claim is won: {other:?}"),
    };
    let was = rev(&one, c);
    let unclaim = Write::Unclaim(proxypool::store::Unclaim {
        on: ClaimOn::Endpoint(c),
        epoch,
        event: NewEvent::new(EventKind::TrialAbandoned),
    });
    let r = one.write_groups(&[vec![unclaim]]).unwrap();
    assert_eq!(before(&r), [(c, was)]);

    // Found changed (cooled already): nothing written, nothing told.
    let r = one.write_groups(&[vec![cooled(a)]]).unwrap();
    assert_eq!(before(&r), []);
    assert_eq!(r[0].as_ref().unwrap().fresh.len(), 1);
}

/// Every row that changed under a commit comes back as it is, each read on its own:
/// endpoints and pairs, several in one batch, in the order of the batch's writes, and one
/// that is gone comes back as none.
#[test]
fn every_row_found_changed_comes_back_as_it_is() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let (mut one, mut two) = (store(&url), store(&url));
    let ids = add(&mut one, 85, 4);
    let [x, y, z, gone] = ids[..] else {
        unreachable!()
    };
    // Another daemon cooled y, x and z's pair first, and removed `gone`.
    two.write(&[cooled(y), cooled(x), pair_cooled(z, State::Available)])
        .unwrap();
    two.write(&[Write::Remove(vec![gone])]).unwrap();
    let r = one
        .write_groups(&[
            vec![cooled(x), cooled(y), pair_cooled(z, State::Available)],
            vec![cooled(gone)],
        ])
        .unwrap();
    match &r[0].as_ref().unwrap().fresh[..] {
        [RowNow::Endpoint(a, Some(ra)), RowNow::Endpoint(b, Some(rb)), RowNow::Pair(c, d, Some(rc))] =>
        {
            assert_eq!((*a, ra.state), (x, State::Cooling));
            assert_eq!((*b, rb.state), (y, State::Cooling));
            assert_eq!((*c, d.as_str()), (z, "shop.test"));
            assert_eq!(
                (rc.record.endpoint, rc.record.health.state),
                (z, State::Cooling)
            );
        }
        other => panic!("x's, y's and z's pair's rows as they are, not {other:?}"),
    }
    match &r[1] {
        Ok(a) => assert!(
            matches!(&a.fresh[..], [RowNow::Endpoint(id, None)] if *id == gone),
            "{a:?}"
        ),
        Err(e) => assert!(matches!(e, StoreError::NotFound(_)), "{e:?}"),
    }
}

/// A batch whose events the server refuses (here a trigger refuses one detail) fails
/// alone: the commit is redone batch by batch, and then without it, and the batches
/// around it are written with their events.
#[test]
fn a_batch_whose_events_are_refused_fails_alone() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let mut s = store(&url);
    let db = url.rsplit('/').next().unwrap().to_string();
    pg.sql(
        &db,
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF NEW.detail = 'refuse me' THEN RAISE EXCEPTION 'refused by the test'; END IF; \
           RETURN NEW; END $$; \
         CREATE TRIGGER refuse BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse()",
    );
    let ids = add(&mut s, 82, 3);
    let refused = NewEvent {
        endpoint: Some(ids[1]),
        detail: Some("refuse me".into()),
        ..NewEvent::new(EventKind::StateChanged)
    };
    let r = s
        .write_groups(&[
            vec![cooled(ids[0])],
            vec![
                moved(ids[1], State::Available, State::Cooling, None),
                Write::Event(refused),
            ],
            vec![cooled(ids[2])],
        ])
        .unwrap();
    assert!(r[0].is_ok() && r[2].is_ok(), "{r:?}");
    let e = r[1].as_ref().unwrap_err().to_string();
    assert!(e.contains("refused by the test"), "{e}");
    assert_eq!(changed(&s), [ids[0], ids[2]]);
    let states: Vec<State> = ids
        .iter()
        .map(|&id| s.get(id).unwrap().unwrap().state)
        .collect();
    assert_eq!(states, [State::Cooling, State::Available, State::Cooling]);
}

/// A commit of transitions and events alone is one call of the database's function, and
/// judges each write as the statements do: a transition another daemon made first comes
/// back as its row, and the events are written in the commit's order, a transition's only
/// when it applied. A trial's result under a stale claim refuses its own batch and no
/// other (the commit is then redone batch by batch).
#[test]
fn a_commit_of_transitions_and_events_is_judged_write_by_write() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    pg.sql(
        &db,
        &format!("ALTER DATABASE {db} SET track_functions = 'pl'"),
    );
    let (mut one, mut two) = (store(&url), store(&url));
    let ids = add(&mut one, 83, 6);
    let [a, b, c, d, e, f] = ids[..] else {
        unreachable!()
    };
    two.write(&[cooled(b)]).unwrap();
    let report = |id: i64, detail: &str| {
        Write::EventStatus(
            NewEvent {
                endpoint: Some(id),
                detail: Some(detail.into()),
                ..NewEvent::new(EventKind::Report)
            },
            Some(503),
        )
    };
    let r = one
        .write_groups(&[
            vec![cooled(e), report(e, "first"), cooled(a)],
            vec![cooled(b), report(b, "second")],
            vec![cooled(c)],
        ])
        .unwrap();
    assert!(r.iter().all(Result::is_ok), "{r:?}");
    assert_eq!(
        (
            r[0].as_ref().unwrap().fresh.len(),
            r[2].as_ref().unwrap().fresh.len()
        ),
        (0, 0)
    );
    match &r[1].as_ref().unwrap().fresh[..] {
        [RowNow::Endpoint(id, Some(row))] => assert_eq!((*id, row.state), (b, State::Cooling)),
        other => panic!("b's row as it is, not {other:?}"),
    }
    assert_eq!(changed(&one), [a, b, c, e]);
    // This commit's events, in its order: e's transition and report, a's, b's report
    // (its transition was another daemon's), c's.
    let all = one
        .events_matching(&EventFilter::default(), 0, 1000)
        .unwrap();
    let last: Vec<_> = all
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(|ev| {
            (
                ev.endpoint,
                ev.kind.as_str(),
                ev.detail.as_deref(),
                ev.status,
            )
        })
        .collect();
    assert_eq!(
        last,
        [
            (Some(e), "state_changed", None, None),
            (Some(e), "report", Some("first"), Some(503)),
            (Some(a), "state_changed", None, None),
            (Some(b), "report", Some("second"), Some(503)),
            (Some(c), "state_changed", None, None),
        ]
    );
    // It was the function's call (the server counts calls once the session reports them).
    let calls = || {
        pg.sql(
            &db,
            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_user_functions \
             WHERE funcname = 'proxypool_commit'",
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while calls() == "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "proxypool_commit never called"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A trial decided under a claim that is no longer the slot's.
    let late = stale_trial(&mut one, d);
    let r = one
        .write_groups(&[vec![late, report(d, "refused")], vec![cooled(f)]])
        .unwrap();
    assert!(matches!(r[0], Err(StoreError::StaleClaim { .. })), "{r:?}");
    assert!(r[1].is_ok(), "{r:?}");
    assert_eq!(one.get(d).unwrap().unwrap().state, State::ProbeAllowed);
    assert_eq!(changed(&one), [a, b, c, d, e, f], "d only to probe_allowed");
    let refused = one
        .events_matching(&EventFilter::default(), 0, 1000)
        .unwrap()
        .iter()
        .filter(|ev| ev.detail.as_deref() == Some("refused"))
        .count();
    assert_eq!(refused, 0, "the refused batch's report is not written");
}

/// A database whose `proxypool_commit` is gone (dropped, or a role that may not run it)
/// still gets every commit, sent as statements, and the log says so once.
#[test]
fn a_database_without_the_commit_function_gets_its_commits_as_statements() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    let h = home(&url, LONG_COOLDOWN);
    let ids = h.add(&["http://10.84.0.1:3128", "http://10.84.0.2:3128"]);
    pg.sql(&db, "DROP FUNCTION proxypool_commit");
    let d = h.serve();
    cool_two(&d);
    let lines = d
        .log_text()
        .matches("will not run proxypool_commit")
        .count();
    assert_eq!(lines, 1, "{}", d.log_tail(10));
    assert_cooled_in(pg, &db, &ids);
}

/// A removal of several endpoints beside other writes of the same commit: every row it
/// takes, its endpoints' pairs too, is locked in the order every daemon locks rows, ahead
/// of the statements; the removal and the writes around it all apply.
#[test]
fn a_removal_of_several_endpoints_commits_with_the_writes_beside_it() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let mut s = store(&url);
    let ids = add(&mut s, 83, 3);
    let [x, y, z] = ids[..] else { unreachable!() };
    s.write_groups(&[
        vec![pair_cooled(x, State::Available)],
        vec![pair_cooled(y, State::Available)],
    ])
    .unwrap();
    let r = s
        .write_groups(&[
            vec![Write::Remove(vec![z, x])],
            vec![cooled(y), pair_cooled(y, State::Cooling)],
        ])
        .unwrap();
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    assert!(s.get(x).unwrap().is_none() && s.get(z).unwrap().is_none());
    assert_eq!(s.get(y).unwrap().unwrap().state, State::Cooling);
    let pairs: Vec<i64> = s
        .pairs()
        .unwrap()
        .iter()
        .map(|p| p.record.endpoint)
        .collect();
    assert_eq!(pairs, [y], "x's pair went with it");
}

/// Two daemons writing the same rows at once, one of them batch by batch (every commit has
/// a batch that must not apply: a removal of an endpoint that is not there) with its
/// batches in the reverse of the rows' order, the other in one go: neither ever waits
/// for the other in a cycle, so PostgreSQL never has to break a deadlock.
#[test]
fn batch_by_batch_and_at_once_on_the_same_rows_never_deadlock() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let mut s = store(&url);
    let ids = add(&mut s, 84, 4);
    // A write that always applies, so that it always locks its row.
    let touch = |id: i64| moved(id, State::Available, State::Available, None);
    let run = |slow: bool| {
        let (url, ids) = (url.clone(), ids.clone());
        std::thread::spawn(move || {
            let mut s = store(&url);
            let mut errors = Vec::new();
            for round in 0..60 {
                let mut groups: Vec<Vec<Write>> =
                    ids.iter().rev().map(|&id| vec![touch(id)]).collect();
                if slow {
                    groups.insert(0, vec![Write::Remove(vec![9_000_000 + round])]);
                }
                match s.write_groups(&groups) {
                    Ok(r) => errors.extend(
                        r.into_iter()
                            .skip(usize::from(slow))
                            .filter_map(|r| r.err().map(|e| e.to_string())),
                    ),
                    Err(e) => errors.push(e.to_string()),
                }
            }
            errors
        })
    };
    let (a, b, c) = (run(true), run(false), run(true));
    for t in [a, b, c] {
        let errors = t.join().unwrap();
        assert!(errors.is_empty(), "{errors:?}");
    }
}
