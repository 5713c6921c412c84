//! Lease socket benchmarks: lease+release and lease+failure-report round trips over the
//! Unix socket at 1, 8 and 64 connections, side by side with a minimal JSON-lines echo
//! server on a Unix socket (the floor of this machine's kernel and runtime).
//!
//! The last table compares lease+release at 8 connections with metrics recorded and
//! not recorded (`EngineOptions::record_metrics`), two daemons side by side, interleaved.
//!
//! Run: `cargo bench --bench socket` (`cargo bench --bench socket -- metrics` runs only
//! the metrics comparison).

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxypool::config::{Config, Durability, PoolConfig};
use proxypool::pool::engine::{Engine, EngineOptions};
use proxypool::server::{self, Handler};
use proxypool::store::{NewEndpoint, Store};
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
    LeaseRelease,
    LeaseFailure,
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
                    Load::LeaseRelease | Load::LeaseFailure => {
                        let r = c.rt("{\"op\":\"lease\",\"ttl\":\"30s\"}\n").await;
                        let Some(id) = lease_id(r) else {
                            errs += 1;
                            continue;
                        };
                        let req = if load == Load::LeaseRelease {
                            format!("{{\"op\":\"release\",\"lease\":\"{id}\"}}\n")
                        } else {
                            format!(
                                "{{\"op\":\"report\",\"lease\":\"{id}\",\"outcome\":\"failure\",\
                                 \"reason\":\"connect_refused\",\"phase\":\"connect\"}}\n"
                            )
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
    let start = Instant::now();
    let (mut ops, mut errs) = (0, 0);
    while let Some(r) = set.join_next().await {
        let (o, e) = r.unwrap();
        ops += o;
        errs += e;
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = ops as f64 / secs;
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
    start_daemon_with(dir, n, name, EngineOptions::default())
}

fn start_daemon_with(
    dir: &Path,
    n: usize,
    name: &str,
    opts: EngineOptions,
) -> (PathBuf, CancellationToken) {
    let mut store = Store::open_with(&dir.join(format!("{name}.db")), Durability::Normal).unwrap();
    let eps: Vec<NewEndpoint> = support::endpoints(n, "socks5h", 1080);
    store.add_endpoints(&eps).unwrap();
    let sock = dir.join(format!("{name}.sock"));
    let token = CancellationToken::new();
    let (sock2, tok2) = (sock.clone(), token.clone());
    on_own_runtime(move |ready| async move {
        // 200 ms cooldowns: failure reports keep cycling endpoints through
        // cooling -> probe_allowed -> trial, every report a persisted transition.
        let engine = Engine::open_with(store, [pool_config(200)], opts).unwrap();
        tokio::spawn(engine.clone().run_timer(tok2.clone().cancelled_owned()));
        let l = server::bind_unix(&sock2).await.unwrap();
        let h = Arc::new(Handler::new(
            engine,
            Arc::new(Config::default()),
            Default::default(),
        ));
        ready.send(()).unwrap();
        server::run(l, h, tok2).await;
    });
    (sock, token)
}

/// Run a server on its own 1-thread runtime; returns once it says it is ready.
fn on_own_runtime<F, Fut>(server: F)
where
    F: FnOnce(std::sync::mpsc::Sender<()>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
            .block_on(server(tx));
    });
    rx.recv().unwrap();
}

/// Lease+release at 8 connections, metrics on vs off: rounds interleaved so that a
/// noisy neighbour hits both sides alike; prints each round and the ratio of the sums.
fn metrics_comparison(dir: &Path, client: &tokio::runtime::Runtime) {
    const ROUNDS: usize = 5;
    let (on, t_on) = start_daemon_with(dir, 10_000, "metrics-on", EngineOptions::default());
    let off_opts = EngineOptions {
        record_metrics: false,
    };
    let (off, t_off) = start_daemon_with(dir, 10_000, "metrics-off", off_opts);
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

fn main() {
    let dir = tempfile::tempdir().unwrap();
    if std::env::args().any(|a| a == "metrics") {
        let client = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        metrics_comparison(dir.path(), &client);
        return;
    }
    let echo_path = dir.path().join("echo.sock");
    let p = echo_path.clone();
    on_own_runtime(move |ready| async move {
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
    metrics_comparison(dir.path(), &client);
}
