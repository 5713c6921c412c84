//! Sniffing pools end to end through the real binary: `proxypool serve` with a `sniffing`
//! pool whose probe target is a local destination reached through local fake HTTP proxies
//! (tests/common/fakes.rs), so new endpoints move probe_allowed → available after one real probe.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::daemon::*;
use common::fakes::{self, fake_runtime, DestCfg, Fake, HttpProxyCfg};
use serde_json::{json, Value};

/// A runtime for the fakes, and the fakes: a destination and `n` HTTP proxies.
/// (Fields drop in order: the fakes before their runtime.)
struct Net {
    dest: Fake,
    proxies: Vec<Fake>,
    _rt: tokio::runtime::Runtime,
}

impl Net {
    fn new(n: usize) -> Net {
        let rt = fake_runtime();
        let (dest, proxies) = rt.block_on(async {
            let dest = fakes::dest(DestCfg {
                body: b"sniffed destination ok".to_vec(),
                ..DestCfg::default()
            })
            .await;
            let mut proxies = Vec::new();
            for _ in 0..n {
                proxies.push(fakes::http_proxy(HttpProxyCfg::default()).await);
            }
            (dest, proxies)
        });
        Net {
            dest,
            proxies,
            _rt: rt,
        }
    }

    /// The URL of proxy `i` (0-based).
    fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.proxies[i].port())
    }

    /// A sniffing `default` pool probing the destination, plus `sources`.
    fn config(&self, sources: &str) -> String {
        format!(
            r#"
[[pool]]
name = "default"
mode = "sniffing"

[pool.probe]
url = "http://127.0.0.1:{}/health"
expect_status = "200"
expect_body = "sniffed destination"
timeout = "2s"
interval = "0s"

[pool.cooldown]
base = "20m"
jitter = 0.0
{sources}
"#,
            self.dest.port()
        )
    }
}

fn write_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn write_list(path: &Path, urls: &[String]) {
    let mut s = String::from("# provider list\r\n");
    for u in urls {
        s.push_str(u);
        s.push_str("\r\n");
    }
    write_file(path, &s);
}

fn file_source(path: &Path, extra: &str) -> String {
    format!(
        "\n[[pool.source]]\nkind = \"file\"\npath = \"{}\"\n{extra}\n",
        path.display()
    )
}

fn command_source(argv: &[&str], extra: &str) -> String {
    let a: Vec<String> = argv.iter().map(|s| format!("{s:?}")).collect();
    format!(
        "\n[[pool.source]]\nkind = \"command\"\ncommand = [{}]\n{extra}\n",
        a.join(", ")
    )
}

fn kinds(h: &Home) -> Vec<String> {
    h.events()
        .into_iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect()
}

fn sniff_kinds(h: &Home) -> Vec<String> {
    kinds(h)
        .into_iter()
        .filter(|k| k.starts_with("sniff_"))
        .collect()
}

/// Id of the listed endpoint with this URL.
fn id_of(h: &Home, url: &str) -> i64 {
    h.list()
        .into_iter()
        .find(|e| e["url"] == json!(url))
        .unwrap_or_else(|| panic!("{url} not listed: {:?}", h.list()))["id"]
        .as_i64()
        .unwrap()
}

/// Poll `list --json` until `pred` holds (5 s at most).
fn wait_list(h: &Home, d: &Daemon, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    common::eventually(Duration::from_secs(5), what, || {
        let l = h.list();
        if pred(&l) {
            Ok(l)
        } else {
            Err(format!("{l:#?}\n{}", d.log_text()))
        }
    })
}

fn state_of<'a>(l: &'a [Value], url: &str) -> (&'a str, &'a str) {
    let e = l
        .iter()
        .find(|e| e["url"] == json!(url))
        .unwrap_or_else(|| panic!("{url} not listed"));
    (
        e["state"].as_str().unwrap(),
        e["reason"].as_str().unwrap_or(""),
    )
}

/// Hold `n` leases at once (waiting up to 5 s for the first), then release them all;
/// returns the endpoints leased.
fn leased(d: &Daemon, n: usize) -> BTreeSet<i64> {
    let mut c = d.conn();
    let mut ids = BTreeSet::new();
    let mut leases = Vec::new();
    for _ in 0..n {
        let g = ok(c.req(&json!({"op": "lease", "wait": "5s"})));
        assert_eq!(
            g["trial"],
            json!(false),
            "sniffing leases are never trials: {g}"
        );
        ids.insert(g["endpoint"].as_i64().unwrap());
        leases.push(lease_id(&g));
    }
    for l in leases {
        ok(c.req(&json!({"op": "release", "lease": l})));
    }
    ids
}

// ---------------------------------------------------------------------------------------

#[test]
fn serve_sniffs_once_on_startup_falling_back_in_order_then_leases_from_the_sniffed_list() {
    let net = Net::new(2);
    let h0 = tempfile::tempdir().unwrap();
    let good = h0.path().join("good.txt");
    let missing = h0.path().join("missing.txt");
    write_list(&good, &[net.url(0), net.url(1)]);
    let cfg = net.config(&format!(
        "{}{}{}",
        command_source(&["false"], "refresh = \"0s\""),
        file_source(&missing, "refresh = \"0s\""),
        file_source(&good, "refresh = \"0s\""),
    ));
    let h = Home::new(Some(&cfg));
    let d = h.serve();

    // The first lease waits for the prober's first probe and gets a sniffed endpoint.
    let first = leased(&d, 1);
    let ev = h.events();
    let k: Vec<&str> = ev.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        &k[..6],
        &[
            "sniff_on_startup",
            "sniff_failure",
            "sniff_failure",
            "added",
            "added",
            "sniff_success"
        ],
        "{ev:#?}"
    );
    let detail = |i: usize| ev[i]["detail"].as_str().unwrap_or("").to_string();
    assert!(detail(1).contains("command:false"), "{}", detail(1));
    assert!(
        detail(2).contains(&missing.display().to_string()),
        "{}",
        detail(2)
    );
    assert!(
        detail(5).contains(&good.display().to_string()) && detail(5).contains("2 endpoints"),
        "{}",
        detail(5)
    );
    let ids: BTreeSet<i64> = [
        ev[3]["endpoint"].as_i64().unwrap(),
        ev[4]["endpoint"].as_i64().unwrap(),
    ]
    .into_iter()
    .collect();
    assert!(first.is_subset(&ids), "{first:?} {ids:?}");
    for e in &ev[3..5] {
        assert_eq!(e["to"], json!("probe_allowed"), "{e}");
    }
    // After the startup sniff: only the prober's doing.
    for e in &ev[6..] {
        let kind = e["kind"].as_str().unwrap();
        assert!(
            ["trial_admitted", "probe_success", "state_changed"].contains(&kind),
            "{e}"
        );
    }

    // Sniff happens once: more leases, time passing, no other sniff.
    wait_list(&h, &d, "both probed", |l| {
        l.iter().all(|e| e["state"] == json!("available"))
    });
    assert_eq!(leased(&d, 4), ids);
    // Nothing to wait for: with every refresh "0s" no sniff may come, however long.
    let sniffs = sniff_kinds(&h);
    common::holds_for(
        Duration::from_millis(1300),
        "no sniff after startup",
        || {
            let now = sniff_kinds(&h);
            if now == sniffs {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    );
    assert_eq!(leased(&d, 4), ids);
    assert_eq!(
        sniff_kinds(&h),
        vec![
            "sniff_on_startup",
            "sniff_failure",
            "sniff_failure",
            "sniff_success"
        ]
    );

    // `proxypool sources`: each source, its last sniff, result and count, in order.
    let s: Value = serde_json::from_str(&h.ok(&["sources", "--json"])).unwrap();
    let s = s.as_array().unwrap();
    assert_eq!(s.len(), 3, "{s:#?}");
    assert_eq!(s[0]["source"], json!("command:false"));
    assert_eq!(s[0]["last_ok"], json!(false));
    assert!(s[0]["last_at"].is_string(), "{s:#?}");
    assert_eq!(s[1]["source"], json!(format!("file:{}", missing.display())));
    assert_eq!(s[1]["last_ok"], json!(false));
    assert_eq!(s[2]["source"], json!(format!("file:{}", good.display())));
    assert_eq!(s[2]["last_ok"], json!(true));
    assert_eq!(s[2]["last_count"], json!(2));
    let same: Value =
        serde_json::from_str(&h.ok(&["sources", "--pool", "default", "--json"])).unwrap();
    assert_eq!(same.as_array().unwrap().len(), 3);
    let none: Value =
        serde_json::from_str(&h.ok(&["sources", "--pool", "other", "--json"])).unwrap();
    assert_eq!(none, json!([]));
    let table = h.ok(&["sources"]);
    for want in ["command:false", "failed", "ok", "good.txt"] {
        assert!(table.contains(want), "{want} missing from:\n{table}");
    }
    drop(d);
}

#[test]
fn serve_refresh_replaces_the_sniffed_set_ignores_a_broken_list_and_takes_back_a_returner() {
    let net = Net::new(4);
    let h0 = tempfile::tempdir().unwrap();
    let list = h0.path().join("list.txt");
    write_list(&list, &[net.url(0), net.url(1)]);
    let h = Home::new(Some(&net.config(&file_source(&list, "refresh = \"1s\""))));
    let d = h.serve();
    let (u0, u1, u2, u3) = (net.url(0), net.url(1), net.url(2), net.url(3));
    wait_list(&h, &d, "startup set probed", |l| {
        l.len() == 2 && l.iter().all(|e| e["state"] == json!("available"))
    });
    let (p0, p1) = (id_of(&h, &u0), id_of(&h, &u1));
    assert_eq!(leased(&d, 4), BTreeSet::from([p0, p1]));

    // The provider now lists a different set: it replaces the startup set.
    write_list(&list, &[u2.clone(), u3.clone()]);
    let l = wait_list(&h, &d, "new set probed, old one removed", |l| {
        l.len() == 4
            && state_of(l, &u0) == ("disabled", "source_removed")
            && state_of(l, &u1) == ("disabled", "source_removed")
            && state_of(l, &u2).0 == "available"
            && state_of(l, &u3).0 == "available"
    });
    assert_eq!(l.len(), 4, "old rows are kept");
    let (p2, p3) = (id_of(&h, &u2), id_of(&h, &u3));
    assert_eq!(leased(&d, 8), BTreeSet::from([p2, p3]));
    assert!(sniff_kinds(&h).contains(&"sniff_refresh".to_string()));
    // The new ones went through one real probe through their proxy.
    for p in [&net.proxies[2], &net.proxies[3]] {
        assert!(
            p.seen()
                .iter()
                .any(|s| s.contains(&format!("127.0.0.1:{}/health", net.dest.port()))),
            "{:?}",
            p.seen()
        );
    }

    // A garbage answer (an HTML error page): sniff_failure, and nothing changes.
    let before = h.list();
    let failures = |h: &Home| {
        h.events()
            .into_iter()
            .filter(|e| e["kind"] == json!("sniff_failure"))
            .count()
    };
    let at_least = |h: &Home, n: usize| {
        let f = failures(h);
        if f >= n {
            Ok(())
        } else {
            Err(format!("{f} sniff_failure events"))
        }
    };
    let n0 = failures(&h);
    write_file(&list, "<html><body>502 Bad Gateway</body></html>\n");
    common::eventually(Duration::from_secs(10), "two sniff_failures", || {
        at_least(&h, n0 + 2)
    });
    write_file(&list, "");
    let n1 = failures(&h);
    common::eventually(Duration::from_secs(10), "one more sniff_failure", || {
        at_least(&h, n1 + 1)
    });
    assert_eq!(h.list(), before, "a broken list changed something");
    assert_eq!(leased(&d, 8), BTreeSet::from([p2, p3]));
    let s: Value = serde_json::from_str(&h.ok(&["sources", "--json"])).unwrap();
    assert_eq!(s[0]["last_ok"], json!(false), "{s}");

    // u0 comes back: probe_allowed, then available after one probe; same row.
    write_list(&list, &[u0.clone(), u2.clone(), u3.clone()]);
    wait_list(&h, &d, "returner probed", |l| {
        state_of(l, &u0) == ("available", "")
    });
    assert_eq!(id_of(&h, &u0), p0);
    let trail: Vec<(String, String)> = h
        .events()
        .into_iter()
        .filter(|e| e["endpoint"] == json!(p0) && e["kind"] == json!("state_changed"))
        .map(|e| {
            (
                e["from"].as_str().unwrap().to_string(),
                e["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let t = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        trail,
        vec![
            t("probe_allowed", "available"),
            t("available", "disabled"),
            t("disabled", "probe_allowed"),
            t("probe_allowed", "available"),
        ]
    );
    assert_eq!(leased(&d, 9), BTreeSet::from([p0, p2, p3]));
    assert_eq!(state_of(&h.list(), &u1), ("disabled", "source_removed"));
    drop(d);
}

#[test]
fn serve_asks_only_a_working_preferred_source_and_falls_back_in_config_order() {
    let net = Net::new(3);
    let h0 = tempfile::tempdir().unwrap();
    let dir = h0.path();
    let pref = dir.join("preferred.txt");
    write_list(&pref, &[net.url(2)]);
    let cmd = |n: usize| {
        command_source(
            &[
                "sh",
                "-c",
                &format!("echo run >> {}/ran{n}; echo {}", dir.display(), net.url(n)),
            ],
            "refresh = \"0s\"",
        )
    };
    // The preferred source comes last in config order.
    let cfg = net.config(&format!(
        "{}{}{}",
        cmd(0),
        cmd(1),
        file_source(&pref, "preferred = true\nrefresh = \"1s\"")
    ));
    let h = Home::new(Some(&cfg));
    let d = h.serve();
    let p2 = id_of(&h, &net.url(2));
    assert_eq!(leased(&d, 2), BTreeSet::from([p2]));
    let s: Value = serde_json::from_str(&h.ok(&["sources", "--json"])).unwrap();
    assert_eq!(s[0]["preferred"], json!(true), "preferred first: {s:#}");
    assert_eq!(s[0]["last_ok"], json!(true), "{s:#}");
    assert_eq!(s[1]["last_ok"], Value::Null, "never asked: {s:#}");
    assert_eq!(s[2]["last_ok"], Value::Null, "never asked: {s:#}");
    // Refreshes keep asking only the preferred source: two of them, and the commands
    // never ran.
    common::eventually(Duration::from_secs(5), "two sniff_refresh", || {
        let k = sniff_kinds(&h);
        match k.iter().filter(|k| *k == "sniff_refresh").count() {
            n if n >= 2 && k.last().is_some_and(|l| l == "sniff_success") => Ok(()),
            _ => Err(format!("{k:?}")),
        }
    });
    assert!(!dir.join("ran0").exists() && !dir.join("ran1").exists());

    // The preferred source fails: the next in config order is asked, the last is not.
    std::fs::remove_file(&pref).unwrap();
    let l = wait_list(&h, &d, "fallback source used", |l| {
        l.iter()
            .any(|e| e["url"] == json!(net.url(0)) && e["state"] == json!("available"))
    });
    assert_eq!(l.len(), 2, "{l:#?}");
    assert!(dir.join("ran0").exists());
    assert!(!dir.join("ran1").exists(), "the third source was asked");
    // The preferred source's endpoint is untouched by its fallback's list.
    assert_eq!(state_of(&l, &net.url(2)), ("available", ""));
    let ev = h.events();
    let fail = ev
        .iter()
        .rposition(|e| e["kind"] == json!("sniff_failure"))
        .unwrap();
    assert!(ev[fail]["detail"]
        .as_str()
        .unwrap()
        .contains("preferred.txt"));
    assert!(ev[fail + 1..]
        .iter()
        .any(|e| e["kind"] == json!("sniff_success")
            && e["detail"].as_str().unwrap().contains("ran0")));
    drop(d);
}

#[test]
fn serve_sniffs_on_exhaustion_once_and_a_listed_operator_disabled_endpoint_stays_disabled() {
    let net = Net::new(1);
    let closed = fakes::closed_port();
    let h0 = tempfile::tempdir().unwrap();
    let list = h0.path().join("list.txt");
    let dead = format!("http://127.0.0.1:{closed}");
    write_list(&list, &[dead.clone(), net.url(0)]);
    let h = Home::new(Some(&net.config(&file_source(&list, "refresh = \"0s\""))));
    let d = h.serve();
    // The dead one fails its probe and cools (20 min); the good one becomes available.
    wait_list(&h, &d, "probes settled", |l| {
        state_of(l, &dead).0 == "cooling" && state_of(l, &net.url(0)).0 == "available"
    });
    let count = |h: &Home| {
        sniff_kinds(h)
            .iter()
            .filter(|k| *k == "sniff_on_exhaustion")
            .count()
    };
    assert_eq!(count(&h), 0, "one endpoint is available: not exhausted");
    // The operator disables the last usable one: every endpoint is cooling or disabled.
    let good = id_of(&h, &net.url(0));
    h.ok(&["disable", &good.to_string()]);
    common::eventually(
        Duration::from_secs(5),
        "a sniff_on_exhaustion",
        || match count(&h) {
            0 => Err(format!("{:?}", sniff_kinds(&h))),
            _ => Ok(()),
        },
    );
    let before = h.list();
    // Rate limited: the loop keeps waking (every second), but no second exhaustion sniff
    // comes for 30 s. Nothing to wait for: watch it not happen.
    common::holds_for(
        Duration::from_millis(2500),
        "one exhaustion sniff",
        || match count(&h) {
            1 => Ok(()),
            _ => Err(format!("{:?}", sniff_kinds(&h))),
        },
    );
    assert_eq!(count(&h), 1, "{:?}", sniff_kinds(&h));
    assert_eq!(
        sniff_kinds(&h),
        vec![
            "sniff_on_startup",
            "sniff_success",
            "sniff_on_exhaustion",
            "sniff_success"
        ]
    );
    // The source still lists the disabled endpoint: it stays the operator's.
    let l = h.list();
    assert_eq!(l, before);
    assert_eq!(state_of(&l, &net.url(0)), ("disabled", "operator"));
    assert_eq!(err_code(&d.req(json!({"op": "lease"}))), "pool_exhausted");
    drop(d);
}
