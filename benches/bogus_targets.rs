//! 100,000 distinct targets nobody can reach, sent to the gateway (docs/blame.md): they must
//! cool no endpoint and grow the daemon's memory by at most 64 MiB (the per-pool target
//! table keeps 65,536 and forgets the least recently used). Three upstream HTTP proxies
//! answer every CONNECT with `502` (a proxy that cannot reach the target), so every request
//! is judged by contrast: pending, then down.
//!
//! Run: `cargo bench --bench bogus_targets` (`-- N` for another count). Prints the resident
//! memory before and after, the time taken, the answers and the endpoints' states.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proxypool::config::{GatewayConfig, PoolConfig};
use proxypool::endpoint::ProxyUrl;
use proxypool::gateway::Gateway;
use proxypool::health::State;
use proxypool::pool::engine::Engine;
use proxypool::store::{NewEndpoint, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

const CONCURRENCY: usize = 32;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// An HTTP proxy that answers every request with `502 Bad Gateway`.
async fn refusing_proxy() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    port
}

async fn connect(gw: std::net::SocketAddr, target: &str) -> u16 {
    let Ok(mut s) = TcpStream::connect(gw).await else {
        return 0;
    };
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return 0;
    }
    let mut buf = vec![0u8; 2048];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&got);
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(n));
}

async fn run(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("bogus.db")).unwrap();
    let engine = Engine::open(store, [PoolConfig::builtin("default")]).unwrap();
    let mut eps = Vec::new();
    for _ in 0..3 {
        let port = refusing_proxy().await;
        eps.push(NewEndpoint {
            url: ProxyUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            pool: "default".into(),
            label: None,
            source: None,
            state: State::Available,
            tags: Default::default(),
        });
    }
    let ids = engine.add(eps).await.unwrap();
    let mut cfg = GatewayConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.retries = 2;
    let gw = Gateway::bind(cfg, engine.clone()).await.unwrap();
    let addr = gw.local_addr();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(gw.run(shutdown.clone()));
    // Warm up the runtime, the store and the gateway with a few targets first, so the
    // growth measured is the targets'.
    for i in 0..200 {
        connect(addr, &format!("warm-{i}.invalid:443")).await;
    }
    engine.flush().await.unwrap();
    let before = rss_kib();
    let started = Instant::now();
    let sem = Arc::new(Semaphore::new(CONCURRENCY));
    let mut set = tokio::task::JoinSet::new();
    let mut answers = std::collections::BTreeMap::new();
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await.unwrap();
        set.spawn(async move {
            let s = connect(addr, &format!("bogus-{i}.invalid:443")).await;
            drop(permit);
            s
        });
        while set.len() > CONCURRENCY * 4 {
            if let Some(r) = set.join_next().await {
                *answers.entry(r.unwrap()).or_insert(0u64) += 1;
            }
        }
    }
    while let Some(r) = set.join_next().await {
        *answers.entry(r.unwrap()).or_insert(0u64) += 1;
    }
    engine.flush().await.unwrap();
    let took = started.elapsed();
    let after = rss_kib();
    let states: Vec<State> = ids
        .iter()
        .map(|id| engine.health(*id).map(|h| h.state).unwrap())
        .collect();
    let status = &engine.status(Some("default")).unwrap()[0];
    println!("targets                 {n}");
    println!("seconds                 {:.1}", took.as_secs_f64());
    println!("answers (status: count) {answers:?}");
    println!("rss before KiB          {before}");
    println!("rss after KiB           {after}");
    println!(
        "growth MiB              {:.1}",
        (after.saturating_sub(before)) as f64 / 1024.0
    );
    println!("targets down            {}", status.targets_down);
    println!("endpoint states         {states:?}");
    println!(
        "pairs                   {}",
        ids.iter()
            .map(|id| engine.pairs_of(*id).len())
            .sum::<usize>()
    );
    assert!(
        states.iter().all(|s| *s == State::Available),
        "an endpoint cooled"
    );
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
}
