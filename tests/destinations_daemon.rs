//! Per-destination health through the real binary (docs/destinations.md): the socket fields
//! (`destination`, `schemes`, report by session, `duration_ms`), the CLI (`list
//! --destination`, `show`, `enable --destination`), and pairs across kill -9.

mod common;

use std::time::Duration;

use common::daemon::*;
use common::wait::eventually;
use serde_json::{json, Value};

/// Pairs cool for a minute: nothing in these tests waits for a deadline.
const MINUTE_COOLDOWN: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "60s"
factor = 1.0
max = "60s"
jitter = 0.0
"#;

fn err_message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn json_of(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Lease for `dest` on the daemon; returns (lease, endpoint).
fn lease_for(c: &mut Conn, dest: &str) -> (String, i64) {
    let g = ok(c.req(&json!({"op": "lease", "destination": dest})));
    (lease_id(&g), g["endpoint"].as_i64().unwrap())
}

fn ban(c: &mut Conn, lease: &str) {
    let r = ok(c.req(
        &json!({"op": "report", "lease": lease, "outcome": "failure",
        "reason": "destination_status", "phase": "response_head", "status": 403,
        "duration_ms": 85}),
    ));
    assert_eq!(r["state"], json!("available"), "{r}");
}

#[test]
fn socket_lease_and_report_with_destination_schemes_and_session() {
    let h = Home::new(Some(MINUTE_COOLDOWN));
    let d = h.serve();
    let ids = h.add(&["http://10.6.0.1:3128", "socks5h://10.6.0.2:1080"]);
    let mut c = d.conn();

    // The destination is normalised (case, port); the grant is an ordinary one.
    let (l, e) = lease_for(&mut c, "Shop.Example:443");
    assert_eq!(e, ids[0]);
    ban(&mut c, &l);
    // Endpoint 1 is banned for the shop only.
    for _ in 0..4 {
        let (l, e) = lease_for(&mut c, "shop.example");
        assert_eq!(e, ids[1]);
        ok(c.req(&json!({"op": "release", "lease": l})));
    }
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (l, e) = lease_for(&mut c, "news.example");
        seen.push(e);
        ok(c.req(&json!({"op": "release", "lease": l})));
    }
    assert!(seen.contains(&ids[0]), "{seen:?}");

    // schemes.
    for _ in 0..3 {
        let g = ok(c.req(&json!({"op": "lease", "schemes": ["socks5h"]})));
        assert_eq!(g["endpoint"], json!(ids[1]));
        ok(c.req(&json!({"op": "release", "lease": lease_id(&g)})));
    }
    // http-only for the shop: endpoint 1 is banned there, 2 is SOCKS: nothing.
    let r = c.req(&json!({"op": "lease", "destination": "shop.example", "schemes": ["http"]}));
    assert_eq!(err_code(&r), "pool_exhausted", "{r}");

    // `proxypool lease --destination/--scheme` ask the same.
    for _ in 0..2 {
        let v = json_of(&h.ok(&["lease", "--json", "--destination", "Shop.Example"]));
        assert_eq!(v["endpoint"], json!(ids[1]), "{v}");
        ok(c.req(&json!({"op": "release", "lease": v["lease"]})));
    }
    let v = json_of(&h.ok(&["lease", "--json", "--scheme", "http", "--scheme", "socks5h"]));
    ok(c.req(&json!({"op": "release", "lease": v["lease"]})));
    let o = h.run(&["lease", "--destination", "shop.example", "--scheme", "http"]);
    assert_eq!(o.code, Some(1), "exhausted: {o:?}");
    let o = h.run(&["lease", "--scheme", "gopher"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("gopher"), "{o:?}");
    let o = h.run(&["lease", "--destination", "shop.example/path"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("destination"), "{o:?}");

    // Bad input names the field and changes nothing.
    let bad = [
        (json!({"op": "lease", "schemes": ["gopher"]}), "gopher"),
        (json!({"op": "lease", "schemes": []}), "schemes"),
        (
            json!({"op": "lease", "destination": "shop.example/path"}),
            "destination",
        ),
        (json!({"op": "lease", "destination": ""}), "destination"),
        (
            json!({"op": "report", "lease": "x-1", "session": "s", "outcome": "success"}),
            "not both",
        ),
        (json!({"op": "report", "outcome": "success"}), "session"),
        (
            json!({"op": "report", "session": "s", "outcome": "success", "destination": "a b"}),
            "destination",
        ),
    ];
    for (req, word) in bad {
        let r = c.req(&req);
        assert_eq!(err_code(&r), "bad_request", "{req}: {r}");
        assert!(err_message(&r).contains(word), "{req}: {r}");
    }

    // `proxypool report --destination` mirrors the socket.
    let (l, e) = lease_for(&mut c, "cli.example");
    let out = h.ok(&[
        "report",
        &l,
        "--outcome",
        "failure",
        "--reason",
        "destination_status",
        "--status",
        "429",
        "--destination",
        "CLI.example:8443",
        "--duration-ms",
        "40",
    ]);
    assert_eq!(out.trim(), "available");
    let (l2, e2) = lease_for(&mut c, "cli.example");
    assert_ne!(e2, e, "banned for cli.example only");
    let o = h.run(&[
        "report",
        &l2,
        "--outcome",
        "success",
        "--destination",
        "cli.example/x",
    ]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("--destination"), "{o:?}");
    ok(c.req(&json!({"op": "release", "lease": l2})));

    // Report by session: on the endpoint the session is bound to.
    let g = ok(c.req(&json!({"op": "lease", "session": "s1", "schemes": ["socks5h"]})));
    ok(c.req(&json!({"op": "release", "lease": lease_id(&g)})));
    let r = ok(c.req(
        &json!({"op": "report", "session": "s1", "outcome": "success",
        "duration_ms": 120}),
    ));
    assert_eq!(r["state"], json!("available"));
    let r = ok(
        c.req(&json!({"op": "report", "pool": "default", "session": "s1",
        "outcome": "failure", "reason": "connect_refused", "phase": "connect"})),
    );
    assert_eq!(r["state"], json!("cooling"), "{r}");
    // A failure unbound it.
    let r = c.req(&json!({"op": "report", "session": "s1", "outcome": "success"}));
    assert_eq!(err_code(&r), "unknown_lease", "{r}");
    assert!(err_message(&r).contains("\"s1\""), "{r}");
    let r = c.req(&json!({"op": "report", "pool": "nope", "session": "s1", "outcome": "success"}));
    assert_eq!(err_code(&r), "unknown_pool", "{r}");

    // Events carry destination and status.
    let evs = h.events();
    let pair_report = evs
        .iter()
        .find(|e| e["kind"] == json!("report") && e["destination"] == json!("shop.example"))
        .unwrap_or_else(|| panic!("no pair report in {evs:?}"));
    assert_eq!(pair_report["status"], json!(403));
    let endpoint_wide = evs
        .iter()
        .find(|e| e["reason"] == json!("connect_refused") && e["kind"] == json!("report"))
        .unwrap();
    assert_eq!(endpoint_wide["destination"], Value::Null);
}

#[test]
fn cli_list_show_enable_destination_and_pairs_survive_kill_9() {
    let h = Home::new(Some(MINUTE_COOLDOWN));
    let mut d = h.serve();
    let ids = h.add(&["http://u:pw@10.6.1.1:3128", "http://10.6.1.2:3128"]);
    let mut c = d.conn();
    let (l, e) = lease_for(&mut c, "shop.example");
    assert_eq!(e, ids[0]);
    ban(&mut c, &l);
    d.kill9();
    let d = h.serve();
    let mut c = d.conn();
    // Restored: leases for the shop still skip endpoint 1.
    for _ in 0..3 {
        let (l, e) = lease_for(&mut c, "shop.example");
        assert_eq!(e, ids[1]);
        ok(c.req(&json!({"op": "release", "lease": l})));
    }

    let list = json_of(&h.ok(&["list", "--destination", "SHOP.example", "--json"]));
    let rows = list.as_array().unwrap();
    let by_id = |id: i64| rows.iter().find(|r| r["id"] == json!(id)).unwrap();
    assert_eq!(by_id(ids[0])["state"], json!("available"));
    assert_eq!(by_id(ids[0])["destination_state"], json!("cooling"));
    assert_eq!(by_id(ids[0])["pair"]["status"], json!(403));
    assert_eq!(by_id(ids[1])["destination_state"], json!("available"));
    assert_eq!(by_id(ids[1])["pair"], Value::Null);
    let table = h.ok(&["list", "--destination", "shop.example"]);
    assert!(
        table.contains("FOR shop.example") && table.contains("cooling"),
        "{table}"
    );
    assert!(!table.contains("pw@"), "{table}");

    let id1 = ids[0].to_string();
    let show = json_of(&h.ok(&["show", &id1, "--json"]));
    let pairs = show["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{show}");
    assert_eq!(
        (
            &pairs[0]["destination"],
            &pairs[0]["state"],
            &pairs[0]["reason"]
        ),
        (
            &json!("shop.example"),
            &json!("cooling"),
            &json!("destination_status")
        )
    );
    let text = h.ok(&["show", &id1]);
    assert!(text.contains("shop.example cooling"), "{text}");

    // Bad destinations are usage errors (exit 2) that name the value.
    for args in [
        vec!["list", "--destination", "shop.example/x"],
        vec!["enable", &id1, "--destination", "bad host"],
    ] {
        let o = h.run(&args);
        assert_eq!(o.code, Some(2), "{args:?}: {o:?}");
        assert!(o.stderr.contains("--destination"), "{o:?}");
    }

    // Through the daemon.
    let out = h.ok(&["enable", &id1, "--destination", "shop.example"]);
    assert_eq!(out.trim(), format!("{id1}\tshop.example\tavailable"));
    let (l, e) = lease_for(&mut c, "shop.example");
    assert_eq!(
        e, ids[0],
        "cleared: endpoint 1 is leased for the shop again"
    );
    ban(&mut c, &l);
    drop(c);
    drop(d);
    // Without a daemon, on the store.
    let out = h.ok(&["enable", &id1, "--destination", "shop.example"]);
    assert_eq!(out.trim(), format!("{id1}\tshop.example\tavailable"));
    let show = json_of(&h.ok(&["show", &id1, "--json"]));
    assert_eq!(show["pairs"], json!([]));
    let kinds: Vec<_> = h
        .events()
        .into_iter()
        .filter(|e| e["destination"] == json!("shop.example") && e["reason"] == json!("operator"))
        .map(|e| e["to"].clone())
        .collect();
    assert_eq!(kinds, vec![json!("available"), json!("available")]);
}

/// Blame through the real binary (docs/blame.md): two endpoints that cannot reach a
/// target make it down; the socket then refuses leases for it with `destination_down`
/// and when to come back, every other destination still leases, and nobody cooled.
#[test]
fn two_reports_through_two_endpoints_make_a_target_down_on_the_socket() {
    // The target stays down for a minute: the checks below (a CLI lease among them) must
    // all find it down, also on a loaded machine (the default is about 2 s).
    let config = format!(
        "{MINUTE_COOLDOWN}\n[pool.cooldown.target]\nbase = \"60s\"\nfactor = 1.0\nmax = \"60s\"\njitter = 0.0\n"
    );
    let h = Home::new(Some(&config));
    let d = h.serve();
    let ids = h.add(&["http://10.6.0.1:3128", "socks5h://10.6.0.2:1080"]);
    let mut c = d.conn();
    let unreachable = |c: &mut Conn, lease: &str| {
        ok(c.req(
            &json!({"op": "report", "lease": lease, "outcome": "failure",
            "reason": "upstream_unreachable", "phase": "proxy_handshake", "status": 502}),
        ))
    };
    let (l1, e1) = lease_for(&mut c, "dead.invalid:443");
    let r = unreachable(&mut c, &l1);
    assert_eq!(
        (r["state"].as_str(), r["blame"].as_str()),
        (Some("available"), Some("pending")),
        "{r}"
    );
    let (l2, e2) = lease_for(&mut c, "dead.invalid:443");
    assert_ne!(e1, e2, "the next lease for it prefers the other endpoint");
    let r = unreachable(&mut c, &l2);
    assert_eq!(r["blame"], json!("target"), "{r}");
    let refused = c.req(&json!({"op": "lease", "destination": "dead.invalid:443"}));
    assert_eq!(err_code(&refused), "destination_down", "{refused}");
    let after = refused["error"]["retry_after_ms"].as_u64().unwrap();
    assert!((50_000..=60_000).contains(&after), "{refused}");
    assert_eq!(
        refused["retry_after_ms"],
        refused["error"]["retry_after_ms"]
    );
    assert!(
        err_message(&refused).contains("dead.invalid:443"),
        "{refused}"
    );
    for dest in ["dead.invalid:80", "shop.example", "shop.example:443"] {
        let (l, _) = lease_for(&mut c, dest);
        ok(c.req(&json!({"op": "release", "lease": l})));
    }
    let status = ok(c.req(&json!({"op": "status"})));
    let pool = &status["pools"][0];
    assert_eq!(pool["targets_down"], json!(1), "{status}");
    assert_eq!(pool["down_targets"][0]["target"], json!("dead.invalid:443"));
    assert_eq!(
        pool["down_targets"][0]["reason"],
        json!("upstream_unreachable")
    );
    let table = h.ok(&["status"]);
    assert!(table.contains("TARGETS DOWN"), "{table}");
    assert!(table.contains("dead.invalid:443  next trial in"), "{table}");
    // The CLI says the same, exit 1, naming the target.
    let (_, err) = h.fails(1, &["lease", "--destination", "dead.invalid:443"]);
    assert!(err.contains("dead.invalid:443"), "{err}");
    for id in ids {
        assert_eq!(h.listed(id)["state"], json!("available"));
    }
    let events = h.events();
    let blames: Vec<_> = events
        .iter()
        .filter(|e| e["kind"] == "report")
        .map(|e| e["blame"].clone())
        .collect();
    assert_eq!(blames, [json!("pending"), json!("target")], "{events:?}");
    assert!(events.iter().any(|e| e["kind"] == "target_down"
        && e["destination"] == "dead.invalid:443"
        && e["endpoint"].is_null()));
}

/// The prober of a static pool whose probe site goes down (docs/blame.md, "A target that
/// is down"): nobody is cooled, and the site is tried again by its own cooldown, through
/// one endpoint, not at the next sweep; when it is back, target_up.
#[test]
fn a_probe_site_that_goes_down_cools_nobody_and_is_retried_by_its_own_cooldown() {
    use common::fakes::{closed_port, dest, fake_runtime, http_proxy, DestCfg, HttpProxyCfg};
    let rt = fake_runtime();
    let proxies = [
        rt.block_on(http_proxy(HttpProxyCfg::default())),
        rt.block_on(http_proxy(HttpProxyCfg::default())),
    ];
    let port = closed_port();
    let cfg = format!(
        r#"
[[pool]]
name = "default"
mode = "static"

[pool.probe]
url = "http://127.0.0.1:{port}/health"
interval = "1h"
timeout = "2s"
"#
    );
    let h = Home::new(Some(&cfg));
    let ids = h.add(&[
        &format!("http://127.0.0.1:{}", proxies[0].port()),
        &format!("http://127.0.0.1:{}", proxies[1].port()),
    ]);
    let d = h.serve();
    // Both start probe_allowed; their recovery probes find the site down: the first is
    // pending, the second makes it down. Nobody cools.
    let events = eventually(Duration::from_secs(10), "the probe target down", || {
        let ev = h.events();
        ev.iter()
            .any(|e| e["kind"] == "target_down")
            .then_some(ev.clone())
            .ok_or_else(|| format!("{ev:?}"))
    });
    let down = events.iter().find(|e| e["kind"] == "target_down").unwrap();
    assert_eq!(down["destination"], json!(format!("127.0.0.1:{port}")));
    for id in &ids {
        assert_ne!(h.listed(*id)["state"], json!("cooling"), "{events:?}");
    }
    // The site comes back: within seconds (its cooldown, not the hour-long sweep) one
    // probe tries it, it is up again, and the endpoints recover.
    let site = rt.block_on(dest(DestCfg {
        port: Some(port),
        ..Default::default()
    }));
    eventually(
        Duration::from_secs(20),
        "target_up and both endpoints available",
        || {
            let ev = h.events();
            let up = ev.iter().any(|e| e["kind"] == "target_up");
            let states: Vec<_> = ids
                .iter()
                .map(|id| h.listed(*id)["state"].clone())
                .collect();
            (up && states.iter().all(|s| s == "available"))
                .then_some(())
                .ok_or_else(|| format!("up {up}, states {states:?}"))
        },
    );
    drop(site);
    drop(d);
}

/// An operator clears a target that is down without a restart (docs/blame.md, "A target
/// that is down"): `enable --target HOST:PORT`, or the socket's `enable` with `target`.
/// A target no pool knows is refused with an error naming it, and nothing changes.
#[test]
fn enable_target_clears_a_down_target_without_a_restart() {
    let h = Home::new(Some(MINUTE_COOLDOWN));
    let d = h.serve();
    h.add(&["http://10.6.2.1:3128", "socks5h://10.6.2.2:1080"]);
    let mut c = d.conn();
    for _ in 0..2 {
        let (l, _) = lease_for(&mut c, "dead.invalid:443");
        ok(
            c.req(&json!({"op": "report", "lease": l, "outcome": "failure",
            "reason": "upstream_unreachable", "phase": "proxy_handshake"})),
        );
    }
    let refused = c.req(&json!({"op": "lease", "destination": "dead.invalid:443"}));
    assert_eq!(err_code(&refused), "destination_down", "{refused}");
    let out = h.ok(&["enable", "--target", "DEAD.invalid:443"]);
    assert_eq!(
        out.trim(),
        "default\tdead.invalid:443\tup (was down)",
        "{out}"
    );
    let (l, _) = lease_for(&mut c, "dead.invalid:443");
    ok(c.req(&json!({"op": "release", "lease": l})));
    let status = ok(c.req(&json!({"op": "status"})));
    assert_eq!(status["pools"][0]["targets_down"], json!(0), "{status}");
    let up: Vec<_> = h
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "target_up" && e["destination"] == "dead.invalid:443")
        .collect();
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0]["reason"], json!("operator"), "{up:?}");
    // Known (one failure pending contrast), not down: cleared, and said so.
    let (l, _) = lease_for(&mut c, "dead.invalid:443");
    ok(
        c.req(&json!({"op": "report", "lease": l, "outcome": "failure",
        "reason": "upstream_unreachable", "phase": "proxy_handshake"})),
    );
    let out = h.ok(&["enable", "--target", "dead.invalid:443"]);
    assert!(out.contains("was not down"), "{out}");
    // Unknown, or not a target: refused, naming it (exit 2; bad_request on the socket).
    let (_, err) = h.fails(2, &["enable", "--target", "never.example:443"]);
    assert!(
        err.contains("never.example:443") && err.contains("not known"),
        "{err}"
    );
    let (_, err) = h.fails(2, &["enable", "--target", "bad host:1"]);
    assert!(err.contains("--target"), "{err}");
    let (_, err) = h.fails(2, &["enable", "1", "--target", "dead.invalid:443"]);
    assert!(err.contains("--target"), "{err}");
    let r = c.req(&json!({"op": "enable", "target": "never.example:443"}));
    assert_eq!(err_code(&r), "bad_request", "{r}");
    assert!(err_message(&r).contains("never.example:443"), "{r}");
    let r = c.req(&json!({"op": "enable", "endpoint": 1, "target": "dead.invalid:443"}));
    assert_eq!(err_code(&r), "bad_request", "{r}");
    let (l, _) = lease_for(&mut c, "dead.invalid:443");
    ok(
        c.req(&json!({"op": "report", "lease": l, "outcome": "failure",
        "reason": "upstream_unreachable", "phase": "proxy_handshake"})),
    );
    let r = ok(c.req(&json!({"op": "enable", "target": "dead.invalid:443"})));
    assert_eq!(r["cleared"][0]["pool"], json!("default"), "{r}");
    assert_eq!(r["cleared"][0]["was_down"], json!(false), "{r}");
}

/// A 429 asking for a year's quiet holds the pair back at most the pool's cooldown `max`
/// (docs/selection.md, "Slow down, not banned"); `list --destination` shows the slow-down
/// where it shows pairs, and `enable ID --destination HOST` clears it.
#[test]
fn a_slow_down_is_capped_shown_and_cleared() {
    let cfg = format!("{MINUTE_COOLDOWN}\n[pool.pace]\ninterval = \"1s\"\nslow_down = true\n");
    let cfg = cfg.replace("max = \"60s\"", "max = \"10m\"");
    let h = Home::new(Some(&cfg));
    let d = h.serve();
    let ids = h.add(&["http://10.6.3.1:3128"]);
    let mut c = d.conn();
    let (l, _) = lease_for(&mut c, "shop.example");
    ok(
        c.req(&json!({"op": "report", "lease": l, "outcome": "failure",
        "reason": "destination_status", "phase": "response_head", "status": 429,
        "retry_after": "365d"})),
    );
    let paced = c.req(&json!({"op": "lease", "destination": "shop.example"}));
    assert_eq!(err_code(&paced), "paced", "{paced}");
    let after = paced["error"]["retry_after_ms"].as_u64().unwrap();
    assert!((590_000..=600_000).contains(&after), "{paced}");
    let id = ids[0].to_string();
    let list = json_of(&h.ok(&["list", "--destination", "shop.example", "--json"]));
    let row = &list[0];
    assert_eq!(row["destination_state"], json!("available"), "{row}");
    let next = row["slowed"]["next_use_in_ms"].as_u64().unwrap_or(0);
    assert!((590_000..=600_000).contains(&next), "{row}");
    let table = h.ok(&["list", "--destination", "shop.example"]);
    assert!(table.contains("SLOWED"), "{table}");
    let out = h.ok(&["enable", &id, "--destination", "shop.example"]);
    assert_eq!(out.trim(), format!("{id}\tshop.example\tavailable"));
    let (l, e) = lease_for(&mut c, "shop.example");
    assert_eq!(e, ids[0], "cleared: leased for the host at once");
    ok(c.req(&json!({"op": "release", "lease": l})));
    let cleared: Vec<_> = h
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "operator" && e["destination"] == "shop.example")
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(cleared.len(), 1, "{cleared:?}");
    assert!(cleared[0].contains("slow-down cleared"), "{cleared:?}");
    let list = json_of(&h.ok(&["list", "--destination", "shop.example", "--json"]));
    assert_eq!(list[0]["slowed"], Value::Null, "{list}");
}
