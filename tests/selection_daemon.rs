//! Choosing with the real binary (docs/selection.md): tags through the CLI (`add`, `edit`,
//! `list`, `show`, `lease`) and the socket (`lease`, `endpoints`, `edit`), with and
//! without a daemon; bad tags and bad pacing or fallback settings refused naming them,
//! nothing changed; a paced lease waiting for its pair and answering `paced`; a fallback
//! pool serving and named in the answer.

mod common;

use std::time::{Duration, Instant};

use common::daemon::{err_code, ok, Home};
use serde_json::{json, Value};

const CONFIG: &str = r#"
[[pool]]
name = "default"

[[pool]]
name = "shops"
fallback = "spare"

[pool.pace]
interval = "300ms"
in_flight = 1
wait = "1s"

[[pool.pace.site]]
host = "slow.example"
interval = "1h"

[[pool]]
name = "spare"
max_leases_per_endpoint = 1

[[endpoint]]
url = "http://10.9.0.1:3128"
pool = "shops"
tags = {country = "us", tier = "dc"}

[[endpoint]]
url = "http://10.9.0.2:3128"
pool = "spare"
"#;

fn tags_of(v: &Value) -> Value {
    v["tags"].clone()
}

#[test]
fn tags_through_the_cli_without_and_with_a_daemon() {
    let h = Home::new(Some(CONFIG));
    let ids = common::daemon::ids(&h.ok(&[
        "add",
        "http://10.0.0.1:8080",
        "http://10.0.0.2:8080",
        "--tag",
        "country=de",
        "--tag",
        "tier=res",
    ]));
    let plain = h.add(&["http://10.0.0.3:8080"])[0];
    assert_eq!(
        tags_of(&h.listed(ids[0])),
        json!({"country": "de", "tier": "res"})
    );
    assert_eq!(tags_of(&h.listed(plain)), json!({}));
    // The config's endpoint carries its tags.
    let us: Vec<Value> = h.list_with(&["--tag", "country=us"]);
    assert_eq!(us.len(), 1);
    assert_eq!(us[0]["pool"], "shops");
    // Filters: every tag must match.
    let de = h.list_with(&["--tag", "country=de", "--tag", "tier=res"]);
    assert_eq!(de.len(), 2);
    assert!(h
        .list_with(&["--tag", "country=de", "--tag", "tier=dc"])
        .is_empty());
    let table = h.ok(&["list", "--tag", "country=de"]);
    assert!(
        table.contains("TAGS") && table.contains("country=de,tier=res"),
        "{table}"
    );
    // Bad tags: exit 2 naming them, nothing added.
    let before = h.list().len();
    for (args, says) in [
        (
            vec!["add", "http://10.0.0.9:1", "--tag", "Country=us"],
            "lower-case letter",
        ),
        (
            vec!["add", "http://10.0.0.9:1", "--tag", "country"],
            "KEY=VALUE",
        ),
        (
            vec!["add", "http://10.0.0.9:1", "--tag", "pool=x"],
            "reserved",
        ),
        (
            vec!["add", "http://10.0.0.9:1", "--tag", "a=1", "--tag", "a=2"],
            "twice",
        ),
        (vec!["list", "--tag", "country=u s"], "letters, digits"),
    ] {
        let (_, err) = h.fails(2, &args);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(h.list().len(), before);
    // edit without a daemon: set one, remove another.
    let out = h.ok(&[
        "edit",
        &ids[0].to_string(),
        "--tag",
        "country=fr",
        "--tag",
        "tier=",
    ]);
    assert!(out.contains("country=fr"), "{out}");
    assert_eq!(tags_of(&h.listed(ids[0])), json!({"country": "fr"}));
    let shown = h.ok(&["show", &ids[0].to_string()]);
    assert!(shown.contains("country=fr"), "{shown}");
    let ev = h.events_with(&["--kind", "edited"]);
    assert!(
        ev.iter().any(|e| e["detail"]
            .as_str()
            .is_some_and(|d| d.contains("tags country=de,tier=res -> country=fr"))),
        "{ev:?}"
    );

    // With a daemon: edit goes through it and the next lease selects by the new tags.
    let d = h.serve();
    h.ok(&["edit", &ids[1].to_string(), "--tag", "country=fr"]);
    let mut got = Vec::new();
    for _ in 0..4 {
        let out = h.ok(&["lease", "--tag", "country=fr", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap();
        got.push(v["endpoint"].as_i64().unwrap());
        d.req(json!({"op": "release", "lease": v["lease"]}));
    }
    got.sort();
    assert_eq!(got, [ids[0], ids[0], ids[1], ids[1]]);
    // An unknown key: exit 1 with the daemon's bad_request naming it.
    let o = h.run(&["lease", "--tag", "contry=fr"]);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("contry"), "{}", o.stderr);
    // list --json shows the daemon's statistics, bytes included.
    let v = h.listed(ids[0]);
    assert_eq!(v["stats"]["bytes_received"], 0, "{v}");
    assert_eq!(v["stats"]["bytes_sent"], 0, "{v}");
}

#[test]
fn tags_through_the_socket() {
    let h = Home::new(Some(CONFIG));
    let d = h.serve();
    let added = ok(d.req(json!({
        "op": "add",
        "urls": ["http://10.1.0.1:1", "http://10.1.0.2:1"],
        "tags": {"country": "de"}
    })));
    let ids: Vec<i64> = added["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let g = ok(d.req(json!({"op": "lease", "tags": {"country": "de"}})));
    assert!(ids.contains(&g["endpoint"].as_i64().unwrap()));
    assert_eq!(g["pool"], "default");
    let listed = ok(d.req(json!({"op": "endpoints", "tags": {"country": "de"}})));
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(listed["endpoints"][0]["tags"], json!({"country": "de"}));
    let edited =
        ok(d.req(json!({"op": "edit", "endpoint": ids[1], "tags": {"country": "", "tier": "dc"}})));
    assert_eq!(edited["endpoints"][0]["tags"], json!({"tier": "dc"}));
    let g = ok(d.req(json!({"op": "lease", "tags": {"tier": "dc"}, "pool": "default"})));
    assert_eq!(g["endpoint"], ids[1]);
    // Bad input: bad_request naming the problem, nothing changed.
    for (req, says) in [
        (json!({"op": "lease", "tags": {"contry": "de"}}), "contry"),
        (
            json!({"op": "lease", "tags": {"Country": "de"}}),
            "lower-case",
        ),
        (json!({"op": "lease", "tags": ["country=de"]}), "map"),
        (
            json!({"op": "add", "urls": ["http://10.1.0.3:1"], "tags": {"session": "x"}}),
            "reserved",
        ),
        (
            json!({"op": "edit", "endpoint": ids[0], "tags": {"bad key": "x"}}),
            "bad key",
        ),
    ] {
        let r = d.req(req.clone());
        assert_eq!(err_code(&r), "bad_request", "{req}: {r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(says),
            "{req}: {r}"
        );
    }
    // A value nobody carries: exhausted, not an error of the request.
    let r = d.req(json!({"op": "lease", "tags": {"country": "fr"}}));
    assert_eq!(err_code(&r), "pool_exhausted", "{r}");
    assert_eq!(h.list().len(), 4);
}

#[test]
fn a_paced_lease_waits_for_its_pair_then_falls_back_then_answers_paced() {
    let h = Home::new(Some(CONFIG));
    let d = h.serve();
    let lease = |dest: &str| d.req(json!({"op": "lease", "pool": "shops", "destination": dest}));
    let release = |g: &Value| ok(d.req(json!({"op": "release", "lease": g["lease"]})));
    // The interval counts from the first lease, which is given after this.
    let t = Instant::now();
    let first = ok(lease("shop.example"));
    assert_eq!(first["pool"], "shops");
    release(&first);
    // The pool's wait (1 s) holds the next lease until the interval (300 ms) passed.
    let second = ok(lease("shop.example"));
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        (&second["endpoint"], &second["pool"]),
        (&first["endpoint"], &json!("shops"))
    );
    // in_flight = 1 while it is out: past the wait the fallback pool serves, and says so.
    let t = Instant::now();
    let third = ok(lease("shop.example"));
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(third["pool"], "spare", "{third}");
    release(&second);
    // The site override spaces slow.example by an hour.
    let slow = ok(lease("slow.example"));
    assert_eq!(slow["pool"], "shops");
    release(&slow);
    // The spare endpoint is at its cap (third is out): the answer is the first pool's.
    let r = lease("slow.example");
    assert_eq!(err_code(&r), "paced", "{r}");
    let after = r["retry_after_ms"].as_u64().unwrap();
    assert!(after > 3_590_000 && after <= 3_600_000, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("slow.example"),
        "{r}"
    );
    // Leases without a destination are not paced.
    let plain = ok(d.req(json!({"op": "lease", "pool": "shops"})));
    assert_eq!(plain["pool"], "shops");
    let status = d.req(json!({"op": "status", "pool": "shops"}));
    assert_eq!(
        status["pools"][0]["available"], 1,
        "pacing never changes health: {status}"
    );
}

#[test]
fn bad_pacing_tags_and_fallbacks_are_config_errors_naming_the_key() {
    let cases = [
        ("[[pool]]\nname = \"a\"\nfallback = \"zz\"\n", "pool.a.fallback", "unknown pool \"zz\""),
        ("[[pool]]\nname = \"a\"\nfallback = \"a\"\n", "pool.a.fallback", "itself"),
        (
            "[[pool]]\nname = \"a\"\nfallback = \"b\"\n[[pool]]\nname = \"b\"\nfallback = \"a\"\n",
            "fallback",
            "cycle",
        ),
        ("[[pool]]\nname = \"a\"\n[pool.pace]\ninterval = \"25h\"\n", "pool.a.pace.interval", "24h"),
        ("[[pool]]\nname = \"a\"\n[pool.pace]\nwait = \"11m\"\n", "pool.a.pace.wait", "10m"),
        ("[[pool]]\nname = \"a\"\n[pool.pace]\nin_flight = 70000\n", "pool.a.pace.in_flight", "65535"),
        (
            "[[pool]]\nname = \"a\"\n[[pool.pace.site]]\nhost = \"https://x.example/\"\n",
            "pool.a.pace.site[0].host",
            "not a URL",
        ),
        (
            "[[pool]]\nname = \"a\"\n[[pool.pace.site]]\nhost = \"x.example\"\n[[pool.pace.site]]\nhost = \"X.example\"\n",
            "pool.a.pace.site[1].host",
            "twice",
        ),
        ("[[pool]]\nname = \"a\"\nselect = \"smartest\"\n", "select", "fastest"),
        ("[[pool]]\nname = \"a\"\nslow_start = \"2d\"\n", "pool.a.slow_start", "24h"),
        ("[[endpoint]]\nurl = \"http://h:1\"\ntags = {Country = \"us\"}\n", "endpoint[0].tags", "lower-case"),
    ];
    for (text, key, says) in cases {
        let h = Home::new(Some(text));
        let (_, err) = h.fails(2, &["list"]);
        assert!(err.contains(key) && err.contains(says), "{text}\n{err}");
    }
}

/// `list --tag` with `--destination`, and the `endpoints` op with `tags` and
/// `destination`: both filters apply (the tags choose the endpoints, the destination adds
/// each one's state for it).
#[test]
fn tags_and_a_destination_apply_together() {
    let h = Home::new(Some(CONFIG));
    let us = common::daemon::ids(&h.ok(&[
        "add",
        "http://10.0.1.1:8080",
        "http://10.0.1.2:8080",
        "--tag",
        "country=us",
    ]));
    let de = h.add(&["http://10.0.1.3:8080"])[0];
    h.ok(&["edit", &de.to_string(), "--tag", "country=de"]);
    let d = h.serve();
    // Ban the first US endpoint for shop.example (tags choose it in the default pool).
    let g = ok(d.req(json!({"op": "lease", "destination": "shop.example",
        "tags": {"country": "us"}})));
    let banned = g["endpoint"].as_i64().unwrap();
    ok(d.req(
        json!({"op": "report", "lease": g["lease"], "outcome": "failure",
        "reason": "destination_status", "phase": "response_head", "status": 403}),
    ));
    let by_id = |rows: &Value| -> Vec<(i64, Value)> {
        let mut v: Vec<_> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].as_i64().unwrap(), r["destination_state"].clone()))
            .collect();
        v.sort_by_key(|(id, _)| *id);
        v
    };
    let other = *us.iter().find(|&&id| id != banned).unwrap();
    let mut want = vec![(banned, json!("cooling")), (other, json!("available"))];
    want.sort_by_key(|(id, _)| *id);
    // The socket op.
    let r = ok(d.req(json!({"op": "endpoints", "pool": "default",
        "tags": {"country": "us"}, "destination": "Shop.Example"})));
    assert_eq!(by_id(&r["endpoints"]), want, "{r}");
    let r = ok(d.req(
        json!({"op": "endpoints", "pool": "default", "tags": {"country": "de"},
        "destination": "shop.example"}),
    ));
    assert_eq!(
        by_id(&r["endpoints"]),
        vec![(de, json!("available"))],
        "{r}"
    );
    // `state` is then the state for the destination.
    let r = ok(d.req(json!({"op": "endpoints", "tags": {"country": "us"},
        "destination": "shop.example", "state": "cooling"})));
    assert_eq!(
        by_id(&r["endpoints"]),
        vec![(banned, json!("cooling"))],
        "{r}"
    );
    let r = d.req(json!({"op": "endpoints", "destination": "shop.example/x"}));
    assert_eq!(err_code(&r), "bad_request", "{r}");
    // The CLI.
    let out = h.ok(&[
        "list",
        "--pool",
        "default",
        "--tag",
        "country=us",
        "--destination",
        "shop.example",
        "--json",
    ]);
    let rows: Value = serde_json::from_str(&out).unwrap();
    let got: Vec<(i64, Value)> = {
        let mut v: Vec<_> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].as_i64().unwrap(), r["destination_state"].clone()))
            .collect();
        v.sort_by_key(|(id, _)| *id);
        v
    };
    assert_eq!(got, want, "{out}");
    let table = h.ok(&[
        "list",
        "--tag",
        "country=de",
        "--destination",
        "shop.example",
    ]);
    assert!(table.contains("10.0.1.3"), "{table}");
    assert!(!table.contains("10.0.1.1"), "{table}");
}

/// `status` shows what a pool's pacing holds (hosts, pairs, hosts dropped, leases
/// answered `paced`) on the socket and in the CLI (table and --json); a pool that does
/// not pace shows none.
#[test]
fn status_shows_pacing_state() {
    let h = Home::new(Some(CONFIG));
    let d = h.serve();
    let g = ok(d.req(json!({"op": "lease", "pool": "shops", "destination": "slow.example"})));
    ok(d.req(json!({"op": "release", "lease": g["lease"]})));
    // The spare pool's endpoint is taken, so the fallback cannot serve: paced.
    let spare = ok(d.req(json!({"op": "lease", "pool": "spare"})));
    let r = d.req(json!({"op": "lease", "pool": "shops", "destination": "slow.example"}));
    assert_eq!(err_code(&r), "paced", "{r}");
    let s = ok(d.req(json!({"op": "status", "pool": "shops"})));
    assert_eq!(
        s["pools"][0]["pace"],
        json!({"hosts": 1, "pairs": 1, "hosts_dropped": 0, "paced": 1}),
        "{s}"
    );
    let s = ok(d.req(json!({"op": "status", "pool": "spare"})));
    assert!(s["pools"][0].get("pace").is_none(), "{s}");
    let out = h.ok(&["status", "--json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let shops = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == "shops")
        .unwrap();
    assert_eq!(shops["pace"]["paced"], 1, "{out}");
    let table = h.ok(&["status"]);
    assert!(
        table.contains("pool shops: pacing holds 1 host(s), 1 pair(s); 0 host(s) dropped, 1 lease(s) answered paced"),
        "{table}"
    );
    ok(d.req(json!({"op": "release", "lease": spare["lease"]})));
}
