//! The store against both backends: one scenario of every store operation run on a real
//! SQLite file and on a real PostgreSQL (a private cluster, tests/common/postgres.rs);
//! the two schemas kept in step; the migration run by several processes at once; the
//! password kept out of what the store says.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use proxypool::endpoint::ProxyUrl;
use proxypool::event_kind::EventKind;
use proxypool::health::{Phase, Reason, State};
use proxypool::store::pairs::PairWrite;
use proxypool::store::{
    EventFilter, HealthRecord, Location, NewEndpoint, NewEvent, OnExisting, OpenOptions, RowNow,
    Store, StoreError, StoredHealth, Write,
};

use common::postgres::{self, PASSWORD};

fn ep(url: &str, pool: &str) -> NewEndpoint {
    NewEndpoint {
        url: ProxyUrl::parse(url).unwrap(),
        pool: pool.into(),
        label: Some("l".into()),
        source: Some("cli".into()),
        state: State::Available,
        tags: proxypool::tags::Tags::parse_args(&["country=us"]).unwrap(),
    }
}

fn cooled(id: i64, left: Duration) -> Write {
    Write::Transition(
        HealthRecord {
            id,
            from: State::Available,
            trial: None,
            health: StoredHealth {
                state: State::Cooling,
                reason: Some(Reason::ConnectRefused),
                phase: Some(Phase::Connect),
                detail: Some("refused".into()),
                streak: 1,
                reason_streak: 1,
                cooldown_ms: Some(left.as_millis() as u64),
                cooldown_left: Some(left),
            },
        },
        NewEvent {
            endpoint: Some(id),
            from: Some(State::Available),
            to: Some(State::Cooling),
            reason: Some(Reason::ConnectRefused),
            phase: Some(Phase::Connect),
            ..NewEvent::new(EventKind::StateChanged)
        },
    )
}

fn pair(endpoint: i64, dest: &str) -> PairWrite {
    common::writes::pair_cooled(endpoint, dest, State::Available)
}

/// Every operation the daemon and the CLI use, with what each must answer.
fn scenario(s: &mut Store) {
    // Add: consecutive ids, all or nothing.
    let ids = s
        .add_endpoints(&[
            ep("http://u:pw@10.0.0.1:3128", "default"),
            ep("socks5://10.0.0.2:1080", "default"),
            ep("socks5h://10.0.0.3:1080", "other"),
        ])
        .unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!((ids[1] - ids[0], ids[2] - ids[1]), (1, 1));
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    let dup = s
        .add_endpoints(&[
            ep("http://10.0.0.9:1", "default"),
            ep("http://u:pw@10.0.0.1:3128", "default"),
        ])
        .unwrap_err();
    assert!(matches!(dup, StoreError::Duplicate { .. }), "{dup}");
    assert!(!dup.to_string().contains("pw@"), "{dup}");
    assert_eq!(s.list(None, None).unwrap().len(), 3, "all or nothing");
    let twice = s
        .add_endpoints(&[
            ep("http://10.0.0.8:1", "default"),
            ep("http://10.0.0.8:1", "default"),
        ])
        .unwrap_err();
    assert!(
        matches!(twice, StoreError::DuplicateInBatch { .. }),
        "{twice}"
    );

    // Config sync: existing rows keep their id.
    let ensured = s
        .ensure_endpoints(&[
            ep("socks5://10.0.0.2:1080", "default"),
            ep("http://10.0.0.4:8080", "default"),
        ])
        .unwrap();
    assert_eq!(ensured[0], (b, false));
    assert!(ensured[1].1);
    let d = ensured[1].0;

    // Reads.
    let row = s.get(a).unwrap().unwrap();
    assert_eq!(row.url.password.as_deref(), Some("pw"));
    assert_eq!(
        (row.state, row.label.as_deref()),
        (State::Available, Some("l"))
    );
    assert_eq!(s.resolve("http://u:pw@10.0.0.1:3128", None).unwrap().id, a);
    assert_eq!(s.resolve(&c.to_string(), Some("other")).unwrap().id, c);
    assert!(s.resolve("99999", None).unwrap_err().is_input());
    assert!(s
        .resolve(&c.to_string(), Some("default"))
        .unwrap_err()
        .is_input());
    assert_eq!(
        s.list(Some("default"), None)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>(),
        [a, b, d]
    );

    // A transition with its event: the deadline is the store's own clock + what was left.
    // Bounded by the time the write and the read took, however long that was (plus the
    // millisecond the deadline is stored in).
    let before = SystemTime::now();
    s.write(&[cooled(a, Duration::from_secs(60))]).unwrap();
    let row = s.get(a).unwrap().unwrap();
    let took = before.elapsed().unwrap() + Duration::from_millis(2);
    assert_eq!(row.state, State::Cooling);
    assert_eq!(
        (row.reason, row.phase),
        (Some(Reason::ConnectRefused), Some(Phase::Connect))
    );
    let left = row.cooldown_left.unwrap();
    assert!(
        left <= Duration::from_secs(60) && left + took >= Duration::from_secs(60),
        "{left:?} left, {took:?} after the write"
    );
    let until = row.cooldown_until.unwrap();
    let earliest = before + Duration::from_secs(60) - Duration::from_millis(2);
    assert!(
        until >= earliest && until <= earliest + took + Duration::from_millis(2),
        "{until:?} not within {took:?} of {earliest:?}"
    );
    assert_eq!(s.list(None, Some(State::Cooling)).unwrap().len(), 1);

    // Group commit: a failing batch fails alone.
    let r = s
        .write_groups(&[
            vec![cooled(b, Duration::from_secs(30))],
            vec![cooled(424_242, Duration::from_secs(1))],
        ])
        .unwrap();
    assert!(r[0].is_ok());
    match &r[1] {
        // One daemon: a row that is not there is an error of that batch alone.
        Err(e) => assert!(!s.shared(), "{e}"),
        // A fleet: another daemon may have removed it; the write did not happen and
        // memory learns the row is gone.
        Ok(applied) => assert_eq!(
            (s.shared(), applied.fresh.as_slice()),
            (true, [RowNow::Endpoint(424_242, None)].as_slice())
        ),
    }
    assert_eq!(s.get(b).unwrap().unwrap().state, State::Cooling);

    // Pairs.
    s.write_pairs(&[
        pair(a, "shop.example"),
        pair(c, "shop.example"),
        pair(a, "news.example"),
    ])
    .unwrap();
    assert_eq!(s.pairs().unwrap().len(), 3);
    assert_eq!(s.pairs_of(a).unwrap().len(), 2);
    assert_eq!(s.pairs_for("shop.example").unwrap().len(), 2);
    let p = &s.pairs_of(c).unwrap()[0];
    assert_eq!((p.pool.as_str(), p.record.status), ("other", Some(403)));
    // Rows by key: those stored, none for a pair that has no row.
    let at = s
        .pairs_at(&[
            (c, "shop.example".into()),
            (c, "news.example".into()),
            (a, "news.example".into()),
        ])
        .unwrap();
    let keys: Vec<_> = at
        .iter()
        .map(|p| (p.record.endpoint, p.record.destination.as_str()))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.contains(&(c, "shop.example")) && keys.contains(&(a, "news.example")));
    assert!(s.pairs_at(&[]).unwrap().is_empty());
    s.write_pairs(&[PairWrite::Delete {
        endpoint: a,
        destination: "news.example".into(),
        from: State::Cooling,
        trial: None,
        event: NewEvent {
            endpoint: Some(a),
            from: Some(State::Cooling),
            to: Some(State::Available),
            ..NewEvent::new(EventKind::StateChanged)
        },
    }])
    .unwrap();
    assert_eq!(s.pairs_of(a).unwrap().len(), 1);

    // Edit keeps the id and the history; the event never shows the password.
    let new = ProxyUrl::parse("http://u:rotated@10.0.0.1:3128").unwrap();
    let tier = [("tier".to_string(), "dc".to_string())]
        .into_iter()
        .collect();
    let edited = s.edit_endpoint(a, Some(&new), Some(None), &tier).unwrap();
    assert_eq!((edited.id, edited.label), (a, None));
    assert_eq!(edited.tags.to_string(), "country=us,tier=dc");
    assert_eq!(s.get(a).unwrap().unwrap().tags, edited.tags);
    assert_eq!(s.get(b).unwrap().unwrap().tags.to_string(), "country=us");
    assert_eq!(
        s.get(a).unwrap().unwrap().url.password.as_deref(),
        Some("rotated")
    );
    // An edit onto another endpoint's identity is refused, and changes nothing.
    let taken = s.get(b).unwrap().unwrap().url;
    let clash = s
        .edit_endpoint(a, Some(&taken), None, &Default::default())
        .unwrap_err();
    assert!(
        matches!(clash, StoreError::Duplicate { id, .. } if id == b),
        "{clash}"
    );
    assert_eq!(s.get(a).unwrap().unwrap().url, edited.url);

    // Events: in order, filtered, and never a password.
    let all = s.events(None, 0, 1000).unwrap();
    assert!(all.windows(2).all(|w| w[0].id < w[1].id));
    let kinds: Vec<&str> = all.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "added").count(),
        4,
        "{kinds:?}"
    );
    assert!(kinds.contains(&"edited"));
    for e in &all {
        let text = format!("{e:?}");
        assert!(
            !text.contains("rotated") && !text.contains(":pw@"),
            "{text}"
        );
    }
    let of_a = s.events(Some(a), 0, 1000).unwrap();
    assert!(of_a.iter().all(|e| e.endpoint == Some(a)));
    let changed = s
        .events_matching(
            &EventFilter {
                endpoint: None,
                kinds: vec!["state_changed".into()],
                since: None,
            },
            0,
            100,
        )
        .unwrap();
    assert!(changed
        .iter()
        .any(|e| e.destination.as_deref() == Some("shop.example")));
    assert!(changed
        .iter()
        .any(|e| e.destination.is_none() && e.endpoint == Some(a)));
    let last = s.last_events_matching(&EventFilter::default(), 2).unwrap();
    assert_eq!(last.len(), 2);
    assert_eq!(last[1].id, all.last().unwrap().id);
    let recent = s.recent_events(Some(a), 1).unwrap();
    assert_eq!(recent[0].kind, "edited");
    assert!(!s
        .transition_times(SystemTime::now() - Duration::from_secs(60), 100)
        .unwrap()
        .is_empty());
    assert_eq!(
        s.page_rows("default", 10).unwrap()[0].state,
        State::Cooling,
        "attention first"
    );
    assert_eq!(s.rows_between(a, b, 10).unwrap().len(), 2);

    // Remove: its pairs go with it, a `removed` event stays.
    s.remove(&[c]).unwrap();
    assert!(s.get(c).unwrap().is_none());
    assert_eq!(s.pairs_for("shop.example").unwrap().len(), 1);
    assert_eq!(
        s.events(Some(c), 0, 100).unwrap().last().unwrap().kind,
        "removed"
    );

    // Retention: old events go in batches, rows never.
    let n = s.events(None, 0, 10_000).unwrap().len();
    assert_eq!(
        s.prune_events(SystemTime::now() - Duration::from_secs(3600), 100)
            .unwrap(),
        0
    );
    let pruned = s
        .prune_events(SystemTime::now() + Duration::from_secs(1), 3)
        .unwrap();
    assert_eq!(pruned, 3);
    assert_eq!(s.events(None, 0, 10_000).unwrap().len(), n - 3);
    assert_eq!(s.list(None, None).unwrap().len(), 3);
    // `--skip-existing`: what is stored, and a repeat within the import, are passed over.
    s.add_endpoints(&[ep("http://10.0.0.70:1", "skip")])
        .unwrap();
    let mut added = Vec::new();
    let skipped = s
        .add_endpoints_from(
            [
                ep("http://10.0.0.70:1", "skip"),
                ep("http://10.0.0.71:1", "skip"),
                ep("http://10.0.0.71:1", "skip"),
            ]
            .iter()
            .map(Ok::<_, StoreError>),
            OnExisting::Skip,
            |id| added.push(id),
        )
        .unwrap();
    assert_eq!((skipped, added.len()), (2, 1));
    assert_eq!(s.list(Some("skip"), None).unwrap().len(), 2);
}

#[test]
fn every_store_operation_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Store::open(&dir.path().join("s.db")).unwrap();
    scenario(&mut s);
}

/// SQLite applies groups without savepoints and redoes the batch group by group when one
/// fails: a group that fails after writing a row must leave nothing, and the groups on
/// either side of it are committed as if it had never come.
#[test]
fn a_group_that_fails_part_way_leaves_nothing_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let mut s = Store::open(&path).unwrap();
    let ids = s
        .add_endpoints(&[
            ep("http://10.0.0.1:1", "default"),
            ep("http://10.0.0.2:1", "default"),
            ep("http://10.0.0.3:1", "default"),
            ep("http://10.0.0.4:1", "default"),
        ])
        .unwrap();
    let [a, b, c, d] = ids[..] else {
        panic!("{ids:?}")
    };
    let left = Duration::from_secs(60);
    let missing = 424_242;
    let r = s
        .write_groups(&[
            vec![cooled(a, left)],
            vec![cooled(b, left), cooled(missing, left)],
            vec![cooled(c, left)],
            vec![cooled(missing, left)],
            vec![cooled(d, left)],
        ])
        .unwrap();
    let ok: Vec<bool> = r.iter().map(Result::is_ok).collect();
    assert_eq!(ok, [true, false, true, false, true]);
    assert!(matches!(r[1], Err(StoreError::NotFound(_))), "{:?}", r[1]);
    drop(s);
    // What was committed, read back after a reopen.
    let s = Store::open(&path).unwrap();
    let state = |id| s.get(id).unwrap().unwrap().state;
    assert_eq!(
        [state(a), state(b), state(c), state(d)],
        [
            State::Cooling,
            State::Available,
            State::Cooling,
            State::Cooling
        ]
    );
    let changed: Vec<_> = s
        .events(None, 0, 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "state_changed")
        .map(|e| e.endpoint)
        .collect();
    assert_eq!(changed, [Some(a), Some(c), Some(d)]);
}

fn pg_store(url: &str) -> Store {
    let at = Location::parse(std::path::Path::new(url)).unwrap();
    Store::open_at(&at, OpenOptions::default()).unwrap()
}

#[test]
fn every_store_operation_on_postgres() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let mut s = pg_store(&url);
    assert!(s.shared());
    scenario(&mut s);
    // Reopening finds it all (a restart).
    drop(s);
    let s = pg_store(&url);
    assert_eq!(
        s.list(None, None).unwrap().len(),
        5,
        "three, and the skip import's two"
    );
}

/// The store thread's store drives its own connections, and nothing reads their sockets
/// between its calls: a restart of the server meanwhile must not fail the next call.
#[test]
fn a_store_for_one_thread_outlives_a_restart_of_postgres() {
    // A cluster of its own: this test stops it.
    let Some(pg) = postgres::Cluster::start() else {
        return;
    };
    let url = pg.database();
    let mut s = pg_store(&url).for_one_thread().unwrap();
    let ids = s
        .add_endpoints(&[
            ep("http://10.0.0.1:1", "default"),
            ep("http://10.0.0.2:1", "default"),
        ])
        .unwrap();
    s.write(&[cooled(ids[0], Duration::from_secs(60))]).unwrap();
    for round in 0..2 {
        pg.stop_server();
        pg.start_server();
        // The first call after each restart, read then write.
        assert_eq!(s.list(None, None).unwrap().len(), 2, "round {round}");
        let r = s.write_groups(&[vec![cooled(ids[1], Duration::from_secs(60))]]);
        assert!(r.unwrap()[0].is_ok(), "round {round}");
    }
    let s = pg_store(&url);
    assert_eq!(s.get(ids[1]).unwrap().unwrap().state, State::Cooling);
}

#[test]
fn the_schema_is_the_same_in_both_dialects() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let s = pg_store(&url);
    let version = s.schema_version().unwrap();
    drop(s);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let lite = Store::open(&path).unwrap();
    assert_eq!(
        lite.schema_version().unwrap(),
        version,
        "same number of migrations"
    );
    drop(lite);

    // SQLite: table -> (column -> not null).
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut want: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // Less what only SQLite's chain of each endpoint's events needs (PostgreSQL keeps its
    // index on events (endpoint, id) instead).
    let chain_only = ["removed_endpoints"];
    let chain_cols = ["prev", "last_event"];
    for t in tables
        .into_iter()
        .filter(|t| !chain_only.contains(&t.as_str()))
    {
        let cols = conn
            .prepare(&format!("PRAGMA table_info({t})"))
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(3)? == 1 || r.get::<_, i64>(5)? > 0,
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .filter(|(c, _): &(String, bool)| !chain_cols.contains(&c.as_str()))
            .collect();
        want.insert(t, cols);
    }
    // PostgreSQL, less what only a fleet needs.
    let fleet_only = [
        "fleet_sequence",
        "fleet_changes",
        "fleet_removals",
        "fleet_daemons",
        "fleet_jobs",
        "proxypool_schema",
    ];
    let fleet_cols = ["rev", "prev_rev", "claim_epoch", "claim_until", "xid"];
    let db = url.rsplit('/').next().unwrap();
    let out = pg.sql(
        db,
        "SELECT table_name, column_name, is_nullable FROM information_schema.columns \
         WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
    );
    let mut got: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if fleet_only.contains(&f[0]) || fleet_cols.contains(&f[1]) {
            continue;
        }
        got.entry(f[0].into())
            .or_default()
            .insert(f[1].into(), f[2] == "NO");
    }
    assert_eq!(
        got, want,
        "tables, columns and NOT NULL differ between the dialects"
    );

    // The constraints mean the same: the same bad rows are refused by both.
    let bad = [
        "INSERT INTO endpoints (id, pool, scheme, host, port, state, state_changed_at, created_at) \
         VALUES (2, 'p', 'http', 'h2', 1, 'sleeping', 'x', 'x')",
        "INSERT INTO destination_pairs (endpoint, destination, state, state_changed_at) \
         VALUES (1, 'x', 'available', 'x')",
    ];
    let ok = "INSERT INTO endpoints (id, pool, scheme, host, port, state, state_changed_at, created_at) \
              VALUES (1, 'p', 'http', 'h', 1, 'available', 'x', 'x')";
    let for_pg = |sql: &str| {
        sql.replace("'x', 'x')", "now(), now())")
            .replace("'x')", "now())")
    };
    conn.execute(ok, []).unwrap();
    pg.sql(db, &for_pg(ok));
    for sql in bad {
        let e = conn.execute(sql, []).expect_err(sql).to_string();
        assert!(e.contains("CHECK"), "SQLite: {sql}: {e}");
        let out = pg.psql(db, &for_pg(sql));
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains("check constraint"), "PostgreSQL: {sql}: {e}");
    }
}

#[test]
fn several_processes_migrating_at_once_migrate_once() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let bin = env!("CARGO_BIN_EXE_proxypool");
    let kids: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(bin)
                .args(["migrate", "--db", &url])
                .env_remove("PROXYPOOL_CONFIG")
                .env("XDG_CONFIG_HOME", "/nonexistent")
                .output_async()
        })
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains(PASSWORD), "{text}");
    }
    let db = url.rsplit('/').next().unwrap();
    let n: usize = pg
        .sql(db, "SELECT count(*) FROM proxypool_schema")
        .parse()
        .unwrap();
    assert_eq!(n, proxypool::store::postgres::migrations().len());
    assert_eq!(pg.sql(db, "SELECT count(*) FROM fleet_sequence"), "1");
}

#[test]
fn the_password_is_never_in_what_the_store_says() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let s = pg_store(&url);
    assert!(!s.describe().contains(PASSWORD), "{}", s.describe());
    assert!(s.describe().contains("127.0.0.1"));
    drop(s);
    // A wrong password: the error names the database, not the password tried.
    let wrong = url.replace(PASSWORD, "Not-The-Password-99");
    let at = Location::parse(std::path::Path::new(&wrong)).unwrap();
    let err = Store::open_at(&at, OpenOptions::default())
        .err()
        .expect("refused");
    let text = format!("{err} {err:?}");
    assert!(!text.contains("Not-The-Password-99"), "{text}");
    assert!(text.contains("127.0.0.1"), "{text}");
}

trait OutputAsync {
    fn output_async(&mut self) -> std::process::Child;
}

impl OutputAsync for std::process::Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}
