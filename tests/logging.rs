//! Logging through the real binary (docs/observability.md, "Logging"): `serve` speaks at
//! info by default, stderr that is not a terminal gets no ANSI escapes, `--log-format json`
//! writes JSON lines.

mod common;

use std::process::Stdio;

use common::daemon::*;
use common::tools::Proc;
use serde_json::Value;

/// Run `proxypool ARGS serve` with stderr in a file (not a terminal) and no RUST_LOG, until
/// it has answered a ping; then stop it and return what it wrote.
fn serve_log(home: &Home, args: &[&str]) -> String {
    let log = home
        .dir
        .path()
        .join(format!("serve-{}.log", args.join("_")));
    let mut c = home.cmd();
    c.args(args)
        .arg("serve")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut child = Proc(c.spawn().unwrap());
    wait_ping(&mut child.0, &home.socket, &log);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGTERM) };
    let _ = child.0.wait();
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn serve_logs_at_info_without_colours() {
    let home = Home::new(None);
    let text = serve_log(&home, &[]);
    assert!(text.contains("serving"), "no info line at start: {text:?}");
    assert!(text.contains(" INFO "), "{text:?}");
    assert!(
        !text.contains('\x1b'),
        "ANSI escapes in a non-terminal log: {text:?}"
    );
}

#[test]
fn a_first_serve_without_endpoints_says_what_to_do_next() {
    let home = Home::new(None);
    let text = serve_log(&home, &[]);
    assert!(
        text.contains("no endpoints yet: add some with `proxypool add URL`"),
        "{text}"
    );
    home.add(&["http://10.37.0.1:3128"]);
    let text = serve_log(&home, &[]);
    assert!(!text.contains("no endpoints yet"), "{text}");
}

#[test]
fn quiet_serve_is_quiet() {
    let home = Home::new(None);
    let text = serve_log(&home, &["-q"]);
    assert!(!text.contains("serving"), "{text:?}");
}

#[test]
fn json_lines() {
    let home = Home::new(None);
    let text = serve_log(&home, &["--log-format", "json"]);
    assert!(!text.contains('\x1b'), "{text:?}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    let serving = lines
        .iter()
        .find(|v| v["fields"]["message"] == "serving")
        .unwrap_or_else(|| panic!("no serving line: {text}"));
    assert_eq!(serving["level"], "INFO");
    assert_eq!(
        serving["fields"]["socket"],
        home.socket.display().to_string()
    );
}

#[test]
fn bad_log_format_is_usage_error() {
    let home = Home::new(None);
    let out = home.run(&["--log-format", "xml", "list"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("xml"), "{}", out.stderr);
}

/// Many endpoints failing at once (docs/observability.md, "Log volume"): beyond 20 state
/// changes a second the rest of the second is one summary line with counts by reason; no
/// change is lost (the lines and summaries add up to the `state_changed` rows), and a
/// restart logs what it restored as counts.
#[test]
fn a_burst_of_state_changes_is_summarised_and_a_restart_logs_counts() {
    const N: usize = 400;
    let cfg = "[[pool]]\nname = \"default\"\nmode = \"static\"\n[pool.probe]\n\
               url = \"http://127.0.0.1:1/\"\ntimeout = \"2s\"\nconcurrency = 200\n\
               [pool.cooldown]\nbase = \"1h\"\nmax = \"1h\"\n";
    let home = Home::new(Some(cfg));
    // Dead proxies: loopback addresses where nothing listens (connection refused).
    let list: String = (0..N)
        .map(|i| format!("http://127.0.{}.{}:9\n", 1 + i / 200, 1 + i % 200))
        .collect();
    let file = home.path("dead.txt");
    std::fs::write(&file, list).unwrap();
    home.ok(&["import", file.to_str().unwrap()]);
    let d = home.serve();
    let tally = |text: &str| -> (usize, u64) {
        let lines = text.lines().filter(|l| l.contains("state changed")).count();
        let summed: u64 = text
            .lines()
            .filter(|l| l.contains("state changes summarised"))
            .map(|l| {
                let n = l.split("changes=").nth(1).expect("changes field");
                n.split_whitespace().next().unwrap().parse::<u64>().unwrap()
            })
            .sum();
        (lines, summed)
    };
    let (lines, summed) = common::eventually(
        std::time::Duration::from_secs(30),
        "every endpoint cooled and every change logged",
        || {
            let changed = home
                .sqlite()
                .query_row(
                    "SELECT count(*) FROM events WHERE kind = 'state_changed'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap() as u64;
            let (lines, summed) = tally(&d.log_text());
            if changed == N as u64 && lines as u64 + summed == changed {
                Ok((lines, summed))
            } else {
                Err(format!("{changed} rows, {lines} lines + {summed} summed"))
            }
        },
    );
    assert!(
        summed > 0 && lines < N / 2,
        "{lines} lines, {summed} summed"
    );
    let text = d.log_text();
    let summary = text
        .lines()
        .find(|l| l.contains("state changes summarised"))
        .unwrap();
    assert!(summary.contains("by_reason=connect_refused:"), "{summary}");
    drop(d);
    // A restart: one line with the counts, not one per endpoint.
    let d = home.serve();
    let text = d.log_text();
    let restored = text
        .lines()
        .find(|l| l.contains("restored from the store"))
        .unwrap_or_else(|| panic!("no restore line: {text}"));
    assert!(
        restored.contains(&format!("endpoints={N}")) && restored.contains(&format!("cooling={N}")),
        "{restored}"
    );
    let before_start = text.lines().take_while(|l| !l.contains("serving")).count();
    assert!(
        before_start < 5,
        "{before_start} lines before the start line: {text}"
    );
}

/// Pair bans and targets going down are state changes like an endpoint's (docs/
/// observability.md, "Log volume"): they share the budget of 20 lines a second, the rest
/// of each second summed in one line, so a client that bans a thousand pairs on bogus
/// hosts and downs a thousand bogus targets writes a few dozen lines, not two thousand;
/// no change is lost (the lines and the summaries add up to the changes).
#[test]
fn pair_and_target_changes_share_the_log_budget() {
    const N: usize = 1000;
    let cfg = "[[pool]]\nname = \"default\"\nmode = \"static-no-ping\"\n";
    let home = Home::new(Some(cfg));
    home.add(&["http://10.37.0.1:3128", "http://10.37.0.2:3128"]);
    let d = home.serve();
    let mut c = d.conn();
    let fail = |c: &mut common::daemon::Conn, dest: &str, reason: &str, phase: &str| {
        let g = c.req(&serde_json::json!({"op": "lease", "destination": dest}));
        assert_eq!(g["ok"], true, "{g}");
        let r = c.req(&serde_json::json!({"op": "report", "lease": g["lease"],
            "outcome": "failure", "reason": reason, "phase": phase, "status": 403}));
        assert_eq!(r["ok"], true, "{r}");
    };
    for i in 0..N {
        fail(
            &mut c,
            &format!("junk-{i}.example"),
            "destination_status",
            "response_head",
        );
    }
    for i in 0..N {
        for _ in 0..2 {
            let t = format!("down-{i}.invalid:443");
            fail(&mut c, &t, "upstream_unreachable", "proxy_handshake");
        }
    }
    let tally = |text: &str| -> (usize, u64) {
        let lines = text
            .lines()
            .filter(|l| l.contains("pair state changed") || l.contains("target down"))
            .count();
        let summed: u64 = text
            .lines()
            .filter(|l| l.contains("state changes summarised"))
            .map(|l| {
                let n = l.split("changes=").nth(1).expect("changes field");
                n.split_whitespace().next().unwrap().parse::<u64>().unwrap()
            })
            .sum();
        (lines, summed)
    };
    let (lines, summed) = common::eventually(
        std::time::Duration::from_secs(30),
        "every ban and every target down logged or summed",
        || {
            let (lines, summed) = tally(&d.log_text());
            if lines as u64 + summed == 2 * N as u64 {
                Ok((lines, summed))
            } else {
                Err(format!("{lines} lines + {summed} summed"))
            }
        },
    );
    assert!(
        summed > 0 && lines < N / 2,
        "{lines} lines, {summed} summed"
    );
}
