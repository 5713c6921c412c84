//! Real tools the tests run (promtool, Prometheus, Chromium...): found on PATH, skipped with
//! a note when missing, a failure when `CI` is set. Same rule as tests/interop.rs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The binary's path, or None (the caller skips) when it is missing outside CI.
pub fn need(bin: &str, install: &str) -> Option<PathBuf> {
    let dirs = std::env::var("PATH").unwrap_or_default();
    let found = dirs
        .split(':')
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/bin"])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| !v.is_empty()) {
            panic!("{bin} is not installed but CI is set: this test needs it ({install})");
        }
        eprintln!("note: {bin} not installed, skipping this test ({install})");
    }
    found
}

/// `promtool check metrics` on `text`: it must pass without a single lint finding.
pub fn promtool_check(promtool: &Path, text: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    // promtool prints lint findings (e.g. a counter without `_total`) and exits non-zero.
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {:?}\n{}\n{}\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
