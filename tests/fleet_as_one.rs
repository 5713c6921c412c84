//! A fleet that reads as one (docs/fleet.md): sessions that map to the same endpoint
//! through every daemon's gateway, one daemon sniffing a pool for all (and another taking
//! over when it dies), the daemons registered and listed by `status`, `/api/status` and the
//! page, and a gateway request that gets at most one trial among its tries. Real binary,
//! a private PostgreSQL cluster, real tinyproxy upstreams.

mod common;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use common::daemon::Home;
use common::eventually;
use common::fakes::{self, DestCfg, HttpProxyCfg};
use common::fleet::{home, upstreams_and_site, Member, LONG_COOLDOWN as STATIC, PROPAGATION};
use common::postgres::{self, PASSWORD};
use common::upstreams::tinyproxy;

fn db_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

/// Six sessions through two daemons' gateways, after traffic that left the daemons'
/// rotations at different places, go to the same endpoint whichever gateway carries them;
/// when a session's endpoint goes out of service, both move it to the same next one.
#[test]
fn sessions_land_on_the_same_endpoints_through_every_gateway() {
    let Some(pg) = postgres::shared() else { return };
    let rt = fakes::fake_runtime();
    let Some((_upstreams, urls, _site, site)) = upstreams_and_site(&rt, 5) else {
        return;
    };
    let url = pg.database();
    let a = home(&url, STATIC);
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    a.add(&refs);
    let fleet = [Member::start(a), Member::start(home(&url, STATIC))];
    // Uneven traffic without a session: 7 requests through one gateway, 3 through the other.
    for (m, n) in fleet.iter().zip([7, 3]) {
        for _ in 0..n {
            assert_eq!(m.get(&site, None).0, 200);
        }
    }
    let sessions: Vec<String> = (1..=6).map(|i| format!("session-cart{i}")).collect();
    let through = |m: &Member, s: &str| {
        let (status, endpoint) = m.get(&site, Some(s));
        assert_eq!(status, 200, "{s}");
        endpoint.unwrap()
    };
    let mut at = Vec::new();
    for s in &sessions {
        let first = through(&fleet[0], s);
        for round in 0..3 {
            for (i, m) in fleet.iter().enumerate() {
                let e = through(m, s);
                assert_eq!(e, first, "{s} through daemon {i}, round {round}");
            }
        }
        at.push(first);
    }
    // Six sessions over five endpoints: they are spread, not all on one.
    let mut distinct = at.clone();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() >= 2, "{at:?}");
    // The first session's endpoint goes out of service: both gateways move the session to
    // the same next endpoint, and the other sessions stay where they were.
    let gone = at[0];
    fleet[0].home.ok(&["disable", &gone.to_string()]);
    for m in &fleet {
        eventually(PROPAGATION, "the disable followed", || {
            match m.status()["pools"][0]["disabled"].as_u64() {
                Some(1) => Ok(()),
                _ => Err(m.status().to_string()),
            }
        });
    }
    let moved = through(&fleet[0], &sessions[0]);
    assert_ne!(moved, gone);
    assert_eq!(through(&fleet[1], &sessions[0]), moved);
    for (s, e) in sessions
        .iter()
        .zip(&at)
        .skip(1)
        .filter(|(_, e)| **e != gone)
    {
        for m in &fleet {
            assert_eq!(through(m, s), *e, "{s} stays");
        }
    }
    // Another session's endpoint fails through the second daemon's socket and cools (for
    // an hour): both gateways move that session to the same next endpoint too.
    let (i, cooled) = at
        .iter()
        .copied()
        .enumerate()
        .skip(1)
        .find(|(_, e)| *e != gone && *e != moved)
        .expect("a session on a third endpoint");
    let key = sessions[i].strip_prefix("session-").unwrap();
    let g = fleet[1]
        .daemon
        .req(json!({"op": "lease", "pool": "default", "session": key, "ttl": "30s"}));
    assert_eq!(g["endpoint"], json!(cooled), "{g}");
    let r = fleet[1]
        .daemon
        .req(json!({"op": "report", "lease": g["lease"],
        "outcome": "failure", "reason": "connect_refused", "phase": "connect"}));
    assert_eq!(r["state"], "cooling", "{r}");
    for m in &fleet {
        eventually(PROPAGATION, "the failure followed", || {
            match m.status()["pools"][0]["cooling"].as_u64() {
                Some(1) => Ok(()),
                _ => Err(m.status().to_string()),
            }
        });
    }
    let next = through(&fleet[0], &sessions[i]);
    assert!(next != cooled && next != gone, "{next}");
    assert_eq!(through(&fleet[1], &sessions[i]), next);
}

/// Endpoints waiting for their trial in `static-no-ping`: each lease of the gateway may be
/// one, but a request gets at most one among its tries; the next go to proven endpoints.
#[test]
fn a_gateway_request_gets_at_most_one_trial_among_its_tries() {
    let Some(pg) = postgres::shared() else { return };
    let rt = fakes::fake_runtime();
    let mut live = Vec::new();
    for _ in 0..2 {
        let Some(t) = rt.block_on(tinyproxy(&[])) else {
            return;
        };
        live.push(t);
    }
    let site = rt.block_on(fakes::dest(DestCfg::default()));
    let site = format!("http://127.0.0.1:{}/page", site.port());
    let url = pg.database();
    let h = home(&url, STATIC);
    let dead: Vec<String> = (0..3)
        .map(|_| format!("http://127.0.0.1:{}", fakes::closed_port()))
        .collect();
    let dead_refs: Vec<&str> = dead.iter().map(String::as_str).collect();
    let dead_ids = h.add(&dead_refs);
    for t in &live {
        h.add(&[&format!("http://alice:s3cret@127.0.0.1:{}", t.port)]);
    }
    // Out of service, then enabled by an operator: each waits for its single trial.
    let ids: Vec<String> = dead_ids.iter().map(i64::to_string).collect();
    let mut args = vec!["disable"];
    args.extend(ids.iter().map(String::as_str));
    h.ok(&args);
    args[0] = "enable";
    h.ok(&args);
    let m = Member::start(h);
    eventually(PROPAGATION, "three trials waiting", || {
        let s = m.status();
        match s["pools"][0]["probe_allowed"].as_u64() {
            Some(3) => Ok(()),
            _ => Err(s.to_string()),
        }
    });
    let (status, endpoint) = m.get(&site, None);
    assert_eq!(status, 200, "{}", m.daemon.log_tail(20));
    assert!(!dead_ids.contains(&endpoint.unwrap()));
    let admitted = m.home.events_with(&["--kind", "trial_admitted"]);
    assert_eq!(admitted.len(), 1, "one trial for the request: {admitted:?}");
}

/// Each daemon registers itself: `status` (from a host with no daemon, and through a
/// daemon's socket), `/api/status` and the page list them, and the LEASES column counts
/// every daemon's leases. A daemon that stops leaves the list; one killed shows as gone.
#[test]
fn the_fleet_lists_its_daemons_and_counts_their_leases() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let a = home(&url, STATIC);
    a.add(&["http://10.70.0.1:3128", "http://10.70.0.2:3128"]);
    let mut fleet = vec![Member::start(a), Member::start(home(&url, STATIC))];
    for (m, n) in fleet.iter().zip([2, 1]) {
        for _ in 0..n {
            let g = m
                .daemon
                .req(json!({"op": "lease", "pool": "default", "ttl": "1h"}));
            assert_eq!(g["ok"], json!(true), "{g}");
        }
    }
    let outside = home(&url, STATIC);
    let out = eventually(Duration::from_secs(15), "status counts 3 leases", || {
        let out = outside.ok(&["status"]);
        match leases_column(&out) == Some(3) && out.contains("2 daemons serve it") {
            true => Ok(out),
            false => Err(out),
        }
    });
    for m in &fleet {
        assert!(out.contains(&m.daemon.pid().to_string()), "{out}");
        assert!(out.contains(&m.gateway), "{out}");
        // The schema was there when they started: PostgreSQL's notices are not logged.
        assert!(
            !m.daemon.log_text().contains("NOTICE"),
            "{}",
            m.daemon.log_tail(20)
        );
    }
    assert!(!out.contains("no daemon serves it"), "{out}");
    assert!(!out.contains(PASSWORD), "{out}");
    // Through a daemon's socket: the same fleet (the others as of their last heartbeat).
    eventually(Duration::from_secs(15), "the same through a socket", || {
        let mine = fleet[1].home.ok(&["status"]);
        match mine.contains("2 daemons serve it") && leases_column(&mine) == Some(3) {
            true => Ok(()),
            false => Err(mine),
        }
    });
    let v = fleet[0].api_status();
    let daemons = v["daemons"].as_array().unwrap();
    assert_eq!(daemons.len(), 2, "{v}");
    assert!(daemons.iter().all(|d| d["live"] == json!(true)), "{v}");
    let (_, page) = fleet[0].page("/");
    assert!(page.contains("Daemons of the fleet"), "{page}");
    assert!(page.contains(&fleet[1].gateway), "{page}");
    // `list` names the database as host and database, never a file.
    let list = outside.ok(&["list"]);
    assert!(
        list.contains(&format!("postgresql://proxypool@127.0.0.1:{}", pg.port())),
        "{list}"
    );
    // One stops: it leaves the list at once.
    let mut b = fleet.pop().unwrap();
    b.daemon
        .signal_and_wait(libc::SIGTERM, Duration::from_secs(30));
    let out = eventually(PROPAGATION, "one daemon left", || {
        let out = outside.ok(&["status"]);
        match out.contains("1 daemon serves it") {
            true => Ok(out),
            false => Err(out),
        }
    });
    assert!(!out.contains(&b.gateway), "{out}");
    // The other is killed: its row stays, gone once its heartbeat is 10 s old.
    fleet[0].daemon.kill9();
    let out = eventually(Duration::from_secs(30), "the killed one gone", || {
        let out = outside.ok(&["status"]);
        match out.contains("no daemon serves it") && out.contains("gone") {
            true => Ok(out),
            false => Err(out),
        }
    });
    assert_eq!(leases_column(&out), Some(0), "{out}");
}

/// The LEASES column of `status`'s table (pool `default`).
fn leases_column(out: &str) -> Option<u64> {
    let header = out.lines().find(|l| l.contains("LEASES"))?;
    // Columns are set apart by spaces (no header before LEASES has one inside).
    let cells = |l: &str| -> Vec<String> {
        l.split(|c: char| c.is_whitespace() || c == '│')
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    let i = cells(header).iter().position(|c| c == "LEASES")?;
    let row = out
        .lines()
        .find(|l| cells(l).first().map(String::as_str) == Some("default"))?;
    cells(row).get(i)?.parse().ok()
}

/// A sniffing pool whose one source (a file) is read every second: `sources` of a config.
fn sniffing(probe_port: u16, list: &Path) -> String {
    format!(
        r#"
[[pool]]
name = "default"
mode = "sniffing"

[pool.probe]
url = "http://127.0.0.1:{probe_port}/health"
expect_status = "200"
timeout = "2s"
interval = "0s"

[[pool.source]]
kind = "file"
path = "{}"
refresh = "1s"
"#,
        list.display()
    )
}

fn write_list(path: &Path, urls: &[String]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, urls.join("\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The events of `kinds` in the database, in id order.
fn sniff_events(h: &Home) -> Vec<Value> {
    h.events_with(&["--limit", "100000"])
        .into_iter()
        .filter(|e| e["kind"].as_str().is_some_and(|k| k.starts_with("sniff_")))
        .collect()
}

fn millis(at: &Value) -> u128 {
    let t = humantime::parse_rfc3339(at.as_str().unwrap()).unwrap();
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
}

/// One daemon of the fleet sniffs a pool per refresh, the other follows what it writes: one
/// `sniff_refresh` and one `sniff_success` a second, one removal reported once. Killed, its
/// job goes to the other within a few refreshes.
#[test]
fn one_daemon_sniffs_a_source_for_the_fleet_and_another_takes_over_when_it_dies() {
    let Some(pg) = postgres::shared() else { return };
    let rt = fakes::fake_runtime();
    let (probe, proxies) = rt.block_on(async {
        let probe = fakes::dest(DestCfg::default()).await;
        let mut proxies = Vec::new();
        for _ in 0..3 {
            proxies.push(fakes::http_proxy(HttpProxyCfg::default()).await);
        }
        (probe, proxies)
    });
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.txt");
    let urls: Vec<String> = proxies
        .iter()
        .map(|p| format!("http://127.0.0.1:{}", p.port()))
        .collect();
    write_list(&list, &urls);
    let config = sniffing(probe.port(), &list);
    let url = pg.database();
    let mut fleet = vec![
        Member::start(home(&url, &config)),
        Member::start(home(&url, &config)),
    ];
    let h = home(&url, &config);
    let refreshes = eventually(Duration::from_secs(30), "six refreshes", || {
        let ev = sniff_events(&h);
        let n = ev.iter().filter(|e| e["kind"] == "sniff_refresh").count();
        match n >= 6 {
            true => Ok(ev),
            false => Err(format!("{n} sniff_refresh so far")),
        }
    });
    let at: Vec<u128> = refreshes
        .iter()
        .filter(|e| e["kind"] == "sniff_refresh")
        .map(|e| millis(&e["at"]))
        .collect();
    for w in at.windows(2) {
        assert!(
            w[1] - w[0] >= 600,
            "two sniffs in one refresh: {at:?}\n{refreshes:?}"
        );
    }
    let startups = refreshes
        .iter()
        .filter(|e| e["kind"] == "sniff_on_startup")
        .count();
    assert_eq!(startups, 1, "one daemon sniffed at startup: {refreshes:?}");
    // Each refresh has its one success (the last may still be running).
    let ok = refreshes
        .iter()
        .filter(|e| e["kind"] == "sniff_success")
        .count();
    assert!(
        ok + 1 >= at.len() + startups && ok <= at.len() + startups,
        "{refreshes:?}"
    );
    // A URL leaves the list: one removal, reported once.
    write_list(&list, &urls[..2]);
    let removed = eventually(Duration::from_secs(15), "the removal", || {
        let ev = h.events_with(&["--kind", "state_changed", "--limit", "100000"]);
        let gone: Vec<Value> = ev
            .into_iter()
            .filter(|e| e["reason"] == "source_removed")
            .collect();
        match gone.len() {
            0 => Err("not yet".to_string()),
            _ => Ok(gone),
        }
    });
    // A few more refreshes: still one.
    let seen = sniff_events(&h).len();
    eventually(Duration::from_secs(15), "three more sniffs", || {
        match sniff_events(&h).len() >= seen + 6 {
            true => Ok(()),
            false => Err("not yet".to_string()),
        }
    });
    let again = h.events_with(&["--kind", "state_changed", "--limit", "100000"]);
    let count = again
        .iter()
        .filter(|e| e["reason"] == "source_removed")
        .count();
    assert_eq!(count, 1, "one removal reported once: {removed:?}");

    // The daemon that holds the job is killed: the other takes it over.
    let db = db_name(&url);
    let holder_pid: u32 = pg
        .sql(
            db,
            "SELECT d.pid FROM fleet_jobs j JOIN fleet_daemons d ON d.id = j.holder \
             WHERE j.job = 'sniff:default'",
        )
        .parse()
        .unwrap();
    let i = fleet
        .iter()
        .position(|m| m.daemon.pid() == holder_pid)
        .expect("the holder is one of the two");
    let mut dead = fleet.remove(i);
    dead.daemon.kill9();
    let killed_at = sniff_events(&h).last().map(|e| millis(&e["at"])).unwrap();
    let survivor = fleet[0].daemon.pid();
    eventually(Duration::from_secs(20), "the job taken over", || {
        let holder = pg.sql(
            db,
            "SELECT d.pid FROM fleet_jobs j JOIN fleet_daemons d ON d.id = j.holder \
             WHERE j.job = 'sniff:default'",
        );
        let later = sniff_events(&h)
            .iter()
            .filter(|e| e["kind"] == "sniff_refresh" && millis(&e["at"]) > killed_at)
            .count();
        match holder == survivor.to_string() && later >= 2 {
            true => Ok(()),
            false => Err(format!("holder {holder}, {later} refreshes since")),
        }
    });
}

/// SIGHUP with the config now naming, as `[store] url`, the database the daemon serves
/// (from `PROXYPOOL_DB`): nothing changed, so nothing is warned of. Another database is.
#[test]
fn a_reload_naming_the_database_served_warns_of_nothing() {
    let Some(pg) = postgres::shared() else { return };
    let url = pg.database();
    let h = home(&url, STATIC);
    let d = h.serve();
    let reload = |text: &str, n: usize| {
        std::fs::write(h.config.as_ref().unwrap(), text).unwrap();
        unsafe { libc::kill(d.pid() as i32, libc::SIGHUP) };
        eventually(Duration::from_secs(15), "the reload", || {
            match d.log_text().matches("config reloaded").count() >= n {
                true => Ok(()),
                false => Err(d.log_tail(5)),
            }
        });
    };
    reload(&format!("[store]\nurl = \"{url}\"\n{STATIC}"), 1);
    assert!(!d.log_text().contains("store.url"), "{}", d.log_tail(10));
    let other = pg.database();
    reload(&format!("[store]\nurl = \"{other}\"\n{STATIC}"), 2);
    let log = d.log_text();
    assert!(log.contains("store.url"), "{}", d.log_tail(10));
    assert!(!log.contains(PASSWORD), "{log}");
}
