//! The floors table: each daemon load beside the cheapest thing found that does the same
//! work, rows interleaved (A B A B ..., the order flipped every other round), medians.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxypool::config::Durability;
use proxypool::pool::engine::{Engine, EngineOptions};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

use super::support::{self, median};
use super::{
    commit_sizes_text, drive, echo_server, failure_of, release_of, replay, same_rows, start_daemon,
    start_daemon_engine, Exchange, Load, RUN,
};

/// One thread committing one-row transactions (WAL, `synchronous = FULL`) in a fresh
/// database under `dir` for RUN: the floor group commit is measured against. Commits/s.
fn commit_loop(dir: &Path) -> f64 {
    let path = dir.join("commit-loop.db");
    let _ = std::fs::remove_file(&path);
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("commit-loop.db{side}")));
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, at INTEGER, what TEXT)")
        .unwrap();
    let mut conn = conn;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < RUN {
        let tx = conn.transaction().unwrap();
        tx.execute(
            "INSERT INTO t (at, what) VALUES (?1, 'connect_refused')",
            [n as i64],
        )
        .unwrap();
        tx.commit().unwrap();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Rounds of the floors table: each row runs once per round, rows alternating order.
const FLOOR_ROUNDS: usize = 3;

/// Each of `cells` run FLOOR_ROUNDS times, interleaved; each cell's rates in round order.
fn interleaved(cells: &mut [&mut dyn FnMut() -> f64]) -> Vec<Vec<f64>> {
    support::interleaved(FLOOR_ROUNDS, cells.len(), |i| cells[i]())
}

fn rounds_text(v: &[f64]) -> String {
    v.iter()
        .map(|r| format!("{r:.0}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// Each daemon load beside its floor, interleaved, medians of FLOOR_ROUNDS.
pub fn floors(dir: &Path, client: &tokio::runtime::Runtime) {
    let echo_path = dir.join("floor-echo.sock");
    let p = echo_path.clone();
    support::on_own_runtime(move |ready| async move {
        let l = UnixListener::bind(&p).unwrap();
        ready.send(()).unwrap();
        echo_server(l).await;
    });
    let (daemon, t1) = start_daemon(dir, 10_000, "floor-lease");
    let x: &'static Exchange = Box::leak(Box::new(
        client.block_on(Exchange::record(&daemon, release_of)),
    ));
    let replay_path = replay::start(dir, "floor-replay", &x.lease_reply, &x.then_reply, None);
    let (persisted, t2, persisted_engine) = start_daemon_engine(
        dir,
        10_000,
        "floor-report",
        EngineOptions::default(),
        Durability::Full,
    );
    println!(
        "\nfloors: {FLOOR_ROUNDS} rounds of {RUN:?} per row, rows interleaved, medians \
         (lease {} B + answer {} B, release {} B + answer {} B)",
        x.lease.len(),
        x.lease_reply.len(),
        x.then.len(),
        x.then_reply.len()
    );
    println!(
        "{:<48}  {:>5}  {:>12}  {:>10}",
        "row", "conns", "per s", "µs each"
    );
    let cell = |path: &PathBuf, conns: usize, load: Load| {
        let (rate, _, errs) = client.block_on(drive(path.clone(), conns, load));
        assert_eq!(errs, 0, "errors in a floors cell");
        rate
    };
    lease_rows(&cell, &echo_path, &replay_path, &daemon, x);
    let (indexed, t3, indexed_engine) = start_indexed(dir);
    let daemons = Persisted {
        shipped: (&persisted, &persisted_engine),
        indexed: (&indexed, &indexed_engine),
    };
    persisted_rows(dir, client, &cell, &daemons);
    t1.cancel();
    t2.cancel();
    t3.cancel();
}

/// The two `synchronous = full` daemons of the persisted rows: the daemon as it ships, and
/// one whose database has the per-endpoint events index back.
struct Persisted<'a> {
    shipped: (&'a PathBuf, &'a Engine),
    indexed: (&'a PathBuf, &'a Engine),
}

/// A `synchronous = full` daemon on a database given back the index on events (endpoint,
/// id) that migration 09 replaced by a chain, before the daemon opened it: what that index
/// cost. Every event put an entry into the index leaf of its endpoint, a page of its own
/// for each endpoint in a pool of 10,000, and each such page is a WAL frame of the commit.
fn start_indexed(dir: &Path) -> (PathBuf, CancellationToken, Arc<Engine>) {
    let name = "floor-report-indexed";
    let db = dir.join(format!("{name}.db"));
    drop(proxypool::store::Store::open(&db).unwrap());
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("CREATE INDEX events_endpoint ON events (endpoint, id)")
        .unwrap();
    start_daemon_engine(
        dir,
        10_000,
        name,
        EngineOptions::default(),
        Durability::Full,
    )
}

type Cell<'a> = &'a dyn Fn(&PathBuf, usize, Load) -> f64;

/// Lease+release at 1 and 8 connections beside an echo round trip and the replay floor.
fn lease_rows(
    cell: Cell<'_>,
    echo_path: &PathBuf,
    replay_path: &PathBuf,
    daemon: &PathBuf,
    x: &'static Exchange,
) {
    for conns in [1usize, 8] {
        let rates = interleaved(&mut [
            &mut || cell(echo_path, conns, Load::Echo),
            &mut || cell(replay_path, conns, Load::Replay(x)),
            &mut || cell(daemon, conns, Load::LeaseRelease),
        ]);
        let names = [
            "echo, 1 round trip",
            "floor: lease+release bytes, 2 round trips",
            "lease+release, pool of 10,000",
        ];
        for (name, r) in names.iter().zip(&rates) {
            let m = median(r.clone());
            println!(
                "{name:<48}  {conns:>5}  {m:>12.0}  {:>10.1}  rounds {}",
                conns as f64 * 1e6 / m,
                rounds_text(r)
            );
        }
        let (floor, lease) = (median(rates[1].clone()), median(rates[2].clone()));
        println!(
            "{:<48}  {conns:>5}  {:>12.2}  {:>10.2}",
            "lease+release / replay floor (rate, time)",
            lease / floor,
            floor / lease
        );
    }
}

/// Lease + failure report with `synchronous = full` beside the one-row commit loop, the
/// bare replays of a traced commit's rows and the answered floors.
fn persisted_rows(
    dir: &Path,
    client: &tokio::runtime::Runtime,
    cell: Cell<'_>,
    daemons: &Persisted<'_>,
) {
    let (persisted, persisted_engine) = daemons.shipped;
    let (indexed, indexed_engine) = daemons.indexed;
    let commit = traced_commit(dir, cell);
    let bare = std::cell::RefCell::new(same_rows::Bare::open(dir, "same-rows.db", 10_000));
    let replayed = bare.borrow_mut().check(&commit);
    bare.borrow_mut().forget_times();
    assert!(
        replayed == commit.composition,
        "the replay wrote {}, the daemon {}",
        replayed.text(),
        commit.composition.text()
    );
    let answered: &'static Exchange = Box::leak(Box::new(
        client.block_on(Exchange::record(persisted, failure_of)),
    ));
    let waited = |group: usize, inline: bool| {
        replay::start_answered(
            dir,
            &format!(
                "floor-answered-{group}{}",
                if inline { "-inline" } else { "" }
            ),
            10_000,
            &commit,
            group,
            inline,
            &answered.lease_reply,
            &answered.then_reply,
        )
    };
    let (whole, halves, inline) = (waited(8, false), waited(4, false), waited(8, true));
    let sizes_before = persisted_engine.commit_sizes();
    let rates = interleaved(&mut [
        &mut || commit_loop(dir),
        &mut || bare.borrow_mut().run(&commit, 8, RUN),
        &mut || bare.borrow_mut().run_as_traced(&commit, 8, RUN),
        &mut || {
            let rate = cell(persisted, 8, Load::LeaseFailure);
            settle(persisted_engine);
            rate
        },
        &mut || cell(&whole, 8, Load::Replay(answered)),
        &mut || cell(&halves, 8, Load::Replay(answered)),
        &mut || cell(&inline, 8, Load::Replay(answered)),
        &mut || {
            let rate = cell(indexed, 8, Load::LeaseFailure);
            settle(indexed_engine);
            rate
        },
    ]);
    let sizes = commit_sizes_text(&sizes_before, &persisted_engine.commit_sizes());
    let names = [
        "one-row commit loop, synchronous=full",
        "the same rows, bare (8 pairs a commit)",
        "the same rows, bare, the daemon's endpoints",
        "lease+failure report, synchronous=full",
        "floor: the same rows, answered, commits of 8",
        "floor: the same rows, answered, commits of 4",
        "floor: the same rows, answered inline, of 8",
        "lease+failure report, events (endpoint, id) index",
    ];
    for (name, (r, conns)) in names
        .iter()
        .zip(rates.iter().zip([1usize, 1, 1, 8, 8, 8, 8, 8]))
    {
        let m = median(r.clone());
        println!(
            "{name:<48}  {conns:>5}  {m:>12.0}  {:>10.1}  rounds {}",
            conns as f64 * 1e6 / m,
            rounds_text(r)
        );
    }
    print_ratios(&rates);
    // The median transaction against the mean: SQLite checkpoints the WAL in the thread
    // that commits, once it holds 1,000 pages, and those commits take milliseconds.
    let [random, traced] = bare.borrow_mut().spreads();
    println!(
        "the same rows, bare, each transaction: {} on random endpoints; {} on the \
         daemon's endpoints",
        random.text(),
        traced.text()
    );
    println!("persisted pairs' commits: {sizes}");
}

/// The persisted rows' ratios, of their medians and in each round.
fn print_ratios(rates: &[Vec<f64>]) {
    let [one_row, same, as_traced, persisted_rate, whole_rate, halves_rate, inline_rate, indexed] =
        [0, 1, 2, 3, 4, 5, 6, 7].map(|i| median(rates[i].clone()));
    let best_floor = whole_rate.max(halves_rate).max(inline_rate);
    for (name, ratio) in [
        (
            "persisted pairs / one-row commits",
            persisted_rate / one_row,
        ),
        (
            "persisted pairs / the same rows bare",
            persisted_rate / same,
        ),
        ("the same rows bare / one-row commits", same / one_row),
        (
            "persisted / same rows, daemon's endpoints",
            persisted_rate / as_traced,
        ),
        (
            "same rows, daemon's endpoints / one-row",
            as_traced / one_row,
        ),
        (
            "answered floor, commits of 8 / one-row",
            whole_rate / one_row,
        ),
        (
            "answered floor, commits of 4 / one-row",
            halves_rate / one_row,
        ),
        (
            "answered floor inline, of 8 / one-row",
            inline_rate / one_row,
        ),
        (
            "persisted pairs / the best answered floor",
            persisted_rate / best_floor,
        ),
        (
            "with the (endpoint, id) index: pairs / one-row",
            indexed / one_row,
        ),
        (
            "persisted pairs / with the (endpoint, id) index",
            persisted_rate / indexed,
        ),
    ] {
        println!("{name:<48}  {:>5}  {ratio:>12.2}", "");
    }
    let by_round = |a: usize, b: usize| {
        let r: Vec<String> = (0..FLOOR_ROUNDS)
            .map(|i| format!("{:.2}", rates[a][i] / rates[b][i]))
            .collect();
        r.join("/")
    };
    println!(
        "by round: the same rows bare / one-row commits {}; persisted pairs / the same rows \
         bare {}; daemon's endpoints / one-row {}; answered floor of 8 / one-row {}; of 4 / \
         one-row {}; inline, of 8 / one-row {}; persisted pairs / one-row {}; with the (endpoint, id) \
         index / one-row {}",
        by_round(1, 0),
        by_round(3, 1),
        by_round(2, 0),
        by_round(4, 0),
        by_round(5, 0),
        by_round(6, 0),
        by_round(3, 0),
        by_round(7, 0)
    );
    println!(
        "the same rows, bare: {:.0} µs per commit of 8 pairs ({:.0} µs on the daemon's \
         endpoints), against {:.0} µs per one-row commit",
        8e6 / same,
        8e6 / as_traced,
        1e6 / one_row
    );
}

/// Waits until `engine` stops committing (at most 5 s): a load's endpoints still cooling
/// when it ends have their cooldown ends committed after it, on the same disk as the next
/// row's commits.
fn settle(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = engine.commit_sizes().commits;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = engine.commit_sizes().commits;
        if now == last {
            return;
        }
        last = now;
    }
}

/// One of the daemon's commits of 8 lease + failure-report pairs as its store ran it: a
/// daemon of its own (`synchronous = full`, its store connection traced) warmed up by one
/// run of the load, then traced for another.
fn traced_commit(dir: &Path, cell: Cell<'_>) -> same_rows::Commit {
    let (sock, token, _) = same_rows::traced(|| {
        start_daemon_engine(
            dir,
            10_000,
            "floor-traced",
            EngineOptions::default(),
            Durability::Full,
        )
    });
    cell(&sock, 8, Load::LeaseFailure);
    let log = same_rows::record(|| {
        cell(&sock, 8, Load::LeaseFailure);
    });
    token.cancel();
    let c = same_rows::pick(&log, 8);
    println!(
        "a daemon commit of 8 pairs ({} of the {} traced commits answering 8 reports, of {} \
         traced): {}; endpoints {:?}; the {} such commits wrote {:.1} rows on {:.1} endpoints \
         on average",
        c.alike,
        c.full,
        c.traced,
        c.composition.text(),
        c.ids,
        c.full,
        c.mean_rows,
        c.mean_endpoints
    );
    c
}
