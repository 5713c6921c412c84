//! Probe sweep: 2,000 endpoints (loopback fake HTTP proxies, distinct users) probed with
//! `proxypool probe --all`, side by side in one run with `curl --parallel` doing the same
//! 2,000 transactions through the same proxies. Wall time and peak RSS of each command.
//!
//! Run: `cargo bench --bench probe_sweep` (needs curl and /usr/bin/time).

// The fakes of the test harness; the bench uses a part of them.
#[path = "../tests/common/fakes.rs"]
#[allow(dead_code)]
mod fakes;

#[allow(dead_code)]
#[path = "../tests/common/ports.rs"]
mod ports;

#[path = "../tests/common/tcp_queue.rs"]
mod tcp_queue;

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

const ENDPOINTS: usize = 2000;
const PROXIES: usize = 20;
const CONCURRENCY: usize = 64;
const ROUNDS: usize = 5;

/// (wall seconds, peak RSS KiB, stdout)
fn timed(cmd: &mut Command) -> (f64, u64, String) {
    let t = Instant::now();
    let out = cmd.stderr(Stdio::piped()).output().expect("run command");
    let secs = t.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // /usr/bin/time -f '%M' prints the peak RSS (KiB) as the last stderr line.
    let rss = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        stderr.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    (secs, rss, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (dest, proxies) = rt.block_on(async {
        let dest = fakes::dest(fakes::DestCfg::default()).await;
        let mut proxies = Vec::new();
        for _ in 0..PROXIES {
            proxies.push(fakes::http_proxy(fakes::HttpProxyCfg::default()).await);
        }
        (dest, proxies)
    });
    let _guard = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let dest_url = format!("http://127.0.0.1:{}/", dest.port());
    let config = dir.path().join("proxies.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"bench.db\"\n\n[[pool]]\nname = \"default\"\n\n[pool.probe]\n\
             url = \"{dest_url}\"\nexpect_body = \"hello\"\ntimeout = \"10s\"\n"
        ),
    )
    .unwrap();
    let mut list = String::new();
    let mut curl_cfg = String::from("silent\nparallel\n");
    writeln!(curl_cfg, "parallel-max = {CONCURRENCY}").unwrap();
    for i in 0..ENDPOINTS {
        let port = proxies[i % PROXIES].port();
        let proxy = format!("http://u{i}:p{i}@127.0.0.1:{port}");
        writeln!(list, "{proxy}").unwrap();
        writeln!(
            curl_cfg,
            "url = \"{dest_url}\"\nproxy = \"{proxy}\"\noutput = \"/dev/null\"\n\
             write-out = \"%{{http_code}}\\n\""
        )
        .unwrap();
        if i + 1 < ENDPOINTS {
            curl_cfg.push_str("next\n");
        }
    }
    let list_path = dir.path().join("list.txt");
    std::fs::write(&list_path, list).unwrap();
    let curl_path = dir.path().join("curl.cfg");
    std::fs::write(&curl_path, curl_cfg).unwrap();
    let bin = env!("CARGO_BIN_EXE_proxypool");
    let ok = Command::new(bin)
        .args(["--config"])
        .arg(&config)
        .args(["import"])
        .arg(&list_path)
        .status()
        .unwrap();
    assert!(ok.success());

    println!(
        "{ENDPOINTS} endpoints over {PROXIES} loopback HTTP proxies, destination {dest_url}, \
         concurrency {CONCURRENCY}, {ROUNDS} rounds each (alternating)"
    );
    let (mut pp, mut cu) = (Vec::new(), Vec::new());
    let (mut pp_rss, mut cu_rss) = (0, 0);
    for round in 0..ROUNDS {
        let (secs, rss, out) = timed(
            Command::new("/usr/bin/time")
                .args(["-f", "%M", bin, "-q", "--config"])
                .arg(&config)
                .args(["probe", "--all", "--json", "--concurrency"])
                .arg(CONCURRENCY.to_string()),
        );
        let passed = out.lines().filter(|l| l.contains("\"ok\":true")).count();
        assert_eq!(passed, ENDPOINTS, "every proxypool probe must pass");
        println!("round {round}: proxypool probe --all      {secs:>6.3} s  peak RSS {rss:>7} KiB");
        pp.push(secs);
        pp_rss = pp_rss.max(rss);
        let (secs, rss, out) = timed(
            Command::new("/usr/bin/time")
                .args(["-f", "%M", "curl", "-K"])
                .arg(&curl_path),
        );
        let passed = out.lines().filter(|l| l.trim() == "200").count();
        assert_eq!(passed, ENDPOINTS, "every curl transfer must pass");
        println!("round {round}: curl --parallel-max {CONCURRENCY}     {secs:>6.3} s  peak RSS {rss:>7} KiB");
        cu.push(secs);
        cu_rss = cu_rss.max(rss);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (p, c) = (median(&mut pp), median(&mut cu));
    println!(
        "median: proxypool {p:.3} s ({:.0} probes/s, peak {pp_rss} KiB), curl {c:.3} s ({:.0}/s, peak {cu_rss} KiB)",
        ENDPOINTS as f64 / p,
        ENDPOINTS as f64 / c
    );
    println!("ratio proxypool/curl = {:.2} (goal <= 1.0)", p / c);
}
