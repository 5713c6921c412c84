//! Several daemons serving one pool in PostgreSQL (docs/fleet.md), end to end: the real
//! binary, a private PostgreSQL cluster (tests/common/postgres.rs), three daemons on one
//! database, each with its own socket.

mod common;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{err_code, Daemon, Home};
use common::postgres::{self, Session, PASSWORD};
use common::{eventually, holds_for};

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
    home_cooling(url, "3s")
}

/// `home` with cooldowns of `cooldown` (a humantime duration).
fn home_cooling(url: &str, cooldown: &str) -> Home {
    let mut h = Home::new(Some(&CONFIG.replace("\"3s\"", &format!("\"{cooldown}\""))));
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
    sees_within(d, state, n, PROPAGATION);
}

fn sees_within(d: &Daemon, state: &str, n: u64, budget: Duration) {
    eventually(budget, &format!("{n} {state} on a daemon"), || {
        let s = d.status();
        if s[state] == json!(n) {
            Ok(())
        } else {
            // Which daemon, and what it did: a fleet's failures are races, seldom rerun.
            Err(format!("{s}\nits log's last lines:\n{}", d.log_tail(20)))
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
    assert!(
        status.contains("database postgresql://proxypool@127.0.0.1:"),
        "{status}"
    );
    // Import streams a file in one transaction, all or nothing.
    let file = h.path("list.txt");
    std::fs::write(&file, "http://10.1.1.1:3128\nhttp://10.1.1.2:3128\n").unwrap();
    h.ok(&["import", file.to_str().unwrap()]);
    std::fs::write(&file, "http://10.1.1.3:3128\nnot a url\n").unwrap();
    h.fails(2, &["import", file.to_str().unwrap()]);
    assert_eq!(h.list().len(), 3);
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
    // A cooldown that outlasts what follows (two daemons seeing it, eight leases) on a
    // loaded machine: the endpoint must still be cooling when the last one looks.
    let config = CONFIG.replace("\"3s\"", "\"60s\"");
    let homes: Vec<Home> = (0..3)
        .map(|_| {
            let mut h = Home::new(Some(&config));
            h.db = PathBuf::from(&url);
            h
        })
        .collect();
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
    // Every daemon knows of the failure: the endpoint is cooling, or (on a loaded
    // machine, past the 3 s) already waiting for its trial; "cooling" alone could be
    // over before a daemon was asked.
    for d in &ds {
        sees(d, "available", 0);
    }
    // Every connection is open and waiting before the cooldown ends (when it has not).
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

/// `CONFIG` with claims that lapse 4 s after their daemon's last renewal.
/// With a cooldown of 6 s: longer than a loaded machine may take to show the cooling on
/// the other daemon, so that it is seen before the cooldown ends.
fn config_with_hold() -> String {
    let config = CONFIG.replace("\"3s\"", "\"6s\"");
    format!("[store]\nclaim_hold = \"4s\"\n{config}")
}

/// GET `path` from the HTTP listener on `port`: (status, body).
fn http(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

fn store_up(port: u16) -> String {
    let (_, m) = http(port, "/metrics");
    m.lines()
        .find(|l| l.starts_with("proxypool_store_up"))
        .unwrap_or("no proxypool_store_up")
        .to_string()
}

#[test]
fn a_stopped_daemon_loses_its_trial_by_database_time_and_its_late_report_is_stale() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let homes: Vec<Home> = (0..2)
        .map(|_| {
            let mut h = Home::new(Some(&config_with_hold()));
            h.db = PathBuf::from(&url);
            h
        })
        .collect();
    homes[0].add(&["http://10.5.0.1:3128"]);
    let mut ds: Vec<Daemon> = homes.iter().map(|h| h.serve()).collect();
    let g = lease(&ds[0]);
    let r = fail(&ds[0], g["lease"].as_str().unwrap());
    assert_eq!(r["state"], "cooling", "{r}");
    // This test is about claims, not propagation's speed (the test above and the fleet
    // bench hold that): it only needs daemon 1 to know of the cooldown before going on.
    // With the other fleet tests running beside it on 2 cores, daemon 1 once took more
    // than 3 s to show it (1 run in 11 under two CPU hogs; cause not found), so it gets
    // a longer budget here. A change that never arrives still fails.
    sees_within(&ds[1], "cooling", 1, Duration::from_secs(15));
    // After the cooldown, daemon 0 takes the trial with a long lease, then stalls.
    let trial = eventually(Duration::from_secs(15), "daemon 0 gets the trial", || {
        let g = d_lease(&ds[0], "120s");
        if g["ok"] == json!(true) {
            Ok(g)
        } else {
            Err(g.to_string())
        }
    });
    assert_eq!(trial["trial"], json!(true), "{trial}");
    let pid = ds[0].pid() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // Daemon 1 may not take it while the claim holds; it may once it lapsed (4 s after
    // its last renewal, by the database's clock).
    let g = d_lease(&ds[1], "30s");
    assert_eq!(err_code(&g), "pool_exhausted", "{g}");
    let second = eventually(
        Duration::from_secs(15),
        "the claim lapses; daemon 1 takes the trial",
        || {
            let g = d_lease(&ds[1], "30s");
            if g["ok"] == json!(true) {
                Ok(g)
            } else {
                Err(g.to_string())
            }
        },
    );
    assert_eq!(second["trial"], json!(true), "{second}");
    let r = ds[1].req(json!({"op": "report", "lease": second["lease"], "outcome": "success"}));
    assert_eq!(r["state"], "available", "{r}");
    // Daemon 0 wakes up and reports a failure on its old trial: it changes nothing.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let late = fail(&ds[0], trial["lease"].as_str().unwrap());
    assert_eq!(err_code(&late), "stale_claim", "{late}");
    for d in &ds {
        sees(d, "available", 1);
    }
    let admitted = homes[1].events_with(&["--kind", "trial_admitted"]).len();
    assert_eq!(admitted, 2);
    ds[0].kill9();
}

fn d_lease(d: &Daemon, ttl: &str) -> Value {
    d.req(json!({"op": "lease", "pool": "default", "ttl": ttl}))
}

#[test]
fn postgres_stopped_and_started_under_load() {
    // A cluster of its own: this test stops it.
    let Some(pg) = postgres::Cluster::start() else {
        return;
    };
    let url = pg.database();
    // Cooldowns of an hour: the other daemon, which lost the store too, reconnects on its
    // own backoff (up to 5 s) and must still find the cooldown written after the restart.
    let a = home_cooling(&url, "1h");
    let b = home_cooling(&url, "1h");
    a.add(&["http://10.6.0.1:3128", "http://10.6.0.2:3128"]);
    let port = common::tools::free_port();
    let da = a.serve_with(&["--http", &format!("127.0.0.1:{port}")], &[]);
    let db = b.serve();
    assert_eq!(http(port, "/healthz"), (200, "ok\n".to_string()));
    assert!(store_up(port).ends_with(" 1"), "{}", store_up(port));

    pg.stop_server();
    // The daemon notices (its follower's connection breaks): /healthz says so.
    eventually(
        Duration::from_secs(10),
        "/healthz says store_unavailable",
        || match http(port, "/healthz") {
            (503, body) if body.contains("store_unavailable") => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    // Leases go on from memory; a failure must write: it answers store_unavailable, and
    // its lease ends all the same (docs/fleet.md, "Faults"). Nothing reaches the database.
    let g = lease(&da);
    assert_eq!(g["ok"], json!(true), "{g}");
    let r = fail(&da, g["lease"].as_str().unwrap());
    assert_eq!(err_code(&r), "store_unavailable", "{r}");
    assert!(!r.to_string().contains(PASSWORD), "{r}");
    assert_eq!(da.status()["leases"], json!(0), "the lease ended");
    assert!(store_up(port).ends_with(" 0"), "{}", store_up(port));
    for _ in 0..5 {
        let g = lease(&da);
        assert_eq!(g["ok"], json!(true), "leases go on: {g}");
        da.req(json!({"op": "release", "lease": g["lease"]}));
    }
    assert!(!da.log_text().contains(PASSWORD));

    pg.start_server();
    eventually(
        Duration::from_secs(20),
        "/healthz is ok again",
        || match http(port, "/healthz") {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert!(store_up(port).ends_with(" 1"), "{}", store_up(port));
    // Writes go through again, and the other daemon (which lost the store too) catches up.
    let r = eventually(
        Duration::from_secs(10),
        "a failure is written again",
        || {
            let g = lease(&da);
            let r = fail(&da, g["lease"].as_str().unwrap());
            if r["ok"] == json!(true) {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        },
    );
    assert_eq!(r["state"], "cooling", "{r}");
    sees(&db, "cooling", 1);
}

#[test]
fn kill_9_of_every_daemon_under_load_loses_no_acknowledged_report() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let homes: Vec<Home> = (0..3).map(|_| home(&url)).collect();
    let urls: Vec<String> = (1..=60)
        .map(|i| format!("http://10.7.0.{i}:3128"))
        .collect();
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    homes[0].add(&refs);
    let mut ds: Vec<Daemon> = homes.iter().map(|h| h.serve()).collect();
    // Clients on every daemon fail what they lease and keep what was acknowledged.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let (sock, stop) = (ds[i % 3].socket.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut c) = common::daemon::Conn::try_connect(&sock) else {
                    return acked;
                };
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok(g) = c.try_req(&json!({"op": "lease", "pool": "default", "ttl": "30s"})) else {
                        break;
                    };
                    if g["ok"] != json!(true) {
                        continue;
                    }
                    let rep = json!({"op": "report", "lease": g["lease"], "outcome": "failure", "reason": "connect_refused", "phase": "connect"});
                    match c.try_req(&rep) {
                        Ok(r) if r["ok"] == json!(true) => acked.push(g["endpoint"].as_i64().unwrap()),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                acked
            })
        })
        .collect();
    eventually(Duration::from_secs(20), "some reports acknowledged", || {
        let n = homes[0].list_with(&["--state", "cooling"]).len();
        if n >= 10 {
            Ok(())
        } else {
            Err(format!("{n} cooling"))
        }
    });
    for d in &mut ds {
        d.kill9();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<i64> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(!acked.is_empty());
    // Every acknowledged failure is in the database (cooling, or further on; never
    // available without a trial, and the cooldown is 3 s).
    let rows = homes[0].list();
    for id in &acked {
        let row = rows.iter().find(|r| r["id"] == json!(id)).unwrap();
        assert!(
            row["streak"].as_u64().unwrap() >= 1,
            "acknowledged failure of {id} lost: {row}"
        );
    }
    let failures = homes[0]
        .events_with(&["--kind", "report", "--limit", "100000"])
        .len();
    assert!(
        failures >= acked.len(),
        "{failures} report events for {} acknowledged",
        acked.len()
    );
    // The daemons start again from what was committed.
    let d = homes[1].serve();
    assert!(count(&d, "cooling") + count(&d, "probe_allowed") + count(&d, "available") == 60);
}

#[test]
fn a_daemon_started_after_many_changes_follows_the_next_ones() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    // Cooldowns of an hour: nothing comes due while the second daemon starts.
    let config = CONFIG.replace("\"3s\"", "\"1h\"");
    let home = |url: &str| {
        let mut h = Home::new(Some(&config));
        h.db = PathBuf::from(url);
        h
    };
    let a = home(&url);
    let b = home(&url);
    let file = a.path("many.txt");
    let text: String = (0..5_000)
        .map(|i| {
            format!(
                "http://10.9.{}.{}:{}\n",
                (i / 250) % 250,
                i % 250,
                1000 + i / 62_500
            )
        })
        .collect();
    std::fs::write(&file, text).unwrap();
    a.ok(&["import", file.to_str().unwrap()]);
    let da = a.serve();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let sock = da.socket.clone();
            std::thread::spawn(move || {
                let mut c = common::daemon::Conn::connect(&sock);
                for _ in 0..250 {
                    let g = c.req(&json!({"op": "lease", "pool": "default", "ttl": "30s"}));
                    c.req(&json!({"op": "report", "lease": g["lease"], "outcome": "failure", "reason": "connect_refused", "phase": "connect"}));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let n = count(&da, "cooling");
    let db = b.serve();
    sees(&db, "cooling", n);
    for i in 1..=20 {
        let g = lease(&da);
        let r = fail(&da, g["lease"].as_str().unwrap());
        assert_eq!(r["state"], "cooling", "{r}");
        sees(&db, "cooling", n + i);
    }
}

#[test]
fn a_change_numbered_first_and_committed_last_reaches_every_daemon() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let homes: Vec<Home> = (0..4).map(|_| home(&url)).collect();
    let ids = homes[0].add(&["http://10.7.0.1:3128", "http://10.7.0.2:3128"]);
    let (x, y) = (ids[0], ids[1]);
    let ds: Vec<Daemon> = homes[..3].iter().map(|h| h.serve()).collect();
    for d in &ds {
        sees(d, "available", 2);
    }
    // `events --follow` (no daemon on its socket: it reads the database).
    let mut follow = homes[3]
        .cmd()
        .args(["events", "--json", "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (line_tx, lines) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout).lines() {
            let Ok(v) = serde_json::from_str(&l.unwrap()) else {
                continue;
            };
            if line_tx.send(v).is_err() {
                break;
            }
        }
    });
    // It has started once it prints the backlog (the two `added`).
    for _ in 0..2 {
        lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the backlog");
    }
    // A writer takes its change number, writes X and its event, then stays open (as a
    // slow transaction of another daemon would), and sends no notification: only polling
    // can find its change.
    let held_tx = held_change(
        &url,
        &format!(
            "UPDATE endpoints SET state = 'disabled', detail = 'held', \
               state_changed_at = now(), rev = currval('fleet_change_seq') WHERE id = {x}; \
             INSERT INTO events (endpoint, kind, from_state, to_state, detail) \
               VALUES ({x}, 'state_changed', 'available', 'disabled', 'held')"
        ),
    );
    let held = held_tx.number("SELECT currval('fleet_change_seq')");
    // Meanwhile a CLI act (no daemon on its socket) takes a later number and commits.
    homes[3].ok(&["disable", &y.to_string()]);
    let db = url.rsplit('/').next().unwrap();
    let later: i64 = pg
        .sql(db, &format!("SELECT rev FROM endpoints WHERE id = {y}"))
        .parse()
        .unwrap();
    assert!(held < later, "numbers: held {held}, committed {later}");
    for d in &ds {
        sees(d, "disabled", 1);
    }
    let mut followed = Vec::new();
    let saw = |endpoint: i64, followed: &mut Vec<Value>| {
        let deadline = Instant::now() + PROPAGATION;
        while !followed.iter().any(|e| e["endpoint"] == json!(endpoint)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(e) => followed.push(e),
                Err(_) => panic!(
                    "events --follow did not print endpoint {endpoint}'s event: {followed:?}"
                ),
            }
        }
    };
    saw(y, &mut followed);
    // Now the first-numbered change commits: every daemon still finds it, and so does
    // the follow, though its event id is below one it printed.
    held_tx.run("COMMIT");
    for d in &ds {
        sees(d, "disabled", 2);
    }
    saw(x, &mut followed);
    let held_event = followed.iter().find(|e| e["endpoint"] == json!(x)).unwrap();
    let later_event = followed.iter().find(|e| e["endpoint"] == json!(y)).unwrap();
    assert!(
        held_event["id"].as_i64() < later_event["id"].as_i64(),
        "{followed:?}"
    );
    let _ = follow.kill();
    let _ = follow.wait();
}

/// An operator's edit on another host (no daemon on its socket) reaches a serving daemon
/// whole: its new URL and its new tags are what the daemon leases by.
#[test]
fn an_edit_of_url_and_tags_elsewhere_is_followed_whole() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let (a, cli) = (home(&url), home(&url));
    let id = a.add(&["http://10.7.2.1:3128"])[0];
    let d = a.serve();
    sees(&d, "available", 1);
    cli.ok(&[
        "edit",
        &id.to_string(),
        "--url",
        "http://10.7.2.1:3129",
        "--tag",
        "tier=dc",
    ]);
    eventually(PROPAGATION, "the edit followed", || {
        let g = d.req(json!({"op": "lease", "pool": "default", "tags": {"tier": "dc"}}));
        match g["proxy"].as_str() {
            Some("http://10.7.2.1:3129") => Ok(()),
            _ => Err(format!("{g}")),
        }
    });
}

/// A writer's transaction, as a daemon's or a CLI command's: its change number taken, then
/// `sql` (which may use the number as `currval('fleet_change_seq')`), left open: what it
/// wrote stays locked, and unseen, until the session runs `COMMIT`.
fn held_change(url: &str, sql: &str) -> Session {
    Session::begin(
        url,
        &format!(
            "BEGIN; INSERT INTO fleet_changes (seq) VALUES (nextval('fleet_change_seq')); {sql}"
        ),
    )
}

/// Another writer's change of endpoint `id`'s port and `tier` tag, held (`held_change`).
fn edit_held(url: &str, id: i64, port: u16, tier: &str) -> Session {
    let sql = format!(
        "UPDATE endpoints SET port = {port}, tags = '{{\"tier\":\"{tier}\"}}', \
           rev = currval('fleet_change_seq') WHERE id = {id}"
    );
    held_change(url, &sql)
}

/// Wait until one session of database `db` waits for a lock in a statement like `like`.
fn waits_for_lock(pg: &postgres::Cluster, db: &str, like: &str) {
    eventually(
        PROPAGATION,
        &format!("a statement like {like} waits"),
        || {
            let n = pg.sql(
                db,
                &format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' \
                 AND wait_event_type = 'Lock' AND query LIKE '{like}'"
                ),
            );
            if n == "1" {
                Ok(())
            } else {
                Err(format!("{n} waiting"))
            }
        },
    );
}

/// A write of a daemon that waited for another writer's change of the same row (an edit
/// of its URL and tags, numbered first and committed while the daemon's write waits for
/// the row) lands on top of it, and the row then carries the daemon's change number alone.
/// Memory still takes the other writer's columns: after a trial's claim (a statement of
/// its own) and after the trial's success (the group commit's function).
#[test]
fn a_write_that_waited_for_another_change_of_its_row_keeps_that_change() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    let a = home_cooling(&url, "1s");
    let id = a.add(&["http://10.7.3.1:3128"])[0];
    let d = a.serve();
    sees(&d, "available", 1);
    let g = lease(&d);
    assert_eq!(fail(&d, g["lease"].as_str().unwrap())["state"], "cooling");
    // The cooldown's end, written: memory moved first.
    let stored = |col: &str| pg.sql(&db, &format!("SELECT {col} FROM endpoints WHERE id = {id}"));
    eventually(PROPAGATION, "probe_allowed stored", || {
        match stored("state") {
            s if s == "probe_allowed" => Ok(()),
            s => Err(s),
        }
    });
    let tier_known = |tier: &str| {
        let g = d.req(json!({"op": "lease", "pool": "default", "tags": {"tier": tier}}));
        let unknown = g["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tag key"));
        (!unknown).then_some(g.clone()).ok_or(format!("{g}"))
    };

    // The trial's claim waits for the row.
    let edit = edit_held(&url, id, 3129, "dc");
    let trial = std::thread::scope(|s| {
        let leased = s.spawn(|| lease(&d));
        waits_for_lock(pg, &db, "%SET claim_epoch = currval(%");
        edit.run("COMMIT");
        leased.join().unwrap()
    });
    assert_eq!(trial["trial"], true, "{trial}");
    assert_eq!(stored("port"), "3129");
    eventually(PROPAGATION, "the tag known after the claim", || {
        tier_known("dc")
    });

    // The trial's success waits for the row.
    let edit = edit_held(&url, id, 3130, "edge");
    std::thread::scope(|s| {
        let succeeded = s.spawn(|| {
            d.req(json!({"op": "report", "lease": trial["lease"], "outcome": "success"}))
        });
        waits_for_lock(pg, &db, "%proxypool_commit(%");
        edit.run("COMMIT");
        let r = succeeded.join().unwrap();
        assert_eq!(r["state"], "available", "{r}");
    });
    assert_eq!(stored("port"), "3130");
    eventually(PROPAGATION, "the edited URL leased", || {
        let g = tier_known("edge")?;
        match g["proxy"].as_str() {
            Some("http://10.7.3.1:3130") => Ok(()),
            _ => Err(format!("{g}\nits log's last lines:\n{}", d.log_tail(20))),
        }
    });
}

/// A home whose cooldowns last an hour: what cooled stays cooling for the whole test.
fn long_home(url: &str) -> Home {
    common::fleet::home(url, common::fleet::LONG_COOLDOWN)
}

/// Lease and fail one endpoint; the state it was left in.
fn lease_and_fail(d: &Daemon) -> Value {
    let g = lease(d);
    match g["lease"].as_str() {
        Some(l) => fail(d, l),
        None => g,
    }
}

#[test]
fn tls_to_postgres_is_used_checked_and_required() {
    let ca = common::fakes::TestCa::new("proxypool test PostgreSQL CA");
    let files = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf_pem_files(files.path());
    let Some(pg) = postgres::Cluster::start_tls(&cert, &key) else {
        return;
    };
    let url = pg.database();
    let ca_pem = ca.write_pem(files.path());
    let other_dir = tempfile::tempdir().unwrap();
    let other_pem = common::fakes::TestCa::new("someone else").write_pem(other_dir.path());

    // sslmode=require: the CLI adds over TLS.
    let required = long_home(&format!("{url}?sslmode=require"));
    required.add(&["http://10.8.0.1:3128", "http://10.8.0.2:3128"]);
    // verify-full with the CA: a daemon serves and writes over TLS, and so does the CLI.
    let verified = long_home(&format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        ca_pem.display()
    ));
    assert_eq!(verified.list().len(), 2);
    let d = verified.serve();
    sees(&d, "available", 2);
    let r = lease_and_fail(&d);
    assert_eq!(r["state"], "cooling", "{r}");
    let db = url.rsplit('/').next().unwrap();
    assert_eq!(
        pg.sql(
            db,
            &format!(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.datname = '{db}' AND a.pid <> pg_backend_pid() AND NOT s.ssl"
            )
        ),
        "0",
        "every connection is TLS"
    );
    drop(d);

    // verify-full with a CA that did not sign the server's certificate: refused, and the
    // error says it is the TLS handshake (never the password).
    let wrong = long_home(&format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        other_pem.display()
    ));
    let o = wrong.run(&["list"]);
    assert_ne!(o.code, Some(0), "{o:?}");
    assert!(o.stderr.contains("TLS"), "{}", o.stderr);
    assert!(!o.stderr.contains(PASSWORD), "{}", o.stderr);

    // sslmode=disable where the server takes TLS logins only: refused by the server, and
    // the error says so.
    let plain = long_home(&format!("{url}?sslmode=disable"));
    let o = plain.run(&["list"]);
    assert_ne!(o.code, Some(0), "{o:?}");
    assert!(o.stderr.contains("no encryption"), "{}", o.stderr);
    assert!(!o.stderr.contains(PASSWORD), "{}", o.stderr);
}

#[test]
fn a_url_without_a_password_logs_in_with_the_password_file() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap();
    let bare = format!(
        "postgresql://{}@127.0.0.1:{}/{db}",
        postgres::USER,
        pg.port()
    );
    let h = long_home(&bare);
    let passfile = h.path("pgpass");
    std::fs::write(
        &passfile,
        format!(
            "# host:port:db:user:password\n127.0.0.1:{}:{db}:{}:{PASSWORD}\n",
            pg.port(),
            postgres::USER
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &passfile,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let run = |with_file: bool| {
        let mut c = h.cmd();
        c.args(["add", "http://10.9.0.1:3128"])
            .env_remove("PGPASSWORD");
        if with_file {
            c.env("PGPASSFILE", &passfile);
        } else {
            c.env_remove("PGPASSFILE");
        }
        c.output().unwrap()
    };
    // Without it there is no password to give: a configuration error (exit 2, not the
    // store being away), with the database named.
    let o = run(false);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(db), "{err}");
    // With it: logged in.
    let o = run(true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(pg.sql(db, "SELECT count(*) FROM endpoints"), "1");
}

#[test]
fn a_failover_to_the_promoted_standby_is_followed_and_loses_nothing_acknowledged() {
    let Some(primary) = postgres::Cluster::start() else {
        return;
    };
    let standby = primary.start_standby();
    primary.make_synchronous();
    let url = primary.database();
    let db = url.rsplit('/').next().unwrap();
    let both = format!(
        "postgresql://{}:{PASSWORD}@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
        postgres::USER,
        primary.port(),
        standby.port()
    );
    let h = long_home(&both);
    h.add(&[
        "http://10.10.0.1:3128",
        "http://10.10.0.2:3128",
        "http://10.10.0.3:3128",
        "http://10.10.0.4:3128",
    ]);
    let d = h.serve();
    sees(&d, "available", 4);
    // Acknowledged on the primary, and (synchronous) on the standby.
    for _ in 0..2 {
        let r = lease_and_fail(&d);
        assert_eq!(r["state"], "cooling", "{r}");
    }

    primary.stop_server();
    standby.promote();
    // The daemon finds the new primary (the second host) and writes go on.
    let r = eventually(
        Duration::from_secs(30),
        "a write after the failover",
        || {
            let r = lease_and_fail(&d);
            if r["state"] == "cooling" {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        },
    );
    assert!(!r.to_string().contains(PASSWORD), "{r}");
    // Nothing acknowledged before the stop was lost.
    assert_eq!(
        standby.sql(db, "SELECT count(*) FROM endpoints WHERE state = 'cooling'"),
        "3"
    );
    sees(&d, "cooling", 3);
    assert!(!d.log_text().contains(PASSWORD));
}

/// The lock every transaction takes just before it inserts events (its key is in
/// `src/store/postgres/statements.rs`, `EVENTS_LOCK`).
const EVENTS_LOCK: &str = "SELECT pg_advisory_xact_lock(7378984100003398005)";

/// Event ids commit in id order across the fleet: while another transaction holds an
/// event id it has not committed, no daemon commits a larger one, so a reader of
/// `events` by "id greater than the last one seen" never skips an event.
#[test]
fn event_ids_commit_in_order_across_the_fleet() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    let h = home(&url);
    h.add(&["http://10.9.0.1:3128"]);
    let d = h.serve();
    let g = lease(&d);
    // Another writer of the database takes an event id and holds it uncommitted.
    let mut held = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", &url])
        .env_remove("PGPASSFILE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run psql");
    let mut to_psql = held.stdin.take().unwrap();
    let mut from_psql = BufReader::new(held.stdout.take().unwrap());
    writeln!(
        to_psql,
        "BEGIN; {EVENTS_LOCK}; INSERT INTO events (kind, detail) VALUES ('note', 'held') RETURNING id;"
    )
    .unwrap();
    let mut line = String::new();
    while line.trim().parse::<i64>().is_err() {
        line.clear();
        assert!(from_psql.read_line(&mut line).unwrap() > 0, "psql ended");
    }
    let held_id: i64 = line.trim().parse().unwrap();
    // The daemon's report waits for it: nothing it writes is committed meanwhile.
    let lease_id = g["lease"].as_str().unwrap().to_string();
    let mut conn = d.conn();
    let report = std::thread::spawn(move || {
        conn.req(
            &json!({"op": "report", "lease": lease_id, "outcome": "failure",
                         "reason": "connect_refused", "phase": "connect"}),
        )
    });
    holds_for(
        Duration::from_secs(1),
        "no event committed past the held id",
        || {
            let newest = pg.sql(&db, "SELECT COALESCE(max(id), 0) FROM events");
            match (
                newest.parse::<i64>().unwrap() < held_id,
                report.is_finished(),
            ) {
                (true, false) => Ok(()),
                seen => Err(format!("newest {newest}, report answered: {}", seen.1)),
            }
        },
    );
    writeln!(to_psql, "COMMIT;").unwrap();
    drop(to_psql);
    assert!(held.wait().unwrap().success());
    let r = report.join().unwrap();
    assert_eq!(r["state"], "cooling", "{r}");
    // Everything the daemon wrote comes after the held event.
    let ids = pg.sql(
        &db,
        &format!("SELECT count(*) FROM events WHERE id < {held_id} AND kind <> 'added'"),
    );
    assert_eq!(ids, "0", "an event numbered before the held one");
    let after = pg.sql(
        &db,
        &format!("SELECT count(*) FROM events WHERE id > {held_id}"),
    );
    assert!(
        after.parse::<i64>().unwrap() >= 1,
        "the report's events: {after}"
    );
}

/// An import larger than one read of the feed (20,000 endpoint rows) reaches a daemon that
/// follows it in slices, and the changes after it arrive as usual.
#[test]
fn an_import_larger_than_a_read_arrives_in_slices() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let (a, b) = (home_cooling(&url, "1h"), home_cooling(&url, "1h"));
    a.add(&["http://10.8.0.1:3128"]);
    let db = b.serve();
    sees(&db, "available", 1);
    let file = a.path("many.txt");
    let n = 20_500;
    let text: String = (0..n)
        .map(|i| format!("http://10.8.{}.{}:{}\n", 1 + i / 250, i % 250, 2000))
        .collect();
    std::fs::write(&file, text).unwrap();
    a.ok(&["import", file.to_str().unwrap()]);
    sees_within(&db, "available", 1 + n as u64, Duration::from_secs(30));
    let da = a.serve();
    let g = lease(&da);
    assert_eq!(fail(&da, g["lease"].as_str().unwrap())["state"], "cooling");
    sees(&db, "cooling", 1);
    assert_eq!(count(&db, "available"), n as u64);
}

/// While the fleet writes a stream, a follower stops listening (it reads every 25 ms
/// whatever is notified) and follows all the same; after the stream it listens again,
/// and a single change is followed as ever (docs/fleet.md, "Propagation").
#[test]
fn a_follower_stops_listening_in_a_stream_and_listens_again_after_it() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let db = url.rsplit('/').next().unwrap().to_string();
    let (a, b) = (long_home(&url), long_home(&url));
    // Enough endpoints for a stream however slowly a loaded machine writes it (each
    // failure cools one for the test's life).
    let n = 2_000;
    let urls: Vec<String> = (0..n)
        .map(|i| format!("http://10.9.{}.{}:3128", i / 200, i % 200 + 1))
        .collect();
    a.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    let (da, db_) = (a.serve(), b.serve());
    sees(&db_, "available", n);
    let sessions = |sql: &str| {
        pg.sql(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' \
                 AND query = '{sql} proxypool_changes'"
            ),
        )
    };
    // A stream of failures through one daemon from 4 clients at once, while a listening
    // session is looked for that has stopped.
    let stop = AtomicBool::new(false);
    let sent = AtomicU64::new(0);
    let failed = std::thread::scope(|s| {
        let streams: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut failed = 0;
                    while !stop.load(Ordering::Relaxed)
                        && sent.fetch_add(1, Ordering::Relaxed) < n - 10
                    {
                        let r = lease_and_fail(&da);
                        assert_eq!(r["state"], "cooling", "{r}");
                        failed += 1;
                    }
                    failed
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut stopped = false;
        while !stopped && !streams.iter().all(|t| t.is_finished()) && Instant::now() < deadline {
            stopped = sessions("UNLISTEN") != "0";
        }
        stop.store(true, Ordering::Relaxed);
        let failed: u64 = streams.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(
            stopped,
            "no follower stopped listening in {failed} failures"
        );
        failed
    });
    sees(&db_, "cooling", failed);
    // Quiet again: both listen, and one failure more reaches the other daemon.
    eventually(
        Duration::from_secs(10),
        "both daemons listen again",
        || match (sessions("LISTEN").as_str(), sessions("UNLISTEN").as_str()) {
            ("2", "0") => Ok(()),
            other => Err(format!("LISTEN, UNLISTEN sessions: {other:?}")),
        },
    );
    let r = lease_and_fail(&da);
    assert_eq!(r["state"], "cooling", "{r}");
    sees(&db_, "cooling", failed + 1);
}
