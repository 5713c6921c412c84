//! Health-core benchmarks: selection cost vs pool size, memory per endpoint, and
//! persisted transitions per second (single commits vs group commit).
//!
//! Run: `cargo bench --bench core`

use std::hint::black_box;
use std::time::{Duration, Instant};

use proxypool::config::{Durability, PoolConfig};
use proxypool::event_kind::EventKind;
use proxypool::health::{Phase, Reason, State};
use proxypool::pool::engine::Writer;
use proxypool::pool::Pools;
use proxypool::store::{
    EndpointRow, HealthRecord, NewEndpoint, NewEvent, Store, StoredHealth, Write,
};

fn row(i: i64) -> EndpointRow {
    let url = format!(
        "socks5h://user{i}:pass-{i:08}@10.{}.{}.{}:1080",
        (i >> 16) & 255,
        (i >> 8) & 255,
        i & 255
    );
    EndpointRow {
        source: Some("cli".into()),
        ..EndpointRow::fixture(i, &url, "default")
    }
}

fn pools_with(n: i64) -> Pools {
    let mut p = Pools::new([PoolConfig::builtin("default")]);
    let now = tokio::time::Instant::now();
    for i in 1..=n {
        p.insert_row(&row(i), now);
    }
    p
}

/// ns per lease+release pair, best of 5 runs of `iters` pairs.
fn choose_cost(n: i64, iters: u32) -> f64 {
    let mut p = pools_with(n);
    let ttl = Duration::from_secs(60);
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..iters {
            let now = tokio::time::Instant::now();
            let (g, _) = p.lease("default", ttl, None, now);
            let g = g.unwrap();
            let (r, _) = p.release(black_box(&g.lease), now);
            r.unwrap();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    best
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn transition(id: i64, n: u32) -> Write {
    Write::Transition(
        HealthRecord {
            id,
            from: State::Available,
            trial: None,
            health: StoredHealth {
                state: State::Cooling,
                reason: Some(Reason::ConnectRefused),
                phase: Some(Phase::Connect),
                detail: None,
                streak: n,
                reason_streak: n,
                cooldown_ms: Some(60_000),
                cooldown_left: Some(Duration::from_secs(60)),
            },
        },
        NewEvent {
            endpoint: Some(id),
            from: Some(State::Available),
            to: Some(State::Cooling),
            reason: Some(Reason::ConnectRefused),
            phase: Some(Phase::Connect),
            ..NewEvent::new(EventKind::StateChanged)
        },
    )
}

fn store_with(dir: &std::path::Path, n: i64, d: Durability) -> Store {
    let mut s = Store::open_with(&dir.join("bench.db"), d).unwrap();
    let eps: Vec<NewEndpoint> = (1..=n)
        .map(|i| NewEndpoint {
            url: row(i).url,
            pool: "default".into(),
            label: None,
            source: None,
            state: State::Available,
            tags: Default::default(),
        })
        .collect();
    s.add_endpoints(&eps).unwrap();
    s
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();

    println!("== selection cost (lease+release pair, in memory, best of 5)");
    let only: Option<i64> = std::env::var("BENCH_SELECT_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    if let Some(n) = only {
        println!(
            "endpoints={n:>7}  {:>8.1} ns/pair",
            choose_cost(n, 2_000_000)
        );
        return;
    }
    let sizes = [100i64, 10_000, 100_000];
    let mut costs = Vec::new();
    for &n in &sizes {
        let c = choose_cost(n, 200_000);
        println!("endpoints={n:>7}  {c:>8.1} ns/pair");
        costs.push(c);
    }
    println!(
        "ratio 100000/100 = {:.2} (goal <= 1.5)",
        costs[2] / costs[0]
    );

    println!("\n== memory per endpoint at 100,000");
    let rows: Vec<EndpointRow> = (1..=100_000).map(row).collect();
    let before = rss_bytes();
    let mut p = Pools::new([PoolConfig::builtin("default")]);
    let now = tokio::time::Instant::now();
    for r in &rows {
        p.insert_row(r, now);
    }
    let after = rss_bytes();
    println!(
        "rss delta {:.1} MiB for {} endpoints = {:.0} bytes/endpoint (goal <= 1024)",
        (after - before) as f64 / 1048576.0,
        p.len(),
        (after - before) as f64 / p.len() as f64
    );
    drop(p);
    drop(rows);

    for durability in [Durability::Normal, Durability::Full] {
        println!("\n== persisted transitions per second (SQLite WAL, synchronous={durability:?})");
        let dir = tempfile::tempdir().unwrap();
        let mut s = store_with(dir.path(), 1000, durability);
        let n = if durability == Durability::Full {
            300
        } else {
            3000
        };
        let t = Instant::now();
        for i in 0..n {
            s.write(&[transition(1 + (i % 1000), i as u32)]).unwrap();
        }
        let single = n as f64 / t.elapsed().as_secs_f64();
        println!("single (one commit per transition):      {single:>9.0} transitions/s");
        drop(s);
        let dir2 = tempfile::tempdir().unwrap();
        let writer = Writer::spawn(store_with(dir2.path(), 1000, durability));
        for tasks in [8usize, 64] {
            let total = if durability == Durability::Full {
                4000
            } else {
                40_000
            };
            let per_task = total / tasks;
            let t = Instant::now();
            rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                for k in 0..tasks {
                    let w = writer.clone();
                    set.spawn(async move {
                        for i in 0..per_task {
                            let id = 1 + ((k * per_task + i) % 1000) as i64;
                            w.queue(vec![transition(id, i as u32)])
                                .await
                                .unwrap()
                                .unwrap();
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            });
            let rate = (tasks * per_task) as f64 / t.elapsed().as_secs_f64();
            println!(
                "group commit, {tasks:>2} concurrent writers:   {rate:>9.0} transitions/s ({:.1}x single)",
                rate / single
            );
        }
    }
}
