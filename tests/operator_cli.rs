//! Operator commands (docs/reference.md, "Command line") through the real binary: `edit`,
//! `report`/`release`, probes without a built-in target and operator probes that end a
//! cooldown, `completions`, `man`, and SIGHUP reloads of `serve`.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use common::daemon::*;
use common::fakes::closed_port;
use serde_json::{json, Value};

/// A "proxy" that answers every request with `200` and a body, standing for a working
/// proxy in front of a working destination; the probe still runs its full transaction.
fn spawn_answering_proxy() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = "hello";
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

fn events_of(h: &Home, kind: &str) -> Vec<Value> {
    h.events()
        .into_iter()
        .filter(|e| e["kind"] == json!(kind))
        .collect()
}

/// Cool endpoint `id` (the only available one) through a lease and a failure report.
fn cool(d: &Daemon, id: i64) {
    let g = ok(d.req(json!({"op": "lease"})));
    assert_eq!(g["endpoint"], json!(id));
    let r = ok(d.req(
        json!({"op": "report", "lease": lease_id(&g), "outcome": "failure",
        "reason": "connect_refused", "phase": "connect"}),
    ));
    assert_eq!(r["state"], json!("cooling"));
}

#[test]
fn edit_replaces_the_url_keeping_id_state_and_history_without_a_daemon() {
    let h = Home::new(None);
    let ids = h.add(&[
        "socks5://u:old-pw@10.1.0.1:1080",
        "socks5://v:pw@10.1.0.2:1080",
    ]);
    let (a, b) = (ids[0], ids[1]);
    h.ok(&["disable", &a.to_string(), "--reason", "rotating"]);
    let before = events_of(&h, "state_changed").len();

    let out = h.ok(&[
        "edit",
        &a.to_string(),
        "--url",
        "socks5://u:new-pw@10.1.0.1:1080",
    ]);
    assert!(out.starts_with(&format!("{a}\t")), "{out}");
    assert!(!out.contains("new-pw"), "edit printed a password: {out}");
    let row = h.listed(a);
    assert_eq!(row["state"], json!("disabled"), "state kept: {row}");
    assert_eq!(row["reason"], json!("operator"), "{row}");
    let secret = h.ok(&["list", "--json", "--show-secrets"]);
    assert!(
        secret.contains("socks5://u:new-pw@10.1.0.1:1080"),
        "{secret}"
    );
    assert!(!secret.contains("old-pw"), "{secret}");
    // History kept, plus one redacted `edited` event.
    assert_eq!(events_of(&h, "state_changed").len(), before);
    let edited = events_of(&h, "edited");
    assert_eq!(edited.len(), 1, "{edited:?}");
    assert_eq!(edited[0]["endpoint"], json!(a));
    let all = h.ok(&["events", "--json"]);
    assert!(!all.contains("new-pw") && !all.contains("old-pw"), "{all}");
    assert!(edited[0]["detail"]
        .as_str()
        .unwrap()
        .contains("password changed"));

    // A label alone; "" clears it.
    h.ok(&["edit", &a.to_string(), "--label", "rotated"]);
    assert_eq!(h.listed(a)["label"], json!("rotated"));
    h.ok(&["edit", &a.to_string(), "--label", ""]);
    assert_eq!(h.listed(a)["label"], json!(null));

    // Taking another endpoint's identity, no field, or a bad URL: exit 2, nothing changed.
    let o = h.run(&[
        "edit",
        &a.to_string(),
        "--url",
        "socks5://v:x@10.1.0.2:1080",
    ]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("already exists"), "{}", o.stderr);
    assert!(!o.stderr.contains(":x@"), "{}", o.stderr);
    let o = h.run(&["edit", &b.to_string()]);
    assert_eq!(o.code, Some(2), "{o:?}");
    let o = h.run(&["edit", &b.to_string(), "--url", "ftp://h:1"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    let o = h.run(&["edit", "999", "--label", "x"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert_eq!(h.listed(b)["url"], json!("socks5://v:***@10.1.0.2:1080"));
    assert_eq!(events_of(&h, "edited").len(), 3);
}

#[test]
fn edit_while_serving_changes_what_the_next_lease_hands_out() {
    let h = Home::new(None);
    let d = h.serve();
    let id = h.add(&["http://carol:one@10.3.0.1:3128"])[0];
    cool(&d, id);
    h.ok(&[
        "edit",
        "http://carol@10.3.0.1:3128",
        "--url",
        "http://carol:two@10.3.0.1:3128",
    ]);
    // Same id, still cooling: the edit is not a recovery.
    assert_eq!(h.listed(id)["state"], json!("cooling"));
    h.ok(&["enable", "--now", &id.to_string()]);
    let g = ok(d.req(json!({"op": "lease"})));
    assert_eq!(g["endpoint"], json!(id));
    assert_eq!(g["proxy"], json!("http://carol:two@10.3.0.1:3128"));
    // The socket op itself.
    let r = d.req(json!({"op": "edit", "endpoint": id, "label": "x"}));
    assert_eq!(ok(r)["endpoints"][0]["label"], json!("x"));
    let other = h.add(&["http://dave:pw@10.3.0.2:3128"])[0];
    let r = d.req(json!({"op": "edit", "endpoint": other, "url": "http://carol:z@10.3.0.1:3128"}));
    assert_eq!(err_code(&r), "bad_request");
    assert!(!r.to_string().contains(":z@"), "{r}");
    // The CLI through the daemon: the same refusal is exit 2, and nothing changed.
    let o = h.run(&[
        "edit",
        &other.to_string(),
        "--url",
        "http://carol:z@10.3.0.1:3128",
    ]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert_eq!(
        h.listed(other)["url"],
        json!("http://dave:***@10.3.0.2:3128")
    );
    assert_eq!(h.listed(id)["url"], json!("http://carol:***@10.3.0.1:3128"));
}

#[test]
fn report_and_release_mirror_the_socket_ops() {
    let h = Home::new(None);
    let o = h.run(&["release", "abc"]);
    assert_eq!(o.code, Some(1), "no daemon: {o:?}");
    let o = h.run(&["report", "abc", "--outcome", "success"]);
    assert_eq!(o.code, Some(1), "no daemon: {o:?}");

    let _d = h.serve();
    let id = h.add(&["http://erin:pw@10.4.0.1:3128"])[0];
    let lease = |h: &Home| -> String {
        let v: Value = serde_json::from_str(h.ok(&["lease", "--json"]).trim()).unwrap();
        lease_id(&v)
    };
    let l = lease(&h);
    assert_eq!(
        h.ok(&["report", &l, "--outcome", "success"]).trim(),
        "available"
    );
    let o = h.run(&["report", &l, "--outcome", "success"]);
    assert_eq!(o.code, Some(1), "a lease ends with its report: {o:?}");

    let l = lease(&h);
    // Bad input: exit 2 and the lease is untouched.
    for bad in [
        vec!["--outcome", "failure"],
        vec!["--outcome", "failure", "--reason", "cosmic_rays"],
        // (An unparsable --retry-after is not bad input: like the socket, it is noted in
        // the event and ignored, and the failure still cools the endpoint.)
        vec!["--outcome", "maybe"],
    ] {
        let mut args = vec!["report", l.as_str()];
        args.extend(bad.iter().copied());
        let o = h.run(&args);
        assert_eq!(o.code, Some(2), "{args:?}: {o:?}");
    }
    let out = h.ok(&[
        "report",
        &l,
        "--outcome",
        "failure",
        "--reason",
        "destination_status",
        "--phase",
        "response_head",
        "--status",
        "429",
        "--retry-after",
        "120",
        "--detail",
        "banned",
    ]);
    assert_eq!(out.trim(), "cooling");
    let row = h.listed(id);
    assert_eq!(row["reason"], json!("destination_status"));
    assert_eq!(row["phase"], json!("response_head"));
    assert!(row["cooldown_ms"].as_u64().unwrap() >= 120_000, "{row}");

    h.ok(&["enable", "--now", &id.to_string()]);
    let l = lease(&h);
    assert_eq!(h.ok(&["release", &l]).trim(), "released");
    let o = h.run(&["release", &l]);
    assert_eq!(o.code, Some(1), "{o:?}");
    // A second release says the lease ended already, not that it is unknown.
    assert!(o.stderr.contains("was already released"), "{}", o.stderr);
}

#[test]
fn a_static_pool_without_a_probe_url_is_a_config_error_naming_the_pool() {
    for mode in ["static", "sniffing"] {
        let src = if mode == "sniffing" {
            "[[pool.source]]\nkind = \"file\"\npath = \"list.txt\"\n"
        } else {
            ""
        };
        let h = Home::new(Some(&format!(
            "[[pool]]\nname = \"resi\"\nmode = \"{mode}\"\n{src}"
        )));
        let o = h.run(&["list"]);
        assert_eq!(o.code, Some(2), "{mode}: {o:?}");
        assert!(o.stderr.contains("\"resi\""), "{}", o.stderr);
        assert!(o.stderr.contains("probe.url"), "{}", o.stderr);
    }
}

#[test]
fn probe_on_a_pool_without_a_target_exits_2_with_and_without_a_daemon() {
    let h = Home::new(None);
    let id = h.add(&["http://10.5.0.1:3128"])[0];
    let mut daemon = None;
    for _ in 0..2 {
        for args in [
            vec!["probe", "1"],
            vec!["probe", "--pool", "default"],
            vec!["probe", "--all"],
        ] {
            let o = h.run(&args);
            assert_eq!(o.code, Some(2), "{args:?}: {o:?}");
            assert!(o.stderr.contains("no [pool.probe] url"), "{}", o.stderr);
        }
        assert_eq!(h.listed(id)["state"], json!("available"));
        assert!(events_of(&h, "probe_failure").is_empty());
        // Again with a daemon.
        daemon.get_or_insert_with(|| h.serve());
    }
    drop(daemon);
}

#[test]
fn an_operator_probe_that_succeeds_ends_a_cooldown_and_one_that_fails_does_not_extend_it() {
    let good = spawn_answering_proxy();
    let dead = closed_port();
    let cfg = "[[pool]]\nname = \"default\"\n[pool.probe]\nurl = \"http://127.0.0.1:9/\"\n\
               expect_body = \"hello\"\ntimeout = \"2s\"\n[pool.cooldown]\nbase = \"1h\"\nmax = \"1h\"\n\
               [[pool]]\nname = \"bare\"\n";
    let h = Home::new(Some(cfg));
    let d = h.serve();
    let a = h.add(&[&format!("http://127.0.0.1:{good}")])[0];
    cool(&d, a);
    assert_eq!(h.listed(a)["streak"], json!(1));
    let out = h.ok(&["probe", &a.to_string(), "--json"]);
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["ok"], json!(true), "{r}");
    let row = h.listed(a);
    assert_eq!(row["state"], json!("available"), "{row}");
    assert_eq!(row["streak"], json!(0), "{row}");
    assert_eq!(ok(d.req(json!({"op": "lease"})))["endpoint"], json!(a));

    h.ok(&["disable", &a.to_string()]);
    let b = h.add(&[&format!("http://127.0.0.1:{dead}")])[0];
    cool(&d, b);
    let before = h.listed(b);
    let o = h.run(&["probe", &b.to_string()]);
    assert_eq!(o.code, Some(1), "{o:?}");
    let after = h.listed(b);
    assert_eq!(after["state"], json!("cooling"));
    assert_eq!(
        after["cooldown_until"], before["cooldown_until"],
        "not extended"
    );
    assert_eq!(after["streak"], before["streak"]);
    // A disabled endpoint stays disabled whatever the probe says.
    h.ok(&["probe", &a.to_string()]);
    assert_eq!(h.listed(a)["state"], json!("disabled"));
    // A sweep of every pool passes over the pool without a target, and says so.
    let bare: i64 = h
        .ok(&["add", "--pool", "bare", "http://10.9.0.1:3128"])
        .trim()
        .parse()
        .unwrap();
    let o = h.run(&["probe", "--all", "--json"]);
    assert_eq!(o.code, Some(1), "b still fails: {o:?}");
    assert!(o.stderr.contains("never probed: bare"), "{}", o.stderr);
    assert!(
        !o.stdout.contains(&format!("\"id\":{bare},")),
        "{}",
        o.stdout
    );
}

/// An operator's probe of a `probe_allowed` endpoint takes its single recovery attempt
/// (`"trial": true`); when it fails, that attempt failed: the endpoint cools again, and no
/// claim is left behind to keep it from its next trial. With and without a daemon.
#[test]
fn an_operator_probe_that_takes_the_single_trial_and_fails_cools_the_endpoint() {
    let cfg = format!(
        "{ONE_SECOND_COOLDOWN}[pool.probe]\nurl = \"http://127.0.0.1:9/\"\n\
         interval = \"0s\"\ntimeout = \"2s\"\n"
    );
    let h = Home::new(Some(&cfg));
    for with_daemon in [false, true] {
        let d = with_daemon.then(|| h.serve());
        let dead = closed_port();
        let id = h.add(&[&format!("http://127.0.0.1:{dead}")])[0];
        let arg = id.to_string();
        h.ok(&["disable", &arg]);
        h.ok(&["enable", &arg]);
        assert_eq!(h.listed(id)["state"], json!("probe_allowed"));
        let o = h.run(&["probe", &arg, "--json"]);
        assert_eq!(o.code, Some(1), "{o:?}");
        let r: Value = serde_json::from_str(o.stdout.trim()).unwrap();
        assert_eq!(
            (&r["trial"], &r["state"]),
            (&json!(true), &json!("cooling")),
            "{r}"
        );
        // The stored row and events (the 1 s cooldown may have ended since: the streak
        // and the transition stay).
        let row = h.listed(id);
        assert_eq!(row["streak"], json!(1), "{row}");
        let ours: Vec<Value> = h
            .events()
            .into_iter()
            .filter(|e| e["endpoint"] == json!(id))
            .collect();
        assert!(
            ours.iter().any(|e| e["kind"] == json!("state_changed")
                && e["from"] == json!("probe_allowed")
                && e["to"] == json!("cooling")),
            "{ours:?}"
        );
        if let Some(d) = d {
            // The cooldown (1 s) ends and the next lease is the trial: nothing holds it.
            let g = common::eventually(Duration::from_secs(20), "a lease granted", || {
                let v = d.req(json!({"op": "lease", "wait": "5s"}));
                if v["ok"] == json!(true) {
                    Ok(v)
                } else {
                    Err(v.to_string())
                }
            });
            assert_eq!(
                (&g["endpoint"], &g["trial"]),
                (&json!(id), &json!(true)),
                "{g}"
            );
        }
        h.ok(&["remove", &arg]);
    }
}

#[test]
fn completions_and_man_page_come_from_the_command_line_definition() {
    let h = Home::new(Some("this is not toml"));
    for shell in ["bash", "zsh", "fish"] {
        let out = h.ok(&["completions", shell]);
        for sub in ["lease", "report", "release", "edit", "probe", "serve"] {
            assert!(out.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let o = h.run(&["completions", "tcsh"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    // A reader that stops early (`| head -1`) is not a failure, and nothing panics: here
    // the pipe's reading end is closed before the command writes a byte.
    let pages = h.dir.path().join("pages");
    std::fs::create_dir(&pages).unwrap();
    let to_pages = format!("--out-dir={}", pages.display());
    for args in [
        &["completions", "fish"][..],
        &["man"][..],
        &["man", &to_pages][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let child = h
            .cmd()
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = wait_output(child, RUN_LIMIT).expect("finished in time");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.is_empty(),
            "{args:?}: {:?} {err}",
            out.status
        );
    }
    let man = h.ok(&["man"]);
    assert!(
        man.contains(".TH proxypool 1"),
        "not a roff man page: {man}"
    );
    assert!(man.contains("completions") && man.contains("edit"));
    // Real roff: nroff renders it to text with the command list (skipped with a note
    // without nroff; a failure under CI).
    if let Some(nroff) = common::tools::need("nroff", "apt-get install -y groff-base") {
        let page = h.dir.path().join("proxypool.1");
        std::fs::write(&page, &man).unwrap();
        let out = std::process::Command::new(nroff)
            .args(["-man"])
            .arg(&page)
            .output()
            .unwrap();
        // Bold and underline are overstrikes ("N\x08N"): keep the last character of each.
        let mut text = String::new();
        for c in String::from_utf8_lossy(&out.stdout).chars() {
            if c == '\u{8}' {
                text.pop();
            } else {
                text.push(c);
            }
        }
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("SYNOPSIS") && text.contains("release"),
            "{text}"
        );
    }
    let dir = h.dir.path().join("man1");
    std::fs::create_dir_all(&dir).unwrap();
    h.ok(&["man", "--out-dir", dir.to_str().unwrap()]);
    let edit = std::fs::read_to_string(dir.join("proxypool-edit.1")).unwrap();
    assert!(
        edit.contains(".TH proxypool-edit 1") && edit.contains("label"),
        "{edit}"
    );
}

fn send_hup(d: &Daemon) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(d.pid() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0);
}

/// Poll `f` until it returns true (the daemon applies a reload asynchronously).
fn eventually(what: &str, d: &Daemon, mut f: impl FnMut() -> bool) {
    common::eventually(Duration::from_secs(10), what, || {
        if f() {
            Ok(())
        } else {
            Err(d.log_text())
        }
    });
}

#[test]
fn sighup_reloads_pool_policies_and_new_pools_and_refuses_bad_changes() {
    let cfg = |base: &str, extra: &str| {
        format!(
            "[[pool]]\nname = \"default\"\n[pool.cooldown]\nbase = \"{base}\"\nfactor = 1.0\n\
             max = \"2h\"\njitter = 0.0\n{extra}"
        )
    };
    let h = Home::new(Some(&cfg("1m", "")));
    let path = h.config.clone().unwrap();
    let d = h.serve();
    let id = h.add(&["http://10.7.0.1:3128"])[0];
    cool(&d, id);
    assert_eq!(h.listed(id)["cooldown_ms"], json!(60_000));
    h.ok(&["enable", "--now", &id.to_string()]);

    // A longer cooldown and a new pool.
    std::fs::write(
        &path,
        cfg(
            "10m",
            "[[pool]]\nname = \"extra\"\nmax_leases_per_endpoint = 1\n",
        ),
    )
    .unwrap();
    send_hup(&d);
    eventually("the new pool", &d, || {
        d.req(json!({"op": "status", "pool": "extra"}))["ok"] == json!(true)
    });
    cool(&d, id);
    assert_eq!(
        h.listed(id)["cooldown_ms"],
        json!(600_000),
        "new policy applied"
    );
    let x: i64 = h
        .ok(&["add", "--pool", "extra", "http://10.7.0.2:3128"])
        .trim()
        .parse()
        .unwrap();
    let g = ok(d.req(json!({"op": "lease", "pool": "extra"})));
    assert_eq!(g["endpoint"], json!(x));
    // The new pool's cap of one lease applies too.
    assert_eq!(
        err_code(&d.req(json!({"op": "lease", "pool": "extra"}))),
        "pool_exhausted"
    );

    // A bad file, and removing a pool that still has endpoints: logged, nothing changes.
    std::fs::write(&path, "[[pool]]\nname = \"default\"\nbogus = 1\n").unwrap();
    send_hup(&d);
    eventually("the refusal in the log", &d, || {
        d.log_text().contains("bogus")
    });
    // On one line, naming the key and where it is.
    let refusal = d
        .log_text()
        .lines()
        .find(|l| l.contains("bogus"))
        .unwrap()
        .to_string();
    assert!(
        refusal.contains("line 3, column 1: pool[0].bogus: unknown field `bogus`")
            && refusal.contains("nothing changed"),
        "{refusal}"
    );
    std::fs::write(&path, cfg("30s", "")).unwrap();
    send_hup(&d);
    eventually("the second refusal", &d, || {
        d.log_text().contains("still has 1 endpoint")
    });
    assert!(
        d.log_text().matches("nothing changed").count() >= 2,
        "{}",
        d.log_text()
    );
    ok(d.req(json!({"op": "ping"})));
    ok(d.req(json!({"op": "status", "pool": "extra"})));
    h.ok(&["enable", "--now", &id.to_string()]);
    cool(&d, id);
    assert_eq!(
        h.listed(id)["cooldown_ms"],
        json!(600_000),
        "refused reload changed nothing"
    );

    // Once the pool is empty, it may go.
    h.ok(&["remove", &x.to_string()]);
    send_hup(&d);
    eventually("the pool to go", &d, || {
        d.req(json!({"op": "status", "pool": "extra"}))["ok"] == json!(false)
    });
    h.ok(&["enable", "--now", &id.to_string()]);
    cool(&d, id);
    assert_eq!(h.listed(id)["cooldown_ms"], json!(30_000));

    // A gateway added to the file is not started by a reload; the log says so.
    let gw = common::tools::free_port();
    std::fs::write(
        &path,
        cfg(
            "30s",
            &format!("[[gateway]]\nlisten = \"127.0.0.1:{gw}\"\n"),
        ),
    )
    .unwrap();
    send_hup(&d);
    let note = |key: &str| {
        let key = format!("key={key} ");
        move |l: &&str| l.contains(&key) && l.contains("applies only at the next start")
    };
    eventually("the restart note", &d, || {
        d.log_text().lines().any(|l| note("gateway[0] (added)")(&l))
    });
    assert!(std::net::TcpStream::connect(("127.0.0.1", gw)).is_err());
    // So is a changed `[server] http` (it used to be said nowhere), each key by name.
    let http = common::tools::free_port();
    std::fs::write(
        &path,
        cfg(
            "30s",
            &format!(
                "[[gateway]]\nlisten = \"127.0.0.1:{gw}\"\n[server]\nhttp = \"127.0.0.1:{http}\"\nmax_connections = 50\n"
            ),
        ),
    )
    .unwrap();
    send_hup(&d);
    eventually("the http note", &d, || {
        let log = d.log_text();
        log.lines().any(|l| note("server.http")(&l))
            && log.lines().any(|l| note("server.max_connections")(&l))
    });
    assert!(std::net::TcpStream::connect(("127.0.0.1", http)).is_err());
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let Some(analyze) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        assert!(
            !std::env::var("CI").is_ok_and(|v| !v.is_empty()),
            "systemd-analyze is not installed but CI is set (apt-get install systemd)"
        );
        eprintln!("note: systemd-analyze not installed, skipping the unit check");
        return;
    };
    // The unit as shipped, with the binary path pointed at this build.
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/proxypool.service"),
    )
    .unwrap();
    for key in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=proxypool",
        "RuntimeDirectory=proxypool",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.contains(key), "unit lacks {key}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxypool.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/proxypool", BIN)).unwrap();
    let out = std::process::Command::new(analyze)
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {err}");
    assert!(!err.contains("Unknown key"), "{err}");
}

#[test]
fn sighup_applies_new_probe_settings_to_the_running_prober() {
    let proxy = spawn_answering_proxy();
    let cfg = |body: &str| {
        format!(
            "[[pool]]\nname = \"default\"\nmode = \"static\"\n[pool.probe]\n\
             url = \"http://127.0.0.1:9/\"\nexpect_body = \"{body}\"\ntimeout = \"2s\"\n\
             interval = \"0s\"\n[pool.cooldown]\nbase = \"300ms\"\nfactor = 1.0\n\
             max = \"300ms\"\njitter = 0.0\n"
        )
    };
    let h = Home::new(Some(&cfg("not on the page")));
    let path = h.config.clone().unwrap();
    let d = h.serve();
    let id = h.add(&[&format!("http://127.0.0.1:{proxy}")])[0];
    // The prober's trials fail on the body the old settings expect.
    eventually("a body_mismatch", &d, || {
        h.events()
            .iter()
            .any(|e| e["kind"] == json!("probe_failure") && e["reason"] == json!("body_mismatch"))
    });
    assert_ne!(h.listed(id)["state"], json!("available"));
    std::fs::write(&path, cfg("hello")).unwrap();
    send_hup(&d);
    eventually("recovery under the new settings", &d, || {
        h.listed(id)["state"] == json!("available")
    });
    assert!(d.log_text().contains("config reloaded"), "{}", d.log_text());
}
