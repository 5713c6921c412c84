//! Per-destination selection must stay flat (issue 11, "Speed and bounds"): side by side
//! in one run, with 10,000 endpoints of which 5,000 are banned for destination D (plus
//! 10,000 pairs banned across 100 other destinations):
//!
//! - lease+release for D vs for an unbanned destination (target ≥ 0.8×),
//! - leases with a destination vs without one (target ≥ 0.9×),
//!
//! over the Unix socket at 8 connections (the daemon as users see it), and in process on
//! `Pools` alone (selection without the socket, where a scan would show at once).
//! Cells alternate over several rounds and the best round of each is kept: the machine
//! may be shared and noisy.
//!
//! Run: `cargo bench --bench destinations`

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proxypool::config::{Durability, PoolConfig};
use proxypool::event_kind::EventKind;
use proxypool::health::{Reason, State};
use proxypool::pool::engine::EngineOptions;
use proxypool::pool::{Pools, Want};
use proxypool::store::pairs::{PairRecord, PairWrite};
use proxypool::store::{NewEndpoint, NewEvent, Store, StoredHealth};
use support::Conn;
use tokio_util::sync::CancellationToken;

const ENDPOINTS: usize = 10_000;
const BANNED_FOR_D: usize = 5_000;
const OTHER_DESTS: usize = 100;
const OTHER_PER_DEST: usize = 100;
const D: &str = "banned.example";
const CLEAN: &str = "clean.example";
const CONNS: usize = 8;
const CELL: Duration = Duration::from_millis(1500);
const ROUNDS: usize = 3;

fn pair(endpoint: i64, destination: String, until: Duration) -> PairWrite {
    PairWrite::Upsert(
        PairRecord {
            endpoint,
            destination,
            from: State::Available,
            trial: None,
            health: StoredHealth {
                state: State::Cooling,
                reason: Some(Reason::DestinationStatus),
                phase: None,
                detail: None,
                streak: 1,
                reason_streak: 1,
                cooldown_ms: Some(3_600_000),
                cooldown_left: Some(until),
            },
            status: Some(403),
        },
        NewEvent {
            endpoint: Some(endpoint),
            ..NewEvent::new(EventKind::StateChanged)
        },
    )
}

/// A store with the endpoints and the bans (every other endpoint banned for D; 100
/// endpoints banned for each of 100 other destinations), cooling for an hour.
fn seeded_store(path: &Path) -> Store {
    let mut store = Store::open_with(path, Durability::Normal).unwrap();
    let eps: Vec<NewEndpoint> = support::endpoints(ENDPOINTS, "http", 3128);
    let ids = store.add_endpoints(&eps).unwrap();
    let until = Duration::from_secs(3600);
    let mut w: Vec<PairWrite> = ids
        .iter()
        .step_by(ENDPOINTS / BANNED_FOR_D)
        .map(|&id| pair(id, D.into(), until))
        .collect();
    for k in 0..OTHER_DESTS {
        for j in 0..OTHER_PER_DEST {
            let id = ids[(k * 97 + j * 89) % ENDPOINTS];
            w.push(pair(id, format!("other{k}.example"), until));
        }
    }
    store.write_pairs(&w).unwrap();
    store
}

fn pool_config() -> PoolConfig {
    PoolConfig::builtin("default")
}

/// lease+release pairs per second over `CONNS` connections; also counts leases of an
/// endpoint banned for D (must be 0) and errors.
async fn drive(path: PathBuf, dest: Option<&'static str>) -> (f64, u64) {
    let deadline = Instant::now() + CELL;
    let lease = match dest {
        Some(d) => format!("{{\"op\":\"lease\",\"ttl\":\"30s\",\"destination\":\"{d}\"}}\n"),
        None => "{\"op\":\"lease\",\"ttl\":\"30s\"}\n".to_string(),
    };
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..CONNS {
        let (path, lease) = (path.clone(), lease.clone());
        set.spawn(async move {
            let mut c = Conn::open(&path).await;
            let (mut ops, mut bad) = (0u64, 0u64);
            while Instant::now() < deadline {
                let r = c.rt(&lease).await;
                let v: serde_json::Value = serde_json::from_str(r).unwrap();
                let Some(id) = v["lease"].as_str().map(str::to_string) else {
                    bad += 1;
                    continue;
                };
                // Endpoint ids are 1-based; every other one (odd ids) is banned for D.
                if dest == Some(D) && v["endpoint"].as_i64().unwrap() % 2 == 1 {
                    bad += 1;
                }
                let r = c
                    .rt(&format!("{{\"op\":\"release\",\"lease\":\"{id}\"}}\n"))
                    .await;
                if !r.starts_with("{\"ok\":true") {
                    bad += 1;
                }
                ops += 1;
            }
            (ops, bad)
        });
    }
    support::rate_of(set).await
}

fn start_daemon(store: Store, sock: PathBuf) -> CancellationToken {
    let d = support::daemon_on(store, sock, pool_config(), EngineOptions::default());
    assert_eq!(
        d.engine.pair_bans("default"),
        BANNED_FOR_D + OTHER_DESTS * OTHER_PER_DEST
    );
    d.token
}

/// In process: lease+release per second on `Pools` alone, single thread.
fn in_process(p: &mut Pools, want: &Want) -> f64 {
    let ttl = Duration::from_secs(30);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < CELL {
        for _ in 0..1000 {
            let now = tokio::time::Instant::now();
            let (g, _) = p.lease_with("default", ttl, None, want, now);
            let g = g.unwrap();
            let (r, _) = p.release(&g.lease, now);
            r.unwrap();
        }
        n += 1000;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("dest.db");
    let store = seeded_store(&db);

    // In process first (the daemon's threads are not running yet).
    let mut pools = Pools::new([pool_config()]);
    let now = tokio::time::Instant::now();
    for r in store.list(None, None).unwrap() {
        pools.insert_row(&r, now);
    }
    for r in store.pairs().unwrap() {
        pools.restore_pair(&r, now);
    }
    assert_eq!(pools.pair_bans("default"), 15_000);
    let wants = [
        (
            "for D (5,000 of 10,000 banned)",
            Want::parse(Some(D), None).unwrap(),
        ),
        (
            "for an unbanned destination",
            Want::parse(Some(CLEAN), None).unwrap(),
        ),
        ("without a destination", Want::default()),
    ];
    let mut inproc = vec![Vec::new(); wants.len()];
    for _ in 0..ROUNDS {
        for (i, (_, w)) in wants.iter().enumerate() {
            inproc[i].push(in_process(&mut pools, w));
        }
    }
    drop(pools);

    let sock = dir.path().join("dest.sock");
    let token = start_daemon(store, sock.clone());
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dests = [Some(D), Some(CLEAN), None];
    let mut socket = vec![Vec::new(); dests.len()];
    let mut bad = 0;
    for _ in 0..ROUNDS {
        for (i, d) in dests.iter().enumerate() {
            let (rate, b) = client.block_on(drive(sock.clone(), *d));
            socket[i].push(rate);
            bad += b;
        }
    }
    token.cancel();

    println!(
        "{ENDPOINTS} endpoints; {BANNED_FOR_D} banned for {D}; {} pairs banned across {OTHER_DESTS} \
         other destinations; best of {ROUNDS} rounds of {CELL:?} per cell",
        OTHER_DESTS * OTHER_PER_DEST
    );
    println!(
        "{:<44} {:>14} {:>14}",
        "lease+release", "in process/s", "socket 8c/s"
    );
    for (i, (name, _)) in wants.iter().enumerate() {
        println!(
            "{name:<44} {:>14.0} {:>14.0}",
            best(&inproc[i]),
            best(&socket[i])
        );
    }
    let ratio = |v: &[Vec<f64>], a: usize, b: usize| best(&v[a]) / best(&v[b]);
    println!(
        "ratio banned D / unbanned destination:   in process {:.2}x, socket {:.2}x (target >= 0.8x)",
        ratio(&inproc, 0, 1),
        ratio(&socket, 0, 1)
    );
    println!(
        "ratio with / without a destination:      in process {:.2}x, socket {:.2}x (target >= 0.9x)",
        ratio(&inproc, 1, 2),
        ratio(&socket, 1, 2)
    );
    println!(
        "ratio banned D / without a destination:  in process {:.2}x, socket {:.2}x",
        ratio(&inproc, 0, 2),
        ratio(&socket, 0, 2)
    );
    println!("leases of a banned endpoint for D, or errors: {bad}");
    assert_eq!(
        bad, 0,
        "a lease for D returned a banned endpoint, or an op failed"
    );
}
