//! The same choices through the lease socket, where a scraper makes them: one daemon per
//! cell (engine and socket server on a runtime thread of their own, as `proxypool serve`
//! runs them), 10,000 endpoints in one pool, 8 connections each asking lease + release
//! (or lease + report) as fast as answers come. Cells alternate over the rounds (order
//! reversed every other round) and each cell's median is kept.
//!
//! The binding cell paces each host at one use per endpoint a minute: at the socket's
//! rate the pairs of the whole table stay held, by its end about as many as the
//! in-process cell holds at 500 ms. The share of candidates passed over is printed (pairs
//! held over endpoints × hosts). Every cell's daemon stays up through the table, its
//! timer included, as a daemon's would.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proxypool::config::{Durability, PaceConfig, PoolConfig, Select};
use proxypool::pool::engine::EngineOptions;

use crate::support::{self, Conn};

const CONNS: usize = 8;
const RUN: Duration = Duration::from_secs(2);
const ROUNDS: usize = 5;

/// What one cell's clients ask.
#[derive(Clone, Copy)]
enum Ask {
    /// Every lease for this host, then a release.
    One(&'static str),
    /// Each lease for one of `hosts` hosts drawn at random, then a release.
    Many(usize),
    /// No destination; each use reported a success with a duration (feeds `fastest`).
    Measured,
}

/// The lease id in a lease answer, without parsing the rest (the client's work stays
/// small beside the daemon's).
fn lease_id(answer: &str) -> Option<&str> {
    let at = answer.find("\"lease\":\"")? + 9;
    let len = answer[at..].find('"')?;
    Some(&answer[at..at + len])
}

/// The endpoint id in a lease answer.
fn endpoint(answer: &str) -> u64 {
    let at = answer
        .find("\"endpoint\":")
        .map_or(answer.len(), |i| i + 11);
    answer[at..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0, |n, d| n * 10 + u64::from(d - b'0'))
}

/// Pairs per second over `CONNS` connections for `RUN`; errors must stay 0.
async fn drive(path: PathBuf, ask: Ask) -> (f64, u64) {
    let leases: Vec<String> = match ask {
        Ask::One(h) => vec![format!(
            "{{\"op\":\"lease\",\"ttl\":\"30s\",\"destination\":\"{h}\"}}\n"
        )],
        Ask::Many(n) => (0..n)
            .map(|i| {
                format!(
                    "{{\"op\":\"lease\",\"ttl\":\"30s\",\"destination\":\"site{i}.example\"}}\n"
                )
            })
            .collect(),
        Ask::Measured => vec!["{\"op\":\"lease\",\"ttl\":\"30s\"}\n".to_string()],
    };
    let deadline = Instant::now() + RUN;
    let mut set = tokio::task::JoinSet::new();
    for c in 0..CONNS {
        let (path, leases) = (path.clone(), leases.clone());
        set.spawn(async move {
            let mut rng = fastrand::Rng::with_seed(c as u64);
            let mut conn = Conn::open(&path).await;
            let (mut ops, mut errs) = (0u64, 0u64);
            let mut next = String::new();
            while Instant::now() < deadline {
                let r = conn.rt(&leases[rng.usize(..leases.len())]).await;
                let Some(id) = lease_id(r) else {
                    errs += 1;
                    continue;
                };
                // As in process: each endpoint answers in its own time, varied a little.
                let ms = 20 + (endpoint(r) * 7 + ops) % 200;
                next.clear();
                match ask {
                    Ask::Measured => {
                        next.push_str(&format!(
                            "{{\"op\":\"report\",\"lease\":\"{id}\",\"outcome\":\"success\",\"duration_ms\":{ms}}}\n"
                        ));
                    }
                    _ => next.push_str(&format!("{{\"op\":\"release\",\"lease\":\"{id}\"}}\n")),
                }
                if !conn.rt(&next).await.starts_with("{\"ok\":true") {
                    errs += 1;
                }
                ops += 1;
            }
            (ops, errs)
        });
    }
    support::rate_of(set).await
}

/// The socket table: rates, the ratios, and how much the binding cell binds.
pub fn table(dir: &Path, endpoints: usize, hosts: usize, pace: fn(Duration) -> PaceConfig) {
    let eps = support::endpoints(endpoints, "http", 3128);
    let pool = |f: &dyn Fn(&mut PoolConfig)| {
        let mut c = PoolConfig::builtin("default");
        f(&mut c);
        c
    };
    let cells: Vec<(&str, Ask, PoolConfig)> = vec![
        ("off, one host", Ask::One("shop.example"), pool(&|_| {})),
        (
            "on (interval 0, in_flight 0), one host",
            Ask::One("shop.example"),
            pool(&|c| c.pace = Some(pace(Duration::ZERO))),
        ),
        ("off, 1,000 hosts", Ask::Many(hosts), pool(&|_| {})),
        (
            "binding (interval 60s), 1,000 hosts",
            Ask::Many(hosts),
            pool(&|c| c.pace = Some(pace(Duration::from_secs(60)))),
        ),
        ("least_leased, measured", Ask::Measured, pool(&|_| {})),
        (
            "fastest, measured",
            Ask::Measured,
            pool(&|c| c.select = Select::Fastest),
        ),
    ];
    let daemons: Vec<support::Daemon> = cells
        .iter()
        .enumerate()
        .map(|(i, (_, _, cfg))| {
            support::daemon(
                dir,
                &format!("choose-{i}"),
                &eps,
                cfg.clone(),
                EngineOptions::default(),
                Durability::Normal,
            )
        })
        .collect();
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let rates = support::interleaved(ROUNDS, cells.len(), |i| {
        let (r, errs) = client.block_on(drive(daemons[i].sock.clone(), cells[i].1));
        assert_eq!(
            errs, 0,
            "{}: every lease and answer must succeed",
            cells[i].0
        );
        r
    });
    println!();
    println!(
        "{:<44}  {:>12}  (through the socket, {CONNS} connections, medians of {ROUNDS} rounds)",
        "lease+release (10,000 endpoints)", "per second"
    );
    let med: Vec<f64> = rates.into_iter().map(support::median).collect();
    for (i, (name, _, _)) in cells.iter().enumerate() {
        println!("{name:<44}  {:>12.0}", med[i]);
    }
    let held = daemons[3].engine.status(Some("default")).unwrap()[0]
        .pace
        .unwrap_or_default();
    let share = held.pairs as f64 / (endpoints * hosts) as f64;
    println!(
        "{:<44}  {:>12}  ({} pairs held: about {:.1}% of candidates passed over)",
        "binding: pace state at the end",
        held.hosts,
        held.pairs,
        share * 100.0
    );
    println!();
    println!(
        "{:<44}  {:>8}  {:>8}",
        "ratio (through the socket)", "measured", "target"
    );
    for (what, n, d, target) in [
        ("pacing on, not binding / off", 1, 0, ">= 0.95x"),
        ("pacing binding / off (1,000 hosts)", 3, 2, ">= 0.8x"),
        ("fastest / least_leased", 5, 4, ">= 0.9x"),
    ] {
        println!("{what:<44}  {:>7.2}x  {target:>8}", med[n] / med[d]);
    }
    for d in daemons {
        d.token.cancel();
    }
}
