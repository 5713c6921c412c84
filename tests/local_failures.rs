//! A probe that fails on this machine's side (out of descriptors) is nobody's evidence:
//! the real `proxypool probe`, run with a lowered open-file limit, skips the endpoints
//! it could not probe and records nothing against them. The limit is walked up one
//! descriptor at a time, so that some runs start yet leave some probes no socket.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Stdio;

use common::daemon::{json_lines, wait_output, Home, RUN_LIMIT};
use common::fakes::{dest, fake_runtime, http_proxy, DestCfg, HttpProxyCfg};

/// `proxypool probe --all --json --concurrency AT_ONCE` with soft and hard open-file limits of `n`.
fn probe_with_nofile(home: &Home, n: u64, at_once: usize) -> (Option<i32>, String, String) {
    let mut c = home.cmd();
    c.args([
        "probe",
        "--all",
        "--json",
        "--concurrency",
        &at_once.to_string(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        c.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = wait_output(c.spawn().expect("spawn proxypool"), RUN_LIMIT)
        .expect("proxypool probe finished");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Probes running at once: more sockets than starting the CLI needs, so that some limit
/// lets the CLI start yet leaves some probes no socket.
const AT_ONCE: usize = 24;

#[test]
fn a_probe_short_of_descriptors_records_nothing_against_the_endpoint() {
    let rt = fake_runtime();
    let site = rt.block_on(dest(DestCfg::default()));
    let proxies: Vec<_> = (0..AT_ONCE)
        .map(|_| rt.block_on(http_proxy(HttpProxyCfg::default())))
        .collect();
    let home = Home::new(Some(&format!(
        "[[pool]]\nname = \"default\"\n[pool.probe]\nurl = \"http://127.0.0.1:{}/probe\"\n",
        site.port()
    )));
    let urls: Vec<String> = proxies
        .iter()
        .map(|p| format!("http://127.0.0.1:{}", p.port()))
        .collect();
    let ids = home.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(ids.len(), AT_ONCE);
    let states = |home: &Home| -> Vec<String> {
        let rows = home.list();
        ids.iter()
            .map(|id| {
                let row = rows.iter().find(|r| r["id"] == *id).expect("listed");
                row["state"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let before = states(&home);
    let judged = |home: &Home| -> Vec<serde_json::Value> {
        home.events()
            .into_iter()
            .filter(|e| e["kind"] == "probe_failure" || e["kind"] == "state_changed")
            .collect()
    };
    let judged_before = judged(&home).len();

    let (mut some_skipped, mut all_passed) = (None, None);
    for n in 8..=128u64 {
        let (code, stdout, stderr) = probe_with_nofile(&home, n, AT_ONCE);
        let reports = json_lines(&stdout);
        if reports.is_empty() {
            // Short of descriptors before any probe (the runtime, the config, the
            // database): a clear error and a failed exit, never a report.
            assert_ne!(code, Some(0), "limit {n}: no report yet exit 0: {stderr}");
            assert!(
                stderr.contains("Too many open files") || stderr.contains("unable to open"),
                "limit {n}: failed without naming why: {stderr}"
            );
        } else {
            assert_eq!(reports.len(), AT_ONCE, "limit {n}: {stdout}");
            let mut skipped = 0;
            for r in &reports {
                match r["skipped"].as_str() {
                    Some(why) => {
                        assert!(
                            why.contains("could not run on this machine"),
                            "limit {n}: skipped for another reason: {why}"
                        );
                        skipped += 1;
                    }
                    None => assert_eq!(
                        r["ok"], true,
                        "limit {n}: a probe through a working proxy failed: {r}\n{stderr}"
                    ),
                }
            }
            // A probe skipped for want of descriptors is not a failed probe.
            assert_eq!(code, Some(0), "limit {n}: {stderr}");
            if skipped > 0 {
                some_skipped.get_or_insert((n, skipped));
            } else {
                all_passed = Some(n);
            }
        }
        // Whatever happened, no endpoint was judged by it.
        assert_eq!(
            states(&home),
            before,
            "limit {n} changed an endpoint's state"
        );
        assert_eq!(
            judged(&home).len(),
            judged_before,
            "limit {n} recorded a failure or a transition: {:#?}",
            judged(&home)
        );
        if all_passed.is_some() {
            break;
        }
    }
    let (skipped_at, skipped) = some_skipped.expect(
        "some limit let the CLI start yet left probes no socket: the local skip was never exercised",
    );
    let passed_at = all_passed.expect("a limit of 128 descriptors lets every probe run");
    assert!(skipped_at < passed_at && skipped > 0);
    eprintln!("limits: {skipped} of {AT_ONCE} probes skipped at {skipped_at} descriptors, all ran at {passed_at}");
}
