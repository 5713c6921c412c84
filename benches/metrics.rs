//! Metrics benchmarks: a `/metrics` scrape of 100,000 endpoints (goal < 50 ms), and the
//! hot-path cost of a lease's counter + histogram with pre-resolved handles versus a
//! family lookup per call.
//!
//! Run: `cargo bench --bench metrics`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use proxypool::health::{Reason, State};
use proxypool::metrics::{GaugeSnapshot, LeaseResult, Metrics};
use proxypool::protocol::EndpointView;
use proxypool::protocol::ErrorCode;
use proxypool::protocol::PoolStatus;
use proxypool::web::{HttpApp, PageLimits, PageModel, StatusError, StatusSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const ENDPOINTS: usize = 100_000;
const POOLS: usize = 8;

fn pool_names() -> Vec<String> {
    (0..POOLS).map(|i| format!("pool{i}")).collect()
}

/// Endpoint i is in pool i % POOLS with a state spread 70/15/10/5.
fn states() -> Arc<Vec<(usize, State)>> {
    Arc::new(
        (0..ENDPOINTS)
            .map(|i| {
                let s = match i % 20 {
                    0..=13 => State::Available,
                    14..=16 => State::Cooling,
                    17..=18 => State::ProbeAllowed,
                    _ => State::Disabled,
                };
                (i % POOLS, s)
            })
            .collect(),
    )
}

/// A registry with every series a busy daemon would have: every pool with leases,
/// every failure reason reported, every (from, to, reason) transition seen, probes.
fn busy_metrics(aggregate_per_scrape: bool) -> Metrics {
    let m = Metrics::new();
    let names = pool_names();
    let states = states();
    if aggregate_per_scrape {
        // Worst case: the daemon keeps no counts and walks all endpoints per scrape.
        m.set_gauge_source(Box::new(move || {
            GaugeSnapshot::count_states(&names, states.iter().copied())
        }));
    } else {
        // The engine keeps counts per pool: the callback copies them.
        let snap = GaugeSnapshot::count_states(&names, states.iter().copied());
        m.set_gauge_source(Box::new(move || snap.clone()));
    }
    for name in pool_names() {
        let p = m.pool(&name);
        p.lease(LeaseResult::Granted, Duration::from_micros(30));
        p.report_success();
        for &r in Reason::ALL {
            p.report_failure(r);
            for &from in State::ALL {
                for &to in State::ALL {
                    p.transition(from, to, Some(r));
                }
            }
        }
        p.probe(true, Duration::from_millis(120));
        p.probe(false, Duration::from_secs(10));
        p.upstream_attempt(true);
    }
    m.gateway();
    m
}

fn time_encode(m: &Metrics, runs: usize) -> (f64, f64, usize) {
    let mut v = Vec::with_capacity(runs);
    let mut len = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let s = m.encode();
        v.push(t.elapsed().as_secs_f64() * 1000.0);
        len = black_box(s).len();
    }
    v.sort_by(f64::total_cmp);
    (v[runs / 2], v[runs - 1], len)
}

struct CountsSource;

impl StatusSource for CountsSource {
    async fn status(&self, _pool: Option<&str>) -> Result<Vec<PoolStatus>, StatusError> {
        Ok(Vec::new())
    }
    async fn endpoints(
        &self,
        _pool: Option<&str>,
        _state: Option<State>,
    ) -> Result<Vec<EndpointView>, StatusError> {
        Ok(Vec::new())
    }
    async fn endpoints_for(
        &self,
        _pool: Option<&str>,
        _destination: &str,
    ) -> Result<Vec<(EndpointView, State)>, StatusError> {
        Ok(Vec::new())
    }
    async fn page(&self, _limits: PageLimits) -> Result<PageModel, StatusError> {
        Err(StatusError::new(
            ErrorCode::Internal,
            "the page is not part of this benchmark",
        ))
    }
}

/// GET /metrics over loopback, median and max of `runs` in ms.
async fn time_scrape(m: Metrics, runs: usize) -> (f64, f64) {
    let listener = proxypool::web::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let app = HttpApp::new(Arc::new(CountsSource), Arc::new(m), None);
    tokio::spawn(proxypool::web::serve(listener, Arc::new(app), stop.clone()));
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        assert!(out.starts_with(b"HTTP/1.1 200"));
        v.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    stop.cancel();
    v.sort_by(f64::total_cmp);
    (v[runs / 2], v[runs - 1])
}

/// ns per lease record (counter + wait histogram) from `threads` threads on one pool.
fn hot_path(threads: usize, iters: u64, pre_resolved: bool) -> f64 {
    let m = Arc::new(Metrics::new());
    let family: Family<Vec<(String, String)>, Counter> = Family::default();
    let handles = m.pool("default");
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let h = handles.clone();
            let f = family.clone();
            s.spawn(move || {
                let labels = vec![
                    ("pool".to_string(), "default".to_string()),
                    ("result".to_string(), "granted".to_string()),
                ];
                for _ in 0..iters {
                    if pre_resolved {
                        h.lease(LeaseResult::Granted, Duration::from_micros(40));
                    } else {
                        f.get_or_create(black_box(&labels)).inc();
                    }
                }
            });
        }
    });
    t.elapsed().as_nanos() as f64 / (threads as u64 * iters) as f64
}

fn main() {
    println!("## Scrape of {ENDPOINTS} endpoints in {POOLS} pools");
    for (what, aggregate) in [
        (
            "gauges aggregated from 100,000 endpoint states per scrape",
            true,
        ),
        ("gauges copied from per-pool counts", false),
    ] {
        let m = busy_metrics(aggregate);
        let (med, max, len) = time_encode(&m, 50);
        println!("encode, {what}: median {med:.2} ms, max {max:.2} ms, {len} bytes");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (med, max) = rt.block_on(time_scrape(busy_metrics(true), 50));
    println!(
        "GET /metrics over loopback (aggregating per scrape): median {med:.2} ms, max {max:.2} ms"
    );

    println!("## Hot path: one lease recorded (ns per call)");
    for threads in [1, 8] {
        let pre = hot_path(threads, 2_000_000 / threads as u64, true);
        let lookup = hot_path(threads, 2_000_000 / threads as u64, false);
        println!(
            "{threads} thread(s): pre-resolved counter + histogram {pre:.1} ns; family lookup + counter {lookup:.1} ns"
        );
    }
}
