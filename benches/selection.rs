//! Choosing must stay cheap (issue 23, "Speed"): side by side in one run, in process on
//! `Pools` (selection alone, where a scan of the pool would show at once), 10,000
//! endpoints in one pool, lease+release per second:
//!
//! - pacing on but never binding (`interval = 0`, `in_flight = 0`) vs off, one host
//!   (target ≥ 0.95×);
//! - pacing binding (`interval = 500ms`: each host's recent endpoints are passed over,
//!   hundreds of thousands of pairs held) vs off, each lease for one of 1,000 hosts drawn
//!   at random (target ≥ 0.8×);
//! - `select = "fastest"` vs `least_leased`, no destination, every endpoint measured
//!   (target ≥ 0.9×);
//!
//! and two floors beside them, to tell the cost of the job from the cost of the code:
//!
//! - "floor: off + one random 8-byte update": the off cell that also reads and writes one
//!   random 8-byte word per lease in a table of `FLOOR_PAIRS` words (4 MB: the ready times
//!   of the pairs the binding cell holds, with no key and no slack). Pacing must keep and
//!   touch at least that much state at random per lease, which no cache of this machine
//!   holds;
//! - "random, measured": one uniformly random candidate (`select = "random"`), the least a
//!   sampling strategy reads: a random endpoint's entry instead of the next one in order;
//!
//! and sticky sessions (issue 49: on a daemon alone a session's endpoint is kept or the
//! least leased; in a fleet it is the one of the highest rendezvous weight, the same on
//! every daemon): leases for one of 1,000 session keys against leases without a
//! session, for each placement (target: a session lease ≥ 0.95× what it was before, by `benches/ab.sh
//! selection`), and, for the worst case, a new key for every lease;
//!
//! and exit identity (issue 46): leases for one host after 600 bans from it, with 2,000
//! exit addresses known over 10,000 endpoints (3,000 endpoints banned, one address one ban,
//! and 200 subnets suspect) against the same with no exit known (600 pairs banned);
//!
//! and the memory per paced (endpoint, host) pair (target ≤ 64 bytes), from a counting
//! allocator: the live bytes after a run with pacing, less those after the same run
//! without, over the pairs held. Cells alternate over several rounds and the best round of
//! each is kept: the machine may be shared and noisy.
//!
//! A second table (`selection/socket.rs`) measures the first three ratios through the
//! lease socket, where a scraper leases: the same choices with the socket's own work
//! around them.
//!
//! Run: `cargo bench --bench selection` (`-- socket`: only the socket table; `-- WORD`:
//! only the in-process cells whose name holds WORD, side by side: `ROUNDS` rounds (3 by
//! default), each running every such cell once, and for every two of them each round's
//! ratio and the median, e.g. `ROUNDS=9 cargo bench --bench selection -- destination`).

#[path = "../tests/common/counting.rs"]
mod counting;
#[path = "selection/socket.rs"]
mod socket;
mod support;

use std::time::{Duration, Instant, SystemTime};

use proxypool::config::{ExitConfig, PaceConfig, PoolConfig, Select};
use proxypool::health::{Failure, Phase, Reason};
use proxypool::pool::{Outcome, Pools, ReportOn, Want};
use proxypool::store::EndpointRow;

use counting::{live, Counting};

#[global_allocator]
static A: Counting = Counting;

const ENDPOINTS: usize = 10_000;
const HOSTS: usize = 1_000;
const CELL: Duration = Duration::from_millis(1500);
const ROUNDS: usize = 3;
const TTL: Duration = Duration::from_secs(30);
/// The pairs the binding cell keeps live: each lease's pair stays 500 ms, at about a
/// million leases a second.
const FLOOR_PAIRS: usize = 500_000;

fn pace(interval: Duration) -> PaceConfig {
    PaceConfig {
        interval,
        in_flight: 0,
        wait: Duration::ZERO,
        slow_down: false,
        sites: Default::default(),
    }
}

fn rows() -> Vec<EndpointRow> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = proxypool::store::Store::open(&dir.path().join("sel.db")).unwrap();
    store
        .add_endpoints(&support::endpoints(ENDPOINTS, "http", 3128))
        .unwrap();
    store.list(None, None).unwrap()
}

fn pools(rows: &[EndpointRow], f: impl FnOnce(&mut PoolConfig)) -> Pools {
    let mut c = PoolConfig::builtin("default");
    f(&mut c);
    let mut p = Pools::new([c]);
    let now = tokio::time::Instant::now();
    for r in rows {
        p.insert_row(r, now);
    }
    p
}

/// A daemon of a fleet: sessions by rendezvous weight (docs/leases.md).
fn fleet(rows: &[EndpointRow]) -> Pools {
    let mut p = pools(rows, |_| {});
    p.join_fleet();
    p
}

/// Exit addresses of the `exits` cell: endpoints share them five to one, five to a subnet.
const ADDRESSES: usize = 2_000;
/// Subnets of the `exits` cell a site bans (3 addresses each: `subnet_after`).
const SUSPECT: usize = 200;
/// The host of the destination cells.
const SITE: &str = "shop.example";

/// The exit address of the `i`th row: address `i % ADDRESSES`, five to a /24.
fn exit_ip(i: usize) -> std::net::IpAddr {
    let k = i % ADDRESSES;
    let s = k / 5;
    std::net::Ipv4Addr::new(10, (s / 256) as u8, (s % 256) as u8, (k % 5 + 1) as u8).into()
}

/// A pool where `SITE` answered a ban through one endpoint of three addresses of each of
/// `SUSPECT` subnets (600 reports). With `known` the endpoints' exit addresses are known
/// (`ADDRESSES` of them, five endpoints each), so each ban holds for the five endpoints of
/// its address (3,000 banned for the site) and those subnets are suspect for it
/// (docs/exit.md); without, the same reports ban 600 pairs, as a pool without exit
/// identity would. `Site::Every` instead bans, with exits unknown, every endpoint the
/// known-exits pool passes over (the 5,000 of the 200 subnets): the same passing over,
/// without exit identity's lookups.
fn banned_by_site(rows: &[EndpointRow], site: Site) -> Pools {
    let known = site == Site::Known;
    let mut p = pools(rows, |c| {
        c.exit = known.then(|| ExitConfig {
            url: Some("http://127.0.0.1:9/ip".into()),
            ..ExitConfig::default()
        })
    });
    let now = tokio::time::Instant::now();
    if known {
        for (i, r) in rows.iter().enumerate() {
            p.exit_learned(r.id, Ok(exit_ip(i)), now);
        }
    }
    // What a ban is counted by (an address, or an endpoint), if the row is to be banned.
    let banned = |i: usize| {
        let k = i % ADDRESSES;
        match site {
            Site::Every => (k / 5 < SUSPECT).then_some(i),
            _ => (k / 5 < SUSPECT && k % 5 < 3).then_some(k),
        }
    };
    let goal = match site {
        Site::Every => (0..rows.len()).filter(|&i| banned(i).is_some()).count(),
        _ => SUSPECT * 3,
    };
    let index: std::collections::HashMap<_, _> =
        rows.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    let want = Want::parse(Some(SITE), None).unwrap();
    let mut bans = std::collections::HashSet::new();
    for _ in 0..4 * rows.len() {
        let (g, _) = p.lease_with("default", TTL, None, &want, now);
        let g = g.unwrap();
        let key = banned(index[&g.endpoint]);
        if key.is_some_and(|k| bans.insert(k)) {
            let f = Failure {
                status: Some(403),
                ..Failure::new(Reason::DestinationStatus, Some(Phase::ResponseHead))
            };
            p.report(&g.lease, Outcome::Failure(f), now, SystemTime::now())
                .0
                .unwrap();
        } else {
            p.release(&g.lease, now).0.unwrap();
        }
        if bans.len() == goal {
            return p;
        }
    }
    panic!("only {} of {goal} bans", bans.len());
}

/// What the site's bans in `banned_by_site` hold for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Site {
    /// Exits unknown: each ban, its pair.
    Unknown,
    /// Exits known: each ban, its address; the subnets suspect.
    Known,
    /// Exits unknown, and every endpoint `Known` passes over banned.
    Every,
}

/// How one cell asks.
#[derive(Clone, Copy)]
enum Ask {
    /// Every lease for this host.
    One(&'static str),
    /// Each lease for one of `HOSTS` hosts, drawn at random.
    Many,
    /// No destination; each use reported with a latency (feeds `fastest`).
    Measured,
    /// As `Many`, and each lease updates one random word of a table of this many.
    Touching(usize),
    /// No destination, no session: what a session lease is set against.
    Plain,
    /// No destination; each lease for one of `SESSIONS` session keys, drawn at random.
    Sessions,
    /// No destination; a session key no lease used before, every lease.
    NewSessions,
}

/// Session keys of the `Sessions` cell.
const SESSIONS: usize = 1_000;

fn session_keys() -> &'static [String] {
    static KEYS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| (0..SESSIONS).map(|i| format!("session-{i}")).collect())
}

/// `n` leases (and releases or reports) as `ask` says; returns how many were granted.
fn run(p: &mut Pools, ask: Ask, wants: &[Want], rng: &mut fastrand::Rng, n: usize) -> usize {
    thread_local! {
        // The floor's table, kept across calls as pacing keeps its pairs.
        static TABLE: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let mut table = TABLE.take();
    let touch = match ask {
        Ask::Touching(words) => {
            table.resize(words, 0);
            true
        }
        _ => false,
    };
    let mut granted = 0;
    for i in 0..n {
        let now = tokio::time::Instant::now();
        let wall = SystemTime::now();
        let want = match ask {
            Ask::Many | Ask::Touching(_) => &wants[rng.usize(..wants.len())],
            _ => &wants[0],
        };
        let fresh;
        let session = match ask {
            Ask::Sessions => Some(session_keys()[rng.usize(..SESSIONS)].as_str()),
            Ask::NewSessions => {
                fresh = format!("new-{}", rng.u64(..));
                Some(fresh.as_str())
            }
            _ => None,
        };
        if touch {
            let w = rng.usize(..table.len());
            table[w] = std::hint::black_box(table[w]).wrapping_add(i as u64);
        }
        let (g, _) = p.lease_with("default", TTL, session, want, now);
        let Ok(g) = g else { continue };
        granted += 1;
        match ask {
            Ask::Measured => {
                let on = ReportOn {
                    duration: Some(Duration::from_millis(
                        20 + (g.endpoint as u64 * 7 + i as u64) % 200,
                    )),
                    ..ReportOn::default()
                };
                p.report_with(&g.lease, Outcome::Success, &on, now, wall)
                    .0
                    .unwrap();
            }
            _ => {
                p.release(&g.lease, now).0.unwrap();
            }
        }
    }
    TABLE.set(table);
    granted
}

fn wants(ask: Ask) -> Vec<Want> {
    match ask {
        Ask::One(h) => vec![Want::parse(Some(h), None).unwrap()],
        Ask::Many | Ask::Touching(_) => (0..HOSTS)
            .map(|i| Want::parse(Some(&format!("site{i}.example")), None).unwrap())
            .collect(),
        Ask::Measured | Ask::Plain | Ask::Sessions | Ask::NewSessions => vec![Want::default()],
    }
}

/// Lease+release per second for one cell.
fn cell(p: &mut Pools, ask: Ask, wants: &[Want], rng: &mut fastrand::Rng) -> (f64, f64) {
    let start = Instant::now();
    let (mut n, mut granted) = (0, 0);
    while start.elapsed() < CELL {
        granted += run(p, ask, wants, rng, 1000);
        n += 1000;
    }
    let s = start.elapsed().as_secs_f64();
    (n as f64 / s, granted as f64 / n as f64)
}

fn best(v: &[(f64, f64)]) -> (f64, f64) {
    v.iter()
        .copied()
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
}

/// Live bytes per pair held after `n` leases for random hosts with `interval` (an hour:
/// nothing is forgotten), less the same run without pacing.
fn bytes_per_pair(rows: &[EndpointRow], n: usize) -> (f64, usize) {
    let many = wants(Ask::Many);
    let measure = |f: &dyn Fn(&mut PoolConfig)| {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut p = pools(rows, f);
        let before = live();
        run(&mut p, Ask::Many, &many, &mut rng, n);
        let live = live() - before;
        let held = p.pace_held("default").unwrap().1;
        drop(p);
        (live, held)
    };
    let (off, _) = measure(&|_| {});
    let (on, pairs) = measure(&|c| c.pace = Some(pace(Duration::from_secs(3600))));
    ((on - off) as f64 / pairs as f64, pairs)
}

/// `ROUNDS` from the environment (the default otherwise).
fn rounds_from_env() -> usize {
    std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(ROUNDS)
}

/// A cell: its name, what it asks, its pools and the wants it asks with.
type Cell<'a> = (&'a str, Ask, Pools, Vec<Want>);

/// `rounds` rounds of `cells`, each round running every cell once, in turn (in reverse
/// order every other round): each cell's (rate, granted share) per round.
fn side_by_side(
    cells: Vec<(&str, Ask, Pools)>,
    rounds: usize,
) -> (Vec<Cell<'_>>, Vec<Vec<(f64, f64)>>) {
    let mut cells: Vec<Cell<'_>> = cells
        .into_iter()
        .map(|(n, a, p)| (n, a, p, wants(a)))
        .collect();
    let mut rng = fastrand::Rng::with_seed(23);
    let mut out = vec![Vec::new(); cells.len()];
    for round in 0..rounds {
        let order: Vec<usize> = match round % 2 {
            0 => (0..cells.len()).collect(),
            _ => (0..cells.len()).rev().collect(),
        };
        for i in order {
            let (_, ask, p, w) = &mut cells[i];
            out[i].push(cell(p, *ask, w, &mut rng));
        }
    }
    (cells, out)
}

/// The cells a word named, side by side: each round runs every cell once, in turn (in
/// reverse order every other round), so a machine whose speed drifts moves them alike;
/// each cell's rate per round, its best, and for every two cells each round's ratio and
/// their median.
fn matching(cells: Vec<(&str, Ask, Pools)>, rounds: usize) {
    let (cells, out) = side_by_side(cells, rounds);
    for (i, (name, ..)) in cells.iter().enumerate() {
        let (r, g) = best(&out[i]);
        let rounds: Vec<String> = out[i].iter().map(|c| format!("{:.0}", c.0)).collect();
        println!(
            "{name:<50}  {r:>12.0}  {:>7.1}%  rounds: {}",
            g * 100.0,
            rounds.join(" ")
        );
    }
    for i in 1..cells.len() {
        for j in 0..i {
            let per: Vec<f64> = (0..rounds).map(|r| out[i][r].0 / out[j][r].0).collect();
            let mut sorted = per.clone();
            sorted.sort_by(f64::total_cmp);
            let shown: Vec<String> = per.iter().map(|x| format!("{x:.2}")).collect();
            println!(
                "{} / {}: median {:.2}x, by round {}",
                cells[i].0,
                cells[j].0,
                sorted[sorted.len() / 2],
                shown.join(" ")
            );
        }
    }
}

fn main() {
    let rows = rows();
    let cells: Vec<(&str, Ask, Pools)> = vec![
        (
            "off, one host",
            Ask::One("shop.example"),
            pools(&rows, |_| {}),
        ),
        (
            "on (interval 0, in_flight 0), one host",
            Ask::One("shop.example"),
            pools(&rows, |c| c.pace = Some(pace(Duration::ZERO))),
        ),
        ("off, 1,000 hosts", Ask::Many, pools(&rows, |_| {})),
        (
            "binding (interval 500ms), 1,000 hosts",
            Ask::Many,
            pools(&rows, |c| c.pace = Some(pace(Duration::from_millis(500)))),
        ),
        (
            "least_leased, measured",
            Ask::Measured,
            pools(&rows, |_| {}),
        ),
        (
            "fastest, measured",
            Ask::Measured,
            pools(&rows, |c| c.select = Select::Fastest),
        ),
        (
            "floor: off + one random 8-byte update",
            Ask::Touching(FLOOR_PAIRS),
            pools(&rows, |_| {}),
        ),
        (
            "random, measured",
            Ask::Measured,
            pools(&rows, |c| c.select = Select::Random),
        ),
        ("no session", Ask::Plain, pools(&rows, |_| {})),
        ("session (1,000 keys)", Ask::Sessions, pools(&rows, |_| {})),
        (
            "session, a new key each lease",
            Ask::NewSessions,
            pools(&rows, |_| {}),
        ),
        (
            "destination, 600 bans, exit unknown",
            Ask::One(SITE),
            banned_by_site(&rows, Site::Unknown),
        ),
        (
            "destination, 600 bans, 2,000 exits, 200 subnets",
            Ask::One(SITE),
            banned_by_site(&rows, Site::Known),
        ),
        (
            "destination, 5,000 endpoints banned, exit unknown",
            Ask::One(SITE),
            banned_by_site(&rows, Site::Every),
        ),
        ("fleet session (1,000 keys)", Ask::Sessions, fleet(&rows)),
        (
            "fleet session, a new key each lease",
            Ask::NewSessions,
            fleet(&rows),
        ),
    ];
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    if only.as_deref() == Some("socket") {
        let dir = tempfile::tempdir().unwrap();
        socket::table(dir.path(), ENDPOINTS, HOSTS, pace);
        return;
    }
    if let Some(word) = &only {
        let mut cells = cells;
        cells.retain(|(n, _, _)| n.contains(word.as_str()));
        matching(cells, rounds_from_env());
        return;
    }
    let (cells, out) = side_by_side(cells, ROUNDS);
    println!(
        "{:<50}  {:>12}  {:>8}",
        "lease+release (10,000 endpoints)", "per second", "granted"
    );
    let mut rate = Vec::new();
    for (i, (name, _, p, _)) in cells.iter().enumerate() {
        let (r, g) = best(&out[i]);
        rate.push(r);
        let held = p.pace_held("default").unwrap();
        println!(
            "{name:<50}  {r:>12.0}  {:>7.1}%  ({} hosts, {} pairs held)",
            g * 100.0,
            held.0,
            held.1
        );
    }
    println!();
    println!("{:<50}  {:>8}  {:>8}", "ratio", "measured", "target");
    // (what, numerator cell, denominator cell, target)
    let ratios = [
        ("pacing on, not binding / off", 1, 0, ">= 0.95x"),
        ("pacing binding / off (1,000 hosts)", 3, 2, ">= 0.8x"),
        ("fastest / least_leased", 5, 4, ">= 0.9x"),
        (
            "floor: off + one random 8-byte update / off",
            6,
            2,
            "(floor)",
        ),
        ("random / least_leased", 7, 4, "(floor)"),
        ("session (1,000 keys) / no session", 9, 8, "(vs A)"),
        (
            "session, a new key each lease / no session",
            10,
            8,
            "(vs A)",
        ),
        (
            "destination, 600 bans: exits known / unknown",
            12,
            11,
            ">= 0.97x",
        ),
        (
            "destination: exits known / 5,000 banned (floor)",
            12,
            13,
            "(floor)",
        ),
        ("fleet session (1,000 keys) / no session", 14, 8, "(vs A)"),
        (
            "fleet session, a new key each lease / no session",
            15,
            8,
            "(vs A)",
        ),
    ];
    for (what, n, d, target) in ratios {
        println!("{what:<50}  {:>7.2}x  {target:>8}", rate[n] / rate[d]);
    }
    let (bytes, pairs) = bytes_per_pair(&rows, 300_000);
    println!();
    println!(
        "{:<50}  {:>8.1}  {:>8}",
        format!("bytes per paced pair ({pairs} pairs)"),
        bytes,
        "<= 64"
    );
    drop(cells);
    let dir = tempfile::tempdir().unwrap();
    socket::table(dir.path(), ENDPOINTS, HOSTS, pace);
}
