//! Integration tests of the operator CLI: the real `proxypool` binary against a temporary
//! database, with every XDG/HOME path and the daemon socket pointed into a temp dir.

mod common;

use std::path::Path;

use predicates::prelude::*;
use rusqlite::Connection;
use serde_json::Value;

use common::daemon::{count_rows, ids, json_lines, text, Home};

/// A password that must never show up anywhere but `--show-secrets`.
const SECRET: &str = "hunter2secret";

fn find(rows: &[Value], id: i64) -> &Value {
    rows.iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no endpoint {id} in {rows:#?}"))
}

fn kinds(evs: &[Value]) -> Vec<String> {
    evs.iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

fn assert_no_secret(what: &str, s: &str) {
    assert!(!s.contains(SECRET), "{what} leaked the password:\n{s}");
}

fn assert_rfc3339_utc(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string: {v}"));
    assert!(s.ends_with('Z'), "not UTC: {s}");
    humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}"));
}

// ---------------------------------------------------------------------------------------
// add
// ---------------------------------------------------------------------------------------

#[test]
fn add_one_and_several_prints_ids() {
    let e = Home::new(None);
    let one = e.add(&["http://10.0.0.1:3128"]);
    assert_eq!(one.len(), 1);
    let out = e.ok(&[
        "add",
        "socks5://u:p@proxy.example:1080",
        "https://[2001:db8::1]:443",
        "socks4a://h:1",
        "--label",
        "batch-1",
    ]);
    let more = ids(&out);
    assert_eq!(more.len(), 3, "{out}");
    assert!(more.iter().all(|id| *id > one[0]));
    let rows = e.list();
    assert_eq!(rows.len(), 4);
    let first = find(&rows, one[0]);
    assert_eq!(first["url"], "http://10.0.0.1:3128");
    assert_eq!(first["pool"], "default");
    assert_eq!(first["label"], Value::Null);
    assert_eq!(first["source"], "cli");
    assert_eq!(first["state"], "available");
    for id in &more {
        assert_eq!(find(&rows, *id)["label"], "batch-1");
    }
    assert_eq!(
        find(&rows, more[0])["url"],
        "socks5://u:***@proxy.example:1080"
    );
    assert_eq!(e.count("endpoints"), 4);
    // One `added` event per endpoint.
    let evs = e.events();
    assert_eq!(kinds(&evs), vec!["added"; 4]);
}

#[test]
fn add_to_configured_pool_and_unknown_pool() {
    let e = Home::new(None);
    let cfg = e.path("pools.toml");
    std::fs::write(
        &cfg,
        "[[pool]]\nname = \"resi\"\nmode = \"static\"\n[pool.probe]\nurl = \"http://127.0.0.1:9/\"\n\n[[pool]]\nname = \"dc\"\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let resi = ids(&e.ok(&[
        "--config",
        cfg,
        "add",
        "--pool",
        "resi",
        "--label",
        "r",
        "socks5h://u:x@r1.example:1080",
        "socks5h://u:x@r2.example:1080",
    ]));
    let dc = ids(&e.ok(&[
        "--config",
        cfg,
        "add",
        "--pool",
        "dc",
        "http://d.example:80",
    ]));
    let def = ids(&e.ok(&["--config", cfg, "add", "http://d.example:80"]));
    assert_eq!((resi.len(), dc.len(), def.len()), (2, 1, 1));

    let rows = e.list_with(&["--config", cfg]);
    assert_eq!(rows.len(), 4);
    for id in &resi {
        let r = find(&rows, *id);
        assert_eq!(r["pool"], "resi");
        assert_eq!(r["label"], "r");
        // A `static` pool starts new endpoints as probe_allowed (docs/reference.md, "Pools
        // and modes").
        assert_eq!(r["state"], "probe_allowed");
    }
    assert_eq!(find(&rows, dc[0])["pool"], "dc");
    assert_eq!(find(&rows, dc[0])["state"], "available");
    assert_eq!(find(&rows, def[0])["pool"], "default");

    let only = e.list_with(&["--config", cfg, "--pool", "resi"]);
    assert_eq!(only.len(), 2);
    assert!(only.iter().all(|r| r["pool"] == "resi"));

    // A pool that is not configured: exit 2, nothing added.
    let (_, err) = e.fails(
        2,
        &[
            "--config",
            cfg,
            "add",
            "--pool",
            "nosuch",
            "http://n.example:1",
        ],
    );
    assert!(err.contains("nosuch"), "{err}");
    assert_eq!(e.count("endpoints"), 4);
}

#[test]
fn identity_includes_user_and_duplicates_reject_the_whole_batch() {
    let e = Home::new(None);
    let ab = e.add(&["socks5://a:x@h:1", "socks5://b:x@h:1"]);
    assert_eq!(
        ab.len(),
        2,
        "two accounts on one host:port are two endpoints"
    );
    assert_ne!(ab[0], ab[1]);

    // Same user, other password: the same endpoint.
    let dup = format!("socks5://a:{SECRET}@h:1");
    let (out, err) = e.fails(2, &["add", &dup]);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("already exists"), "{err}");
    assert_no_secret("duplicate error", &err);

    // A good URL in the same batch is not added either.
    let (_, err) = e.fails(2, &["add", "http://good.example:8080", &dup]);
    assert_no_secret("duplicate error", &err);
    // ...nor when the duplicate is within the batch itself.
    let (_, err) = e.fails(
        2,
        &[
            "add",
            "http://good.example:8080",
            "http://good.example:8080",
        ],
    );
    assert!(err.contains("twice"), "{err}");
    assert_eq!(e.count("endpoints"), 2);
    assert_eq!(e.count("events"), 2);
    let rows = e.list_with(&["--show-secrets"]);
    assert_eq!(
        find(&rows, ab[0])["url"],
        "socks5://a:x@h:1",
        "password unchanged"
    );

    // Other schemes, ports and users (or none) are other endpoints.
    let more = e.add(&["socks5h://a:x@h:1", "socks5://a:x@h:2", "socks5://h:1"]);
    assert_eq!(more.len(), 3);
    assert_eq!(e.count("endpoints"), 5);
}

#[test]
fn bad_urls_exit_2_name_the_problem_and_never_leak() {
    let e = Home::new(None);
    let s = SECRET;
    let cases: Vec<(String, &str)> = vec![
        (format!("u:{s}@h:1"), "missing scheme"),
        (format!("ftp://u:{s}@h:21"), "unknown scheme"),
        (format!("http://u:{s}@:80"), "missing host"),
        (format!("http://u:{s}@h"), "missing port"),
        (format!("http://u:{s}@h:"), "missing port"),
        (format!("http://u:{s}@h:0"), "invalid port"),
        (format!("http://u:{s}@h:65536"), "invalid port"),
        (format!("http://u:{s}@h:80/path"), "unexpected path"),
        (format!("http://u:{s}@h:80?q=1"), "unexpected path"),
        (format!("http://u:{s}@[zz::1]:80"), "invalid host"),
        (format!("http://u:{s}@[::1:80"), "invalid host"),
        (format!("http://u:{s}@::1:80"), "invalid host"),
        (format!("http://u:{s}@ho st:80"), "white space"),
        (format!("http://u:{s}@h$x.example:80"), "invalid host"),
        (format!("http://:{s}@h:80"), "empty user"),
        (format!("http://u:{s}%ff@h:80"), "invalid percent-encoding"),
        (format!("http://u:{s}%zz@h:80"), "invalid percent-encoding"),
    ];
    for (url, want) in &cases {
        let out = e.run(&["add", "http://fine.example:1", url]);
        let (so, se) = (out.stdout, out.stderr);
        assert_eq!(out.code, Some(2), "{url}: {so} {se}");
        assert!(
            se.contains(want),
            "{url}: stderr does not say {want:?}: {se}"
        );
        assert!(se.contains("nothing was added"), "{url}: {se}");
        assert_no_secret(url, &so);
        assert_no_secret(url, &se);
        assert!(so.trim().is_empty(), "{url}: printed ids: {so}");
    }
    assert_eq!(
        e.count("endpoints"),
        0,
        "a bad URL must reject the whole batch"
    );
    assert_eq!(e.count("events"), 0);
}

#[test]
fn ipv6_and_percent_encoded_credentials_round_trip() {
    let e = Home::new(None);
    let url = "socks5://us%40er:p%3Aw%2F%40d@[2001:DB8::0:1]:1080";
    let id = e.add(&[url])[0];
    let secret = e.list_with(&["--show-secrets"]);
    let r = find(&secret, id);
    // The host is normalised; the user and password keep their encoding.
    assert_eq!(r["url"], "socks5://us%40er:p%3Aw%2F%40d@[2001:db8::1]:1080");
    let plain = e.list();
    assert_eq!(
        find(&plain, id)["url"],
        "socks5://us%40er:***@[2001:db8::1]:1080"
    );
    // The decoded credentials are what is stored.
    let (user, pw): (String, String) = e
        .sqlite()
        .query_row(
            "SELECT user, password FROM endpoints WHERE id=?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((user.as_str(), pw.as_str()), ("us@er", "p:w/@d"));
    // The shown URL resolves back to the same endpoint, by the same identity.
    let show: Value =
        serde_json::from_str(&e.ok(&["show", "--json", r["url"].as_str().unwrap()])).unwrap();
    assert_eq!(show["id"], id);
    let (_, err) = e.fails(2, &["add", "socks5://us%40er:other@[2001:db8::1]:1080"]);
    assert!(err.contains("already exists"), "{err}");
    assert!(!err.contains("other"), "{err}");
}

// ---------------------------------------------------------------------------------------
// import
// ---------------------------------------------------------------------------------------

#[test]
fn import_file_skips_comments_and_blank_lines() {
    let e = Home::new(None);
    let f = e.path("list.txt");
    std::fs::write(
        &f,
        "# provider list\n\nhttp://1.1.1.1:8080\n   \n  socks5://u:p@2.2.2.2:1080  \n# trailing comment\nhttps://h.example:443/\n",
    )
    .unwrap();
    let out = e
        .cli()
        .args(["import", f.to_str().unwrap(), "--label", "imp"])
        .assert()
        .success()
        .stderr(predicate::str::contains("imported 3 endpoints"));
    drop(out);
    let rows = e.list();
    let urls: Vec<&str> = rows.iter().map(|r| r["url"].as_str().unwrap()).collect();
    assert_eq!(
        urls,
        vec![
            "http://1.1.1.1:8080",
            "socks5://u:***@2.2.2.2:1080",
            "https://h.example:443"
        ]
    );
    assert!(rows
        .iter()
        .all(|r| r["label"] == "imp" && r["pool"] == "default"));
    // Importing the same file again is a duplicate: exit 2, nothing changes.
    e.fails(2, &["import", f.to_str().unwrap()]);
    assert_eq!(e.count("endpoints"), 3);
}

#[test]
fn import_from_stdin() {
    let e = Home::new(None);
    e.cli()
        .args(["import", "-"])
        .write_stdin("# from a pipe\nsocks5h://a:b@s1.example:1080\n\nsocks4://s2.example:1080\n")
        .assert()
        .success()
        .stderr(predicate::str::contains("imported 2 endpoints"));
    let rows = e.list();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["url"], "socks5h://a:***@s1.example:1080");
    assert_eq!(rows[1]["url"], "socks4://s2.example:1080");
}

#[test]
fn import_bad_line_names_the_line_and_adds_nothing() {
    let e = Home::new(None);
    let f = e.path("bad.txt");
    std::fs::write(
        &f,
        format!("# header\nhttp://1.1.1.1:8080\n\nsocks5://u:p@2.2.2.2:1080\nsocks5://u:{SECRET}@3.3.3.3:0\nhttp://4.4.4.4:80\n"),
    )
    .unwrap();
    let (out, err) = e.fails(2, &["import", f.to_str().unwrap()]);
    assert!(err.contains("line 5"), "{err}");
    assert!(err.contains("invalid port"), "{err}");
    assert_no_secret("import error", &err);
    assert_no_secret("import stdout", &out);
    assert_eq!(
        e.count("endpoints"),
        0,
        "nothing from the file may be added"
    );

    // Same through stdin.
    let out = e
        .cli()
        .args(["import", "-"])
        .write_stdin(format!("http://1.1.1.1:8080\nnot a url {SECRET}\n"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("line 2"), "{err}");
    assert_eq!(e.count("endpoints"), 0);

    // A file that does not exist.
    let (_, err) = e.fails(2, &["import", e.path("missing.txt").to_str().unwrap()]);
    assert!(err.contains("missing.txt"), "{err}");
}

// ---------------------------------------------------------------------------------------
// list, show
// ---------------------------------------------------------------------------------------

#[test]
fn list_table_json_shape_and_filters() {
    let e = Home::new(None);
    let ids = e.add(&[
        &format!("socks5://alice:{SECRET}@h1.example:1080"),
        "http://h2.example:3128",
        "http://h3.example:3128",
    ]);
    e.ok(&["disable", &ids[2].to_string(), "--reason", "broken"]);

    let table = e.ok(&["list"]);
    for col in ["ID", "URL", "POOL", "STATE", "REASON", "STREAK", "LABEL"] {
        assert!(table.contains(col), "{col} missing:\n{table}");
    }
    assert!(
        table.contains("socks5://alice:***@h1.example:1080"),
        "{table}"
    );
    assert!(
        table.contains("disabled") && table.contains("operator"),
        "{table}"
    );
    assert!(
        table.contains("3 endpoints: 2 available, 1 disabled"),
        "{table}"
    );
    assert_no_secret("list", &table);

    let out = e.ok(&["list", "--json"]);
    assert_no_secret("list --json", &out);
    let v: Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for r in rows {
        for k in [
            "id",
            "url",
            "pool",
            "label",
            "source",
            "state",
            "reason",
            "phase",
            "streak",
            "cooldown_until",
            "cooldown_ms",
        ] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
        assert!(r["id"].is_i64());
        assert!(r["streak"].is_u64());
        assert!(r["cooldown_until"].is_null() || r["cooldown_until"].is_string());
    }
    assert_eq!(
        find(rows, ids[0])["url"],
        "socks5://alice:***@h1.example:1080"
    );
    let d = find(rows, ids[2]);
    assert_eq!(d["state"], "disabled");
    assert_eq!(d["reason"], "operator");

    let secret = e.ok(&["list", "--json", "--show-secrets"]);
    assert!(secret.contains(&format!("socks5://alice:{SECRET}@h1.example:1080")));
    let secret_table = e.ok(&["list", "--show-secrets"]);
    assert!(secret_table.contains(SECRET));

    let avail = e.list_with(&["--state", "available"]);
    assert_eq!(avail.len(), 2);
    assert!(avail.iter().all(|r| r["state"] == "available"));
    let dis = e.list_with(&["--state", "disabled"]);
    assert_eq!(dis.len(), 1);
    assert_eq!(dis[0]["id"], ids[2]);
    assert!(e.list_with(&["--state", "cooling"]).is_empty());
    assert_eq!(e.list_with(&["--pool", "default"]).len(), 3);
    // An unknown pool is an error, as for `status` (issue 13).
    e.fails(2, &["list", "--pool", "other"]);

    let (out, err) = e.fails(2, &["list", "--state", "bogus"]);
    assert!(out.is_empty());
    assert!(err.contains("bogus"), "{err}");
}

#[test]
fn show_by_id_and_url_with_recent_events() {
    let e = Home::new(None);
    let url = format!("socks5h://bob:{SECRET}@s.example:1080");
    let id = e.add(&[&url, "http://other.example:1"])[0];
    e.ok(&["disable", &id.to_string(), "--reason", "rotating"]);
    e.ok(&["enable", &id.to_string()]);

    let txt = e.ok(&["show", &id.to_string()]);
    assert_no_secret("show", &txt);
    assert!(txt.contains("socks5h://bob:***@s.example:1080"), "{txt}");
    assert!(txt.contains("probe_allowed"), "{txt}");
    assert!(txt.contains("recent events"), "{txt}");
    assert!(
        txt.contains("added") && txt.contains("state_changed"),
        "{txt}"
    );

    for arg in [
        id.to_string(),
        url.clone(),
        "socks5h://bob@s.example:1080".into(),
    ] {
        let out = e.ok(&["show", "--json", &arg]);
        assert_no_secret("show --json", &out);
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["id"], id, "{arg}");
        assert_eq!(v["url"], "socks5h://bob:***@s.example:1080");
        assert_eq!(v["state"], "probe_allowed");
        for k in [
            "pool",
            "label",
            "source",
            "reason",
            "phase",
            "streak",
            "cooldown_until",
            "cooldown_ms",
        ] {
            assert!(v.get(k).is_some(), "{k} missing");
        }
        let evs = v["events"].as_array().expect("events array");
        assert_eq!(
            kinds(evs),
            vec!["state_changed", "state_changed", "added"],
            "most recent first"
        );
        let evids: Vec<i64> = evs.iter().map(|e| e["id"].as_i64().unwrap()).collect();
        assert!(evids.windows(2).all(|w| w[0] > w[1]), "{evids:?}");
        assert!(evs.iter().all(|ev| ev["endpoint"] == id));
        assert_eq!(evs[0]["to"], "probe_allowed");
        assert_eq!(evs[1]["to"], "disabled");
        assert_eq!(evs[1]["detail"], "rotating");
    }

    let (_, err) = e.fails(2, &["show", "999"]);
    assert!(err.contains("999"), "{err}");
    e.fails(2, &["show", "http://nobody.example:1"]);
    e.fails(2, &["show", "--json", "not a url"]);
}

// ---------------------------------------------------------------------------------------
// disable, enable, remove, events
// ---------------------------------------------------------------------------------------

#[test]
fn disable_and_enable_change_state_and_write_events() {
    let e = Home::new(None);
    let ids = e.add(&["http://a.example:1", "socks5://u:p@b.example:2"]);
    let (a, b) = (ids[0], ids[1]);

    let out = e.ok(&[
        "disable",
        &a.to_string(),
        "--reason",
        "provider maintenance",
    ]);
    assert_eq!(out.trim(), format!("{a}\tdisabled"));
    let r = find(&e.list(), a).clone();
    assert_eq!(r["state"], "disabled");
    assert_eq!(r["reason"], "operator");
    let last = e
        .events_with(&["--endpoint", &a.to_string()])
        .pop()
        .unwrap();
    assert_eq!(last["kind"], "state_changed");
    assert_eq!(last["from"], "available");
    assert_eq!(last["to"], "disabled");
    assert_eq!(last["reason"], "operator");
    assert_eq!(last["detail"], "provider maintenance");

    // enable: one probe decides.
    let out = e.ok(&["enable", &a.to_string()]);
    assert_eq!(out.trim(), format!("{a}\tprobe_allowed"));
    let r = find(&e.list(), a).clone();
    assert_eq!(r["state"], "probe_allowed");
    assert_eq!(r["reason"], Value::Null);
    let last = e
        .events_with(&["--endpoint", &a.to_string()])
        .pop()
        .unwrap();
    assert_eq!(
        (&last["from"], &last["to"]),
        (&"disabled".into(), &"probe_allowed".into())
    );

    // By URL (password ignored for identity), several at once, then enable --now.
    let out = e.ok(&["disable", "socks5://u@b.example:2", &a.to_string()]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(e.list_with(&["--state", "disabled"]).len() == 2);
    let out = e.ok(&["enable", "--now", &a.to_string(), &b.to_string()]);
    assert!(out.contains(&format!("{a}\tavailable")), "{out}");
    assert!(out.contains(&format!("{b}\tavailable")), "{out}");
    assert_eq!(e.list_with(&["--state", "available"]).len(), 2);

    // Every state-changing operator action left an event row, in order.
    let evs = e.events();
    let seq: Vec<(i64, String, String)> = evs
        .iter()
        .map(|v| {
            (
                v["endpoint"].as_i64().unwrap(),
                v["kind"].as_str().unwrap().to_string(),
                v["to"].as_str().unwrap_or("-").to_string(),
            )
        })
        .collect();
    let want: Vec<(i64, String, String)> = [
        (a, "added", "available"),
        (b, "added", "available"),
        (a, "state_changed", "disabled"),
        (a, "state_changed", "probe_allowed"),
        (b, "state_changed", "disabled"),
        (a, "state_changed", "disabled"),
        (a, "state_changed", "available"),
        (b, "state_changed", "available"),
    ]
    .into_iter()
    .map(|(i, k, t)| (i, k.to_string(), t.to_string()))
    .collect();
    assert_eq!(seq, want);
    // The same rows are in the database.
    assert_eq!(e.count("events"), 8);

    // Unknown target in a batch: exit 2 and nothing changed.
    let before = e.count("events");
    e.fails(2, &["disable", &a.to_string(), "424242"]);
    e.fails(2, &["enable", &a.to_string(), "http://nobody.example:9"]);
    assert_eq!(e.count("events"), before);
    assert_eq!(find(&e.list(), a)["state"], "available");
}

#[test]
fn remove_deletes_rows_and_writes_removed_events() {
    let e = Home::new(None);
    let ids = e.add(&[
        "http://a.example:1",
        &format!("socks5://u:{SECRET}@b.example:2"),
        "http://c.example:3",
    ]);
    let (a, b, c) = (ids[0], ids[1], ids[2]);

    let out = e.ok(&["remove", &a.to_string()]);
    assert_eq!(out.trim(), format!("{a}\tremoved"));
    let out = e.ok(&["remove", "socks5://u:anything@b.example:2"]);
    assert_eq!(out.trim(), format!("{b}\tremoved"));
    assert_no_secret("remove", &out);

    let rows = e.list();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], c);
    assert_eq!(e.count("endpoints"), 1);
    for id in [a, b] {
        let evs = e.events_with(&["--endpoint", &id.to_string()]);
        assert_eq!(kinds(&evs), vec!["added", "removed"], "endpoint {id}");
    }

    // Known + unknown: exit 2, the known one stays.
    let (_, err) = e.fails(2, &["remove", &c.to_string(), "777"]);
    assert!(err.contains("777"), "{err}");
    e.fails(2, &["remove", &c.to_string(), &a.to_string()]);
    e.fails(2, &["remove", "http://nobody.example:1", &c.to_string()]);
    assert_eq!(e.count("endpoints"), 1);
    assert_eq!(e.events_with(&["--endpoint", &c.to_string()]).len(), 1);
}

#[test]
fn removed_ids_are_never_reused() {
    // Events outlive their endpoint; a reused id would inherit a stranger's history.
    let e = Home::new(None);
    let a = e.add(&["http://a.example:1"])[0];
    e.ok(&["disable", &a.to_string(), "--reason", "old"]);
    e.ok(&["remove", &a.to_string()]);
    let b = e.add(&["http://b.example:2"])[0];
    assert!(b > a, "id {a} was reused as {b}");
    let show: Value = serde_json::from_str(&e.ok(&["show", "--json", &b.to_string()])).unwrap();
    assert_eq!(kinds(show["events"].as_array().unwrap()), vec!["added"]);
}

#[test]
fn events_json_lines_filter_and_order() {
    let e = Home::new(None);
    let ids = e.add(&["http://a.example:1", "http://b.example:2"]);
    let (a, b) = (ids[0], ids[1]);
    e.ok(&["disable", &b.to_string()]);
    e.ok(&["disable", &a.to_string()]);
    e.ok(&["enable", "--now", &b.to_string()]);
    e.ok(&["remove", &a.to_string()]);

    let out = e.ok(&["events", "--json"]);
    let all = json_lines(&out);
    assert_eq!(all.len(), 6, "{out}");
    for ev in &all {
        let obj = ev.as_object().expect("one object a line");
        for k in [
            "id", "at", "kind", "endpoint", "from", "to", "reason", "phase", "detail", "lease",
        ] {
            assert!(obj.contains_key(k), "{k} missing in {ev}");
        }
        assert_rfc3339_utc(&ev["at"]);
    }
    let evids: Vec<i64> = all.iter().map(|v| v["id"].as_i64().unwrap()).collect();
    assert!(evids.windows(2).all(|w| w[0] < w[1]), "{evids:?}");
    assert_eq!(
        kinds(&all),
        vec![
            "added",
            "added",
            "state_changed",
            "state_changed",
            "state_changed",
            "removed"
        ]
    );

    let only_a = e.events_with(&["--endpoint", &a.to_string()]);
    assert!(only_a.iter().all(|v| v["endpoint"] == a));
    assert_eq!(kinds(&only_a), vec!["added", "state_changed", "removed"]);
    let only_b = e.events_with(&["--endpoint", &b.to_string()]);
    assert!(only_b.iter().all(|v| v["endpoint"] == b));
    assert_eq!(
        kinds(&only_b),
        vec!["added", "state_changed", "state_changed"]
    );
    assert_eq!(only_b[1]["to"], "disabled");
    assert_eq!(only_b[2]["to"], "available");
    assert!(e.events_with(&["--endpoint", "9999"]).is_empty());

    let tail = e.events_with(&["--limit", "2"]);
    assert_eq!(kinds(&tail), vec!["state_changed", "removed"]);

    // The text form has one line per event.
    let txt = e.ok(&["events"]);
    assert_eq!(txt.lines().count(), 6, "{txt}");
    assert!(txt.contains("removed endpoint="), "{txt}");
}

// ---------------------------------------------------------------------------------------
// redaction
// ---------------------------------------------------------------------------------------

#[test]
fn verbose_and_trace_logs_never_leak_the_password() {
    // Once with -vv (debug) and once with RUST_LOG=trace, each on a fresh database.
    for trace in [false, true] {
        redaction_script(trace);
    }
}

fn redaction_script(trace: bool) {
    let e = Home::new(None);
    let url = format!("socks5://carol:{SECRET}@127.0.0.1:1");
    let imp = e.path("imp.txt");
    std::fs::write(&imp, format!("http://dan:{SECRET}@d.example:8080\n")).unwrap();
    let imp = imp.to_str().unwrap().to_string();
    let bad_cfg = e.path("bad.toml");
    std::fs::write(
        &bad_cfg,
        format!("[[endpoint]]\nurl = \"socks5://u:{SECRET}@h\"\n"),
    )
    .unwrap();
    let bad_cfg = bad_cfg.to_str().unwrap().to_string();
    let s = |x: &str| x.to_string();

    let script: Vec<(Vec<String>, i32)> = vec![
        (vec![s("add"), url.clone()], 0),
        (vec![s("add"), url.clone()], 2),
        (vec![s("add"), format!("socks5://x:{SECRET}@h:0")], 2),
        (vec![s("import"), imp.clone()], 0),
        (vec![s("import"), imp.clone()], 2),
        (vec![s("list")], 0),
        (vec![s("list"), s("--json")], 0),
        (vec![s("show"), url.clone()], 0),
        (vec![s("show"), s("--json"), url.clone()], 0),
        // Probing by URL resolves the endpoint before the concurrency is refused; real
        // probes are tested in probe_faults.rs and local_failures.rs.
        (vec![s("probe"), s("--concurrency"), s("0"), url.clone()], 2),
        (vec![s("disable"), url.clone(), s("--reason"), s("x")], 0),
        (vec![s("enable"), url.clone()], 0),
        (vec![s("enable"), s("--now"), url.clone()], 0),
        (vec![s("status")], 0),
        (vec![s("events")], 0),
        (vec![s("events"), s("--json")], 0),
        (vec![s("lease")], 1),
        (vec![s("--config"), bad_cfg.clone(), s("list")], 2),
        (vec![s("remove"), url.clone()], 0),
        (vec![s("remove"), url.clone()], 2),
    ];
    let mut all = String::new();
    for (args, code) in &script {
        let mut c = e.cli();
        if trace {
            c.env("RUST_LOG", "trace");
        } else {
            c.arg("-vv");
        }
        let out = c.args(args).output().unwrap();
        let (so, se) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {so}\n{se}");
        assert_no_secret(&format!("{args:?} stdout"), &so);
        assert_no_secret(&format!("{args:?} stderr"), &se);
        all.push_str(&so);
        all.push_str(&se);
    }
    // Logging really was on (so the assertion above means something).
    let level = if trace { "TRACE" } else { "DEBUG" };
    assert!(all.contains(level), "no {level} output at all");
    assert!(all.contains("carol:***@127.0.0.1:1"));
    assert!(all.contains("dan:***@d.example:8080"));

    // Nothing in the events table carries it either.
    let conn = e.sqlite();
    let mut st = conn
        .prepare(
            "SELECT at||kind||COALESCE(endpoint,'')||COALESCE(from_state,'')||COALESCE(to_state,'')\
             ||COALESCE(reason,'')||COALESCE(phase,'')||COALESCE(detail,'')||COALESCE(lease,'') \
             FROM events",
        )
        .unwrap();
    let rows: Vec<String> = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(rows.len() >= 6, "{rows:?}");
    for r in &rows {
        assert_no_secret("events table", r);
    }
    drop(st);
    drop(conn);
    // The only place it appears: --show-secrets (dan is still there).
    let shown = e.ok(&["list", "--json", "--show-secrets"]);
    assert!(
        shown.contains(&format!("dan:{SECRET}@d.example:8080")),
        "{shown}"
    );
}

// ---------------------------------------------------------------------------------------
// configuration
// ---------------------------------------------------------------------------------------

#[test]
fn config_unknown_key_is_rejected_with_key_and_line() {
    let e = Home::new(None);
    let cfg = e.path("c.toml");
    std::fs::write(
        &cfg,
        "[store]\npath = \"x.db\"\n\n[[pool]]\nname = \"p\"\nmax_lease_per_endpoint = 3\n",
    )
    .unwrap();
    let (_, err) = e.fails(2, &["--config", cfg.to_str().unwrap(), "list"]);
    assert!(err.contains("max_lease_per_endpoint"), "{err}");
    assert!(err.contains("line 6"), "{err}");

    let cfg2 = e.path("c2.toml");
    std::fs::write(&cfg2, "[server]\nsocket = \"s\"\nlisten = \"x\"\n").unwrap();
    let (_, err) = e.fails(2, &["list", "--config", cfg2.to_str().unwrap()]);
    assert!(err.contains("listen") && err.contains("line 3"), "{err}");
    assert!(!e.path("x.db").exists());

    // A bad policy value: its own line and its key once, not the pool's line.
    for (value, problem) in [
        ("fall = 0", "fall must be >= 1"),
        ("factor = 0.5", "factor must be >= 1, got 0.5"),
    ] {
        let cfg3 = e.path("c3.toml");
        std::fs::write(
            &cfg3,
            format!("# a pool\n\n[[pool]]\nname = \"eu\"\n[pool.cooldown]\n{value}\n"),
        )
        .unwrap();
        let (_, err) = e.fails(2, &["config", "check", "--config", cfg3.to_str().unwrap()]);
        let key = format!("pool.eu.cooldown.{}", value.split(' ').next().unwrap());
        assert!(err.contains(&format!("line 6: {key}: {problem}")), "{err}");
        assert_eq!(err.matches("pool.eu").count(), 1, "{err}");
    }
}

#[test]
fn config_bad_value_names_the_key() {
    let e = Home::new(None);
    let cfg = e.path("c.toml");
    std::fs::write(
        &cfg,
        "[[pool]]\nname = \"p\"\n[pool.cooldown]\nbase = \"60s\"\nfactor = 0.5\n",
    )
    .unwrap();
    let (_, err) = e.fails(2, &["--config", cfg.to_str().unwrap(), "list"]);
    assert!(err.contains("factor"), "{err}");

    std::fs::write(
        &cfg,
        "[[pool]]\nname = \"p\"\n[pool.cooldown]\nmax = \"soon\"\n",
    )
    .unwrap();
    let (_, err) = e.fails(2, &["--config", cfg.to_str().unwrap(), "list"]);
    assert!(err.contains("soon"), "{err}");

    // A config that does not exist is an error too, not silently the defaults.
    let (_, err) = e.fails(
        2,
        &["--config", e.path("nope.toml").to_str().unwrap(), "list"],
    );
    assert!(err.contains("nope.toml"), "{err}");
}

#[test]
fn example_config_is_accepted_and_its_endpoints_are_synced() {
    let e = Home::new(None);
    let dir = e.path("etc");
    std::fs::create_dir(&dir).unwrap();
    let cfg = dir.join("proxies.toml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("proxies.example.toml"),
        &cfg,
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    // No --db / PROXYPOOL_DB: [store] path, relative to the config's folder, is used.
    let out = e
        .bare()
        .args(["list", "--json", "--config", cfg])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let db = dir.join("proxypool.db");
    assert!(db.exists(), "the database should land beside the config");
    let rows: Vec<Value> = serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert!(rows.iter().all(|r| r["source"] == "config"));
    assert_eq!(rows[0]["url"], "socks5h://user:***@10.0.0.5:1080");
    assert_eq!(rows[0]["label"], "dc-1");
    assert_eq!(rows[0]["pool"], "default");
    assert_eq!(rows[1]["url"], "http://10.0.0.6:3128");
    assert_eq!(count_rows(&db, "endpoints"), 2);

    // Syncing again adds nothing; the example's pools are usable from the CLI.
    e.bare()
        .args([
            "--config",
            cfg,
            "add",
            "--pool",
            "residential",
            "http://r.example:1",
        ])
        .assert()
        .success();
    e.bare()
        .args(["--config", cfg, "list"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("3 endpoints").and(predicate::str::contains("residential")),
        );
    assert_eq!(count_rows(&db, "endpoints"), 3);
    let added = Connection::open(&db)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM events WHERE kind='added'", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap();
    assert_eq!(added, 3);
}

#[test]
fn config_env_and_db_precedence() {
    let e = Home::new(None);
    let cfg = e.path("c.toml");
    std::fs::write(&cfg, "[store]\npath = \"from-config.db\"\n").unwrap();
    let (from_cfg, from_env, from_flag) = (
        e.path("from-config.db"),
        e.path("from-env.db"),
        e.path("from-flag.db"),
    );

    // PROXYPOOL_CONFIG works like --config.
    e.bare()
        .env("PROXYPOOL_CONFIG", &cfg)
        .args(["add", "http://one.example:1"])
        .assert()
        .success();
    assert_eq!(count_rows(&from_cfg, "endpoints"), 1);

    // PROXYPOOL_DB beats the config file.
    e.bare()
        .env("PROXYPOOL_CONFIG", &cfg)
        .env("PROXYPOOL_DB", &from_env)
        .args(["add", "http://two.example:2"])
        .assert()
        .success();
    assert_eq!(count_rows(&from_env, "endpoints"), 1);
    assert_eq!(count_rows(&from_cfg, "endpoints"), 1);

    // --db beats PROXYPOOL_DB.
    e.bare()
        .env("PROXYPOOL_CONFIG", &cfg)
        .env("PROXYPOOL_DB", &from_env)
        .args([
            "add",
            "http://three.example:3",
            "--db",
            from_flag.to_str().unwrap(),
        ])
        .assert()
        .success();
    assert_eq!(count_rows(&from_flag, "endpoints"), 1);
    assert_eq!(count_rows(&from_env, "endpoints"), 1);

    // --config beats PROXYPOOL_CONFIG.
    let other = e.path("other.toml");
    std::fs::write(&other, "[store]\npath = \"other.db\"\n").unwrap();
    e.bare()
        .env("PROXYPOOL_CONFIG", &cfg)
        .args([
            "--config",
            other.to_str().unwrap(),
            "add",
            "http://four.example:4",
        ])
        .assert()
        .success();
    assert_eq!(count_rows(&e.path("other.db"), "endpoints"), 1);
    assert_eq!(count_rows(&from_cfg, "endpoints"), 1);

    // Nothing given: $XDG_DATA_HOME/proxypool/proxypool.db.
    e.bare()
        .args(["add", "http://five.example:5"])
        .assert()
        .success();
    let default_db = e.path("data/proxypool/proxypool.db");
    assert_eq!(count_rows(&default_db, "endpoints"), 1);

    // $XDG_CONFIG_HOME/proxypool/proxies.toml is used when it exists.
    std::fs::create_dir_all(e.path("config/proxypool")).unwrap();
    std::fs::write(
        e.path("config/proxypool/proxies.toml"),
        "[store]\npath = \"xdg.db\"\n",
    )
    .unwrap();
    e.bare()
        .args(["add", "http://six.example:6"])
        .assert()
        .success();
    assert_eq!(
        count_rows(&e.path("config/proxypool/xdg.db"), "endpoints"),
        1
    );
    assert_eq!(count_rows(&default_db, "endpoints"), 1);
    // Nothing went to the real home (the harness creates it empty).
    let in_home: Vec<_> = std::fs::read_dir(e.path("home"))
        .unwrap()
        .map(|d| d.unwrap().file_name())
        .collect();
    assert!(in_home.is_empty(), "{in_home:?}");
}

// ---------------------------------------------------------------------------------------
// probe, lease, global options
// ---------------------------------------------------------------------------------------

#[test]
fn probe_needs_targets_and_lease_needs_a_daemon() {
    let e = Home::new(None);
    e.add(&["http://a.example:1"]);
    let (out, err) = e.fails(2, &["probe"]);
    assert!(out.is_empty());
    assert!(err.contains("--all"), "{err}");
    e.fails(2, &["probe", "--all", "--concurrency", "0"]);
    e.fails(2, &["probe", "424242"]);
    e.fails(2, &["probe", "--pool", "nosuch"]);

    let (out, err) = e.fails(1, &["lease"]);
    assert!(out.is_empty());
    assert!(err.contains("serve"), "{err}");
    e.fails(1, &["lease", "--json", "--ttl", "5s"]);
    // A stale socket file (nobody listening) is not a daemon either.
    std::fs::write(e.path("no-daemon.sock"), "").unwrap();
    let (_, err) = e.fails(1, &["lease"]);
    assert!(err.contains("serve"), "{err}");
    // Bad durations are usage errors from the argument parser.
    e.fails(2, &["lease", "--ttl", "forever"]);
    // Operator commands work without a daemon.
    assert_eq!(e.list().len(), 1);

    // Looking for a daemon that is not there leaves nothing behind: no database, no lock
    // file, no folder.
    let fresh = Home::new(None);
    for args in [
        &["lease"][..],
        &["report", "l-1", "--outcome", "success"],
        &["release", "l-1"],
    ] {
        fresh.fails(1, args);
    }
    let data = fresh.path("data");
    let left: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|d| d.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind in {data:?}: {left:?}");
}

#[test]
fn global_options_before_and_after_the_subcommand() {
    let e = Home::new(None);
    let x = e.path("x.db");
    let x = x.to_str().unwrap();
    // No PROXYPOOL_DB at all: only the flag decides.
    e.bare()
        .args(["--db", x, "add", "http://a.example:1"])
        .assert()
        .success()
        .stdout("1\n");
    e.bare()
        .args(["add", "http://b.example:2", "--db", x])
        .assert()
        .success()
        .stdout("2\n");
    for args in [
        vec!["--db", x, "list", "--json"],
        vec!["list", "--json", "--db", x],
    ] {
        let out = e.bare().args(&args).output().unwrap();
        assert!(out.status.success());
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2, "{args:?}");
    }
    // -q / -v and --socket in either position too.
    let sock = e.path("elsewhere.sock");
    let sock = sock.to_str().unwrap();
    e.bare()
        .args(["-q", "--socket", sock, "list", "--db", x])
        .assert()
        .success();
    e.bare()
        .args(["lease", "--db", x, "--socket", sock, "-v"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("elsewhere.sock"));
    // Unknown flags are usage errors.
    e.bare().args(["list", "--bogus"]).assert().code(2);
    assert_eq!(count_rows(&e.path("x.db"), "endpoints"), 2);
}

// ---------------------------------------------------------------------------------------
// migrations
// ---------------------------------------------------------------------------------------

#[test]
fn a_first_migration_database_is_migrated_on_open() {
    let e = Home::new(None);
    {
        let conn = Connection::open(&e.db).unwrap();
        let up = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/01-initial/up.sql"),
        )
        .unwrap();
        conn.execute_batch(&up).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO endpoints (id, pool, scheme, host, port, user, password, label, source, \
             state, reason, phase, detail, streak, cooldown_ms, cooldown_until, state_changed_at, created_at) \
             VALUES (7, 'default', 'socks5', 'old.example', 1080, 'olduser', ?1, 'legacy', 'cli', \
             'cooling', 'connect_refused', 'connect', 'refused', 2, 120000, '2999-01-01T00:00:00.000Z', \
             '2024-01-01T00:00:00.000Z', '2023-12-31T00:00:00.000Z')",
            [SECRET],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO events (at, endpoint, kind, from_state, to_state, reason, phase, detail) \
             VALUES ('2024-01-01T00:00:00.000Z', 7, 'state_changed', 'available', 'cooling', \
             'connect_refused', 'connect', 'refused')",
            [],
        )
        .unwrap();
    }

    // A read-only command migrates (it could not read the old schema), and says so.
    let listed = e.run(&["list", "--json"]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(
        listed.stderr.contains("upgraded the database")
            && listed
                .stderr
                .contains(&format!("from schema version 1 to {}", migrations())),
        "{}",
        listed.stderr
    );
    let out = listed.stdout;
    assert_no_secret("list of migrated db", &out);
    let rows: Vec<Value> = serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["id"], 7);
    assert_eq!(r["url"], "socks5://olduser:***@old.example:1080");
    assert_eq!(r["state"], "cooling");
    assert_eq!(r["reason"], "connect_refused");
    assert_eq!(r["phase"], "connect");
    assert_eq!(r["streak"], 2);
    assert_eq!(r["cooldown_ms"], 120000);
    assert_eq!(r["label"], "legacy");
    assert_rfc3339_utc(&r["cooldown_until"]);
    // Stored until 2999 with a 2 min cooldown: the daemon waits 2 min, and that is shown.
    let table = e.ok(&["list"]);
    assert!(
        table.contains("in 2m") && !table.contains("years"),
        "{table}"
    );
    let shown = e.ok(&["show", "7"]);
    assert!(
        shown.contains("(in 2m; stored 2999-01-01") && shown.contains("clamped"),
        "{shown}"
    );

    let conn = e.sqlite();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, migrations());
    let has_pairs: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='destination_pairs'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(has_pairs, 1, "destination_pairs table missing");
    let has_col: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM pragma_table_info('endpoints') WHERE name='reason_streak'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(has_col, 1, "reason_streak column missing");
    let has_sources: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='sources'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(has_sources, 1, "sources table missing");
    let reason_streak: i64 = conn
        .query_row("SELECT reason_streak FROM endpoints WHERE id=7", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(reason_streak, 0);
    drop(conn);

    // The old event is still there, and the migrated store is fully usable.
    let show: Value = serde_json::from_str(&e.ok(&["show", "--json", "7"])).unwrap();
    let evs = show["events"].as_array().unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0]["to"], "cooling");
    let new = e.add(&["http://new.example:1"])[0];
    assert!(new > 7);
    e.ok(&["enable", "--now", "7"]);
    assert_eq!(find(&e.list(), 7)["state"], "available");
    // Opening again is a no-op, and says nothing.
    let again = e.run(&["list"]);
    assert!(!again.stderr.contains("upgraded"), "{}", again.stderr);
    assert_eq!(e.count("endpoints"), 2);
}

#[test]
fn operator_actions_that_change_nothing_still_leave_an_event() {
    let e = Home::new(None);
    let a = e.add(&["http://a.example:1"])[0];
    e.ok(&["disable", &a.to_string(), "--reason", "first"]);
    let before = e.count("events");
    // Already operator-disabled: exit 0, state unchanged, one `operator` row.
    let out = e.ok(&["disable", &a.to_string(), "--reason", "second"]);
    assert_eq!(out.trim(), format!("{a}\tdisabled"));
    // The first reason stays: a second disable does not rewrite history.
    assert_eq!(find(&e.list(), a)["detail"], "first");
    e.ok(&["enable", "--now", &a.to_string()]);
    // Already available: nothing to change, one `operator` row.
    e.ok(&["enable", &a.to_string()]);
    assert_eq!(e.count("events"), before + 3);
    let evs = e.events_with(&["--endpoint", &a.to_string()]);
    let ops: Vec<&Value> = evs.iter().filter(|v| v["kind"] == "operator").collect();
    assert_eq!(ops.len(), 2, "{evs:?}");
    assert_eq!(ops[0]["to"], "disabled");
    assert!(ops[0]["detail"]
        .as_str()
        .unwrap()
        .starts_with("disable: nothing to change"));
    assert_eq!(ops[1]["to"], "available");
    assert!(ops[1]["detail"]
        .as_str()
        .unwrap()
        .starts_with("enable: nothing to change"));
}

#[test]
fn events_follow_prints_new_events_as_they_happen() {
    use std::io::{BufRead, BufReader};
    let e = Home::new(None);
    e.add(&["http://a.example:1"]);
    let d = e.dir.path();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_proxypool"))
        .args(["events", "--follow", "--json"])
        .env_remove("PROXYPOOL_CONFIG")
        .env_remove("RUST_LOG")
        .env("PROXYPOOL_DB", &e.db)
        .env("HOME", d.join("home"))
        .env("XDG_RUNTIME_DIR", d.join("run"))
        .env("XDG_CONFIG_HOME", d.join("config"))
        .env("XDG_DATA_HOME", d.join("data"))
        .env("PROXYPOOL_SOCKET", d.join("no-daemon.sock"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["kind"], "added");
    // A change made while following shows up without restarting the command.
    e.ok(&["disable", "1", "--reason", "live"]);
    let next: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(next["kind"], "state_changed");
    assert_eq!(next["to"], "disabled");
    assert_eq!(next["detail"], "live");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The schema version a new proxypool reaches: one per folder of migrations/.
fn migrations() -> i64 {
    std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count() as i64
}
