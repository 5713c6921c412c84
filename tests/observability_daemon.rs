//! `serve --http` through the real binary: `/healthz`, `/metrics` (checked by `promtool`
//! when installed; required when `CI` is set), `/api/status` against the socket's answer,
//! the page and the per-endpoint statistics in `show` / `list --json`; `events` filters;
//! the `status` table's next deadline.

mod common;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------------------------------

use common::daemon::{lease_id, ok as ok_resp, Home};
use common::tools::free_port;
use serde_json::{json, Value};

/// A static-no-ping pool with a ten-minute cooldown, so a failure leaves a deadline.
const TEN_MINUTE_COOLDOWN: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "10m"
factor = 1.0
max = "10m"
jitter = 0.0
"#;

/// A plain HTTP/1.1 GET; returns (status, body).
fn get_blocking(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        (head[9..12].parse().unwrap(), body.to_string())
    })
}

fn promtool_check(text: &str) {
    let Some(promtool) = common::tools::need("promtool", "apt-get install -y prometheus") else {
        return;
    };
    common::tools::promtool_check(&promtool, text);
}

fn metric_line<'a>(text: &'a str, series: &str) -> Option<&'a str> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .map(|l| l[series.len()..].trim())
}

#[test]
fn the_daemon_serves_metrics_status_and_statistics() {
    let home = Home::new(Some(TEN_MINUTE_COOLDOWN));
    let ids = home.add(&["http://10.9.0.1:8080", "http://u:pw@10.9.0.2:8080"]);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let d = home.serve_with(&["--http", &addr.to_string()], &[]);

    // The start line names the socket, the http address and the pools with their counts.
    let log = d.log_text();
    let start = log
        .lines()
        .find(|l| l.contains("serving"))
        .unwrap_or_else(|| panic!("{log}"));
    for want in [
        &addr.to_string(),
        "default=2",
        home.socket.to_str().unwrap(),
    ] {
        assert!(start.contains(want), "{want} not in start line {start:?}");
    }

    let (status, body) = get_blocking(addr, "/healthz");
    assert_eq!((status, body.as_str()), (200, "ok\n"));

    // Two uses of the first endpoint (round robin: leases 1 and 3), one failed use of
    // the second with the HTTP status the scraper saw.
    let mut c = d.conn();
    let mut by_endpoint: std::collections::HashMap<i64, Vec<String>> = Default::default();
    for _ in 0..3 {
        let g = ok_resp(c.req(&json!({"op": "lease"})));
        by_endpoint
            .entry(g["endpoint"].as_i64().unwrap())
            .or_default()
            .push(lease_id(&g));
    }
    let (a, b) = (ids[0], ids[1]);
    let (first, second) = if by_endpoint[&a].len() == 2 {
        (a, b)
    } else {
        (b, a)
    };
    let l = &by_endpoint[&first];
    ok_resp(
        c.req(&json!({"op": "report", "lease": l[0], "outcome": "success", "duration_ms": 100})),
    );
    ok_resp(
        c.req(&json!({"op": "report", "lease": l[1], "outcome": "success", "duration_ms": 200})),
    );
    let bad = c.req(&json!({"op": "report", "lease": by_endpoint[&second][0], "outcome": "success", "duration_ms": -5}));
    assert_eq!(bad["error"]["code"], "bad_request", "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("duration_ms"),
        "{bad}"
    );
    let r = ok_resp(
        c.req(&json!({"op": "report", "lease": by_endpoint[&second][0],
        "outcome": "failure", "reason": "destination_status", "status": 403})),
    );
    assert_eq!(r["state"], "cooling");

    // /api/status is the socket's status answer.
    let sock = ok_resp(c.req(&json!({"op": "status"})));
    let (status, body) = get_blocking(addr, "/api/status");
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(api["pools"][0]["cooling"], 1, "{body}");
    let strip = |mut v: Value| {
        // The deadline counts down between the two reads.
        v[0]["next_deadline_ms"] = Value::Null;
        v
    };
    assert_eq!(strip(api["pools"].clone()), strip(sock["pools"].clone()));
    let (status, _) = get_blocking(addr, "/api/status?pool=nope");
    assert_eq!(status, 404);

    // Statistics: EWMA 100 -> 130 ms (alpha 0.3), in /api/endpoints, list and show.
    let (_, body) = get_blocking(addr, "/api/endpoints");
    let eps: Value = serde_json::from_str(&body).unwrap();
    let st = eps["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == first)
        .unwrap()["stats"]
        .clone();
    assert_eq!(
        (
            st["leases"].clone(),
            st["successes"].clone(),
            st["failures"].clone()
        ),
        (json!(2), json!(2), json!(0)),
        "{st}"
    );
    assert!(
        (st["latency_ms"].as_f64().unwrap() - 130.0).abs() < 1e-6,
        "{st}"
    );
    assert!(st["last_success"].as_str().unwrap().ends_with('Z'), "{st}");
    let listed = home.listed(second);
    assert_eq!(listed["stats"]["failures"], 1, "{listed}");
    assert_eq!(listed["stats"]["leases"], 1, "{listed}");
    let shown: Value =
        serde_json::from_str(&home.ok(&["show", &first.to_string(), "--json"])).unwrap();
    assert_eq!(shown["stats"]["successes"], 2, "{shown}");
    let table = home.ok(&["show", &first.to_string()]);
    assert!(
        table.contains("100.0%") && table.contains("130 ms"),
        "{table}"
    );
    // The report's status is stored on its event.
    let evs = home.events();
    assert!(
        evs.iter()
            .any(|e| e["kind"] == "report" && e["status"] == 403),
        "{evs:?}"
    );

    // The page shows them.
    let (status, page) = get_blocking(addr, "/");
    assert_eq!(status, 200);
    for want in [
        "Pool default",
        "130 ms",
        "100.0%",
        "0.0%",
        "10.9.0.2",
        "u:***@",
    ] {
        assert!(page.contains(want), "{want} missing from the page:\n{page}");
    }
    assert!(!page.contains("pw@"), "password on the page");

    // /metrics counts what happened and passes promtool.
    let (status, text) = get_blocking(addr, "/metrics");
    assert_eq!(status, 200);
    let want = [
        (
            r#"proxypool_leases_total{pool="default",result="granted"}"#,
            "3",
        ),
        (
            r#"proxypool_reports_total{pool="default",outcome="success",reason="none"}"#,
            "2",
        ),
        (
            r#"proxypool_reports_total{pool="default",outcome="failure",reason="destination_status"}"#,
            "1",
        ),
        (
            r#"proxypool_transitions_total{pool="default",from="available",to="cooling",reason="destination_status"}"#,
            "1",
        ),
        (
            r#"proxypool_endpoints{pool="default",state="cooling"}"#,
            "1",
        ),
        (
            r#"proxypool_endpoints{pool="default",state="available"}"#,
            "1",
        ),
        (r#"proxypool_destination_bans{pool="default"}"#, "0"),
        (r#"proxypool_lease_wait_seconds_count{pool="default"}"#, "3"),
    ];
    for (series, value) in want {
        assert_eq!(metric_line(&text, series), Some(value), "{series}\n{text}");
    }
    let commits = metric_line(&text, "proxypool_store_commit_seconds_count").unwrap();
    assert!(commits.parse::<u64>().unwrap() >= 1, "{text}");
    assert!(!text.contains("10.9.0") && !text.contains("pw"), "{text}");
    promtool_check(&text);
}

#[test]
fn http_is_off_by_default_and_needs_a_token_off_loopback() {
    let home = Home::new(None);
    let o = home.run(&["serve", "--http", "0.0.0.0:9"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("PROXYPOOL_HTTP_TOKEN"), "{o:?}");
    let cfg = Home::new(Some("[server]\nhttp = \"0.0.0.0:9\"\n"));
    let o = cfg.run(&["serve"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("0.0.0.0:9"), "{o:?}");
    let bad = Home::new(Some("[server]\nhttp = \"localhost\"\n"));
    let o = bad.run(&["status"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("http"), "{o:?}");
    // `[server] http` starts the listener; the flag wins over it.
    let port = free_port();
    let cfg = Home::new(Some(&format!("[server]\nhttp = \"127.0.0.1:{port}\"\n")));
    let d = cfg.serve();
    let (status, _) = get_blocking(format!("127.0.0.1:{port}").parse().unwrap(), "/healthz");
    assert_eq!(status, 200);
    drop(d);
    let other = free_port();
    let d = cfg.serve_with(&["--http", &format!("127.0.0.1:{other}")], &[]);
    let (status, _) = get_blocking(format!("127.0.0.1:{other}").parse().unwrap(), "/healthz");
    assert_eq!(status, 200);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    drop(d);
    // PROXYPOOL_HTTP comes between the two.
    let third = free_port();
    let env_addr = format!("127.0.0.1:{third}");
    let d = cfg.serve_with(&[], &[("PROXYPOOL_HTTP", &env_addr)]);
    let (status, _) = get_blocking(env_addr.parse().unwrap(), "/healthz");
    assert_eq!(status, 200);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    drop(d);
    // Without either there is no listener, and the start line says so.
    let d = home.serve();
    let log = d.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("serving") && l.contains("http=-")),
        "{log}"
    );
}

#[test]
fn status_table_shows_the_next_deadline() {
    let home = Home::new(Some(TEN_MINUTE_COOLDOWN));
    home.add(&["http://10.9.0.1:8080"]);
    let d = home.serve();
    let table = home.ok(&["status"]);
    assert!(table.contains("NEXT DEADLINE"), "{table}");
    let g = ok_resp(d.req(json!({"op": "lease"})));
    ok_resp(d.req(json!({"op": "report", "lease": lease_id(&g), "outcome": "failure", "reason": "connect_refused"})));
    let table = home.ok(&["status"]);
    assert!(
        table.contains("in 9m 5") || table.contains("in 10m"),
        "{table}"
    );
}

fn event_lines(out: &str) -> Vec<Value> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn events_filter_by_kind_since_and_limit_and_follow_from_the_last_ten() {
    let home = Home::new(Some(TEN_MINUTE_COOLDOWN));
    let urls: Vec<String> = (1..=12)
        .map(|i| format!("http://10.9.1.{i}:8080"))
        .collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let ids = home.add(&urls);
    let d = home.serve();
    let g = ok_resp(d.req(json!({"op": "lease"})));
    ok_resp(d.req(json!({"op": "report", "lease": lease_id(&g), "outcome": "failure", "reason": "connect_refused", "status": 502})));
    let all = home.events();
    assert!(all.len() >= 14, "{all:?}");

    let reports = event_lines(&home.ok(&["events", "--json", "--kind", "report"]));
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0]["status"], 502, "{reports:?}");
    let two = event_lines(&home.ok(&[
        "events",
        "--json",
        "--kind",
        "report",
        "--kind",
        "state_changed",
    ]));
    assert_eq!(two.len(), 2, "{two:?}");
    let o = home.run(&["events", "--kind", "reports"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("state_changed"), "{o:?}");

    assert_eq!(
        event_lines(&home.ok(&["events", "--json", "--since", "1h"])).len(),
        all.len()
    );
    assert!(home
        .ok(&["events", "--json", "--since", "2099-01-01T00:00:00Z"])
        .trim()
        .is_empty());
    let o = home.run(&["events", "--since", "last tuesday"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    let last = event_lines(&home.ok(&["events", "--json", "--limit", "3"]));
    assert_eq!(last.len(), 3);
    assert_eq!(last[2]["id"], all.last().unwrap()["id"]);

    // --follow: exactly the last ten, then what happens next.
    let mut child = home
        .cmd()
        .args(["events", "--json", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout).lines() {
            if tx.send(l.unwrap()).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while lines.len() < 10 {
        lines.push(
            rx.recv_timeout(Duration::from_secs(10))
                .expect("backlog line"),
        );
    }
    let first: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(first["id"], all[all.len() - 10]["id"]);
    // Nothing more until something happens.
    assert!(rx.recv_timeout(Duration::from_millis(600)).is_err());
    home.ok(&["disable", &ids[5].to_string()]);
    let next: Value = serde_json::from_str(
        &rx.recv_timeout(Duration::from_secs(10))
            .expect("followed line"),
    )
    .unwrap();
    assert_eq!(next["endpoint"], ids[5]);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_daemon_gateway_is_counted_in_metrics() {
    use common::fakes::{self, DestCfg, HttpProxyCfg};
    use common::gateway::{
        connect_tunnel, get, proxy_auth, read_response, roundtrip, socks5_connect,
    };

    let rt = fakes::fake_runtime();
    let dest = rt.block_on(fakes::dest(DestCfg::default()));
    let up = rt.block_on(fakes::http_proxy(HttpProxyCfg::default()));
    let home = Home::new(None);
    home.add(&[&format!("http://127.0.0.1:{}", up.port())]);
    let http: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let gw: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _d = home.serve_with(
        &["--gateway", &gw.to_string(), "--http", &http.to_string()],
        &[],
    );
    let dport = dest.port();
    rt.block_on(async {
        let r = roundtrip(gw, &get(dport, "/", "Connection: close\r\n")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        let (mut s, r) = connect_tunnel(gw, dport, "").await;
        assert_eq!(r.status(), 200, "{}", r.head);
        s.write_all(b"GET /in HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_response(&mut s).await.unwrap().status(), 200);
        drop(s);
        let (s, code) = socks5_connect(gw, None, "127.0.0.1", dport).await;
        assert_eq!(code, 0);
        drop(s);
        let r = roundtrip(gw, &get(dport, "/", &proxy_auth("colour-blue", ""))).await;
        assert_eq!(r.status(), 400, "{}", r.head);
    });

    let want = [
        (
            r#"proxypool_gateway_requests_total{protocol="http_forward",outcome="ok"}"#,
            1,
        ),
        (
            r#"proxypool_gateway_requests_total{protocol="http_connect",outcome="ok"}"#,
            1,
        ),
        (
            r#"proxypool_gateway_requests_total{protocol="socks5",outcome="ok"}"#,
            1,
        ),
        (
            r#"proxypool_gateway_requests_total{protocol="http_forward",outcome="bad_request"}"#,
            1,
        ),
        (
            r#"proxypool_gateway_requests_total{protocol="socks5",outcome="exhausted"}"#,
            0,
        ),
        (
            r#"proxypool_gateway_upstream_attempts_total{pool="default",outcome="success"}"#,
            3,
        ),
        (
            r#"proxypool_gateway_upstream_attempts_total{pool="default",outcome="failure"}"#,
            0,
        ),
    ];
    // Byte totals are added when an upstream connection closes, just after the client's.
    let text = common::eventually(Duration::from_secs(5), "bytes counted both ways", || {
        let text = get_blocking(http, "/metrics").1;
        let moved = |d: &str| {
            metric_line(
                &text,
                &format!(r#"proxypool_gateway_bytes_total{{pool="default",direction="{d}"}}"#),
            )
            .is_some_and(|v| v.parse::<u64>().unwrap() > 0)
        };
        if moved("to_upstream") && moved("to_client") {
            Ok(text)
        } else {
            Err(text)
        }
    });
    for (series, value) in want {
        assert_eq!(
            metric_line(&text, series),
            Some(value.to_string().as_str()),
            "{series}\n{text}"
        );
    }
    for d in ["to_upstream", "to_client"] {
        let series = format!(r#"proxypool_gateway_bytes_total{{pool="default",direction="{d}"}}"#);
        let n: u64 = metric_line(&text, &series).unwrap().parse().unwrap();
        assert!(n > 0, "{series}\n{text}");
    }
    assert!(
        !text.contains("colour") && !text.contains("127.0.0.1"),
        "{text}"
    );
    promtool_check(&text);
}

/// The status page of a real daemon, as headless Chromium renders it.
#[test]
fn chromium_renders_the_daemons_status_page() {
    const EVIL: &str = "<script>alert(1)</script>";
    let Some(chromium) = common::tools::need("chromium", "apt-get install -y chromium") else {
        return;
    };
    let config = format!(
        "{TEN_MINUTE_COOLDOWN}\n[[pool]]\nname = \"residential\"\nmode = \"static-no-ping\"\n"
    );
    let home = Home::new(Some(&config));
    let labelled =
        common::daemon::ids(&home.ok(&["add", "--label", EVIL, "http://10.9.0.1:8080"]))[0];
    let plain = home.add(&["http://u:pw@10.9.0.2:8080"])[0];
    home.ok(&["add", "--pool", "residential", "socks5://10.9.0.3:1080"]);
    let http: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let d = home.serve_with(&["--http", &http.to_string()], &[]);

    let mut c = d.conn();
    let mut lease_of = std::collections::HashMap::new();
    for _ in 0..2 {
        let g = ok_resp(c.req(&json!({"op": "lease"})));
        lease_of.insert(g["endpoint"].as_i64().unwrap(), lease_id(&g));
    }
    ok_resp(c.req(&json!({"op": "report", "lease": lease_of[&labelled],
        "outcome": "success", "duration_ms": 80})));
    let r = ok_resp(c.req(&json!({"op": "report", "lease": lease_of[&plain],
        "outcome": "failure", "reason": "connect_refused"})));
    assert_eq!(r["state"], "cooling");
    // One live lease stays out on the second pool.
    ok_resp(c.req(&json!({"op": "lease", "pool": "residential"})));

    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(chromium)
        .args(common::tools::CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", &format!("http://{http}/")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::daemon::wait_output(out, Duration::from_secs(90))
        .expect("chromium did not finish in 90 s");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "Pool default",
        "Pool residential",
        "2 endpoints · 0 live leases",
        "1 endpoints · 1 live leases",
        "next cooldown ends in",
        "http://u:***@10.9.0.2:8080",
        "socks5://10.9.0.3:1080",
        "connect_refused",
        "100.0%",
        "0.0%",
        "80 ms",
        "<title>available: 1</title>",
        "<title>cooling: 1</title>",
        "transitions in the last hour",
        "Recent events",
    ] {
        assert!(dom.contains(want), "{want} missing from the DOM:\n{dom}");
    }
    // The rows carry state and reason.
    let row = |id: i64| {
        let at = dom
            .find(&format!("data-endpoint=\"{id}\""))
            .unwrap_or_else(|| panic!("no row for {id}:\n{dom}"));
        let end = dom[at..].find("</tr>").unwrap() + at;
        dom[at..end].to_string()
    };
    let bad = row(plain);
    assert!(
        bad.contains(">cooling<") && bad.contains(">connect_refused<"),
        "{bad}"
    );
    let good = row(labelled);
    assert!(
        good.contains(">available<") && good.contains("80 ms"),
        "{good}"
    );
    // The label is a text node: serialized escaped, never a script element.
    assert!(
        good.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{good}"
    );
    assert!(!dom.contains(EVIL) && !dom.contains("<script"), "{dom}");
    assert!(!dom.contains("pw@"), "password on the page");
}
