//! Runs the Python client's unittest suite against a real daemon.

mod support_daemon;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use support_daemon::*;

#[test]
fn python_client_unittests_pass_against_a_real_daemon() {
    let have_python = std::process::Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_python {
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
            panic!("python3 is required in CI to test clients/python");
        }
        eprintln!("note: python3 not found; skipping the Python client tests");
        return;
    }
    let h = Home::new(None);
    let _d = h.serve();
    // The daemon starts with endpoints, as in real use.
    h.add(&[
        "http://seed:pw@10.250.0.1:3128",
        "socks5h://10.250.0.2:1080",
    ]);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python");
    let child = h
        .command("python3")
        .args(["-m", "unittest", "-v", "test_proxypool_client"])
        .current_dir(&dir)
        .env("PROXYPOOL_BIN", BIN)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let out = wait_output(child, Duration::from_secs(120)).expect("python tests timed out");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python client tests failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // The daemon-backed tests really ran (not skipped for a missing environment).
    assert!(
        stderr.lines().any(|l| l
            .starts_with("test_leased_reports_failure_when_exception_has_reason ")
            && l.ends_with("... ok")),
        "{stderr}"
    );
    assert!(!stderr.contains("skipped"), "{stderr}");
    eprintln!("{stderr}");
}
