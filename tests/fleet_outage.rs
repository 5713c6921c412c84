//! A fleet through an outage of its PostgreSQL database (docs/fleet.md, "Faults"): two
//! daemons, each with its gateway in front of real tinyproxy upstreams, under gateway and
//! socket traffic while the server is stopped and started again. Nothing is left leased,
//! every success report is answered, and the views (the page, the JSON API, `status`
//! through the socket, `events --follow`) keep answering and follow on once it is back.

mod common;

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use common::daemon::{err_code, Conn};
use common::fakes;
use common::fleet::{home, upstreams_and_site, Member};
use common::postgres::{self, PASSWORD};
use common::{eventually, holds_for};

/// `static-no-ping`: a failed endpoint's trial is a lease, as the gateway gets them. A
/// short cooldown, so that trials come up while the traffic runs.
const CONFIG: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "2s"
factor = 1.0
max = "2s"
jitter = 0.0
"#;

/// What one traffic thread did.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    /// Success reports over the socket that were not answered `ok`.
    refused: AtomicU64,
}

/// Gateway requests to `site` through `m` until `stop`.
fn gateway_traffic(m: &Member, site: &str, stop: &AtomicBool, tally: &Tally) {
    while !stop.load(Ordering::Relaxed) {
        let _ = m.get(site, None);
        tally.ops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Lease and report success over the socket until `stop`; a refused report is counted
/// (and its lease released, as a client would).
fn socket_traffic(socket: &std::path::Path, stop: &AtomicBool, tally: &Tally) -> Vec<Value> {
    let mut c = Conn::connect(socket);
    let mut refusals = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let g = c.req(&json!({"op": "lease", "pool": "default", "ttl": "60s"}));
        if g["ok"] != json!(true) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let r = c.req(&json!({"op": "report", "lease": g["lease"], "outcome": "success"}));
        tally.ops.fetch_add(1, Ordering::Relaxed);
        if r["ok"] != json!(true) {
            tally.refused.fetch_add(1, Ordering::Relaxed);
            refusals.push(r);
            c.req(&json!({"op": "release", "lease": g["lease"]}));
        }
    }
    refusals
}

#[test]
fn an_outage_under_gateway_and_socket_traffic_leaves_no_lease_and_answers_every_success() {
    // A cluster of its own: this test stops it.
    let Some(pg) = postgres::Cluster::start() else {
        return;
    };
    let rt = fakes::fake_runtime();
    let Some((_upstreams, mut urls, _site, site)) = upstreams_and_site(&rt, 3) else {
        return;
    };
    let url = pg.database();
    let a = home(&url, CONFIG);
    // Two endpoints that refuse every connection: failures and trials meet the outage.
    urls.extend((0..2).map(|_| format!("http://127.0.0.1:{}", fakes::closed_port())));
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    a.add(&refs);
    let members = [Member::start(a), Member::start(home(&url, CONFIG))];

    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Tally>> = (0..4).map(|_| Arc::new(Tally::default())).collect();
    let mut socket_threads = Vec::new();
    std::thread::scope(|s| {
        for (i, m) in members.iter().enumerate() {
            let (stop, g, k) = (&stop, &tallies[2 * i], tallies[2 * i + 1].clone());
            let site = site.as_str();
            s.spawn(move || gateway_traffic(m, site, stop, g));
            let (sock, stop) = (m.daemon.socket.clone(), stop.clone());
            socket_threads.push(std::thread::spawn(move || socket_traffic(&sock, &stop, &k)));
        }
        let done = |t: &Tally| t.ops.load(Ordering::Relaxed);
        eventually(
            Duration::from_secs(30),
            "traffic before the outage",
            || match tallies.iter().all(|t| done(t) >= 20) {
                true => Ok(()),
                false => Err(format!(
                    "{:?}",
                    tallies.iter().map(|t| done(t)).collect::<Vec<_>>()
                )),
            },
        );

        pg.stop_server();
        for m in &members {
            eventually(
                Duration::from_secs(15),
                "the daemon sees the store away",
                || match m.store_away() {
                    true => Ok(()),
                    false => Err(m.daemon.log_tail(5)),
                },
            );
        }
        let before: Vec<u64> = tallies.iter().map(|t| done(t)).collect();
        // About ten seconds of traffic while it is away (the check is polled; it only
        // fails if a daemon said the store was back).
        holds_for(
            Duration::from_secs(10),
            "the store stays away",
            || match members.iter().all(Member::store_away) {
                true => Ok(()),
                false => Err("a daemon says the store is back".into()),
            },
        );
        eventually(Duration::from_secs(30), "traffic during the outage", || {
            let now: Vec<u64> = tallies.iter().map(|t| done(t)).collect();
            match now.iter().zip(&before).all(|(n, b)| *n >= b + 20) {
                true => Ok(()),
                false => Err(format!("{before:?} then {now:?}")),
            }
        });
        pg.start_server();
        for m in &members {
            eventually(Duration::from_secs(30), "the store is back", || {
                match m.page("/healthz").0 {
                    200 => Ok(()),
                    other => Err(format!("{other}: {}", m.daemon.log_tail(5))),
                }
            });
        }
        stop.store(true, Ordering::Relaxed);
    });
    let refusals: Vec<Value> = socket_threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert!(
        refusals.is_empty(),
        "{} success reports refused during the outage, the first: {:?}",
        refusals.len(),
        refusals.iter().take(3).collect::<Vec<_>>()
    );
    // Every lease given during the outage was given back: none is left.
    for m in &members {
        eventually(Duration::from_secs(10), "no lease left", || {
            match m.leases() {
                0 => Ok(()),
                n => Err(format!("{n} live leases: {}", m.status())),
            }
        });
        // The outage was logged once, not once per request.
        let log = m.daemon.log_text();
        assert!(!log.contains(PASSWORD), "{log}");
        let lines = log.matches("could not give its lease back").count();
        assert_eq!(lines, 0, "{}", m.daemon.log_tail(30));
    }
    // And writes go through again: a failure cools an endpoint on both daemons.
    let d = &members[0].daemon;
    let r = eventually(Duration::from_secs(20), "a failure is written", || {
        let g = d.req(json!({"op": "lease", "pool": "default", "ttl": "30s"}));
        let r = d.req(
            json!({"op": "report", "lease": g["lease"], "outcome": "failure",
                             "reason": "connect_refused", "phase": "connect"}),
        );
        match r["ok"] == json!(true) {
            true => Ok(r),
            false => Err(format!("{g} {r}")),
        }
    });
    assert_eq!(r["state"], "cooling", "{r}");
}

/// A failure reported while the store is away is refused (`store_unavailable`) and its
/// lease ends all the same; what it did stays in this daemon's memory until the store is
/// back, when memory follows the database again.
#[test]
fn a_failure_in_an_outage_is_refused_and_ends_its_lease() {
    let Some(pg) = postgres::Cluster::start() else {
        return;
    };
    let url = pg.database();
    let h = home(&url, CONFIG);
    h.add(&["http://10.60.0.1:3128", "http://10.60.0.2:3128"]);
    let m = Member::start(h);
    pg.stop_server();
    eventually(Duration::from_secs(15), "the store away", || {
        match m.store_away() {
            true => Ok(()),
            false => Err(m.daemon.log_tail(5)),
        }
    });
    let d = &m.daemon;
    let g = d.req(json!({"op": "lease", "pool": "default", "ttl": "1h"}));
    assert_eq!(g["ok"], json!(true), "{g}");
    let r = d.req(
        json!({"op": "report", "lease": g["lease"], "outcome": "failure",
                         "reason": "connect_refused", "phase": "connect"}),
    );
    assert_eq!(err_code(&r), "store_unavailable", "{r}");
    assert!(!r.to_string().contains(PASSWORD), "{r}");
    assert_eq!(m.leases(), 0, "the refused report ended its lease");
    let again = d.req(json!({"op": "release", "lease": g["lease"]}));
    assert_ne!(again["ok"], json!(true), "{again}");
    // A success writes nothing: answered.
    let g = d.req(json!({"op": "lease", "pool": "default", "ttl": "1h"}));
    let r = d.req(json!({"op": "report", "lease": g["lease"], "outcome": "success"}));
    assert_eq!(r["state"], "available", "{r}");
    pg.start_server();
    // Back: memory follows the database, where the refused failure never was.
    eventually(Duration::from_secs(30), "both available again", || {
        let s = &m.status()["pools"][0];
        match (s["available"].as_u64(), m.store_away()) {
            (Some(2), false) => Ok(()),
            _ => Err(s.to_string()),
        }
    });
    let db = url.rsplit('/').next().unwrap();
    assert_eq!(
        pg.sql(db, "SELECT count(*) FROM events WHERE kind = 'report'"),
        "0"
    );
}

/// The status page, `/api/endpoints`, `/api/status` and `status` through the socket answer
/// from memory while the database is away and say so; `events --follow` (no daemon in
/// between: it reads the database) waits it out and prints what is committed once it is
/// back.
#[test]
fn views_answer_from_memory_and_events_follow_on_through_a_restart() {
    let Some(pg) = postgres::Cluster::start() else {
        return;
    };
    let url = pg.database();
    let h = home(&url, CONFIG);
    let ids = h.add(&[
        "http://u:pw-Views-1@10.61.0.1:3128",
        "http://10.61.0.2:3128",
    ]);
    h.ok(&["edit", &ids[0].to_string(), "--label", "first"]);
    let m = Member::start(h);
    let follower_home = home(&url, CONFIG);
    let mut follow = follower_home
        .cmd()
        .args(["events", "--json", "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel::<Value>();
    let out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines() {
            let Ok(v) = serde_json::from_str(&l.unwrap()) else {
                continue;
            };
            if tx.send(v).is_err() {
                break;
            }
        }
    });
    // Its stderr as it comes: the outage must last until the follower has met it (a
    // restart shorter than its 200 ms between reads would go unnoticed, and nothing
    // would be tested).
    let said = Arc::new(std::sync::Mutex::new(String::new()));
    let err_out = follow.stderr.take().unwrap();
    let said_w = Arc::clone(&said);
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err_out).lines() {
            let Ok(l) = l else { break };
            let mut s = said_w.lock().unwrap();
            s.push_str(&l);
            s.push('\n');
        }
    });
    let stderr_says = |what: &str| -> Result<(), String> {
        let s = said.lock().unwrap();
        match s.contains(what) {
            true => Ok(()),
            false => Err(s.clone()),
        }
    };
    // The backlog: two `added`, one `edited`.
    for _ in 0..3 {
        lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the backlog");
    }

    pg.stop_server();
    eventually(Duration::from_secs(15), "the store away", || {
        match m.store_away() {
            true => Ok(()),
            false => Err(m.daemon.log_tail(5)),
        }
    });
    let (status, page) = m.page("/");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("The database is unavailable."), "{page}");
    assert!(page.contains("10.61.0.1"), "{page}");
    assert!(!page.contains("pw-Views-1"), "{page}");
    let (status, body) = m.page("/api/endpoints");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["store"], "unavailable", "{v}");
    assert_eq!(v["endpoints"].as_array().unwrap().len(), 2, "{v}");
    assert!(!body.contains("pw-Views-1"), "{body}");
    let v = m.api_status();
    assert_eq!(v["store"], "unavailable", "{v}");
    assert_eq!(v["pools"][0]["available"], 2, "{v}");
    // `status` and `list` through this host's daemon (its socket).
    let out = m.home.ok(&["status"]);
    assert!(
        out.contains("default") && out.contains("unavailable"),
        "{out}"
    );
    let r = m.daemon.req(json!({"op": "endpoints"}));
    assert_eq!(r["store"], "unavailable", "{r}");
    // The follower is still there, waiting.
    if follow.try_wait().unwrap().is_some() {
        let out = follow.wait_with_output().unwrap();
        panic!(
            "events --follow exited: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    eventually(
        Duration::from_secs(15),
        "the follower waiting for the database",
        || stderr_says("following on once it is back"),
    );

    pg.start_server();
    eventually(Duration::from_secs(30), "the store back", || {
        match m.store_away() {
            false => Ok(()),
            true => Err(m.daemon.log_tail(5)),
        }
    });
    let (_, body) = m.page("/api/endpoints");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v.get("store").is_none(), "{v}");
    assert_eq!(v["endpoints"][0]["label"], "first", "{v}");
    // A change committed after the restart reaches the follower.
    m.home.ok(&["disable", &ids[1].to_string()]);
    let seen = eventually(
        Duration::from_secs(30),
        "the follower prints it",
        || match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(e) if e["endpoint"] == json!(ids[1]) => Ok(e),
            Ok(_) | Err(_) => Err("not yet".to_string()),
        },
    );
    assert_eq!(seen["to"], "disabled", "{seen}");
    eventually(Duration::from_secs(10), "the follower saying so", || {
        stderr_says("the database is back; following on")
    });
    let _ = follow.kill();
    let _ = follow.wait();
    let err = said.lock().unwrap().clone();
    assert!(!err.contains(PASSWORD), "{err}");
}
