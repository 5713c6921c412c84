//! Runs the Python package's pytest suite (`clients/python/tests`) with the interpreter
//! named by `PROXYPOOL_PYTHON` (a virtualenv with pytest, Scrapy, requests, httpx, aiohttp
//! and PySocks; `.ci/run` makes one). The suite starts its own daemons from this build,
//! real tinyproxy and microsocks, and real Scrapy crawls. Without that interpreter the
//! test is skipped with a note, unless `CI` is set: then it fails, and so does any skip
//! inside the suite.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::{wait_output, BIN};
use common::tools::{in_ci, skip_unless_ci};

const MODULES: &str = "import pytest, scrapy, requests, httpx, aiohttp, socks, proxypool_client";

/// The interpreter, or None (skipped) outside CI.
fn python() -> Option<String> {
    let skip = |why: String| skip_unless_ci(&why, "CI runs the Python client tests, see .ci/run");
    let Some(py) = std::env::var("PROXYPOOL_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
    else {
        return skip("PROXYPOOL_PYTHON is not set (a virtualenv python with clients/python[test], scrapy, requests, httpx, aiohttp, pysocks)".into());
    };
    let ok = Command::new(&py)
        .args(["-c", MODULES])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return skip(format!("{py} cannot `{MODULES}`"));
    }
    Some(py)
}

#[test]
fn python_client_pytest_suite_passes() {
    let Some(py) = python() else {
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python");
    let child = Command::new(&py)
        .args([
            "-m",
            "pytest",
            "-v",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests",
        ])
        .current_dir(&dir)
        .env("PROXYPOOL_BIN", BIN)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PROXYPOOL_SOCKET")
        .env_remove("PROXYPOOL_DB")
        .env_remove("PROXYPOOL_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn pytest");
    let out = wait_output(child, Duration::from_secs(300)).expect("pytest timed out after 300 s");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pytest failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // The suites that need real software really ran, and so did the regression tests.
    for test in [
        "test_client.py::test_bug1_documented_requests_example_reports_dead_socks_proxy",
        "test_client.py::test_bug2_urllib_http_error_is_reported_by_status_not_by_its_reason",
        "test_client.py::test_bug3_successful_block_never_raises_on_exit",
        "test_client.py::test_readme_example_works_without_pysocks_in_a_pool_with_socks",
        "test_classify.py::test_socks_wrong_password_is_proxy_auth_rejected",
        "test_classify.py::test_tinyproxy_wrong_password",
        "test_safety.py::test_one_client_shared_by_threads_never_swaps_replies",
        "test_safety.py::test_a_lease_cancelled_while_its_reply_is_in_flight_is_given_back",
        "test_safety.py::test_random_cancellations_leave_no_lease_behind",
        "test_safety.py::test_a_huge_retry_after_does_not_cost_the_ban",
        "test_safety.py::test_an_exception_that_cannot_be_printed_still_ends_the_lease",
        "test_tcp.py::test_sync_client_over_tcp",
        "test_tcp.py::test_async_client_over_tcp",
        "test_drift.py::test_the_package_version_is_the_daemons",
        "test_drift.py::test_reasons_are_the_daemons",
        "test_drift.py::test_phases_are_the_daemons",
        "test_drift.py::test_default_ban_statuses_are_the_gateways",
        "test_scrapy.py::test_crawl_direct_mode_one_dead_one_banning",
        "test_scrapy.py::test_real_scrapy_download_errors_are_classified",
        "test_scrapy.py::test_crawl_of_an_empty_pool_closes_the_spider_saying_why",
        "test_scrapy.py::test_crawl_in_lease_mode_over_tcp",
        "test_scrapy.py::test_the_documented_spider_crawls_through_the_pool",
        "test_gateway.py::test_scrapy_https_ban_inside_the_tunnel_is_reported_by_session[tcp]",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(test) && l.contains("PASSED")),
            "{test} did not pass:\n{stdout}"
        );
    }
    // Under CI nothing may skip (the suite's conftest also turns a skip into a failure).
    if in_ci() {
        let skipped: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("SKIPPED"))
            .collect();
        assert!(
            skipped.is_empty(),
            "skipped under CI: {skipped:?}\n{stdout}"
        );
    }
    eprintln!("{}", stdout.lines().last().unwrap_or_default());
}
