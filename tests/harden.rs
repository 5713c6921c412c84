//! Regression tests from the adversarial run (issue 13) through the real binary: one daemon
//! per database whatever the path, a `--socket` typo never deletes a file, private
//! folders and lock files, config and token floors, and credentials kept out of what
//! the daemon stores and prints.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::daemon::*;
use serde_json::{json, Value};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Run with `PROXYPOOL_SOCKET` removed, so `[server] socket` of the config decides.
fn run_without_socket_env(h: &Home, args: &[&str]) -> Out {
    let mut c = h.cmd();
    c.env_remove("PROXYPOOL_SOCKET")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let out = wait_output(child, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("`proxypool {}` did not finish in 10 s", args.join(" ")));
    Out::from(out, args)
}

#[test]
fn a_hard_link_to_the_database_is_refused_while_the_daemon_runs() {
    let h = Home::new(None);
    let d = h.serve();
    h.add(&["http://10.13.0.1:3128"]);
    let hard = h.dir.path().join("hard.db");
    std::fs::hard_link(&h.db, &hard).unwrap();
    let other = h.dir.path().join("run/other.sock");
    let hard_s = hard.to_str().unwrap();

    let o = h.run(&["--db", hard_s, "--socket", other.to_str().unwrap(), "serve"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("hard link"), "{}", o.stderr);
    assert!(o.stderr.contains("hard.db"), "{}", o.stderr);
    assert!(!other.exists(), "a second daemon bound {}", other.display());
    // CLI commands through the second name are refused too: no second WAL.
    let o = h.run(&["--db", hard_s, "list"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(!Path::new(&format!("{hard_s}-wal")).exists());
    // The first daemon still serves, untouched.
    assert_eq!(d.req(json!({"op": "ping"}))["ok"], json!(true));
}

#[test]
fn a_symlink_to_the_database_finds_the_running_daemon() {
    let h = Home::new(None);
    let d = h.serve();
    let id = h.add(&["http://10.13.0.2:3128"])[0];
    let link = h.dir.path().join("link.db");
    std::os::unix::fs::symlink(&h.db, &link).unwrap();
    let link_s = link.to_str().unwrap();
    let other = h.dir.path().join("run/other.sock");

    let o = h.run(&["--db", link_s, "--socket", other.to_str().unwrap(), "serve"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("already serving"), "{}", o.stderr);
    assert!(!other.exists(), "a second daemon bound {}", other.display());

    // An operator action through the symlink reaches the daemon that serves the file.
    h.ok(&["--db", link_s, "disable", &id.to_string()]);
    let r = d.req(json!({"op": "lease"}));
    assert_eq!(r["ok"], json!(false), "disabled endpoint leased: {r}");
    assert_eq!(r["error"]["code"], json!("pool_exhausted"), "{r}");
}

#[test]
fn serve_never_deletes_a_file_that_is_not_a_socket() {
    let h = Home::new(None);
    h.add(&["http://10.13.0.3:3128"]);
    let text = h.dir.path().join("notes.txt");
    std::fs::write(&text, "keep me\n").unwrap();

    let o = h.run(&["--socket", text.to_str().unwrap(), "serve"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("notes.txt"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&text).unwrap(), "keep me\n");

    // The database itself given as the socket: refused, every endpoint still there.
    let o = h.run(&["--socket", h.db.to_str().unwrap(), "serve"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("proxypool.db"), "{}", o.stderr);
    assert_eq!(h.list().len(), 1);
}

#[test]
fn config_server_socket_never_deletes_a_file_that_is_not_a_socket() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("precious.txt");
    std::fs::write(&text, "keep me\n").unwrap();
    let h = Home::new(Some(&format!(
        "[server]\nsocket = {:?}\n",
        text.to_str().unwrap()
    )));
    let o = run_without_socket_env(&h, &["serve"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("precious.txt"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&text).unwrap(), "keep me\n");
}

#[test]
fn a_stale_socket_is_replaced_and_a_live_one_is_not() {
    let h = Home::new(None);
    {
        // A socket file left by a crashed daemon: nobody answers.
        let l = std::os::unix::net::UnixListener::bind(&h.socket).unwrap();
        drop(l);
    }
    assert!(h.socket.exists());
    let d = h.serve();
    assert_eq!(d.req(json!({"op": "ping"}))["ok"], json!(true));
    // Another database pointed at the live socket: refused, the daemon unharmed.
    let other_db = h.dir.path().join("other.db");
    let o = h.run(&["--db", other_db.to_str().unwrap(), "serve"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("already serving"), "{}", o.stderr);
    assert_eq!(d.req(json!({"op": "ping"}))["ok"], json!(true));
}

/// Start `serve` from `c`, wait until `sock` exists, then stop it.
fn serve_until_bound(mut c: std::process::Command, sock: &Path) {
    c.arg("serve").stdout(Stdio::null()).stderr(Stdio::null());
    // Killed when this returns, or when the wait below fails.
    let _child = common::tools::Proc(c.spawn().unwrap());
    common::eventually(
        Duration::from_secs(10),
        "the daemon binds its socket",
        || {
            if sock.exists() {
                Ok(())
            } else {
                Err(format!("no {}", sock.display()))
            }
        },
    );
    assert!(sock.exists(), "daemon never bound {}", sock.display());
}

#[test]
fn folders_proxypool_creates_are_private_and_the_lock_file_is_made_0600() {
    // A missing XDG_RUNTIME_DIR is created 0700.
    let h = Home::new(None);
    let runtime = h.dir.path().join("fresh-runtime");
    let mut c = h.cmd();
    c.env("XDG_RUNTIME_DIR", &runtime)
        .env_remove("PROXYPOOL_SOCKET");
    serve_until_bound(c, &runtime.join("proxypool.sock"));
    assert_eq!(mode(&runtime), 0o700, "XDG_RUNTIME_DIR folder");

    // A socket in folders that do not exist yet: each created 0700.
    let deep = h.dir.path().join("sock/a/b.sock");
    let mut c = h.cmd();
    c.env("PROXYPOOL_SOCKET", &deep);
    serve_until_bound(c, &deep);
    assert_eq!(mode(&h.dir.path().join("sock")), 0o700);
    assert_eq!(mode(&h.dir.path().join("sock/a")), 0o700);

    // A database in a new folder: 0700; an existing world-readable lock file: 0600.
    let db = h.dir.path().join("newdir/pp.db");
    h.ok(&["--db", db.to_str().unwrap(), "add", "http://127.0.0.1:9"]);
    assert_eq!(mode(&h.dir.path().join("newdir")), 0o700);
    let lock = h.dir.path().join("data/proxypool.db.lock");
    std::fs::write(&lock, "").unwrap();
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
    h.ok(&["list"]);
    assert_eq!(mode(&lock), 0o600);
}

#[test]
fn reading_a_database_that_does_not_exist_is_an_error_and_creates_nothing() {
    let h = Home::new(None);
    let missing = h.dir.path().join("typo/dir/pp.db");
    let db = missing.to_str().unwrap();
    for args in [
        &["list"][..],
        &["list", "--destination", "example.com"],
        &["show", "1"],
        &["status"],
        &["events"],
        &["sources"],
    ] {
        let o = h.run(&[&["--db", db][..], args].concat());
        assert_eq!(o.code, Some(2), "{args:?}: {o:?}");
        assert!(
            o.stderr.contains("no database at") && o.stderr.contains("typo/dir/pp.db"),
            "{args:?}: {}",
            o.stderr
        );
    }
    assert!(!h.dir.path().join("typo").exists(), "a folder was created");
    // Writing commands create it, as before; then reading works.
    h.ok(&["--db", db, "add", "http://127.0.0.1:9"]);
    assert!(h.ok(&["--db", db, "list"]).contains("127.0.0.1:9"));
    // Endpoints declared in the config are what `list` would show: a new database is
    // created and synced with them, as by any command.
    let h = Home::new(Some("[[endpoint]]\nurl = \"http://127.0.0.1:7\"\n"));
    let fresh = h.dir.path().join("fresh.db");
    let out = h.ok(&["--db", fresh.to_str().unwrap(), "list"]);
    assert!(out.contains("127.0.0.1:7"), "{out}");
}

#[test]
fn a_sub_second_probe_interval_is_a_config_error() {
    let cfg = |interval: &str| {
        format!(
            "[[pool]]\nname = \"default\"\nmode = \"static\"\n[pool.probe]\nurl = \"http://127.0.0.1:9/\"\ninterval = \"{interval}\"\n"
        )
    };
    for bad in ["1ns", "999ms"] {
        let h = Home::new(Some(&cfg(bad)));
        let o = h.run(&["list"]);
        assert_eq!(o.code, Some(2), "{bad}: {o:?}");
        assert!(o.stderr.contains("probe.interval"), "{bad}: {}", o.stderr);
    }
    for good in ["0s", "1s", "5m"] {
        let h = Home::new(Some(&cfg(good)));
        h.ok(&["add", "http://127.0.0.1:9"]);
    }
}

#[test]
fn a_weak_tcp_token_is_refused() {
    let h = Home::new(None);
    for (token, why) in [
        (" ", "blank"),
        ("                 ", "blank"),
        ("hunter2", "at least 16"),
    ] {
        let mut c = h.cmd();
        c.env("PROXYPOOL_TOKEN", token)
            .args(["serve", "--listen-tcp", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = wait_output(c.spawn().unwrap(), Duration::from_secs(10)).expect("exits");
        let o = Out::from(out, &["serve"]);
        assert_eq!(o.code, Some(2), "{token:?}: {o:?}");
        assert!(o.stderr.contains(why), "{token:?}: {}", o.stderr);
        assert!(!o.stderr.contains("hunter2"), "token echoed: {}", o.stderr);
        assert!(!h.socket.exists());
    }
}

#[test]
fn sources_prints_a_command_source_redacted() {
    let h = Home::new(Some(
        r#"
[[pool]]
name = "sn"
mode = "sniffing"

[pool.probe]
url = "http://127.0.0.1:9/"
interval = "0s"

[[pool.source]]
kind = "command"
command = ["fetch-list", "--token", "t0psecret", "--api-key=k3y", "https://bob:pa55@lists.example/x"]
refresh = "0s"
"#,
    ));
    for args in [&["sources"][..], &["sources", "--json"][..]] {
        let out = h.ok(args);
        for secret in ["t0psecret", "k3y", "pa55"] {
            assert!(!out.contains(secret), "{args:?} printed {secret}: {out}");
        }
        assert!(out.contains("fetch-list"), "{out}");
        assert!(out.contains("bob:***@lists.example"), "{out}");
    }
}

#[test]
fn a_password_in_a_report_detail_is_never_stored() {
    let h = Home::new(None);
    let d = h.serve();
    h.add(&["http://alice:s3cr3t-pw@10.13.0.9:3128"]);
    let mut c = d.conn();
    let l = c.req(&json!({"op": "lease"}));
    assert_eq!(l["ok"], json!(true), "{l}");
    let detail = "ProxyError: http://alice:s3cr3t-pw@10.13.0.9:3128 refused; \
                  also tried socks5://carol:other-pw@10.0.0.1:1080 (password s3cr3t-pw)";
    let r = c.req(
        &json!({"op": "report", "lease": l["lease"], "outcome": "failure",
        "reason": "connect_refused", "phase": "connect", "detail": detail}),
    );
    assert_eq!(r["ok"], json!(true), "{r}");
    let events = h.ok(&["events", "--json"]);
    let listed = h.ok(&["list", "--json"]);
    let shown = h.ok(&["show", "1"]);
    for text in [&events, &listed, &shown] {
        assert!(!text.contains("s3cr3t-pw"), "{text}");
        assert!(!text.contains("other-pw"), "{text}");
    }
    let ev: Vec<Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let rep = ev
        .iter()
        .find(|e| e["kind"] == json!("report"))
        .unwrap_or_else(|| panic!("no report event: {events}"));
    assert!(
        rep["detail"]
            .as_str()
            .is_some_and(|s| s.contains("alice:***@10.13.0.9") && s.contains("carol:***@")),
        "{rep}"
    );
}

#[test]
fn a_far_or_malformed_retry_after_still_cools_the_endpoint() {
    // Default policy: max 30m, so a date in 2100 or a huge number is clamped to it.
    let h = Home::new(None);
    let d = h.serve();
    let values = [
        json!("Fri, 01 Jan 2100 00:00:00 GMT"),
        json!("99999999999999999999999"),
        json!(1e300),
        json!("120, 120"),
        json!("garbage"),
    ];
    let urls: Vec<String> = (0..values.len())
        .map(|i| format!("http://10.14.0.{}:3128", i + 1))
        .collect();
    let ids = h.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    let mut c = d.conn();
    for v in &values {
        let l = c.req(&json!({"op": "lease"}));
        assert_eq!(l["ok"], json!(true), "{l}");
        let r = c.req(
            &json!({"op": "report", "lease": l["lease"], "outcome": "failure",
            "reason": "destination_status", "status": 429, "retry_after": v}),
        );
        assert_eq!(r["ok"], json!(true), "{v}: {r}");
        assert_eq!(r["state"], json!("cooling"), "{v}: {r}");
    }
    for id in &ids {
        let e = h.listed(*id);
        assert_eq!(e["state"], json!("cooling"), "{e}");
        let ms = e["cooldown_ms"].as_u64().unwrap_or_else(|| panic!("{e}"));
        assert!(ms <= 30 * 60 * 1000, "bounded by max: {e}");
    }
    let events = h.events();
    for bad in ["120, 120", "garbage"] {
        assert!(
            events.iter().any(|e| e["detail"]
                .as_str()
                .is_some_and(|s| s.contains(bad) && s.contains("ignored"))),
            "{bad} noted: {events:?}"
        );
    }
}

/// A daemon with a TCP listener whose open-file limit is pinned at 256 (soft and hard, so
/// it cannot raise it), as in the adversarial run.
fn serve_tcp_with_256_fds(h: &Home, port: u16, token: &str) -> common::tools::Proc {
    use std::os::unix::process::CommandExt;
    let log = h.path("tcp-daemon.log");
    let mut c = h.cmd();
    c.env("PROXYPOOL_TOKEN", token)
        .env("RUST_LOG", "info")
        .args(["serve", "--listen-tcp", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: only setrlimit between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    wait_ping(&mut child, &h.socket, &log);
    common::tools::Proc(child)
}

#[test]
fn idle_tokenless_tcp_connections_do_not_starve_the_unix_socket() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;
    let h = Home::new(None);
    h.add(&["http://10.15.0.1:3128", "http://10.15.0.2:3128"]);
    let port = common::tools::free_port();
    let token = "a-long-enough-test-token-0123";
    let _d = serve_tcp_with_256_fds(&h, port, token);
    raise_nofile(4096);
    let idle: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert!(
        idle.len() > 300,
        "could only open {} connections",
        idle.len()
    );

    // The Unix socket still answers (Conn times out after 10 s), and so does the CLI.
    let mut c = Conn::connect(&h.socket);
    let l = c.req(&json!({"op": "lease"}));
    assert_eq!(l["ok"], json!(true), "{l}");
    let out = h.run(&["disable", "2", "--reason", "maintenance"]);
    assert_eq!(out.code, Some(0), "{out:?}");

    // Before the token is checked a peer learns nothing but that its token is wrong.
    drop(idle);
    // The daemon notices the dropped idle peers a moment later; until then the listener
    // is at its cap and closes new connections at once (a reset or an empty read).
    let tcp = |line: &str| -> String {
        common::eventually(
            Duration::from_secs(5),
            "an answer on TCP after the idle peers left",
            || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut r = String::new();
                let ok = s.write_all(line.as_bytes()).is_ok()
                    && BufReader::new(s).read_line(&mut r).is_ok_and(|n| n > 0);
                if ok {
                    Ok(r)
                } else {
                    Err("closed without an answer".to_string())
                }
            },
        )
    };
    for line in [
        "{\"op\":\"nosuch\",\"id\":7}\n",
        "{\"op\":\"lease\"}\n",
        "not json\n",
    ] {
        let r = tcp(line);
        assert!(r.contains("token"), "{line}: {r}");
        assert!(!r.contains("unknown_op") && !r.contains("release"), "{r}");
    }
    let r = tcp(&format!("{{\"op\":\"nosuch\",\"token\":\"{token}\"}}\n"));
    assert!(r.contains("unknown_op"), "{r}");

    // A peer that never sends a line is closed by the daemon (generous bound).
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(n) => assert_eq!(n, 0, "unexpected bytes before any request"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}

#[test]
fn an_empty_line_gets_bad_request_and_the_connection_stays_usable() {
    let h = Home::new(None);
    let d = h.serve();
    let mut c = d.conn();
    c.send_raw(b"\n").unwrap();
    let r = c.read_json();
    assert_eq!(err_code(&r), "bad_request", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("empty"),
        "{r}"
    );
    let p = c.req(&json!({"op": "ping"}));
    assert_eq!(p["ok"], json!(true), "{p}");
}

#[test]
fn list_of_an_unknown_pool_exits_2_like_status() {
    let h = Home::new(None);
    h.add(&["http://10.16.0.1:3128"]);
    for args in [
        &["list", "--pool", "nosuch"][..],
        &["status", "--pool", "nosuch"][..],
    ] {
        let (_, err) = h.fails(2, args);
        assert!(err.contains("nosuch"), "{args:?}: {err}");
    }
    // A known pool is fine, also when nothing matches.
    h.ok(&["list", "--pool", "default"]);
    h.ok(&["list", "--pool", "default", "--state", "disabled"]);
}

#[test]
fn an_operator_reason_and_a_source_error_are_stored_redacted() {
    let h = Home::new(Some(
        r#"
[[pool]]
name = "sn"
mode = "sniffing"

[pool.probe]
url = "http://127.0.0.1:9/"
interval = "0s"

[[pool.source]]
kind = "file"
path = "/nonexistent/https://bob:pa55-src@lists.example/x"
refresh = "0s"
"#,
    ));
    let ids = h.add(&["http://alice:s3cr3t-op@10.17.0.1:3128"]);
    let reason = "broken: http://alice:s3cr3t-op@10.17.0.1:3128 (pw s3cr3t-op)";
    h.ok(&["disable", &ids[0].to_string(), "--reason", reason]);
    let d = h.serve();
    let mut c = d.conn();
    let reason2 = "again socks5://carol:other-pw@10.0.0.1:1080";
    let r = c.req(&json!({"op": "enable", "endpoint": ids[0], "now": true}));
    assert_eq!(r["ok"], json!(true), "{r}");
    let r = c.req(&json!({"op": "disable", "endpoint": ids[0], "reason": reason2}));
    assert_eq!(r["ok"], json!(true), "{r}");
    let texts = [
        h.ok(&["events", "--json"]),
        h.ok(&["list", "--json"]),
        h.ok(&["show", &ids[0].to_string()]),
        h.ok(&["sources", "--json"]),
        d.log_text(),
    ];
    for t in &texts {
        for secret in ["s3cr3t-op", "other-pw", "pa55-src"] {
            assert!(!t.contains(secret), "{secret} in {t}");
        }
    }
    assert!(texts[0].contains("alice:***@10.17.0.1"), "{}", texts[0]);
    assert!(texts[3].contains("bob:***@lists.example"), "{}", texts[3]);
}

#[test]
fn a_database_deleted_under_the_daemon_is_detected_and_nothing_more_is_acknowledged() {
    let h = Home::new(None);
    h.add(&["http://10.18.0.1:3128"]);
    let mut d = h.serve();
    let mut c = d.conn();
    let l = c.req(&json!({"op": "lease"}));
    assert_eq!(l["ok"], json!(true), "{l}");
    for suffix in ["", "-wal", "-shm"] {
        let mut p = h.db.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    // Not acknowledged into the deleted file: `internal`, or the daemon already stopped.
    let report = json!({"op": "report", "lease": l["lease"], "outcome": "failure",
        "reason": "connect_refused"});
    match c.try_req(&report) {
        Ok(r) => assert_eq!(err_code(&r), "internal", "{r}"),
        // Or the daemon, having seen the file go, closed the connection unanswered; a
        // hang (a read timeout) would be a failure.
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
            ),
            "{e:?}"
        ),
    }
    // It stops on its own, with an error that says why (generous bound).
    let child = d.child.as_mut().unwrap();
    let status = common::eventually(Duration::from_secs(30), "the daemon stops", || {
        child
            .try_wait()
            .unwrap()
            .ok_or_else(|| "still running".to_string())
    });
    d.child = None;
    assert!(!status.success(), "{status}");
    let log = d.log_text();
    assert!(log.contains("deleted or replaced"), "{log}");
    assert!(!h.socket.exists(), "socket left behind");
}

#[test]
fn connection_caps_are_configurable_and_zero_is_refused() {
    for key in ["max_connections", "max_tcp_connections"] {
        let h = Home::new(Some(&format!("[server]\n{key} = 0\n")));
        let o = h.run(&["list"]);
        assert_eq!(o.code, Some(2), "{key}: {o:?}");
        assert!(o.stderr.contains(&format!("server.{key}")), "{}", o.stderr);
    }
    // A cap of one Unix connection: a second client is closed at once, the first works.
    let h = Home::new(Some("[server]\nmax_connections = 1\n"));
    h.add(&["http://10.19.0.1:3128"]);
    let d = h.serve();
    // The start-up ping's connection frees its slot once the daemon has seen it close.
    let mut first = common::eventually(Duration::from_secs(10), "a slot is freed", || {
        let mut c = d.conn();
        match c.try_req(&json!({"op": "ping"})) {
            Ok(r) if r["ok"] == json!(true) => Ok(c),
            other => Err(format!("{other:?}")),
        }
    });
    let mut second = d.conn();
    assert!(second.closed_by_peer(), "over the cap: closed");
    assert_eq!(first.req(&json!({"op": "lease"}))["ok"], json!(true));
}

/// Ghost leases (issue 20): a `lease` waiting with `wait` whose client closed the socket is
/// never granted, or is given back at once. One endpoint capped at one lease: when its
/// holder releases it, a waiter that left must not take it for the lease's whole hour.
#[test]
fn a_waiting_lease_whose_client_left_is_never_granted() {
    let h = Home::new(Some(
        "[[pool]]\nname = \"default\"\nmax_leases_per_endpoint = 1\n",
    ));
    let d = h.serve();
    let id = h.add(&["http://10.7.0.1:3128"])[0];
    let mut holder = d.conn();
    let first = holder.req(&json!({"op": "lease", "ttl": "1h"}));
    assert_eq!(first["endpoint"], json!(id), "{first}");
    // A second client waits for the endpoint, then goes away while it waits.
    let mut waiter = d.conn();
    waiter
        .send_raw(b"{\"op\":\"lease\",\"ttl\":\"1h\",\"wait\":\"60s\"}\n")
        .unwrap();
    waiter.wait_read_by_peer();
    drop(waiter);
    let r = holder.req(&json!({"op": "release", "lease": first["lease"]}));
    assert_eq!(r["ok"], json!(true), "{r}");
    // Nobody holds it: the lease the waiter asked for was never granted (or went back).
    d.wait_for_counts("available", 1, 0);
    let again = d.req(json!({"op": "lease", "ttl": "1h"}));
    assert_eq!(again["endpoint"], json!(id), "{again}");
}

/// A client that shuts down only its sending side after its request (`printf … | nc -N`)
/// still gets its lease: end of stream alone does not mean nobody reads the answer.
#[test]
fn a_lease_asked_then_half_closed_is_still_answered() {
    let h = Home::new(None);
    let d = h.serve();
    let id = h.add(&["http://10.7.0.1:3128"])[0];
    for _ in 0..20 {
        let mut c = d.conn();
        c.send_raw(b"{\"op\":\"lease\",\"ttl\":\"1h\"}\n").unwrap();
        c.shutdown_write();
        let r = c.read_json();
        assert_eq!(r["endpoint"], json!(id), "{r}");
        let rel = d.req(json!({"op": "release", "lease": r["lease"]}));
        assert_eq!(rel["ok"], json!(true), "{rel}");
    }
}
