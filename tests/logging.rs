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
