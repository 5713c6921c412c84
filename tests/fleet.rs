//! Several daemons serving one pool in PostgreSQL (docs/fleet.md), end to end: the real
//! binary, a private PostgreSQL cluster (tests/common/postgres.rs), three daemons on one
//! database, each with its own socket.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{err_code, Daemon, Home};
use common::eventually;
use common::postgres::{self, PASSWORD};

/// Static, no probes, a 3 s cooldown (no jitter, no growth): long enough to see it
/// everywhere, short enough to wait out.
const CONFIG: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "3s"
factor = 1.0
max = "3s"
jitter = 0.0
"#;

/// How long the others may take to apply a change (docs/fleet.md, "Propagation"): 1 s,
/// plus room for a loaded test machine. The benchmark measures the real figure.
const PROPAGATION: Duration = Duration::from_secs(3);

/// A home of its own (socket, XDG dirs) whose store is the database `url`.
fn home(url: &str) -> Home {
    let mut h = Home::new(Some(CONFIG));
    h.db = PathBuf::from(url);
    h
}

fn lease(d: &Daemon) -> Value {
    d.req(json!({"op": "lease", "pool": "default", "ttl": "30s"}))
}

fn fail(d: &Daemon, lease: &str) -> Value {
    d.req(json!({"op": "report", "lease": lease, "outcome": "failure", "reason": "connect_refused", "phase": "connect"}))
}

fn count(d: &Daemon, state: &str) -> u64 {
    d.status()[state].as_u64().unwrap()
}

/// Wait until `d` shows `n` endpoints in `state`.
fn sees(d: &Daemon, state: &str, n: u64) {
    eventually(PROPAGATION, &format!("{n} {state} on a daemon"), || {
        let s = d.status();
        if s[state] == json!(n) {
            Ok(())
        } else {
            Err(s.to_string())
        }
    });
}

#[test]
fn operator_commands_act_on_the_database_with_no_daemon() {
    let Some(pg) = postgres::shared() else { return };
    let h = home(&pg.database());
    let ids = h.add(&["http://u:s3cret@10.1.0.1:3128", "socks5://10.1.0.2:1080"]);
    assert_eq!(ids.len(), 2);
    let list = h.list();
    assert_eq!(list.len(), 2);
    assert!(!h.ok(&["list"]).contains("s3cret"));
    h.ok(&["disable", &ids[0].to_string(), "--reason", "maintenance"]);
    assert_eq!(h.listed(ids[0])["state"], "disabled");
    h.ok(&["enable", "--now", &ids[0].to_string()]);
    assert_eq!(h.listed(ids[0])["state"], "available");
    h.ok(&["edit", &ids[1].to_string(), "--label", "second"]);
    assert_eq!(h.listed(ids[1])["label"], "second");
    let show = h.ok(&["show", &ids[0].to_string()]);
    assert!(show.contains("10.1.0.1"), "{show}");
    h.ok(&["remove", &ids[1].to_string()]);
    assert_eq!(h.list().len(), 1);
    let kinds: Vec<String> = h
        .events()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    for k in ["added", "state_changed", "edited", "removed"] {
        assert!(kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
    let status = h.ok(&["status"]);
    assert!(status.contains("default"), "{status}");
    let migrate = h.ok(&["migrate"]);
    assert!(migrate.contains("127.0.0.1"), "{migrate}");
    for out in [status, migrate, h.ok(&["events"])] {
        assert!(!out.contains(PASSWORD) && !out.contains("s3cret"), "{out}");
    }
}

#[test]
fn a_bad_store_url_is_refused_with_exit_2_and_no_password() {
    let h = Home::new(None);
    let (_, err) = h.fails(
        2,
        &[
            "list",
            "--db",
            "postgresql://u:Leaky-99@db.invalid/x?sslmode=bogus",
        ],
    );
    assert!(err.contains("sslmode"), "{err}");
    assert!(!err.contains("Leaky-99"), "{err}");
    let cfg = Home::new(Some("[store]\nurl = \"mysql://x\"\n"));
    let (_, err) = cfg.fails(2, &["list"]);
    assert!(err.contains("store.url"), "{err}");
}

#[test]
fn a_failure_on_one_daemon_is_honoured_by_the_others_and_a_cli_act_reaches_all() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let homes: Vec<Home> = (0..3).map(|_| home(&url)).collect();
    let ids = homes[0].add(&["http://10.2.0.1:3128", "http://10.2.0.2:3128"]);
    let ds: Vec<Daemon> = homes.iter().map(|h| h.serve()).collect();
    for d in &ds {
        sees(d, "available", 2);
    }

    // A failure reported to daemon 0 cools the endpoint on 1 and 2.
    let g = lease(&ds[0]);
    assert_eq!(g["ok"], json!(true), "{g}");
    let bad = g["endpoint"].as_i64().unwrap();
    let r = fail(&ds[0], g["lease"].as_str().unwrap());
    assert_eq!(r["state"], "cooling", "{r}");
    for d in &ds[1..] {
        sees(d, "cooling", 1);
        // And they lease only the other one meanwhile.
        for _ in 0..4 {
            let g = lease(d);
            assert_ne!(g["endpoint"].as_i64(), Some(bad), "{g}");
            d.req(json!({"op": "release", "lease": g["lease"]}));
        }
    }

    // A CLI act with no daemon in between: the database, then every daemon.
    let other = if bad == ids[0] { ids[1] } else { ids[0] };
    homes[2].ok(&["disable", &other.to_string()]);
    for d in &ds {
        sees(d, "disabled", 1);
    }
    // A new endpoint added by the CLI is leased by every daemon.
    homes[1].add(&["http://10.2.0.3:3128"]);
    for d in &ds {
        sees(d, "available", 1);
    }
}

#[test]
fn a_stampede_of_500_over_three_daemons_at_the_end_of_a_cooldown_admits_one_trial() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let homes: Vec<Home> = (0..3).map(|_| home(&url)).collect();
    let id = homes[0].add(&["http://10.3.0.1:3128"])[0];
    let ds: Vec<Daemon> = homes.iter().map(|h| h.serve()).collect();
    let g = lease(&ds[0]);
    fail(&ds[0], g["lease"].as_str().unwrap());
    for d in &ds {
        sees(d, "cooling", 1);
    }
    // Every connection is open and waiting before the cooldown ends.
    let sockets: Vec<PathBuf> = ds.iter().map(|d| d.socket.clone()).collect();
    let barrier = Arc::new(Barrier::new(500));
    let until = Instant::now() + Duration::from_secs(3);
    let threads: Vec<_> = (0..500)
        .map(|i| {
            let (sock, barrier) = (sockets[i % 3].clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut c = common::daemon::Conn::connect(&sock);
                barrier.wait();
                // Ask until the trial went to someone (or a few seconds after the end).
                loop {
                    let r = c.req(&json!({"op": "lease", "pool": "default", "ttl": "30s"}));
                    if r["ok"] == json!(true) {
                        return Some(r);
                    }
                    assert_eq!(err_code(&r), "pool_exhausted", "{r}");
                    if Instant::now() > until + Duration::from_secs(4) {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let grants: Vec<Value> = threads
        .into_iter()
        .filter_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(grants.len(), 1, "exactly one trial: {grants:?}");
    assert_eq!(grants[0]["trial"], json!(true));
    assert_eq!(grants[0]["endpoint"], json!(id));
    let admitted = homes[0].events_with(&["--kind", "trial_admitted"]).len();
    assert_eq!(admitted, 1, "one trial_admitted in the database");
    let _ = count(&ds[0], "probe_allowed");
}

#[test]
fn a_sqlite_pool_moves_whole_into_postgres() {
    let Some(pg) = postgres::shared() else { return };
    let lite = Home::new(Some(CONFIG));
    let ids = lite.add(&[
        "http://u:pw@10.4.0.1:3128",
        "socks5://10.4.0.2:1080",
        "http://10.4.0.3:3128",
    ]);
    lite.ok(&["disable", &ids[2].to_string(), "--reason", "gone"]);
    {
        // A cooldown and a pair, through a daemon.
        let d = lite.serve();
        let g = d.req(
            json!({"op": "lease", "pool": "default", "ttl": "30s", "destination": "shop.example"}),
        );
        let r = d.req(json!({"op": "report", "lease": g["lease"], "outcome": "failure", "reason": "destination_status", "phase": "response_head", "status": 403}));
        assert_eq!(r["ok"], json!(true), "{r}");
        let g = d.req(json!({"op": "lease", "pool": "default", "ttl": "30s"}));
        fail(&d, g["lease"].as_str().unwrap());
    }
    let before = lite.list_with(&["--show-secrets"]);
    let events_before = lite.events();
    let url = pg.database();
    let out = lite.ok(&["migrate", "--from", lite.db.to_str().unwrap(), "--to", &url]);
    assert!(!out.contains(PASSWORD), "{out}");
    let moved = home(&url);
    let after = moved.list_with(&["--show-secrets"]);
    let key = |v: &Value| {
        (
            v["id"].clone(),
            v["url"].clone(),
            v["state"].clone(),
            v["reason"].clone(),
            v["streak"].clone(),
            v["cooldown_ms"].clone(),
            v["cooldown_until"].clone(),
        )
    };
    assert_eq!(
        after.iter().map(key).collect::<Vec<_>>(),
        before.iter().map(key).collect::<Vec<_>>()
    );
    let ev = |v: &Vec<Value>| {
        v.iter()
            .map(|e| {
                (
                    e["id"].clone(),
                    e["kind"].clone(),
                    e["endpoint"].clone(),
                    e["at"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ev(&moved.events()), ev(&events_before));
    let pairs = moved.list_with(&["--destination", "shop.example"]);
    assert!(
        pairs.iter().any(|v| v.to_string().contains("cooling")),
        "{pairs:?}"
    );
    // A second move into the same schema changes nothing.
    let (_, err) = lite.fails(
        1,
        &["migrate", "--from", lite.db.to_str().unwrap(), "--to", &url],
    );
    assert!(err.contains("empty"), "{err}");
    assert_eq!(moved.list().len(), 3);
    // New ids continue after the moved ones.
    let next = moved.add(&["http://10.4.0.9:3128"])[0];
    assert!(next > *ids.iter().max().unwrap(), "{next}");
}
