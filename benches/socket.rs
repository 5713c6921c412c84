//! Lease socket benchmarks: lease+release and lease+failure-report round trips over the
//! Unix socket at 1, 8 and 64 connections, side by side with a minimal JSON-lines echo
//! server on a Unix socket (the floor of this machine's kernel and runtime).
//!
//! The floors table (`socket/floors.rs`) measures each daemon load beside the cheapest
//! thing found that does the same work, rounds interleaved (A B A B ...), medians:
//! lease+release beside a server that
//! answers the same two round trips with the same bytes without reading them (one echo
//! round trip is the other floor row, for comparison with older figures), and lease +
//! failure report with `synchronous = full` beside a bare loop of one-row SQLite commits
//! on the same disk and beside "the same rows, bare": one thread replaying, on a plain
//! connection, what one of the daemon's commits of 8 pairs writes (traced from a daemon's
//! store, `socket/same_rows.rs`), on random endpoints of the pool and, as a second row,
//! the traced commits themselves on the daemon's own endpoints. Two more rows put the
//! round trips back: "the same rows, answered" (`socket/replay.rs`) is a lean server that
//! answers the same lease and report bytes and commits those rows for the reports that
//! wait on them, knowing how many will come, in commits of 8 and of 4 on a commit thread
//! and in commits of 8 on its runtime thread: a floor of persisted pairs for callers that
//! wait for their answers. The last row is the daemon on a database given back the index
//! on events (endpoint, id) that an endpoint's chain of events replaced: what it cost.
//!
//! The last table compares lease+release at 8 connections with metrics recorded and
//! not recorded (`EngineOptions::record_metrics`), two daemons side by side, interleaved.
//!
//! Run: `cargo bench --bench socket` (`cargo bench --bench socket -- floors` runs only
//! the floors table, `-- metrics` only the metrics comparison). For a profile,
//! `-- hold release|report [SECONDS]` runs one load (lease+release, or lease + failure
//! report with `synchronous = full`) at 8 connections for SECONDS (default 20): the
//! daemon's runtime thread is named `server`, its store thread `proxypool-store`.

#[path = "socket/floors.rs"]
mod floors;
#[path = "socket/replay.rs"]
mod replay;
#[path = "socket/same_rows.rs"]
mod same_rows;
mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxypool::config::{Durability, PoolConfig};
use proxypool::pool::engine::{CommitCounts, Engine, EngineOptions};
use support::Conn;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

const RUN: Duration = Duration::from_secs(3);

fn lease_id(resp: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(resp).ok()?;
    v["lease"].as_str().map(str::to_string)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    Echo,
    /// A recorded lease and the request after it, against a replay server.
    Replay(&'static Exchange),
    LeaseRelease,
    LeaseFailure,
}

/// A lease and the request after it (a release, or a failure report) as the daemon saw
/// them: both requests and both answers, verbatim.
#[derive(PartialEq, Eq)]
struct Exchange {
    lease: String,
    lease_reply: String,
    then: String,
    then_reply: String,
}

impl Exchange {
    /// One real pair against the daemon at `path`, `then` making the second request from
    /// the lease id.
    async fn record(path: &Path, then: fn(&str) -> String) -> Exchange {
        let mut c = Conn::open(path).await;
        let lease = "{\"op\":\"lease\",\"ttl\":\"30s\"}\n".to_string();
        let lease_reply = c.rt(&lease).await.to_string();
        let id = lease_id(&lease_reply).expect("a lease");
        let then = then(&id);
        let then_reply = c.rt(&then).await.to_string();
        assert!(then_reply.starts_with("{\"ok\":true"), "{then_reply}");
        Exchange {
            lease,
            lease_reply,
            then,
            then_reply,
        }
    }
}

fn release_of(id: &str) -> String {
    format!("{{\"op\":\"release\",\"lease\":\"{id}\"}}\n")
}

fn failure_of(id: &str) -> String {
    format!(
        "{{\"op\":\"report\",\"lease\":\"{id}\",\"outcome\":\"failure\",\
         \"reason\":\"connect_refused\",\"phase\":\"connect\"}}\n"
    )
}

/// Runs `conns` clients for RUN; returns (operations/s, mean µs per operation, errors).
/// An operation is one echo round trip, or one lease + (release | report) pair.
async fn drive(path: PathBuf, conns: usize, load: Load) -> (f64, f64, u64) {
    let deadline = Instant::now() + RUN;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..conns {
        let path = path.clone();
        set.spawn(async move {
            let mut c = Conn::open(&path).await;
            let (mut ops, mut errs) = (0u64, 0u64);
            while Instant::now() < deadline {
                match load {
                    Load::Echo => {
                        let r = c.rt("{\"op\":\"lease\",\"pool\":\"default\"}\n").await;
                        assert!(!r.is_empty());
                    }
                    Load::Replay(x) => {
                        // The same client work as a real pair: the lease id is parsed out
                        // of the answer.
                        let r = c.rt(&x.lease).await;
                        if lease_id(r).is_none() {
                            errs += 1;
                        }
                        let r = c.rt(&x.then).await;
                        if !r.starts_with("{\"ok\":true") {
                            errs += 1;
                        }
                    }
                    Load::LeaseRelease | Load::LeaseFailure => {
                        let r = c.rt("{\"op\":\"lease\",\"ttl\":\"30s\"}\n").await;
                        let Some(id) = lease_id(r) else {
                            errs += 1;
                            continue;
                        };
                        let req = if load == Load::LeaseRelease {
                            release_of(&id)
                        } else {
                            failure_of(&id)
                        };
                        let r = c.rt(&req).await;
                        if !r.starts_with("{\"ok\":true") {
                            errs += 1;
                        }
                    }
                }
                ops += 1;
            }
            (ops, errs)
        });
    }
    let (rate, errs) = support::rate_of(set).await;
    (rate, conns as f64 * 1e6 / rate, errs)
}

async fn echo_server(l: UnixListener) {
    loop {
        let Ok((s, _)) = l.accept().await else { return };
        tokio::spawn(async move {
            let (r, mut w) = s.into_split();
            let mut r = BufReader::new(r);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if w.write_all(line.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}

fn pool_config(cooldown_ms: u64) -> PoolConfig {
    let mut p = PoolConfig::builtin("default");
    let d = Duration::from_millis(cooldown_ms);
    p.policy.cooldown.base = d;
    p.policy.cooldown.max = d;
    p.policy.cooldown.factor = 1.0;
    p.policy.cooldown.jitter = 0.0;
    p
}

/// A daemon (engine + socket server) on its own runtime thread, like `proxypool serve`.
fn start_daemon(dir: &Path, n: usize, name: &str) -> (PathBuf, CancellationToken) {
    start_daemon_with(dir, n, name, EngineOptions::default(), Durability::Normal)
}

fn start_daemon_with(
    dir: &Path,
    n: usize,
    name: &str,
    opts: EngineOptions,
    durability: Durability,
) -> (PathBuf, CancellationToken) {
    let (path, token, _) = start_daemon_engine(dir, n, name, opts, durability);
    (path, token)
}

/// [`start_daemon_with`], also handing back the engine (to read its commit sizes).
fn start_daemon_engine(
    dir: &Path,
    n: usize,
    name: &str,
    opts: EngineOptions,
    durability: Durability,
) -> (PathBuf, CancellationToken, Arc<Engine>) {
    // 200 ms cooldowns: failure reports keep cycling endpoints through
    // cooling -> probe_allowed -> trial, every report a persisted transition.
    let d = support::daemon(
        dir,
        name,
        &support::endpoints(n, "socks5h", 1080),
        pool_config(200),
        opts,
        durability,
    );
    (d.sock, d.token, d.engine)
}

/// What the commits between two readings carried: per commit, callers answered, groups
/// (callers and writes that rode along) and writes; and how many commits answered each
/// number of callers.
fn commit_sizes_text(before: &CommitCounts, after: &CommitCounts) -> String {
    let commits = (after.commits - before.commits).max(1) as f64;
    let hist: Vec<u64> = after
        .by_callers
        .iter()
        .zip(&before.by_callers)
        .map(|(a, b)| a - b)
        .collect();
    let callers: u64 = hist.iter().enumerate().map(|(i, n)| i as u64 * n).sum();
    let last = hist.iter().rposition(|&n| n > 0).unwrap_or(0);
    let shown: Vec<String> = hist[..=last]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if i + 1 == hist.len() {
                format!("17+:{n}")
            } else {
                format!("{i}:{n}")
            }
        })
        .collect();
    format!(
        "{} commits; per commit {:.2} callers (at least: 17+ counted as 17), {:.2} groups, \
         {:.2} writes; commits by callers {}",
        after.commits - before.commits,
        callers as f64 / commits,
        (after.groups - before.groups) as f64 / commits,
        (after.writes - before.writes) as f64 / commits,
        shown.join(" ")
    )
}

/// Lease+release at 8 connections, metrics on vs off: rounds interleaved so that a
/// noisy neighbour hits both sides alike; prints each round and the ratio of the sums.
fn metrics_comparison(dir: &Path, client: &tokio::runtime::Runtime) {
    const ROUNDS: usize = 5;
    let (on, t_on) = start_daemon_with(
        dir,
        10_000,
        "metrics-on",
        EngineOptions::default(),
        Durability::Normal,
    );
    let off_opts = EngineOptions {
        record_metrics: false,
        ..EngineOptions::default()
    };
    let (off, t_off) = start_daemon_with(dir, 10_000, "metrics-off", off_opts, Durability::Normal);
    println!("\nlease+release, pool of 10,000, 8 connections: metrics on vs off ({ROUNDS} rounds)");
    println!("{:<8} {:>14} {:>14}", "round", "on ops/s", "off ops/s");
    let (mut sum_on, mut sum_off) = (0.0, 0.0);
    for round in 0..ROUNDS {
        // Alternate which side runs first within a round.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        let mut r = [0.0; 2];
        for with in order {
            let path = if with { &on } else { &off };
            let (rate, _, errs) = client.block_on(drive(path.clone(), 8, Load::LeaseRelease));
            assert_eq!(errs, 0);
            r[usize::from(!with)] = rate;
        }
        sum_on += r[0];
        sum_off += r[1];
        println!("{round:<8} {:>14.0} {:>14.0}", r[0], r[1]);
    }
    println!(
        "total    {:>14.0} {:>14.0}   on/off = {:.3}",
        sum_on / ROUNDS as f64,
        sum_off / ROUNDS as f64,
        sum_on / sum_off
    );
    t_on.cancel();
    t_off.cancel();
}

/// One load at 8 connections for `secs`, for a profiler to watch.
fn hold(dir: &Path, client: &tokio::runtime::Runtime, what: &str, secs: u64) {
    let (load, durability) = match what {
        "release" => (Load::LeaseRelease, Durability::Normal),
        "report" => (Load::LeaseFailure, Durability::Full),
        other => panic!("hold takes release or report, not {other:?}"),
    };
    let opts = EngineOptions::default();
    let (path, token, engine) = start_daemon_engine(dir, 10_000, "hold", opts, durability);
    let before = engine.commit_sizes();
    println!(
        "pid {}: {what} at 8 connections for {secs} s",
        std::process::id()
    );
    let (mut ops, start) = (0.0, Instant::now());
    while start.elapsed() < Duration::from_secs(secs) {
        let (rate, _, errs) = client.block_on(drive(path.clone(), 8, load));
        assert_eq!(errs, 0);
        ops += rate * RUN.as_secs_f64();
    }
    println!("{:.0} pairs/s", ops / start.elapsed().as_secs_f64());
    println!(
        "commits: {}",
        commit_sizes_text(&before, &engine.commit_sizes())
    );
    token.cancel();
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "hold") {
        let client = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let what = args.get(i + 1).map_or("release", String::as_str);
        let secs = args.get(i + 2).and_then(|s| s.parse().ok()).unwrap_or(20);
        hold(dir.path(), &client, what, secs);
        return;
    }
    let only = |what: &str| args.iter().any(|a| a == what);
    if only("metrics") || only("floors") {
        let client = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        if only("floors") {
            floors::floors(dir.path(), &client);
        } else {
            metrics_comparison(dir.path(), &client);
        }
        return;
    }
    let echo_path = dir.path().join("echo.sock");
    let p = echo_path.clone();
    support::on_own_runtime(move |ready| async move {
        let l = UnixListener::bind(&p).unwrap();
        ready.send(()).unwrap();
        echo_server(l).await;
    });
    let (small, t1) = start_daemon(dir.path(), 10, "small");
    let (large, t2) = start_daemon(dir.path(), 10_000, "large");
    // Failure reports leave endpoints cooling and then in trial: a separate daemon keeps
    // the lease+release cells free of that state.
    let (failing, t3) = start_daemon(dir.path(), 10_000, "failing");
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    println!("server: 1 runtime thread + store thread; client: 1 runtime thread; {RUN:?} per cell");
    println!(
        "{:<36} {:>5} {:>12} {:>10} {:>7}",
        "load", "conns", "ops/s", "µs/op", "errors"
    );
    let mut echo_us = std::collections::HashMap::new();
    for conns in [1usize, 8, 64] {
        let (rate, us, errs) = client.block_on(drive(echo_path.clone(), conns, Load::Echo));
        echo_us.insert(conns, us);
        println!(
            "{:<36} {conns:>5} {rate:>12.0} {us:>10.1} {errs:>7}",
            "echo round trip"
        );
        for (name, path) in [("pool of 10", &small), ("pool of 10,000", &large)] {
            let (rate, us, errs) = client.block_on(drive(path.clone(), conns, Load::LeaseRelease));
            println!(
                "{:<36} {conns:>5} {rate:>12.0} {us:>10.1} {errs:>7}   pair = {:.2}x echo rt",
                format!("lease+release, {name}"),
                us / echo_us[&conns]
            );
        }
        {
            let name = "pool of 10,000";
            let (rate, us, errs) =
                client.block_on(drive(failing.clone(), conns, Load::LeaseFailure));
            println!(
                "{:<36} {conns:>5} {rate:>12.0} {us:>10.1} {errs:>7}",
                format!("lease+failure report, {name}")
            );
        }
    }
    t1.cancel();
    t2.cancel();
    t3.cancel();
    floors::floors(dir.path(), &client);
    metrics_comparison(dir.path(), &client);
}
