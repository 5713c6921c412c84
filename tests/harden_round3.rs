//! Regressions of the third adversarial run (issue 44) through the real binary: lease names
//! nobody can guess, a bounded ttl and a bounded number of live leases, a CLI whose reader
//! closed the pipe, a SIGHUP whose config file would block the reader.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use common::daemon::*;
use serde_json::{json, Value};

fn report_failure(lease: &str) -> Value {
    json!({"op": "report", "lease": lease, "outcome": "failure",
           "reason": "proxy_auth_rejected", "phase": "proxy_handshake"})
}

#[test]
fn a_lease_name_cannot_be_guessed_from_another() {
    let h = Home::new(None);
    let d = h.serve();
    let id = h.add(&["http://10.44.0.1:3128"])[0];
    let mine = lease_id(&ok(d.req(json!({"op": "lease", "ttl": "5m"}))));
    let theirs = lease_id(&ok(d.req(json!({"op": "lease", "ttl": "5m"}))));
    for name in [&mine, &theirs] {
        let (n, secret) = name.split_once('-').expect("number-secret");
        assert!(u64::from_str_radix(n, 16).is_ok(), "{name}");
        assert_eq!(secret.len(), 32, "128 random bits: {name}");
        assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    }
    let (mine_n, mine_secret) = mine.split_once('-').unwrap();
    let (theirs_n, theirs_secret) = theirs.split_once('-').unwrap();
    assert_ne!(mine_n, theirs_n);
    assert_ne!(
        mine_secret, theirs_secret,
        "the random part is drawn per lease"
    );

    // Whoever holds one name (or none) guesses the other's: right number, wrong bits;
    // the next number with this name's bits; the old `prefix-number` form.
    let mut flipped = theirs.clone();
    let last = flipped.pop().unwrap();
    flipped.push(if last == '0' { '1' } else { '0' });
    let guesses = [
        flipped,
        format!("{theirs_n}-{mine_secret}"),
        format!("{:08x}-{theirs_n}", 0xdead_beef_u32),
    ];
    for guess in &guesses {
        let r = d.req(report_failure(guess));
        assert_eq!(err_code(&r), "unknown_lease", "{guess}: {r}");
        let r = d.req(json!({"op": "release", "lease": guess}));
        assert_eq!(err_code(&r), "unknown_lease", "{guess}: {r}");
    }
    assert_eq!(
        h.listed(id)["state"],
        json!("available"),
        "nothing was cooled"
    );
    assert_eq!(d.status()["leases"], json!(2), "nothing was released");
    // The holders' own names still work, once each.
    ok(d.req(json!({"op": "release", "lease": theirs})));
    let r = d.req(json!({"op": "release", "lease": theirs}));
    assert_eq!(err_code(&r), "unknown_lease", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already released"),
        "{r}"
    );
    ok(d.req(json!({"op": "release", "lease": mine})));
}

#[test]
fn a_ttl_over_the_pools_max_ttl_is_refused_and_changes_nothing() {
    let h = Home::new(None);
    let d = h.serve();
    h.add(&["http://10.44.0.2:3128"]);
    let r = d.req(json!({"op": "lease", "ttl": "365d"}));
    assert_eq!(err_code(&r), "bad_request", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("max_ttl") && msg.contains("1h"), "{msg}");
    assert_eq!(d.status()["leases"], json!(0));
    ok(d.req(json!({"op": "lease", "ttl": "1h"})));
    // The CLI says the same, exit 2.
    let (_, err) = h.fails(2, &["lease", "--ttl", "2h"]);
    assert!(err.contains("max_ttl"), "{err}");

    let h = Home::new(Some("[[pool]]\nname = \"default\"\nmax_ttl = \"3h\"\n"));
    let d = h.serve();
    h.add(&["http://10.44.0.3:3128"]);
    ok(d.req(json!({"op": "lease", "ttl": "150m"})));
    let r = d.req(json!({"op": "lease", "ttl": "4h"}));
    assert_eq!(err_code(&r), "bad_request", "{r}");
}

#[test]
fn live_leases_are_capped_per_pool() {
    let h = Home::new(Some("[[pool]]\nname = \"default\"\nmax_leases = 3\n"));
    let d = h.serve();
    h.add(&["http://10.44.0.4:3128", "http://10.44.0.5:3128"]);
    let leases: Vec<String> = (0..3)
        .map(|_| lease_id(&ok(d.req(json!({"op": "lease", "ttl": "1h"})))))
        .collect();
    let r = d.req(json!({"op": "lease", "ttl": "1h"}));
    assert_eq!(err_code(&r), "pool_exhausted", "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("max_leases") && msg.contains('3'), "{msg}");
    assert!(
        r["error"].get("retry_after_ms").is_none(),
        "no time is known: {r}"
    );
    assert_eq!(d.status()["leases"], json!(3));
    ok(d.req(json!({"op": "release", "lease": leases[0]})));
    ok(d.req(json!({"op": "lease", "ttl": "1h"})));
}

#[test]
fn max_leases_and_max_ttl_out_of_range_are_config_errors() {
    for (key, value) in [
        ("max_leases", "0"),
        ("max_leases", "20000000"),
        ("max_ttl", "\"0s\""),
    ] {
        let h = Home::new(Some(&format!(
            "[[pool]]\nname = \"default\"\n{key} = {value}\n"
        )));
        let (_, err) = h.fails(2, &["config", "check"]);
        assert!(
            err.contains(&format!("pool.default.{key}")),
            "{key}={value}: {err}"
        );
    }
}

#[test]
fn a_reader_that_closes_the_pipe_ends_output_quietly_and_the_command_completes() {
    let h = Home::new(None);
    let urls: Vec<String> = (1..=6)
        .map(|i| format!("http://10.44.1.{i}:3128"))
        .collect();
    let ids = h.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    h.ok(&["disable", "1", "2", "3", "4", "5", "6"]);
    for args in [
        vec!["enable", "1", "2", "4", "6", "--now"],
        vec!["list"],
        vec!["events"],
        vec!["completions", "bash"],
    ] {
        // The reader is gone before the first write: every write meets a closed pipe.
        let mut c = h.cmd();
        c.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        drop(child.stdout.take());
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(0), "{args:?}: {st} {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 6]);
    for e in h.list() {
        let id = e["id"].as_i64().unwrap();
        let want = if [1, 2, 4, 6].contains(&id) {
            "available"
        } else {
            "disabled"
        };
        assert_eq!(e["state"], json!(want), "endpoint {id}");
    }
}

#[test]
fn a_sighup_whose_config_is_a_fifo_is_refused_and_the_daemon_serves_on() {
    let h = Home::new(Some("[[pool]]\nname = \"default\"\n"));
    let mut d = h.serve();
    let cfg = h.config.clone().unwrap();
    std::fs::remove_file(&cfg).unwrap();
    let c = std::ffi::CString::new(cfg.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path in our temp dir.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(d.pid() as i32, libc::SIGHUP) }, 0);
    common::eventually(Duration::from_secs(10), "the reload is refused", || {
        let log = d.log_text();
        if log.contains("config reload refused") {
            Ok(())
        } else {
            Err(log)
        }
    });
    assert!(
        d.log_text().contains("not a regular file"),
        "{}",
        d.log_tail(5)
    );
    assert_eq!(d.req(json!({"op": "ping"}))["ok"], json!(true));
    let st = d.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    assert!(st.success() || st.code() == Some(0), "{st}");
    // The CLI refuses the FIFO too, at once (it would block forever waiting for a writer).
    let (_, err) = h.fails(2, &["config", "check"]);
    assert!(err.contains("not a regular file"), "{err}");
}
