//! Running a fleet (docs/operators.md) through the real binary: each listener with its own
//! secret, the lease role that can only lease, token files, the CLI on another "host"
//! reaching the daemon over `--connect tcp://`, empty pools that say so, and commands that
//! name the database and the daemon they read.

mod common;

use std::process::Stdio;

use common::daemon::*;
use common::tools::free_port;
use serde_json::{json, Value};

const ADMIN: &str = "admin-t0ken-0123456789";
const LEASE: &str = "lease-t0ken-0123456789";

/// A CLI run of `h` with extra environment.
fn run_env(h: &Home, args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = h.cmd();
    c.args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = wait_output(c.spawn().unwrap(), RUN_LIMIT).expect("CLI run finished");
    Out::from(out, args)
}

fn addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// An endpoint nothing listens on: a gateway's dial through it is refused at once.
fn closed_endpoint() -> String {
    format!("http://127.0.0.1:{}", common::fakes::closed_port())
}

#[test]
fn each_listener_has_its_own_secret_and_the_lease_role_only_leases() {
    let h = Home::new(None);
    let ids = h.add(&[&closed_endpoint(), &closed_endpoint()]);
    let (tcp, gw, http) = (addr(), addr(), addr());
    let d = h.serve_with(
        &["--listen-tcp", &tcp, "--gateway", &gw, "--http", &http],
        &[("PROXYPOOL_TOKEN", ADMIN), ("PROXYPOOL_LEASE_TOKEN", LEASE)],
    );
    let req = |token: &str, mut v: Value| {
        v["token"] = json!(token);
        tcp_req(&tcp, &v)
    };
    // The lease role: what a scraper needs.
    ok(req(LEASE, json!({"op": "ping"})));
    let s = ok(req(LEASE, json!({"op": "status"})));
    assert_eq!(s["pools"][0]["available"], json!(2), "{s}");
    let g = ok(req(LEASE, json!({"op": "lease"})));
    let r = ok(req(
        LEASE,
        json!({"op": "report", "lease": g["lease"], "outcome": "success"}),
    ));
    assert_eq!(r["state"], json!("available"));
    let g = ok(req(LEASE, json!({"op": "lease"})));
    ok(req(LEASE, json!({"op": "release", "lease": g["lease"]})));
    // ...and nothing else: every operator op is refused and changes nothing.
    let before = h.list();
    for v in [
        json!({"op": "remove", "endpoints": [ids[0]]}),
        json!({"op": "disable", "endpoint": ids[0]}),
        json!({"op": "add", "urls": ["http://10.31.0.9:3128"]}),
        json!({"op": "edit", "endpoint": ids[1], "label": "x"}),
        json!({"op": "endpoints"}),
        json!({"op": "probe", "all": true}),
    ] {
        let op = v["op"].as_str().unwrap().to_string();
        let r = req(LEASE, v);
        assert_eq!(err_code(&r), "forbidden", "{op}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("needs the admin role"),
            "{r}"
        );
    }
    assert_eq!(h.list(), before, "a refused op changed nothing");
    // The admin token may do everything; a token that is neither, nothing.
    let r = ok(req(ADMIN, json!({"op": "disable", "endpoint": ids[1]})));
    assert_eq!(r["state"], json!("disabled"));
    ok(req(
        ADMIN,
        json!({"op": "enable", "endpoint": ids[1], "now": true}),
    ));
    let r = req("lease-t0ken-012345678", json!({"op": "ping"}));
    assert_eq!(err_code(&r), "bad_request", "{r}");
    // Loopback listeners never need the socket's tokens: the Prometheus job and local
    // scrapers keep working.
    let (status, _, body) = http_get(&http, "/metrics", "");
    assert_eq!(status, 200, "{body}");
    let (status, head, _) = http_get(&gw, "http://127.0.0.1:9/", "");
    assert_ne!(status, 407, "{head}");
    assert!(head.contains("x-proxypool-error"), "{head}");
    // No secret is ever written to the log.
    let log = d.log_text();
    assert!(!log.contains(ADMIN) && !log.contains(LEASE), "{log}");
}

#[test]
fn tokens_come_from_files_and_the_http_listener_has_its_own() {
    let h = Home::new(None);
    let write = |name: &str, text: &str| {
        let p = h.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let (admin_file, lease_file) = (
        write("admin.tok", &format!("{ADMIN}\n")),
        write("lease.tok", LEASE),
    );
    let http_file = write("http.tok", "http-t0ken-0123456789\n");
    let http = addr();
    let cfg = h.dir.path().join("fleet.toml");
    let cfg_s = cfg.display().to_string();
    let config = |admin: &str, lease: &str| {
        format!(
            "[server]\nhttp = \"{http}\"\ntoken_file = \"{admin}\"\nlease_token_file = \"{lease}\"\nhttp_token_file = \"{http_file}\"\n"
        )
    };
    // Bad files stop the start, naming the key (never the secret).
    let same = write("same.tok", ADMIN);
    let missing = h.dir.path().join("missing.tok").display().to_string();
    let short = write("short.tok", "short\n");
    for (admin, lease, key) in [
        (&admin_file, &same, "server.lease_token_file"),
        (&missing, &lease_file, "server.token_file"),
        (&admin_file, &short, "server.lease_token_file"),
    ] {
        std::fs::write(&cfg, config(admin, lease)).unwrap();
        let o = h.run(&["--config", &cfg_s, "serve", "--listen-tcp", &addr()]);
        assert_eq!(o.code, Some(2), "{o:?}");
        assert!(o.stderr.contains(key), "{key}: {}", o.stderr);
        assert!(
            !o.stderr.contains(ADMIN) && !o.stderr.contains("short\n"),
            "{}",
            o.stderr
        );
    }
    std::fs::write(&cfg, config(&admin_file, &lease_file)).unwrap();
    let tcp = addr();
    let d = h.serve_with(&["--config", &cfg_s, "--listen-tcp", &tcp], &[]);
    let id = ids(&h.ok(&["--config", &cfg_s, "add", "http://10.32.0.1:3128"]))[0];
    let r = tcp_req(
        &tcp,
        &json!({"op": "remove", "endpoints": [id], "token": LEASE}),
    );
    assert_eq!(err_code(&r), "forbidden", "{r}");
    ok(tcp_req(&tcp, &json!({"op": "lease", "token": LEASE})));
    ok(tcp_req(
        &tcp,
        &json!({"op": "remove", "endpoints": [id], "token": ADMIN}),
    ));
    // An HTTP token set is required on loopback too: the operator asked for it.
    let (status, _, _) = http_get(&http, "/healthz", "");
    assert_eq!(status, 401);
    let (status, _, _) = http_get(
        &http,
        "/healthz",
        "Authorization: Bearer http-t0ken-0123456789\r\n",
    );
    assert_eq!(status, 200);
    let (status, _, _) = http_get(
        &http,
        "/healthz",
        &format!("Authorization: Bearer {ADMIN}\r\n"),
    );
    assert_eq!(status, 401, "the socket's token is not the HTTP listener's");
    drop(d);
}

#[test]
fn the_cli_on_another_host_reaches_the_daemon_over_tcp() {
    let server = Home::new(None);
    let ids = server.add(&["http://10.33.0.1:3128", "http://10.33.0.2:3128"]);
    let tcp = addr();
    let _d = server.serve_with(
        &["--listen-tcp", &tcp],
        &[("PROXYPOOL_TOKEN", ADMIN), ("PROXYPOOL_LEASE_TOKEN", LEASE)],
    );
    let connect = format!("tcp://{tcp}");
    // Another host: its own home, no database, no socket.
    let client = Home::new(None);
    let lease_env = [("PROXYPOOL_LEASE_TOKEN", LEASE)];
    let o = run_env(
        &client,
        &["--connect", &connect, "lease", "--json"],
        &lease_env,
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    let g: Value = serde_json::from_str(o.stdout.trim()).unwrap();
    let lease = g["lease"].as_str().unwrap();
    // PROXYPOOL_CONNECT does the same as the flag.
    let env = [
        ("PROXYPOOL_LEASE_TOKEN", LEASE),
        ("PROXYPOOL_CONNECT", connect.as_str()),
    ];
    let o = run_env(
        &client,
        &[
            "report",
            lease,
            "--outcome",
            "failure",
            "--reason",
            "connect_refused",
        ],
        &env,
    );
    assert_eq!((o.code, o.stdout.trim()), (Some(0), "cooling"), "{o:?}");
    let o = run_env(&client, &["status"], &env);
    assert_eq!(o.code, Some(0), "{o:?}");
    let first = o.stdout.lines().next().unwrap();
    assert!(
        first.contains(&format!("daemon {connect}"))
            && first.contains(&server.db.display().to_string()),
        "status names the daemon and its database: {}",
        o.stdout
    );
    // Listing endpoints is an operator's: the lease role may not.
    let o = run_env(&client, &["list"], &env);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr.contains("endpoints needs the admin role"),
        "{}",
        o.stderr
    );
    let admin = [
        ("PROXYPOOL_TOKEN", ADMIN),
        ("PROXYPOOL_CONNECT", connect.as_str()),
    ];
    let o = run_env(&client, &["list"], &admin);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("10.33.0.2"), "{}", o.stdout);
    assert!(
        o.stdout.contains("2 endpoints: 1 available, 1 cooling")
            && o.stdout.contains(&format!("daemon {connect}")),
        "{}",
        o.stdout
    );
    // Where each endpoint stands for one destination, from the daemon: the cooling one
    // is cooling for it too.
    let o = run_env(&client, &["list", "--destination", "Shop.Example"], &admin);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("FOR shop.example"), "{}", o.stdout);
    let row = |ip: &str| {
        let line = o
            .stdout
            .lines()
            .find(|l| l.contains(ip))
            .unwrap_or_default();
        line.split(|c: char| c.is_whitespace() || c == '│')
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // The state for the destination is the column before SLOWED.
    let for_shop = |ip: &str| row(ip).iter().rev().nth(1).cloned();
    assert_eq!(
        for_shop("10.33.0.1").as_deref(),
        Some("cooling"),
        "{}",
        o.stdout
    );
    assert_eq!(
        for_shop("10.33.0.2").as_deref(),
        Some("available"),
        "{}",
        o.stdout
    );
    assert_eq!(row("10.33.0.1").last().map(String::as_str), Some("-"));
    let o = run_env(
        &client,
        &[
            "list",
            "--destination",
            "shop.example",
            "--state",
            "available",
            "--json",
        ],
        &admin,
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v[0]["destination"], "shop.example");
    assert_eq!(v[0]["destination_state"], "available");
    let o = run_env(&client, &["list", "--destination", "bad host"], &admin);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("--destination"), "{}", o.stderr);
    // Operator commands need the admin role: the lease token is sent first.
    let both = [
        ("PROXYPOOL_LEASE_TOKEN", LEASE),
        ("PROXYPOOL_TOKEN", ADMIN),
        ("PROXYPOOL_CONNECT", connect.as_str()),
    ];
    let id = ids[1].to_string();
    let o = run_env(&client, &["disable", &id], &both);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr.contains("needs the admin role") && o.stderr.contains("unset it"),
        "{}",
        o.stderr
    );
    let o = run_env(&client, &["disable", &id, "--reason", "rotating"], &admin);
    assert_eq!(
        (o.code, o.stdout.trim()),
        (Some(0), format!("{id}\tdisabled").as_str()),
        "{o:?}"
    );
    let o = run_env(
        &client,
        &["enable", "http://10.33.0.2:3128", "--now"],
        &admin,
    );
    assert_eq!(
        (o.code, o.stdout.trim()),
        (Some(0), format!("{id}\tavailable").as_str()),
        "{o:?}"
    );
    let o = run_env(&client, &["add", "http://u:pw@10.33.0.3:3128"], &admin);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(server.list().len(), 3);
    // What reads a database is for the daemon's host, and says so.
    for args in [
        &["events"][..],
        &["sources"],
        &["show", "1"],
        &["import", "-"],
    ] {
        let o = run_env(&client, args, &admin);
        assert_eq!(o.code, Some(2), "{o:?}");
        assert!(o.stderr.contains("--connect tcp://"), "{}", o.stderr);
    }
    // No token, no request.
    let o = run_env(
        &client,
        &["status"],
        &[("PROXYPOOL_CONNECT", connect.as_str())],
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("PROXYPOOL_LEASE_TOKEN"), "{}", o.stderr);
    let o = run_env(
        &client,
        &["status"],
        &[("PROXYPOOL_CONNECT", "10.0.0.5:7000")],
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("tcp://HOST:PORT"), "{}", o.stderr);
    // Nothing was written on the client's host.
    assert!(!client.db.exists(), "the client created a database");
    let out = format!("{:?}", run_env(&client, &["status"], &admin));
    assert!(!out.contains(ADMIN) && !out.contains("pw@"), "{out}");
}

#[test]
fn an_empty_pool_says_so_on_the_socket_and_the_cli() {
    let h = Home::new(Some("[[pool]]\nname = \"socks\"\n"));
    h.add(&["socks5h://10.34.0.1:1080"]);
    let o = h.run(&["add", "--pool", "socks", "socks5h://10.34.0.2:1080"]);
    assert_eq!(o.code, Some(0), "{o:?}");
    h.ok(&["remove", "1"]);
    let d = h.serve();
    // `default` has no endpoint: pool_empty, and no retry_after_ms.
    let r = d.req(json!({"op": "lease"}));
    assert_eq!(err_code(&r), "pool_empty", "{r}");
    assert!(
        r.get("retry_after_ms").is_none() && r["error"].get("retry_after_ms").is_none(),
        "{r}"
    );
    let o = h.run(&["lease"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stderr
            .contains("has no endpoints: add some with `proxypool add URL"),
        "{}",
        o.stderr
    );
    // A scheme the pool does not have: the filter is named, not a cooldown.
    let r = d.req(json!({"op": "lease", "pool": "socks", "schemes": ["socks5"]}));
    assert_eq!(err_code(&r), "pool_empty", "{r}");
    let o = h.run(&["lease", "--pool", "socks", "--scheme", "socks5"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("no socks5 endpoint"), "{}", o.stderr);
    assert!(!o.stderr.contains(" ms"), "{}", o.stderr);
    ok(d.req(json!({"op": "lease", "pool": "socks", "schemes": ["socks5h"]})));
}

#[test]
fn status_and_list_name_the_database_and_the_daemon_they_read() {
    let h = Home::new(None);
    h.add(&["http://10.35.0.1:3128"]);
    let db = h.db.display().to_string();
    let o = h.run(&["status"]);
    assert!(
        o.stdout
            .lines()
            .next()
            .unwrap()
            .contains(&format!("database {db} · no daemon")),
        "{}",
        o.stdout
    );
    let d = h.serve();
    let o = h.run(&["status"]);
    let first = o.stdout.lines().next().unwrap().to_string();
    assert!(
        first.contains(&format!("database {db}"))
            && first.contains(&format!("daemon {}", h.socket.display())),
        "{first}"
    );
    let o = h.run(&["list"]);
    assert!(
        o.stdout.contains(&format!(
            "1 endpoints: 1 available (database {db}, daemon {})",
            h.socket.display()
        )),
        "{}",
        o.stdout
    );
    // A new shell without PROXYPOOL_DB reads another database: it says so, and that the
    // daemon on the socket serves the first one.
    let other = h.dir.path().join("data/other.db");
    let other_s = other.display().to_string();
    let env = [("PROXYPOOL_DB", other_s.as_str())];
    let o = run_env(&h, &["add", "http://10.35.0.2:3128"], &env);
    assert_eq!(o.code, Some(0), "{o:?}");
    let o = run_env(&h, &["status"], &env);
    assert!(
        o.stdout
            .contains(&format!("database {other_s} · no daemon serves it")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains(&format!(
            "the daemon on {} serves another database, {db}",
            h.socket.display()
        )),
        "{}",
        o.stdout
    );
    drop(d);
}

#[test]
fn imports_take_provider_lines_skip_what_exists_and_name_every_bad_line() {
    let h = Home::new(None);
    let file = h.dir.path().join("list.txt");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    let f = file.display().to_string();
    let export = "# provider export\n10.36.0.1:3128:bob:s3cret\nalice:pw2@10.36.0.2:3128\n\n10.36.0.3:3128\n";
    // Without a daemon, then through one: the same answers.
    for round in ["direct", "daemon"] {
        write(export);
        let d = (round == "daemon").then(|| h.serve());
        let o = h.run(&["import", &f, "--scheme", "socks5"]);
        if round == "direct" {
            assert_eq!(o.code, Some(0), "{o:?}");
            assert!(o.stderr.contains("imported 3 endpoints"), "{}", o.stderr);
            let urls: Vec<_> = h
                .list()
                .iter()
                .map(|e| e["url"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(
                urls,
                [
                    "socks5://bob:***@10.36.0.1:3128",
                    "socks5://alice:***@10.36.0.2:3128",
                    "socks5://10.36.0.3:3128"
                ]
            );
        } else {
            // Importing again is refused at the first line already there, naming it.
            assert_eq!(o.code, Some(2), "{o:?}");
            assert!(
                o.stderr
                    .contains("line 2: endpoint socks5://bob:***@10.36.0.1:3128 already exists"),
                "{}",
                o.stderr
            );
            assert!(o.stderr.contains("nothing was imported"), "{}", o.stderr);
        }
        // An updated list: --skip-existing adds the new line and counts the rest.
        let n = h.list().len();
        write(&format!(
            "10.36.0.1:3128:bob:s3cret\nalice:pw2@10.36.0.2:3128\n10.36.0.3:3128\n10.36.1.{n}:3128\n"
        ));
        let o = h.run(&["import", &f, "--scheme", "socks5", "--skip-existing"]);
        assert_eq!(o.code, Some(0), "{round}: {o:?}");
        assert!(
            o.stderr.contains("added 1, skipped 3"),
            "{round}: {}",
            o.stderr
        );
        assert_eq!(h.list().len(), n + 1);
        // Every bad line is named by its number, and nothing changes.
        for (text, want) in [
            ("10.36.2.1:3128\n\n10.36.2.2:3128:bob\n", "line 3: "),
            (
                "10.36.2.1:3128\n10.36.2.1:3128\n",
                "line 2: endpoint socks5://10.36.2.1:3128 is listed twice",
            ),
            (
                "10.36.2.1:3128\nftp://10.36.2.3:21\n",
                "line 2: unknown scheme",
            ),
        ] {
            write(text);
            let o = h.run(&["import", &f, "--scheme", "socks5"]);
            assert_eq!(o.code, Some(2), "{round}: {o:?}");
            assert!(o.stderr.contains(want), "{round}: {want}: {}", o.stderr);
            assert!(!o.stderr.contains("s3cret"), "{}", o.stderr);
            assert_eq!(h.list().len(), n + 1, "{round}: all or nothing");
        }
        drop(d);
    }
    let o = h.run(&["import", &f, "--scheme", "gopher"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr.contains("unknown scheme \"gopher\""),
        "{}",
        o.stderr
    );
}

#[test]
fn config_check_validates_a_file_without_a_daemon() {
    let h = Home::new(None);
    let file = h.dir.path().join("check.toml");
    let f = file.display().to_string();
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    write("[store]\npath = \"pp.db\"\n[[pool]]\nname = \"eu\"\n[[endpoint]]\nurl = \"http://10.37.0.1:3128\"\npool = \"eu\"\n");
    let o = h.run(&["config", "check", "--config", &f]);
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(o.stdout.lines().count(), 1, "{}", o.stdout);
    assert!(
        o.stdout.starts_with(&format!(
            "config {f}: ok: 2 pools (default, eu), 1 endpoint, 0 gateways, database "
        )),
        "{}",
        o.stdout
    );
    // Nothing was created: no database, no lock.
    assert!(!h.dir.path().join("pp.db").exists() && !h.db.exists());
    for (text, want) in [
        (
            "[server]\nhttp = \"127.0.0.1:1\"\nmax_connections = 0\n",
            "line 3: server.max_connections: must be at least 1",
        ),
        (
            "[[pool]]\nname = \"eu\"\n[pool.cooldown]\nbase = \"soon\"\n",
            "line 4, column 8: pool[0].cooldown.base: invalid duration",
        ),
        (
            "[server]\ntoken_file = \"/nonexistent/admin.tok\"\n",
            "server.token_file: cannot read /nonexistent/admin.tok",
        ),
        (
            "[[pool]]\nname = \"eu\"\n[pool.probe]\nurl = \"ftp://x/\"\n",
            "ftp",
        ),
        (
            "[[gateway]]\nlisten = \"0.0.0.0:18083\"\ntoken = \"a-gateway-token-1\"\n[[gateway]]\nlisten = \"127.0.0.1:18083\"\n",
            "gateway[1].listen: 127.0.0.1:18083 cannot be bound beside gateway[0] on 0.0.0.0:18083",
        ),
        // A parser error with no key under its position still names one, never a type.
        (
            "[pool]\nname = \"x\"\n",
            "pool: invalid type: map, expected an array of tables ([[...]])",
        ),
        (
            "[[pool]]\nname = \"a\"\n\n[[pool]]\nmode = \"static\"\n",
            "line 4, column 1: pool[1]: missing field `name`",
        ),
        ("store = 1\n", "store: invalid type: integer `1`, expected a table"),
        (
            "[[gateway]]\nlisten = \"127.0.0.1:18082\"\nban_status = 403\n",
            "gateway[0].ban_status: invalid type: integer `403`, expected an array\n",
        ),
        // What `serve` refuses before it listens: a reader's address off loopback with
        // no token, and two listeners on one address.
        (
            "[server]\nhttp = \"0.0.0.0:9464\"\n",
            "server.http: http address 0.0.0.0:9464 is not a loopback address: set PROXYPOOL_HTTP_TOKEN",
        ),
        (
            "[[gateway]]\nlisten = \"127.0.0.1:18080\"\n[[gateway]]\nlisten = \"127.0.0.1:18080\"\n",
            "gateway[1].listen: 127.0.0.1:18080 cannot be bound beside gateway[0] on 127.0.0.1:18080",
        ),
        (
            "[server]\nhttp = \"127.0.0.1:18081\"\n[[gateway]]\nlisten = \"127.0.0.1:18081\"\n",
            "gateway[0].listen: 127.0.0.1:18081 cannot be bound beside server.http on 127.0.0.1:18081",
        ),
    ] {
        write(text);
        let o = h.run(&["config", "check", "--config", &f]);
        assert_eq!(o.code, Some(2), "{text}: {o:?}");
        assert!(o.stderr.contains(want), "{text}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    }
    // With the reader's token the same address passes, as `serve` would start.
    write("[server]\nhttp = \"0.0.0.0:9464\"\n");
    let o = run_env(
        &h,
        &["config", "check", "--config", &f],
        &[("PROXYPOOL_HTTP_TOKEN", "a-reader-token-of-some-length")],
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    // PROXYPOOL_CONFIG is the file too; none at all is an error saying where it looked.
    let o = run_env(
        &h,
        &["config", "check"],
        &[("PROXYPOOL_CONFIG", f.as_str())],
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    let o = h.run(&["config", "check"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr.contains("proxies.toml does not exist"),
        "{}",
        o.stderr
    );
}

/// The status page leads with the pools, worst first, and names the destinations
/// endpoints are banned on; `/api/endpoints?destination=D` gives each endpoint's state for
/// D (docs/observability.md, "Status page").
#[test]
fn the_status_page_leads_with_the_worst_pool_and_shows_bans() {
    let h = Home::new(Some(
        "[[pool]]\nname = \"default\"\nmode = \"static-no-ping\"\n\
         [[pool]]\nname = \"idle\"\nmode = \"static-no-ping\"\n",
    ));
    let ids = h.add(&["http://10.36.0.1:3128", "http://10.36.0.2:3128"]);
    let http = addr();
    let d = h.serve_with(&["--http", &http], &[]);
    let g = ok(d.req(json!({"op": "lease", "destination": "shop.example"})));
    let banned = g["endpoint"].as_i64().unwrap();
    ok(d.req(
        json!({"op": "report", "lease": g["lease"], "outcome": "failure",
        "reason": "destination_status", "status": 403, "destination": "shop.example"}),
    ));
    let (status, _, body) = http_get(
        &http,
        "/api/endpoints?destination=Shop.Example&state=cooling",
        "",
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let got: Vec<(i64, String, String)> = v["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["state"].as_str().unwrap().to_string(),
                e["destination_state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![(banned, "available".into(), "cooling".into())],
        "{body}"
    );
    let other = ids.iter().find(|&&i| i != banned).unwrap();
    let (_, _, body) = http_get(&http, "/api/endpoints?destination=shop.example", "");
    assert!(
        body.contains(&format!(r#""id":{other}"#))
            && body.contains(r#""destination_state":"available""#),
        "{body}"
    );
    let (status, _, body) = http_get(&http, "/api/endpoints?destination=a%20b", "");
    assert_eq!(status, 400, "{body}");
    // The page: the empty pool first (nothing can be leased), the banned destination
    // named for the pool and for the endpoint.
    let (status, _, page) = http_get(&http, "/", "");
    assert_eq!(status, 200);
    let summary = page.find("Pools, worst first").expect("a summary");
    let idle = page[summary..].find(r#"data-pool="idle""#).unwrap();
    let default = page[summary..].find(r#"data-pool="default""#).unwrap();
    assert!(idle < default, "the empty pool leads");
    assert!(page.contains("no endpoints"), "{page}");
    assert!(
        page.contains("1 banned pairs") && page.contains("shop.example (1)"),
        "{page}"
    );
    assert!(
        page.contains(r#"<td class="bans">shop.example</td>"#),
        "{page}"
    );
}

/// `probe --pool P` exits 1 for a pool with no endpoint, as for a pool whose endpoints
/// all fail: neither can be used.
#[test]
fn probing_an_empty_pool_exits_like_a_dead_one() {
    let h = Home::new(Some(
        "[[pool]]\nname = \"eu\"\nmode = \"static\"\n[pool.probe]\n\
         url = \"http://127.0.0.1:1/\"\ntimeout = \"2s\"\n",
    ));
    let o = h.run(&["probe", "--pool", "eu"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stderr
            .contains("pool \"eu\" has no endpoints: nothing was probed"),
        "{}",
        o.stderr
    );
    h.ok(&["add", "--pool", "eu", &closed_endpoint()]);
    let o = h.run(&["probe", "--pool", "eu"]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("1 of 1 probes failed"), "{}", o.stderr);
    // A pool with no probe target is bad usage, empty or not.
    let o = h.run(&["probe", "--pool", "default"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr
            .contains("pool \"default\" has no [pool.probe] url"),
        "{}",
        o.stderr
    );
}

const TWO_POOLS: &str = r#"
[[pool]]
name = "shops"
mode = "static-no-ping"

[[pool]]
name = "news"
mode = "static-no-ping"
"#;

/// The state of endpoint `id` as `list` has it.
fn state_of(h: &Home, id: i64) -> String {
    h.listed(id)["state"].as_str().unwrap().to_string()
}

#[test]
fn operator_commands_name_a_url_within_a_pool() {
    let h = Home::new(Some(TWO_POOLS));
    let url = "http://10.34.0.1:3128";
    let shop = ids(&h.ok(&["add", "--pool", "shops", url]))[0];
    let news = ids(&h.ok(&["add", "--pool", "news", url]))[0];

    // Without a daemon. The URL alone is ambiguous: refused, naming both ids and --pool.
    let (_, err) = h.fails(2, &["disable", url]);
    assert!(
        err.contains(&format!("{shop}, {news}")) && err.contains("--pool"),
        "{err}"
    );
    assert_eq!(
        (state_of(&h, shop), state_of(&h, news)),
        ("available".into(), "available".into())
    );
    h.ok(&["disable", "--pool", "news", url, "--reason", "rotated out"]);
    assert_eq!(
        (state_of(&h, shop), state_of(&h, news)),
        ("available".into(), "disabled".into())
    );
    let shown = h.ok(&["show", "--pool", "shops", url, "--json"]);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["id"], json!(shop), "{shown}");
    // An id of another pool is not the endpoint meant: refused, nothing changes.
    let (_, err) = h.fails(
        2,
        &["enable", "--now", "--pool", "shops", &news.to_string()],
    );
    assert!(
        err.contains(&format!("with id {news} in pool \"shops\"")),
        "{err}"
    );
    assert_eq!(state_of(&h, news), "disabled");
    let (_, err) = h.fails(2, &["remove", "--pool", "nope", url]);
    assert!(err.contains("in pool \"nope\""), "{err}");
    assert_eq!(h.list().len(), 2);

    // Through a daemon, on its socket and over TCP from another host: the same rule.
    let tcp = addr();
    let _d = h.serve_with(&["--listen-tcp", &tcp], &[("PROXYPOOL_TOKEN", ADMIN)]);
    h.ok(&["enable", "--now", "--pool", "news", url]);
    assert_eq!(state_of(&h, news), "available");
    let (_, err) = h.fails(2, &["disable", url]);
    assert!(err.contains("--pool"), "{err}");
    let client = Home::new(None);
    let connect = format!("tcp://{tcp}");
    let env = [
        ("PROXYPOOL_TOKEN", ADMIN),
        ("PROXYPOOL_CONNECT", connect.as_str()),
    ];
    let o = run_env(&client, &["disable", url], &env);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("--pool"), "{}", o.stderr);
    let o = run_env(&client, &["disable", "--pool", "shops", url], &env);
    assert_eq!(o.code, Some(0), "{o:?}");
    let o = run_env(
        &client,
        &["remove", "--pool", "news", &shop.to_string()],
        &env,
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr
            .contains(&format!("with id {shop} in pool \"news\"")),
        "{}",
        o.stderr
    );
    assert_eq!(
        (state_of(&h, shop), state_of(&h, news)),
        ("disabled".into(), "available".into())
    );
    let o = run_env(
        &client,
        &["edit", "--pool", "news", url, "--label", "n1"],
        &env,
    );
    assert_eq!(o.code, Some(0), "{o:?}");
    assert_eq!(h.listed(news)["label"], json!("n1"));
    assert_eq!(h.listed(shop)["label"], Value::Null);
}
