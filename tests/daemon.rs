//! End-to-end tests of `proxypool serve` and the CLI through the real binary.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::daemon::*;
use common::fakes::{
    self, base64, fake_runtime, http_proxy, proxy_requests, scripted, Act, DestCfg, Fake,
    HttpProxyCfg,
};
use common::tools::free_port;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// A local destination and a tiny HTTP forward proxy.
// ---------------------------------------------------------------------------------------

const DEST_BODY: &str = "hello from the destination";

/// An HTTP proxy fake requiring Basic credentials `user:pass`.
async fn forward_proxy(user: &str, pass: &str) -> Fake {
    http_proxy(HttpProxyCfg {
        auth: Some((user.into(), pass.into())),
        ..Default::default()
    })
    .await
}

/// A GET through an HTTP proxy given as `http://user:pass@host:port`, in absolute form,
/// with a plain TCP client. Returns (status, body).
fn get_via_proxy(proxy: &str, url: &str) -> (u16, String) {
    let rest = proxy.strip_prefix("http://").expect("http proxy URL");
    let (cred, hostport) = rest
        .trim_end_matches('/')
        .rsplit_once('@')
        .expect("proxy URL with credentials");
    let mut s = TcpStream::connect(hostport).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let host = url
        .strip_prefix("http://")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    write!(
        s,
        "GET {url} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic {}\r\nConnection: close\r\n\r\n",
        base64(cred.as_bytes())
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn events_of(h: &Home, kind: &str) -> Vec<Value> {
    h.events()
        .into_iter()
        .filter(|e| e["kind"] == json!(kind))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Lease → real use through a proxy → report → states and events.
// ---------------------------------------------------------------------------------------

#[test]
fn lease_use_through_real_proxy_then_report_success_and_failure() {
    let rt = fake_runtime();
    let dst = rt.block_on(fakes::dest(DestCfg::default()));
    let dest = dst.port();
    let proxy = rt.block_on(forward_proxy("alice", "s3cret"));
    let pport = proxy.port();
    let h = Home::new(None);
    let d = h.serve();
    let url = format!("http://alice:s3cret@127.0.0.1:{pport}");
    let id = h.add(&[&url])[0];

    let mut c = d.conn();
    let g = ok(c.req(&json!({"op": "lease", "id": 1})));
    assert_eq!(g["endpoint"], json!(id));
    assert_eq!(g["trial"], json!(false));
    assert_eq!(
        g["proxy"],
        json!(url),
        "the lease hands out the credentials"
    );

    let target = format!("http://127.0.0.1:{dest}/some/page?q=1");
    let (status, body) = get_via_proxy(g["proxy"].as_str().unwrap(), &target);
    assert_eq!(status, 200);
    assert_eq!(body, DEST_BODY);
    {
        let log = proxy_requests(&proxy, "alice", "s3cret");
        assert_eq!(
            log,
            vec![(format!("GET {target} HTTP/1.1"), true)],
            "the proxy saw one absolute-form request with the right credentials"
        );
    }
    let r = ok(c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"})));
    assert_eq!(r["state"], json!("available"));

    let e = h.listed(id);
    assert_eq!(e["state"], json!("available"));
    assert_eq!(e["streak"], json!(0));
    let shown = e["url"].as_str().unwrap();
    assert!(
        !shown.contains("s3cret") && shown.contains("***"),
        "password redacted in list: {shown}"
    );

    // Second use fails at connect.
    let g2 = ok(c.req(&json!({"op": "lease"})));
    assert_eq!(g2["endpoint"], json!(id));
    let l2 = lease_id(&g2);
    let r = ok(
        c.req(&json!({"op": "report", "lease": l2, "outcome": "failure",
        "reason": "connect_refused", "phase": "connect"})),
    );
    assert_eq!(r["state"], json!("cooling"));

    let e = h.listed(id);
    assert_eq!(e["state"], json!("cooling"));
    assert_eq!(e["reason"], json!("connect_refused"));
    assert_eq!(e["phase"], json!("connect"));
    assert_eq!(e["streak"], json!(1));
    assert!(e["cooldown_until"].is_string(), "{e}");
    assert!(e["cooldown_ms"].as_u64().unwrap() > 0, "{e}");

    let evs = h.events();
    let report = evs
        .iter()
        .find(|ev| ev["kind"] == json!("report") && ev["lease"] == json!(l2))
        .unwrap_or_else(|| panic!("no report event for {l2}: {evs:?}"));
    assert_eq!(report["endpoint"], json!(id));
    assert_eq!(report["reason"], json!("connect_refused"));
    assert_eq!(report["phase"], json!("connect"));
    let changed = evs
        .iter()
        .find(|ev| ev["kind"] == json!("state_changed") && ev["lease"] == json!(l2))
        .unwrap_or_else(|| panic!("no state_changed event for {l2}: {evs:?}"));
    assert_eq!(changed["endpoint"], json!(id));
    assert_eq!(changed["from"], json!("available"));
    assert_eq!(changed["to"], json!("cooling"));
    assert_eq!(changed["reason"], json!("connect_refused"));
    assert!(
        report["id"].as_i64() < changed["id"].as_i64() || report["id"] == changed["id"],
        "events in order"
    );
    for ev in &evs {
        assert!(ev["at"].is_string(), "{ev}");
        for k in [
            "id", "kind", "endpoint", "from", "to", "reason", "phase", "detail", "lease",
        ] {
            assert!(ev.get(k).is_some(), "event without {k}: {ev}");
        }
        assert!(
            !ev.to_string().contains("s3cret"),
            "password in events: {ev}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Every op of the lease socket (docs/reference.md, "Ops") with its fields, and every error code.
// ---------------------------------------------------------------------------------------

#[test]
fn every_op_with_its_fields_and_error_codes() {
    let h = Home::new(None);
    let d = h.serve();
    let ids = h.add(&["http://bob:hunter2@127.0.0.1:9", "socks5h://127.0.0.1:10"]);
    let (a, b) = (ids[0], ids[1]);
    let mut c = d.conn();

    // ping, with string and number ids echoed.
    let p = ok(c.req(&json!({"op": "ping", "id": "abc"})));
    assert_eq!(p["id"], json!("abc"));
    assert_eq!(p["version"], json!(env!("CARGO_PKG_VERSION")));
    let p = ok(c.req(&json!({"op": "ping", "id": 42})));
    assert_eq!(p["id"], json!(42));
    let p = ok(c.req(&json!({"op": "ping"})));
    assert!(p.get("id").is_none(), "no id when none was sent: {p}");

    // lease: every field.
    let g = ok(c.req(&json!({"op": "lease", "id": 7, "pool": "default", "ttl": "30s"})));
    assert_eq!(g["id"], json!(7));
    assert!(g["lease"].is_string());
    assert!(g["endpoint"].is_i64());
    assert_eq!(g["trial"], json!(false));
    assert_eq!(g["expires_in_ms"], json!(30_000));
    let leased_a = g["endpoint"] == json!(a);
    let want_proxy = if leased_a {
        "http://bob:hunter2@127.0.0.1:9"
    } else {
        "socks5h://127.0.0.1:10"
    };
    assert_eq!(g["proxy"], json!(want_proxy));
    let g_default_ttl = ok(c.req(&json!({"op": "lease"})));
    assert_eq!(g_default_ttl["expires_in_ms"], json!(60_000));
    assert_ne!(
        g_default_ttl["endpoint"], g["endpoint"],
        "two leases spread over two endpoints"
    );
    let with_creds = if leased_a { &g } else { &g_default_ttl };
    assert_eq!(with_creds["proxy"], json!("http://bob:hunter2@127.0.0.1:9"));

    // status: counts by state and outstanding leases.
    let s = ok(c.req(&json!({"op": "status", "id": "s"})));
    assert_eq!(s["id"], json!("s"));
    let pools = s["pools"].as_array().unwrap();
    let def = pools
        .iter()
        .find(|p| p["pool"] == json!("default"))
        .unwrap();
    assert_eq!(def["available"], json!(2));
    assert_eq!(def["cooling"], json!(0));
    assert_eq!(def["probe_allowed"], json!(0));
    assert_eq!(def["disabled"], json!(0));
    assert_eq!(def["leases"], json!(2));
    let s = ok(c.req(&json!({"op": "status", "pool": "default"})));
    assert_eq!(s["pools"].as_array().unwrap().len(), 1);

    // endpoints: passwords redacted; filters.
    let e = ok(c.req(&json!({"op": "endpoints"})));
    let eps = e["endpoints"].as_array().unwrap();
    assert_eq!(eps.len(), 2);
    let text = e.to_string();
    assert!(!text.contains("hunter2"), "password leaked: {text}");
    let ea = eps.iter().find(|x| x["id"] == json!(a)).unwrap();
    assert_eq!(ea["url"], json!("http://bob:***@127.0.0.1:9"));
    assert_eq!(ea["state"], json!("available"));
    let e = ok(c.req(&json!({"op": "endpoints", "pool": "default", "state": "cooling"})));
    assert_eq!(e["endpoints"], json!([]));

    // release: nothing but ok (and id).
    let r = ok(c.req(&json!({"op": "release", "lease": lease_id(&g_default_ttl), "id": 3})));
    assert_eq!(r, json!({"ok": true, "id": 3}));
    // report success: the state.
    let r = ok(c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"})));
    assert_eq!(r["state"], json!("available"));
    // A second report on a finished lease says it was reported already.
    let r = c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"}));
    assert_eq!(err_code(&r), "unknown_lease");
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("already reported"), "{r}");
    let r = c.req(&json!({"op": "release", "lease": lease_id(&g_default_ttl)}));
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("already released"), "{r}");
    let r = c.req(&json!({"op": "release", "lease": "no-such-lease", "id": "x"}));
    assert_eq!(err_code(&r), "unknown_lease");
    assert_eq!(r["id"], json!("x"), "id echoed on errors");

    // Error codes.
    let r = c.req(&json!({"op": "fly", "id": 9}));
    assert_eq!(err_code(&r), "unknown_op");
    assert_eq!(r["id"], json!(9));
    let r = c.req(&json!({"id": 10}));
    assert_eq!(err_code(&r), "bad_request");
    let r = c.req(&json!({"op": "lease", "ttl": "soon"}));
    assert_eq!(err_code(&r), "bad_request");
    let r = c.req(&json!({"op": "lease", "pool": "nope"}));
    assert_eq!(err_code(&r), "unknown_pool");
    let r = c.req(&json!({"op": "status", "pool": "nope"}));
    assert_eq!(err_code(&r), "unknown_pool");

    // A failure report without a reason is refused and the lease stays live.
    let g = ok(c.req(&json!({"op": "lease"})));
    let r = c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "failure"}));
    assert_eq!(err_code(&r), "bad_request");
    let r = c.req(
        &json!({"op": "report", "lease": lease_id(&g), "outcome": "failure",
        "reason": "not_a_reason"}),
    );
    assert_eq!(err_code(&r), "bad_request");
    let r = ok(c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"})));
    assert_eq!(r["state"], json!("available"));

    // lease_expired.
    let g = ok(c.req(&json!({"op": "lease", "ttl": "200ms"})));
    assert_eq!(g["expires_in_ms"], json!(200));
    // The daemon's timer ends it: no live lease left.
    common::eventually(Duration::from_secs(5), "the 200 ms lease expires", || {
        let s = d.status();
        if s["leases"] == json!(0) {
            Ok(())
        } else {
            Err(s.to_string())
        }
    });
    let r = c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"}));
    assert_eq!(err_code(&r), "lease_expired");

    // disable / enable by id and by URL.
    let r = ok(c.req(&json!({"op": "disable", "endpoint": a, "reason": "maintenance"})));
    assert_eq!(r["state"], json!("disabled"));
    assert_eq!(r["endpoint"], json!(a));
    let r = ok(c.req(&json!({"op": "enable", "endpoint": a})));
    assert_eq!(r["state"], json!("probe_allowed"));
    // static-no-ping: the next lease is that endpoint's single trial.
    let g = ok(c.req(&json!({"op": "lease"})));
    assert_eq!(g["endpoint"], json!(a));
    assert_eq!(g["trial"], json!(true));
    let r = ok(c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"})));
    assert_eq!(r["state"], json!("available"));
    let r = ok(c.req(&json!({"op": "disable", "endpoint": "socks5h://127.0.0.1:10"})));
    assert_eq!(r["state"], json!("disabled"));
    assert_eq!(r["endpoint"], json!(b));
    let r = ok(c.req(&json!({"op": "enable", "endpoint": b, "now": true})));
    assert_eq!(r["state"], json!("available"));
    let r = c.req(&json!({"op": "disable", "endpoint": 99999}));
    assert_eq!(err_code(&r), "bad_request");

    // pool_exhausted: nothing cooling → no retry_after_ms at all (no deadline to wait for).
    ok(c.req(&json!({"op": "disable", "endpoint": a})));
    ok(c.req(&json!({"op": "disable", "endpoint": b})));
    let r = c.req(&json!({"op": "lease", "id": "ex"}));
    assert_eq!(err_code(&r), "pool_exhausted");
    assert_eq!(r["id"], json!("ex"));
    assert!(
        r["error"].get("retry_after_ms").is_none() && r.get("retry_after_ms").is_none(),
        "no retry_after_ms when nothing cools: {r}"
    );
    // One cooling (default base 60s ± 10%) → retry_after_ms is a number.
    ok(c.req(&json!({"op": "enable", "endpoint": a, "now": true})));
    let g = ok(c.req(&json!({"op": "lease"})));
    let r = ok(c.req(
        &json!({"op": "report", "lease": lease_id(&g), "outcome": "failure",
        "reason": "connect_timeout", "phase": "no_such_phase", "detail": "test"}),
    ));
    assert_eq!(r["state"], json!("cooling"));
    assert_eq!(
        h.listed(a)["phase"],
        Value::Null,
        "unknown phase stored as null"
    );
    let r = c.req(&json!({"op": "lease"}));
    assert_eq!(err_code(&r), "pool_exhausted");
    for ms in [&r["error"]["retry_after_ms"], &r["retry_after_ms"]] {
        let ms = ms
            .as_u64()
            .unwrap_or_else(|| panic!("retry_after_ms is a number: {r}"));
        assert!((50_000..=66_000).contains(&ms), "retry_after_ms {ms}");
    }
    let s = ok(c.req(&json!({"op": "status"})));
    let def = &s["pools"][0];
    assert_eq!(
        (
            def["available"].clone(),
            def["cooling"].clone(),
            def["disabled"].clone()
        ),
        (json!(0), json!(1), json!(1))
    );
    assert_eq!(def["leases"], json!(0));
}

// ---------------------------------------------------------------------------------------
// Malformed input, size limits, stalled clients, many connections.
// ---------------------------------------------------------------------------------------

#[test]
fn malformed_line_gets_bad_request_and_connection_stays_usable() {
    let h = Home::new(None);
    let d = h.serve();
    let mut c = d.conn();
    c.send_raw(b"this is not json\n").unwrap();
    assert_eq!(err_code(&c.read_json()), "bad_request");
    c.send_raw(b"[1,2,3]\n").unwrap();
    assert_eq!(err_code(&c.read_json()), "bad_request");
    c.send_raw(b"{\"op\":\"lease\",\"bogus\":1,\"id\":5}\n")
        .unwrap();
    let r = c.read_json();
    assert_eq!(err_code(&r), "bad_request");
    assert_eq!(r["id"], json!(5));
    // Pipelined requests are answered in order.
    c.send_raw(
        b"{\"op\":\"ping\",\"id\":1}\n{\"op\":\"nope\",\"id\":2}\n{\"op\":\"ping\",\"id\":3}\n",
    )
    .unwrap();
    let ids: Vec<Value> = (0..3).map(|_| c.read_json()["id"].clone()).collect();
    assert_eq!(ids, vec![json!(1), json!(2), json!(3)]);
    let p = ok(c.req(&json!({"op": "ping", "id": "after"})));
    assert_eq!(p["id"], json!("after"));
}

#[test]
fn line_of_64_kib_is_accepted_and_longer_line_gets_too_large_and_close() {
    let h = Home::new(None);
    let d = h.serve();
    // Exactly 64 KiB (newline excluded) is still accepted.
    let head = "{\"op\":\"ping\",\"id\":\"";
    let tail = "\"}";
    let pad = 64 * 1024 - head.len() - tail.len();
    let line = format!("{head}{}{tail}", "x".repeat(pad));
    assert_eq!(line.len(), 64 * 1024);
    let mut c = d.conn();
    c.send_raw(format!("{line}\n").as_bytes()).unwrap();
    let r = ok(c.read_json());
    assert_eq!(r["id"].as_str().unwrap().len(), pad);

    // One byte more: too_large, then the connection is closed.
    let line = format!("{head}{}{tail}", "x".repeat(pad + 1));
    let mut c = d.conn();
    // The server may close before it read everything; a write error is fine.
    let _ = c.send_raw(format!("{line}\n").as_bytes());
    let r = c.read_json();
    assert_eq!(err_code(&r), "too_large");
    assert!(c.closed_by_peer(), "connection closed after too_large");

    // The daemon still serves others.
    ok(d.req(json!({"op": "ping"})));
}

#[test]
fn stalled_half_line_client_does_not_delay_another() {
    let h = Home::new(None);
    let d = h.serve();
    let mut stalled = d.conn();
    stalled.send_raw(b"{\"op\":\"pi").unwrap();
    // The daemon holds the half line: its connection task is waiting for the rest.
    stalled.wait_read_by_peer();
    for _ in 0..5 {
        let mut other = d.conn();
        // A ping held behind the stalled line would never be answered, since that line
        // never ends until below: the read's deadline would pass instead.
        let answer = other.try_req(&json!({"op": "ping"}));
        assert!(
            answer.is_ok(),
            "ping held behind a stalled line: {answer:?}"
        );
        ok(answer.unwrap());
    }
    // The stalled client finishes its line and is answered too.
    stalled.send_raw(b"ng\",\"id\":\"late\"}\n").unwrap();
    assert_eq!(ok(stalled.read_json())["id"], json!("late"));
}

#[test]
fn two_thousand_concurrent_connections_all_get_answers() {
    const N: usize = 2000;
    // One descriptor per connection here (no cloned stream) and one in the daemon, whose
    // cap is set above N so the default (half its open-file limit) does not decide.
    let need = N as u64 + 200;
    let limit = raise_nofile(need);
    if limit < need {
        let hard = hard_nofile();
        let _: Option<()> = common::tools::skip_unless_ci(
            &format!(
                "the open-file limit is {limit} (hard limit {hard}), below the {need} \
                 that {N} concurrent connections need"
            ),
            "raise the hard limit: `ulimit -Hn` as root, or LimitNOFILE= in a unit",
        );
        return;
    }
    let h = Home::new(Some(&format!("[server]\nmax_connections = {}\n", N + 100)));
    let d = h.serve();
    let threads = 8;
    let per = N / threads;
    let barrier = Arc::new(Barrier::new(threads));
    let mut hs = Vec::new();
    for t in 0..threads {
        let (sock, barrier) = (d.socket.clone(), barrier.clone());
        hs.push(thread::spawn(move || {
            let conns: Vec<std::os::unix::net::UnixStream> = (0..per)
                .map(|_| {
                    let s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    s
                })
                .collect();
            // Every connection is open before anyone sends.
            barrier.wait();
            for (i, mut c) in conns.iter().enumerate() {
                let id = t * per + i;
                c.write_all(format!("{{\"op\":\"ping\",\"id\":{id}}}\n").as_bytes())
                    .unwrap();
            }
            let mut answered = 0;
            for (i, c) in conns.iter().enumerate() {
                let mut line = String::new();
                BufReader::new(c).read_line(&mut line).unwrap();
                let r = ok(serde_json::from_str(&line).unwrap());
                assert_eq!(r["id"], json!(t * per + i));
                answered += 1;
            }
            answered
        }));
    }
    let total: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, per * threads);
    assert_eq!(total, N, "every one of the {N} connections answered");
    ok(d.req(json!({"op": "ping"})));
}

/// The hard `RLIMIT_NOFILE`, for the message of a test that cannot raise the soft one.
#[allow(clippy::unnecessary_cast)]
fn hard_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscall on a local struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    r.rlim_max as u64
}

// ---------------------------------------------------------------------------------------
// Trials: the stampede, TTL expiry and release of a trial.
// ---------------------------------------------------------------------------------------

/// Lease every endpoint once and report a failure, so all of them cool.
fn cool_all(d: &Daemon, ids: &[i64]) {
    let mut c = d.conn();
    let mut seen = HashSet::new();
    let mut leases = Vec::new();
    for _ in ids {
        let g = ok(c.req(&json!({"op": "lease"})));
        assert_eq!(g["trial"], json!(false));
        seen.insert(g["endpoint"].as_i64().unwrap());
        leases.push(lease_id(&g));
    }
    assert_eq!(
        seen,
        ids.iter().copied().collect(),
        "one lease per endpoint"
    );
    for l in leases {
        let r = ok(
            c.req(&json!({"op": "report", "lease": l, "outcome": "failure",
            "reason": "connect_refused", "phase": "connect"})),
        );
        assert_eq!(r["state"], json!("cooling"));
    }
}

#[test]
fn stampede_after_cooldown_admits_exactly_one_trial_per_endpoint() {
    // Three seconds: the pool must still be exhausted when it is asked right after the
    // five reports, also on a loaded machine.
    let h = Home::new(Some(&ONE_SECOND_COOLDOWN.replace("\"1s\"", "\"3s\"")));
    let d = h.serve();
    let urls: Vec<String> = (0..5).map(|i| format!("http://10.9.8.{i}:3128")).collect();
    let ids = h.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    // Before the reports: a cooldown counts from its report, so the endpoints may come
    // due 3 s after this and not before.
    let cooled_at = Instant::now();
    cool_all(&d, &ids);
    let r = d.req(json!({"op": "lease"}));
    assert_eq!(err_code(&r), "pool_exhausted");
    assert!(
        r["error"]["retry_after_ms"].as_u64().unwrap() <= 3000,
        "{r}"
    );

    const N: usize = 500;
    let barrier = Arc::new(Barrier::new(N + 1));
    let mut hs = Vec::new();
    for _ in 0..N {
        let (sock, barrier) = (d.socket.clone(), barrier.clone());
        hs.push(
            thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let mut c = Conn::connect(&sock);
                    barrier.wait();
                    c.req(&json!({"op": "lease", "ttl": "30s"}))
                })
                .unwrap(),
        );
    }
    // Released the moment the cooldowns end: all five endpoints wait for their trial.
    d.wait_for_counts("probe_allowed", 5, 0);
    assert!(
        cooled_at.elapsed() >= Duration::from_secs(3),
        "cooled for under 3 s"
    );
    barrier.wait();
    let responses: Vec<Value> = hs.into_iter().map(|h| h.join().unwrap()).collect();

    let mut trials = Vec::new();
    let mut exhausted = 0;
    for r in &responses {
        if r["ok"] == json!(true) {
            assert_eq!(
                r["trial"],
                json!(true),
                "a non-trial lease of a cooling/probe_allowed endpoint: {r}"
            );
            trials.push(r["endpoint"].as_i64().unwrap());
        } else {
            assert_eq!(err_code(r), "pool_exhausted", "{r}");
            // The endpoints are on trial, none cooling: no deadline to send.
            assert!(
                r["error"].get("retry_after_ms").is_none(),
                "no retry_after_ms without a cooldown deadline: {r}"
            );
            exhausted += 1;
        }
    }
    assert_eq!(
        trials.len(),
        5,
        "exactly one trial per endpoint: {trials:?}"
    );
    let distinct: HashSet<i64> = trials.iter().copied().collect();
    assert_eq!(distinct, ids.iter().copied().collect::<HashSet<_>>());
    assert_eq!(exhausted, N - 5);
    let admitted = events_of(&h, "trial_admitted");
    assert_eq!(admitted.len(), 5, "{admitted:?}");
}

#[test]
fn unreported_trial_expires_and_released_trial_returns_the_claim() {
    let h = Home::new(Some(ONE_SECOND_COOLDOWN));
    let d = h.serve();
    let id = h.add(&["http://10.9.9.9:8080"])[0];
    cool_all(&d, &[id]);
    d.wait_for_counts("probe_allowed", 1, 0);
    let mut c = d.conn();

    let t0 = Instant::now();
    let g = ok(c.req(&json!({"op": "lease", "ttl": "300ms"})));
    assert_eq!(
        (g["endpoint"].as_i64(), &g["trial"]),
        (Some(id), &json!(true))
    );
    let first = lease_id(&g);
    // While the trial is claimed nobody else gets the endpoint.
    let r = c.req(&json!({"op": "lease"}));
    if r["ok"] == json!(true) {
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "second lease while the trial is claimed: {r}"
        );
    } else {
        assert_eq!(err_code(&r), "pool_exhausted");
        assert_eq!(
            r["error"]["retry_after_ms"],
            Value::Null,
            "nothing cools while the trial is in flight: {r}"
        );
    }
    // The 300 ms trial lease expires: its claim is given back.
    d.wait_for_counts("probe_allowed", 1, 0);
    let g = ok(c.req(&json!({"op": "lease", "ttl": "30s"})));
    assert_eq!(g["endpoint"], json!(id));
    assert_eq!(
        g["trial"],
        json!(true),
        "the expired trial gave its claim back"
    );
    let second = lease_id(&g);
    let ab = events_of(&h, "trial_abandoned");
    assert!(
        ab.iter()
            .any(|e| e["lease"] == json!(first) && e["endpoint"] == json!(id)),
        "trial_abandoned for the expired trial {first}: {ab:?}"
    );
    // Reporting the expired one is refused.
    let r = c.req(&json!({"op": "report", "lease": first, "outcome": "success"}));
    assert_eq!(err_code(&r), "lease_expired");

    // A released trial gives the claim back at once.
    ok(c.req(&json!({"op": "release", "lease": second})));
    let g = ok(c.req(&json!({"op": "lease"})));
    assert_eq!(g["endpoint"], json!(id));
    assert_eq!(g["trial"], json!(true));
    let ab = events_of(&h, "trial_abandoned");
    assert!(
        ab.iter().any(|e| e["lease"] == json!(second)),
        "trial_abandoned for the released trial {second}: {ab:?}"
    );
    assert_eq!(h.listed(id)["streak"], json!(1), "abandon keeps the streak");
    let r = ok(c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"})));
    assert_eq!(r["state"], json!("available"));
    assert_eq!(h.listed(id)["streak"], json!(0));
}

// ---------------------------------------------------------------------------------------
// Durability across kill -9, and a single daemon per socket.
// ---------------------------------------------------------------------------------------

#[test]
fn acknowledged_reports_survive_kill_9_and_restart_replaces_stale_socket() {
    let h = Home::new(None);
    let mut d = h.serve();
    const N: usize = 50;
    let urls: Vec<String> = (0..N).map(|i| format!("http://10.7.0.{i}:3128")).collect();
    let ids = h.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());

    // A second serve on the same socket is refused while this one runs.
    let o = h.run(&["serve"]);
    assert_eq!(o.code, Some(1), "second serve: {o:?}");
    assert!(
        o.stderr
            .contains("another proxypool daemon is already serving"),
        "{}",
        o.stderr
    );
    ok(d.req(json!({"op": "ping"})));

    let mut c = d.conn();
    let mut leases = HashMap::new();
    for _ in 0..N {
        let g = ok(c.req(&json!({"op": "lease"})));
        leases.insert(lease_id(&g), g["endpoint"].as_i64().unwrap());
    }
    let leased: HashSet<i64> = leases.values().copied().collect();
    assert_eq!(leased.len(), N);
    for l in leases.keys() {
        let r = ok(
            c.req(&json!({"op": "report", "lease": l, "outcome": "failure",
            "reason": "connect_timeout", "phase": "connect"})),
        );
        assert_eq!(r["state"], json!("cooling"));
    }
    d.kill9();
    assert!(h.socket.exists(), "kill -9 leaves the socket file behind");

    let d2 = h.serve();
    ok(d2.req(json!({"op": "ping"})));
    let list = h.list();
    for id in &ids {
        let e = list.iter().find(|e| e["id"] == json!(id)).unwrap();
        assert_eq!(e["state"], json!("cooling"), "{e}");
        assert_eq!(e["streak"], json!(1), "{e}");
        assert_eq!(e["reason"], json!("connect_timeout"), "{e}");
    }
    let reports = events_of(&h, "report");
    let reported: HashSet<String> = reports
        .iter()
        .filter_map(|e| e["lease"].as_str().map(str::to_string))
        .collect();
    assert_eq!(reports.len(), N);
    assert_eq!(reported, leases.keys().cloned().collect::<HashSet<_>>());
    // The restarted daemon still withholds them.
    let r = d2.req(json!({"op": "lease"}));
    assert_eq!(err_code(&r), "pool_exhausted");
    assert!(r["error"]["retry_after_ms"].as_u64().unwrap() > 1000, "{r}");
}

// ---------------------------------------------------------------------------------------
// Operator CLI against a running daemon.
// ---------------------------------------------------------------------------------------

/// Lease `n` times on one connection, releasing each; returns the endpoints seen.
fn lease_many(c: &mut Conn, n: usize) -> Vec<i64> {
    (0..n)
        .map(|_| {
            let g = ok(c.req(&json!({"op": "lease"})));
            ok(c.req(&json!({"op": "release", "lease": lease_id(&g)})));
            g["endpoint"].as_i64().unwrap()
        })
        .collect()
}

#[test]
fn cli_operator_commands_reach_the_running_daemon_at_once() {
    let h = Home::new(None);
    let d = h.serve();
    let mut c = d.conn();
    let ids = h.add(&[
        "http://u:p@10.1.0.1:3128",
        "http://10.1.0.2:3128",
        "socks5://10.1.0.3:1080",
    ]);
    let (a, b, cc) = (ids[0], ids[1], ids[2]);
    let seen: HashSet<i64> = lease_many(&mut c, 9).into_iter().collect();
    assert_eq!(
        seen,
        ids.iter().copied().collect(),
        "added while serving: leasable"
    );

    let out = h.ok(&["disable", &b.to_string(), "--reason", "flaky"]);
    assert_eq!(out.trim(), format!("{b}\tdisabled"));
    let seen = lease_many(&mut c, 30);
    assert!(!seen.contains(&b), "disabled endpoint leased: {seen:?}");
    let e = h.listed(b);
    assert_eq!(e["state"], json!("disabled"));
    assert_eq!(e["reason"], json!("operator"));

    // enable (no --now): one trial decides, the next lease is it.
    let out = h.ok(&["enable", &b.to_string()]);
    assert_eq!(out.trim(), format!("{b}\tprobe_allowed"));
    let g = ok(c.req(&json!({"op": "lease"})));
    assert_eq!(
        (g["endpoint"].as_i64(), &g["trial"]),
        (Some(b), &json!(true))
    );
    ok(c.req(&json!({"op": "release", "lease": lease_id(&g)})));
    ok(d.req(json!({"op": "disable", "endpoint": b})));

    let out = h.ok(&["enable", "--now", "http://10.1.0.2:3128"]);
    assert_eq!(out.trim(), format!("{b}\tavailable"));
    let seen = lease_many(&mut c, 6);
    assert!(
        seen.contains(&b),
        "enabled --now endpoint not leased: {seen:?}"
    );

    let out = h.ok(&["remove", &cc.to_string()]);
    assert_eq!(out.trim(), format!("{cc}\tremoved"));
    let seen = lease_many(&mut c, 30);
    assert!(!seen.contains(&cc), "removed endpoint leased: {seen:?}");

    let dd = h.add(&["http://10.1.0.4:3128"])[0];
    let seen = lease_many(&mut c, 3);
    assert!(
        seen.contains(&dd),
        "added endpoint not leased at once: {seen:?}"
    );

    let list = h.list();
    let states: HashMap<i64, String> = list
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: HashMap<i64, String> = [a, b, dd]
        .iter()
        .map(|&i| (i, "available".to_string()))
        .collect();
    assert_eq!(states, want);
    // The daemon agrees with the database.
    let s = ok(d.req(json!({"op": "status"})));
    assert_eq!(s["pools"][0]["available"], json!(3));
    assert_eq!(s["pools"][0]["disabled"], json!(0));
    let table = h.ok(&["list"]);
    assert!(table.contains("3 endpoints: 3 available"), "{table}");
    assert!(!table.contains(":p@"), "password in list: {table}");
    let kinds: Vec<String> = h
        .events()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    assert!(kinds.contains(&"added".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"removed".to_string()), "{kinds:?}");
    assert!(
        !d.log_text().contains("database is locked"),
        "{}",
        d.log_text()
    );
}

// ---------------------------------------------------------------------------------------
// Signals, TCP listener, `proxypool lease`.
// ---------------------------------------------------------------------------------------

#[test]
fn sigterm_exits_0_and_removes_the_socket() {
    let h = Home::new(None);
    let mut d = h.serve();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&h.socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    let st = d.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(st.code(), Some(0), "exit status {st}: {}", d.log_text());
    assert!(!h.socket.exists(), "socket file removed on SIGTERM");
}

#[test]
fn sigterm_ends_a_waiting_lease_and_exits_promptly() {
    let h = Home::new(None);
    let mut d = h.serve();
    let id = h.add(&["http://10.3.0.1:3128"])[0];
    h.ok(&["disable", &id.to_string()]);
    let sock = h.socket.clone();
    let (sent, taken) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || {
        let mut c = Conn::connect(&sock);
        c.send_raw(b"{\"op\":\"lease\",\"wait\":\"300s\"}\n")
            .unwrap();
        // Read by the daemon: the request is in flight, waiting for an endpoint.
        c.wait_read_by_peer();
        sent.send(()).unwrap();
        c.read_json()
    });
    taken.recv().unwrap();
    // Far sooner than the lease's 300 s wait: a daemon still waiting at the deadline is
    // killed and the test fails.
    let st = d.signal_and_wait(libc::SIGTERM, Duration::from_secs(25));
    assert_eq!(st.code(), Some(0), "exit status {st}: {}", d.log_text());
    let resp = waiter.join().unwrap();
    assert_eq!(resp["ok"], json!(false), "{resp}");
    // Ended by the shutdown, not by its wait running out (`pool_exhausted`).
    assert_eq!(err_code(&resp), "internal", "{resp}");
    assert!(
        resp["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{resp}"
    );
    assert!(!h.socket.exists());
}

#[test]
fn listen_tcp_requires_a_token_and_checks_it() {
    let h = Home::new(None);
    // Refused without a token: exit 2, nothing started.
    let o = h.run(&["serve", "--listen-tcp", "127.0.0.1:0"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("PROXYPOOL_TOKEN"), "{}", o.stderr);
    assert!(!h.socket.exists());

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let d = h.serve_with(
        &["--listen-tcp", &addr],
        &[("PROXYPOOL_TOKEN", "t0ken-xyz-0123456789")],
    );
    h.add(&["http://10.2.0.1:3128"]);
    let s = TcpStream::connect(&addr).expect("TCP listener up with the socket");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut req = |v: Value| -> Value {
        writeln!(w, "{v}").unwrap();
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?}: {e}"))
    };
    let resp = req(json!({"op": "ping"}));
    assert_eq!(resp["ok"], json!(false), "no token: {resp}");
    err_code(&resp);
    let resp = req(json!({"op": "lease", "token": "wrong"}));
    assert_eq!(resp["ok"], json!(false), "wrong token: {resp}");
    let resp = req(json!({"op": "ping", "token": "t0ken-xyz-0123456789", "id": 1}));
    assert_eq!(resp["ok"], json!(true), "{resp}");
    assert_eq!(resp["id"], json!(1));
    let resp = req(json!({"op": "lease", "token": "t0ken-xyz-0123456789"}));
    assert_eq!(resp["ok"], json!(true), "{resp}");
    assert_eq!(resp["proxy"], json!("http://10.2.0.1:3128"));
    // `import` reads a file of the daemon's: never for remote clients.
    let secret_file = h.dir.path().join("not-for-you.txt");
    std::fs::write(&secret_file, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let resp = req(json!({"op": "import", "token": "t0ken-xyz-0123456789", "path": secret_file}));
    assert_eq!(resp["ok"], json!(false), "{resp}");
    assert!(!resp.to_string().contains("root:x"), "{resp}");
    // Locally it only takes private files of this user, and never echoes their text.
    let resp = d.req(json!({"op": "import", "path": secret_file}));
    assert_eq!(resp["ok"], json!(false), "{resp}");
    assert!(!resp.to_string().contains("root:x"), "{resp}");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let resp = d.req(json!({"op": "import", "path": secret_file}));
    assert_eq!(resp["ok"], json!(false), "{resp}");
    assert!(!resp.to_string().contains("root:x"), "{resp}");
    assert!(
        secret_file.exists(),
        "only the CLI's own spill files are deleted"
    );
    // The Unix socket needs no token.
    ok(d.req(json!({"op": "ping"})));
}

#[test]
fn cli_lease_prints_url_or_json_and_fails_when_exhausted() {
    let h = Home::new(None);
    let o = h.run(&["lease"]);
    assert_eq!(o.code, Some(1), "no daemon: {o:?}");
    let _d = h.serve();
    let id = h.add(&["http://carol:pw0rd@10.3.0.1:3128"])[0];
    let out = h.ok(&["lease"]);
    assert_eq!(out, "http://carol:pw0rd@10.3.0.1:3128\n");
    let out = h.ok(&["lease", "--json", "--ttl", "45s"]);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["ok"], json!(true));
    assert_eq!(v["proxy"], json!("http://carol:pw0rd@10.3.0.1:3128"));
    assert_eq!(v["endpoint"], json!(id));
    assert_eq!(v["trial"], json!(false));
    assert_eq!(v["expires_in_ms"], json!(45_000));
    assert!(v["lease"].is_string());

    h.ok(&["disable", &id.to_string()]);
    let o = h.run(&["lease"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stdout.is_empty(), "{o:?}");
    assert!(o.stderr.contains("no endpoint available"), "{}", o.stderr);
    let o = h.run(&["lease", "--json"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    // The error object is printed for scripts, exactly as the socket answered it.
    let v: Value = serde_json::from_str(o.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    assert_eq!(v["ok"], json!(false), "{v}");
    assert_eq!(v["error"]["code"], json!("pool_exhausted"), "{v}");
    assert!(v["error"]["retry_after_ms"].is_null(), "{v}");
}

// ---------------------------------------------------------------------------------------
// Edge cases of the health states (docs/reference.md, "States") through the socket.
// ---------------------------------------------------------------------------------------

#[test]
fn late_failure_report_on_a_cooling_endpoint_does_not_extend_the_cooldown() {
    let h = Home::new(None);
    let d = h.serve();
    let id = h.add(&["http://10.4.0.1:3128"])[0];
    let mut c = d.conn();
    let g1 = ok(c.req(&json!({"op": "lease"})));
    let g2 = ok(c.req(&json!({"op": "lease"})));
    assert_eq!(
        (g1["endpoint"].as_i64(), g2["endpoint"].as_i64()),
        (Some(id), Some(id))
    );
    let r = ok(c.req(
        &json!({"op": "report", "lease": lease_id(&g1), "outcome": "failure",
        "reason": "connect_refused", "phase": "connect"}),
    ));
    assert_eq!(r["state"], json!("cooling"));
    let first_report = std::time::SystemTime::now();
    let before = h.listed(id);
    // A cooldown the late report restarted would end later than this one: let the wall
    // clock move on past the millisecond `cooldown_until` is written in.
    common::eventually(Duration::from_secs(1), "the wall clock moves on", || {
        let moved = first_report.elapsed().unwrap_or_default();
        if moved >= Duration::from_millis(20) {
            Ok(())
        } else {
            Err(format!("{moved:?}"))
        }
    });
    let r = ok(c.req(
        &json!({"op": "report", "lease": lease_id(&g2), "outcome": "failure",
        "reason": "connect_timeout", "phase": "connect"}),
    ));
    assert_eq!(r["state"], json!("cooling"));
    let after = h.listed(id);
    for k in ["streak", "cooldown_until", "cooldown_ms", "reason"] {
        assert_eq!(before[k], after[k], "late report changed {k}");
    }
    let late: Vec<Value> = events_of(&h, "report")
        .into_iter()
        .filter(|e| e["lease"] == json!(lease_id(&g2)))
        .collect();
    assert_eq!(late.len(), 1, "the late report is logged as an event");
    // A late success does not end the cooldown either.
    let g3 = d.req(json!({"op": "lease"}));
    assert_eq!(err_code(&g3), "pool_exhausted");
}

#[test]
fn operator_disable_during_a_trial_is_sticky() {
    let h = Home::new(Some(ONE_SECOND_COOLDOWN));
    let d = h.serve();
    let id = h.add(&["http://10.4.1.1:3128"])[0];
    cool_all(&d, &[id]);
    d.wait_for_counts("probe_allowed", 1, 0);
    let mut c = d.conn();
    let g = ok(c.req(&json!({"op": "lease"})));
    assert_eq!(g["trial"], json!(true));
    let out = h.ok(&["disable", &id.to_string()]);
    assert_eq!(out.trim(), format!("{id}\tdisabled"));
    let r = ok(c.req(&json!({"op": "report", "lease": lease_id(&g), "outcome": "success"})));
    assert_eq!(
        r["state"],
        json!("disabled"),
        "nothing automatic clears a disable"
    );
    let e = h.listed(id);
    assert_eq!(e["state"], json!("disabled"));
    assert_eq!(e["reason"], json!("operator"));
    assert_eq!(err_code(&c.req(&json!({"op": "lease"}))), "pool_exhausted");
}

#[test]
fn a_claimed_trial_is_admitted_again_after_kill_9() {
    let h = Home::new(Some(ONE_SECOND_COOLDOWN));
    let mut d = h.serve();
    let id = h.add(&["http://10.4.2.1:3128"])[0];
    cool_all(&d, &[id]);
    d.wait_for_counts("probe_allowed", 1, 0);
    let g = ok(d.req(json!({"op": "lease", "ttl": "1h"})));
    assert_eq!(g["trial"], json!(true));
    d.kill9();
    let d = h.serve();
    let e = h.listed(id);
    assert_eq!(e["state"], json!("probe_allowed"), "{e}");
    let g = ok(d.req(json!({"op": "lease"})));
    assert_eq!(
        (g["endpoint"].as_i64(), &g["trial"]),
        (Some(id), &json!(true))
    );
}

/// A trial's lease is answered before its claim is stored (the claim rides in the next
/// commit), but an acknowledged report of that trial has the claim stored before it.
#[test]
fn a_reported_trial_survives_kill_9_with_its_claim_stored_before_the_report() {
    // The first cooldown ends in a second; the trial's failure then cools for an hour, so
    // that it is still cooling after the kill, the restart and `list` on a loaded machine.
    let config = ONE_SECOND_COOLDOWN
        .replace("factor = 1.0", "factor = 3600.0")
        .replace("max = \"1s\"", "max = \"1h\"");
    let h = Home::new(Some(&config));
    let mut d = h.serve();
    let id = h.add(&["http://10.4.2.2:3128"])[0];
    cool_all(&d, &[id]);
    d.wait_for_counts("probe_allowed", 1, 0);
    let mut c = d.conn();
    let g = ok(c.req(&json!({"op": "lease", "ttl": "1h"})));
    assert_eq!(g["trial"], json!(true));
    let lease = lease_id(&g);
    let r = ok(c.req(
        &json!({"op": "report", "lease": lease, "outcome": "failure",
        "reason": "connect_refused", "phase": "connect"}),
    ));
    assert_eq!(r["state"], json!("cooling"));
    d.kill9();
    let _d = h.serve();
    let e = h.listed(id);
    assert_eq!(
        (&e["state"], &e["streak"]),
        (&json!("cooling"), &json!(2)),
        "{e}"
    );
    let of_lease = |kind: &str| -> Vec<i64> {
        events_of(&h, kind)
            .iter()
            .filter(|e| e["lease"] == json!(lease))
            .map(|e| e["id"].as_i64().unwrap())
            .collect()
    };
    let (claimed, reported) = (of_lease("trial_admitted"), of_lease("report"));
    assert_eq!((claimed.len(), reported.len()), (1, 1), "{:?}", h.events());
    assert!(
        claimed[0] < reported[0],
        "claim {claimed:?} after report {reported:?}"
    );
}

/// With nobody writing after it, a trial's claim still reaches the database.
#[test]
fn a_trial_claim_alone_is_committed_soon() {
    let h = Home::new(Some(ONE_SECOND_COOLDOWN));
    let d = h.serve();
    let id = h.add(&["http://10.4.2.3:3128"])[0];
    cool_all(&d, &[id]);
    d.wait_for_counts("probe_allowed", 1, 0);
    let g = ok(d.req(json!({"op": "lease", "ttl": "1h"})));
    assert_eq!(g["trial"], json!(true));
    let lease = lease_id(&g);
    common::eventually(
        Duration::from_secs(10),
        "the trial_admitted event stored",
        || {
            let found = events_of(&h, "trial_admitted");
            match found.iter().any(|e| e["lease"] == json!(lease)) {
                true => Ok(()),
                false => Err(format!("{found:?}")),
            }
        },
    );
}

#[test]
fn lease_with_wait_returns_the_trial_when_the_cooldown_ends() {
    let h = Home::new(Some(ONE_SECOND_COOLDOWN));
    let d = h.serve();
    let id = h.add(&["http://10.4.3.1:3128"])[0];
    cool_all(&d, &[id]);
    let t = Instant::now();
    let r = d.req(json!({"op": "lease", "wait": "200ms"}));
    assert_eq!(err_code(&r), "pool_exhausted");
    assert!(t.elapsed() >= Duration::from_millis(200), "waited");
    let mut c = d.conn();
    let g = ok(c.req(&json!({"op": "lease", "wait": "60s"})));
    let el = t.elapsed();
    assert_eq!(
        (g["endpoint"].as_i64(), &g["trial"]),
        (Some(id), &json!(true))
    );
    // Woken at the cooldown's end (1 s), not at the wait's (60 s, which would answer
    // `pool_exhausted`, and which the connection's read deadline does not reach).
    assert!(
        el >= Duration::from_millis(900),
        "lease answered after {el:?}"
    );
    assert!(el < Duration::from_secs(60), "lease answered after {el:?}");
}

#[test]
fn session_key_sticks_to_one_endpoint() {
    let h = Home::new(None);
    let d = h.serve();
    let ids = h.add(&[
        "http://10.4.4.1:3128",
        "http://10.4.4.2:3128",
        "http://10.4.4.3:3128",
    ]);
    let mut c = d.conn();
    let first = ok(c.req(&json!({"op": "lease", "session": "user-1"})))["endpoint"].clone();
    for _ in 0..5 {
        let g = ok(c.req(&json!({"op": "lease", "session": "user-1"})));
        assert_eq!(g["endpoint"], first);
    }
    // Without a session, leases go to the least-leased endpoints: the other two.
    let others: HashSet<i64> = lease_many(&mut c, 6).into_iter().collect();
    let want: HashSet<i64> = ids.iter().copied().filter(|i| json!(i) != first).collect();
    assert_eq!(others, want);
}

// ---------------------------------------------------------------------------------------
// `static` mode: the daemon's prober makes the single trial through the real proxy.
// ---------------------------------------------------------------------------------------

#[test]

fn static_mode_prober_recovers_through_a_real_proxy_and_leases_are_never_trials() {
    let rt = fake_runtime();
    let dst = rt.block_on(fakes::dest(DestCfg::default()));
    let dest = dst.port();
    let proxy = rt.block_on(forward_proxy("pr", "obe"));
    let pport = proxy.port();
    let silent_fake = rt.block_on(scripted(vec![Act::Hang]));
    let silent = silent_fake.port();
    let closed = common::fakes::closed_port();
    let cfg = format!(
        r#"
[[pool]]
name = "default"
mode = "static"

[pool.probe]
url = "http://127.0.0.1:{dest}/health"
expect_status = "200"
expect_body = "destination"
timeout = "60s"
interval = "0s"

[pool.cooldown]
base = "20m"
jitter = 0.0
"#
    );
    let h = Home::new(Some(&cfg));
    let d = h.serve();
    let good = h.add(&[&format!("http://pr:obe@127.0.0.1:{pport}")])[0];
    let refused = h.add(&[&format!("http://127.0.0.1:{closed}")])[0];
    let stalled = h.add(&[&format!("http://127.0.0.1:{silent}")])[0];

    let mut c = d.conn();
    // The stalled proxy's probe waits out its 60 s timeout: far past this.
    common::eventually(Duration::from_secs(20), "the probes settle", || {
        // A lease never hands out a probe_allowed endpoint, claimed or not.
        let r = c.req(&json!({"op": "lease"}));
        if r["ok"] == json!(true) {
            assert_eq!(r["trial"], json!(false), "{r}");
            assert_eq!(r["endpoint"], json!(good), "{r}");
            ok(c.req(&json!({"op": "release", "lease": lease_id(&r)})));
        } else {
            assert_eq!(err_code(&r), "pool_exhausted");
        }
        let g = h.listed(good);
        let f = h.listed(refused);
        if g["state"] == json!("available") && f["state"] == json!("cooling") {
            Ok(())
        } else {
            Err(format!("{g} {f}\n{}", d.log_text()))
        }
    });
    {
        let log = proxy_requests(&proxy, "pr", "obe");
        assert!(
            log.iter()
                .any(|(l, auth)| *auth
                    && l == &format!("GET http://127.0.0.1:{dest}/health HTTP/1.1")),
            "the probe went through the proxy in absolute form with credentials: {:?}",
            log
        );
    }
    let f = h.listed(refused);
    assert_eq!(f["reason"], json!("connect_refused"), "{f}");
    assert_eq!(f["phase"], json!("connect"), "{f}");
    // The stalled proxy's probe is still in flight (claimed): it stays probe_allowed and
    // is never leased.
    assert_eq!(h.listed(stalled)["state"], json!("probe_allowed"));
    let seen = lease_many(&mut c, 10);
    assert!(seen.iter().all(|&e| e == good), "{seen:?}");
    let kinds: Vec<String> = events_of(&h, "probe_success")
        .iter()
        .map(|e| e["endpoint"].to_string())
        .collect();
    assert!(kinds.contains(&good.to_string()), "{kinds:?}");
}

#[test]
fn removing_a_config_declared_endpoint_while_serving_keeps_list_and_daemon_consistent() {
    let h = Home::new(Some(
        r#"
[[endpoint]]
url = "http://10.6.0.1:3128"
"#,
    ));
    let d = h.serve();
    let list = h.list();
    assert_eq!(list.len(), 1, "{list:?}");
    let id = list[0]["id"].as_i64().unwrap();
    let g = ok(d.req(json!({"op": "lease"})));
    assert_eq!(g["endpoint"], json!(id));
    let out = h.ok(&["remove", &id.to_string()]);
    assert_eq!(out.trim(), format!("{id}\tremoved"));
    // Every later command agrees with the daemon: the endpoint is gone.
    assert_eq!(h.list(), Vec::<Value>::new());
    let s = ok(d.req(json!({"op": "status"})));
    assert_eq!(s["pools"][0]["available"], json!(0));
    // No endpoint left at all: the pool is empty, not exhausted.
    assert_eq!(err_code(&d.req(json!({"op": "lease"}))), "pool_empty");
    assert_eq!(h.list(), Vec::<Value>::new());
}

#[test]
fn cli_probe_while_serving_runs_in_the_daemon_and_applies_results() {
    let rt = fake_runtime();
    let dst = rt.block_on(fakes::dest(DestCfg::default()));
    let dest = dst.port();
    let proxy = rt.block_on(forward_proxy("alice", "s3cret"));
    let pport = proxy.port();
    let dead_fake = rt.block_on(scripted(vec![Act::Hang]));
    let dead = dead_fake.port();
    let cfg = format!(
        "[[pool]]\nname = \"default\"\n[pool.probe]\nurl = \"http://127.0.0.1:{dest}/\"\n\
         expect_body = \"hello\"\ntimeout = \"3s\"\n"
    );
    let h = Home::new(Some(&cfg));
    let d = h.serve();
    let good = h.add(&[&format!("http://alice:s3cret@127.0.0.1:{pport}")])[0];
    let bad = h.add(&[&format!("http://127.0.0.1:{dead}")])[0];

    // One good endpoint: exit 0, the result table names it ok.
    let out = h.run(&["probe", &good.to_string()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("ok"), "{}", out.stdout);

    // --all with a silent proxy: exit 1, JSON lines carry reason and phase, and the
    // daemon (the only writer) applied the failure at once.
    let out = h.run(&["probe", "--all", "--json"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let failed = lines.iter().find(|r| r["id"] == json!(bad)).unwrap();
    assert_eq!(failed["ok"], json!(false));
    assert_eq!(failed["reason"], json!("slow_response"));
    assert_eq!(failed["phase"], json!("response_head"));
    assert_eq!(failed["state"], json!("cooling"));
    assert_eq!(h.listed(bad)["state"], json!("cooling"));
    assert_eq!(h.listed(good)["state"], json!("available"));
    // The running daemon knows: the next leases never hand out the cooling endpoint.
    let mut c = d.conn();
    for _ in 0..3 {
        let g = ok(c.req(&json!({"op": "lease"})));
        assert_eq!(g["endpoint"], json!(good));
        ok(c.req(&json!({"op": "release", "lease": lease_id(&g)})));
    }
    assert!(!out.stderr.contains("database is locked"));
}

#[test]
fn a_line_that_is_not_utf8_gets_bad_request_and_the_connection_stays_usable() {
    let h = Home::new(None);
    let d = h.serve();
    let mut c = d.conn();
    c.send_raw(b"{\"op\":\"ping\",\"id\":\"\xff\"}\n{\"op\":\"ping\",\"id\":2}\r\n")
        .unwrap();
    let first = c.read_json();
    assert_eq!(first["ok"], json!(false), "{first}");
    assert_eq!(first["error"]["code"], json!("bad_request"), "{first}");
    let second = c.read_json();
    assert_eq!(second["ok"], json!(true), "{second}");
    assert_eq!(second["id"], json!(2));
}

#[test]
fn periodic_checks_probe_available_endpoints_every_interval() {
    // A destination that answers 200 once, then 403: the first probe (recovery) passes,
    // a later periodic check fails and cools the endpoint.
    let rt = fake_runtime();
    let dst = rt.block_on(fakes::dest(DestCfg {
        first_status: Some(200),
        status: 403,
        ..DestCfg::default()
    }));
    let dest = dst.port();
    let proxy = rt.block_on(forward_proxy("alice", "s3cret"));
    let pport = proxy.port();
    let cfg = format!(
        "[[pool]]\nname = \"default\"\nmode = \"static\"\n[pool.probe]\n\
         url = \"http://127.0.0.1:{dest}/\"\ntimeout = \"2s\"\ninterval = \"1s\"\n"
    );
    let h = Home::new(Some(&cfg));
    let _d = h.serve();
    let id = h.add(&[&format!("http://alice:s3cret@127.0.0.1:{pport}")])[0];
    let kinds = common::eventually(Duration::from_secs(8), "a periodic check fails", || {
        let kinds: Vec<String> = h
            .events()
            .iter()
            .filter(|e| e["endpoint"] == json!(id))
            .map(|e| e["kind"].as_str().unwrap_or("").to_string())
            .collect();
        if kinds.iter().any(|k| k == "probe_failure") {
            Ok(kinds)
        } else {
            Err(format!("{kinds:?}"))
        }
    });
    let first_ok = kinds.iter().position(|k| k == "probe_success").unwrap();
    let failed = kinds.iter().position(|k| k == "probe_failure").unwrap();
    assert!(first_ok < failed, "{kinds:?}");
    let e = h.listed(id);
    assert_eq!(e["state"], json!("cooling"));
    assert_eq!(e["reason"], json!("destination_status"));
}

fn run_with(
    h: &Home,
    args: &[&str],
    env: &[(&str, &std::path::Path)],
) -> (Option<i32>, String, String) {
    let mut c = h.cmd();
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn operator_commands_reach_the_daemon_of_their_own_database_only() {
    let h = Home::new(None);
    let d = h.serve();
    let ids = h.add(&[
        "http://a1.example:1",
        "http://a2.example:2",
        "http://a3.example:3",
    ]);
    // Another database, same socket setting: its commands must not touch the daemon's pool.
    let other_db = h.dir.path().join("other.db");
    let other = [("PROXYPOOL_DB", other_db.as_path())];
    let (code, _, err) = run_with(
        &h,
        &[
            "add",
            "http://b1.example:1",
            "http://b2.example:2",
            "http://b3.example:3",
        ],
        &other,
    );
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run_with(&h, &["remove", &ids[2].to_string()], &other);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(h.list().len(), 3, "the daemon's database lost nothing");
    let (_, out, _) = run_with(&h, &["list", "--json"], &other);
    let rest: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(
        rest.len(),
        2,
        "the other database lost its own endpoint {}",
        ids[2]
    );

    // Same database, a CLI whose socket setting differs from the daemon's (no
    // PROXYPOOL_SOCKET, another runtime dir): the lock file leads it to the daemon.
    let elsewhere = h.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let mut c = h.cmd();
    c.env_remove("PROXYPOOL_SOCKET")
        .env("XDG_RUNTIME_DIR", &elsewhere);
    let out = c.args(["disable", &ids[0].to_string()]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut conn = d.conn();
    for _ in 0..4 {
        let g = ok(conn.req(&json!({"op": "lease"})));
        assert_ne!(g["endpoint"], json!(ids[0]), "the daemon saw the disable");
        ok(conn.req(&json!({"op": "release", "lease": lease_id(&g)})));
    }
}

#[test]
fn a_large_import_while_serving_is_one_batch_and_leasable_at_once() {
    let h = Home::new(None);
    let d = h.serve();
    let mut text = String::from("# provider list\n");
    for i in 0..3000 {
        text.push_str(&format!(
            "socks5h://user{i}:secretpw{i}@10.{}.{}.1:1080\n",
            i / 250,
            i % 250
        ));
    }
    let file = h.dir.path().join("big.txt");
    std::fs::write(&file, &text).unwrap();
    let out = h.run(&["import", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(h.list().len(), 3000);
    let s = ok(d.conn().req(&json!({"op": "status"})));
    assert_eq!(
        s["pools"][0]["available"],
        json!(3000),
        "the daemon holds them all"
    );
    // The spilled file is gone, and a re-import (all duplicates) changes nothing.
    let leftovers: Vec<_> = std::fs::read_dir(h.db.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".import-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let again = h.run(&["import", file.to_str().unwrap()]);
    assert_eq!(again.code, Some(2), "{}", again.stderr);
    assert!(!again.stderr.contains("secretpw"), "{}", again.stderr);
    assert_eq!(h.list().len(), 3000);
}
