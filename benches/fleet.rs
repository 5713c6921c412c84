//! Several daemons on one PostgreSQL database against one daemon on SQLite, side by side in
//! one run (docs/fleet.md; numbers in BENCHMARKS.md):
//!
//! 1. ordinary leases per second (lease + release, 8 clients): one daemon on SQLite and one
//!    on PostgreSQL, rounds interleaved;
//! 2. persisted transitions per second (lease + a failure report that cools the endpoint,
//!    8 clients) through one daemon on each, and pgbench's rate of the same UPDATE + INSERT
//!    transaction at 8 clients on the same server (`synchronous_commit` on, fsync on);
//! 3. propagation of a change from one daemon to another (a failure acknowledged by A until
//!    B's status shows it): p50 and p99;
//!    and the floor of 4 with no daemon: pgbench committing those pairs 8 at a time from
//!    one connection against 3 at a time from three (the shapes of one and three daemons'
//!    commits), a statement at a time and pipelined (a commit in one round trip);
//! 4. three daemons against one at the same client count, in alternating cells
//!    (`fleet/three.rs`): the transitions the database kept a second, leases/s, the CPU
//!    spent per transition by the daemons and by PostgreSQL, one daemon serving while
//!    the two others follow it, and the same with the two others' clients relayed to it
//!    by HAProxy (`fleet/relay.rs`: the most a write leader could reach here); then, in
//!    one more cell of each, where the daemons' PostgreSQL sessions wait
//!    (`fleet/waits.rs`).
//!
//! The real binary (release) and a private PostgreSQL cluster (tests/common/postgres.rs).
//! Run: `cargo bench --bench fleet` (needs Debian's `postgresql`, prints a note without
//! it; the relayed cell needs `haproxy`, and is left out with a note without it);
//! `FLEET_THREE_ONLY=1` runs section 4 alone, `FLEET_FLOOR_ONLY=1` the floor alone; `FLEET_PROFILE=1` runs none of them and
//! shows where one cell of one daemon and one of three spend their time (`fleet/profile.rs`;
//! `FLEET_PERF_ARGS` adds `perf record` arguments);
//! `FLEET_PG_SETTINGS='name=value;...'` starts the server with more settings;
//! `PROXYPOOL_BIN=path/to/proxypool` runs another build's daemon instead (a before/after
//! comparison: `benches/ab.sh` shares one target directory, so both of its sides would run
//! the last daemon built).

#[allow(dead_code)]
#[path = "../tests/common/tools.rs"]
mod tools;

#[allow(dead_code)]
#[path = "../tests/common/ports.rs"]
mod ports;

#[allow(dead_code)]
#[path = "../tests/common/wait.rs"]
mod wait;
#[allow(unused_imports)]
use wait::{eventually, eventually_async};

#[allow(dead_code)]
#[path = "../tests/common/postgres.rs"]
mod postgres;

mod support;
use support::median;

#[path = "fleet/waits.rs"]
mod waits;

#[path = "fleet/three.rs"]
mod three;

#[path = "fleet/relay.rs"]
mod relay;

#[path = "fleet/profile.rs"]
mod profile;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The daemon: `PROXYPOOL_BIN` when set (another build, to compare), else this build's.
fn bin() -> String {
    std::env::var("PROXYPOOL_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_proxypool").into())
}
const CLIENTS: usize = 8;
const CELL: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;
/// Endpoints per database: transitions use them up (each cools for an hour).
const ENDPOINTS: usize = 200_000;

const CONFIG: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "1h"
factor = 1.0
max = "1h"
jitter = 0.0
"#;

struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Conn {
    fn new(sock: &Path) -> Conn {
        let w = UnixStream::connect(sock).unwrap();
        Conn {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }
    fn req(&mut self, v: &Value) -> Value {
        let mut line = serde_json::to_string(v).unwrap();
        line.push('\n');
        self.w.write_all(line.as_bytes()).unwrap();
        let mut out = String::new();
        self.r.read_line(&mut out).unwrap();
        serde_json::from_str(&out).unwrap()
    }
}

/// A home (socket, XDG dirs, config) on the database `db` (a path or a URL).
struct Home {
    dir: tempfile::TempDir,
    db: String,
}

impl Home {
    fn new(db: Option<&str>) -> Home {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("proxies.toml"), CONFIG).unwrap();
        let db = db
            .map(str::to_string)
            .unwrap_or_else(|| dir.path().join("pp.db").display().to_string());
        Home { dir, db }
    }
    fn socket(&self) -> PathBuf {
        self.dir.path().join("pp.sock")
    }
    fn cmd(&self) -> Command {
        let mut c = Command::new(bin());
        let d = self.dir.path();
        c.env("PROXYPOOL_DB", &self.db)
            .env("PROXYPOOL_SOCKET", self.socket())
            .env("PROXYPOOL_CONFIG", d.join("proxies.toml"))
            .env("XDG_DATA_HOME", d)
            .env("XDG_RUNTIME_DIR", d)
            .env("HOME", d)
            .env_remove("PROXYPOOL_TOKEN")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }
    fn import(&self, n: usize, tag: u32) {
        let file = self.dir.path().join("list.txt");
        let text: String = (0..n)
            .map(|i| {
                format!(
                    "http://10.{tag}.{}.{}:{}\n",
                    (i / 250) % 250,
                    i % 250,
                    1000 + i / 62_500
                )
            })
            .collect();
        std::fs::write(&file, text).unwrap();
        let out = self.cmd().arg("import").arg(&file).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fn serve(&self) -> Daemon {
        let log = std::fs::File::create(self.dir.path().join("daemon.log")).unwrap();
        let child = self
            .cmd()
            .arg("serve")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let sock = self.socket();
        let t0 = Instant::now();
        while UnixStream::connect(&sock).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon { child, sock }
    }
}

struct Daemon {
    child: Child,
    sock: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's parent and CPU seconds (user + system) from `/proc/PID/stat`: its own, and
/// those of the children it has reaped (added to it when they are).
struct Stat {
    ppid: u32,
    own: f64,
    reaped: f64,
}

fn stat(pid: u32) -> Option<Stat> {
    let tick = 100.0; // USER_HZ on Linux
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let secs = |a: usize, b: usize| -> Option<f64> {
        Some((f[a].parse::<f64>().ok()? + f[b].parse::<f64>().ok()?) / tick)
    };
    Some(Stat {
        ppid: f[1].parse().ok()?,
        own: secs(11, 12)?,
        reaped: secs(13, 14)?,
    })
}

/// The live children of `pid`.
fn children_of(pid: u32) -> impl Iterator<Item = Stat> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .filter(move |s| s.ppid == pid)
}

/// CPU seconds of a process and, with `children`, of its child processes: those alive now
/// and those it has reaped.
fn cpu(pid: u32, children: bool) -> f64 {
    let Some(me) = stat(pid) else { return 0.0 };
    if !children {
        return me.own;
    }
    me.own + me.reaped + children_of(pid).map(|c| c.own + c.reaped).sum::<f64>()
}

/// How many processes have `pid` as their parent.
fn children(pid: u32) -> usize {
    children_of(pid).count()
}

/// `CLIENTS` connections spread over `socks` for `CELL`; each op is `op`; ops per second.
fn drive(socks: &[PathBuf], op: fn(&mut Conn) -> bool) -> f64 {
    drive_n(CLIENTS, socks, op)
}

/// `clients` connections spread over `socks` for `CELL`; ops per second.
fn drive_n(clients: usize, socks: &[PathBuf], op: fn(&mut Conn) -> bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (sock, stop, done) = (socks[i % socks.len()].clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut c = Conn::new(&sock);
                while !stop.load(Ordering::Relaxed) {
                    if op(&mut c) {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    std::thread::sleep(CELL);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}

fn lease_release(c: &mut Conn) -> bool {
    let g = c.req(&json!({"op": "lease", "pool": "default", "ttl": "30s"}));
    if g["ok"] != json!(true) {
        return false;
    }
    c.req(&json!({"op": "release", "lease": g["lease"]}))["ok"] == json!(true)
}

fn transition(c: &mut Conn) -> bool {
    let g = c.req(&json!({"op": "lease", "pool": "default", "ttl": "30s"}));
    if g["ok"] != json!(true) {
        return false;
    }
    let r = c.req(&json!({"op": "report", "lease": g["lease"], "outcome": "failure", "reason": "connect_refused", "phase": "connect"}));
    r["state"] == json!("cooling")
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// pgbench at `clients` connections (two threads at most) running `script` for a cell on
/// `db` with the query protocol `mode` (`simple`, `prepared`): its rate and the
/// transactions it processed.
fn pgbench_run(
    pg: &postgres::Cluster,
    db: &str,
    script: &Path,
    clients: usize,
    mode: &str,
) -> (f64, f64) {
    let threads = clients.min(2);
    let out = Command::new("pgbench")
        .args([
            "-n",
            "-M",
            mode,
            "-c",
            &clients.to_string(),
            "-j",
            &threads.to_string(),
            "-T",
        ])
        .arg(CELL.as_secs().to_string())
        .arg("-f")
        .arg(script)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port().to_string(),
            "-U",
            postgres::USER,
            db,
        ])
        .env("PGPASSWORD", postgres::PASSWORD)
        .output()
        .expect("pgbench (postgresql-contrib or postgresql-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    // A run that stopped or failed transactions would read as a low rate.
    let failed = text
        .lines()
        .find_map(|l| l.strip_prefix("number of failed transactions:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap_or("0");
    assert!(
        out.status.success() && failed == "0",
        "pgbench failed ({}, {failed} failed transactions): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let tps = text
        .lines()
        .find(|l| l.starts_with("tps"))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let done = text
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    (tps, done)
}

/// pgbench writes copies of the tables (same columns, indexes and constraints): the
/// daemons' rows must not change behind their backs. A checkpoint after the imports, so
/// none falls on the first cells.
fn bench_tables(pg: &postgres::Cluster, db: &str) {
    pg.sql(
        db,
        "CREATE TABLE bench_endpoints (LIKE endpoints INCLUDING ALL); \
         INSERT INTO bench_endpoints SELECT * FROM endpoints; \
         CREATE TABLE bench_events (LIKE events INCLUDING ALL)",
    );
    pg.sql(db, "CHECKPOINT");
}

/// A pgbench script committing `k` UPDATE + INSERT pairs in one transaction; `pipelined`:
/// sent in one round trip (pipeline mode, prepared statements), as a daemon sends its
/// commit, rather than one statement at a time.
fn batch_script(dir: &Path, k: usize, pipelined: bool) -> PathBuf {
    let mut text = String::new();
    for i in 0..k {
        text.push_str(&format!("\\set id{i} random(1, {ENDPOINTS})\n"));
    }
    if pipelined {
        text.push_str("\\startpipeline\n");
    }
    text.push_str("BEGIN;\n");
    for i in 0..k {
        text.push_str(&format!(
            "UPDATE bench_endpoints SET state = 'cooling', streak = streak + 1, \
             cooldown_ms = 3600000, cooldown_until = now() + interval '1 hour', \
             state_changed_at = now() WHERE id = :id{i};\n\
             INSERT INTO bench_events (at, endpoint, kind, from_state, to_state, reason, phase) \
             VALUES (now(), :id{i}, 'state_changed', 'available', 'cooling', 'connect_refused', 'connect');\n"
        ));
    }
    text.push_str("END;\n");
    if pipelined {
        text.push_str("\\endpipeline\n");
    }
    let path = dir.join(format!("batch{k}-{pipelined}.sql"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The floor of three daemons against one (section 4) with no daemon at all: pgbench
/// committing the same UPDATE + INSERT pairs in the shape the daemons' commits take, one
/// writer committing 8 at a time (one daemon at 8 clients) against three writers
/// committing 3 at a time (three daemons share the 8 clients: 2.6 a commit). Twice, with
/// prepared statements both times: a statement at a time (a round trip each), and
/// pipelined (a commit in one round trip, as a daemon sends it). If the shape alone loses what the fleet
/// loses, only fewer, larger commits (one writer for the fleet) can win it back.
fn batching_floor(pg: &postgres::Cluster, db: &str, dir: &Path) {
    for (pipelined, mode, label) in [
        (false, "prepared", "a statement at a time"),
        (true, "prepared", "pipelined"),
    ] {
        let (one, three) = (
            batch_script(dir, 8, pipelined),
            batch_script(dir, 3, pipelined),
        );
        let (mut r1, mut r3) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            r1.push(pgbench_run(pg, db, &one, 1, mode).0 * 8.0);
            r3.push(pgbench_run(pg, db, &three, 3, mode).0 * 3.0);
        }
        let rounds: Vec<String> = r1
            .iter()
            .zip(&r3)
            .map(|(a, b)| format!("{:.2}", b / a))
            .collect();
        let (r1, r3) = (median(r1), median(r3));
        println!("\n2b. the batching floor: pgbench, UPDATE + INSERT pairs per commit, no daemon, {label}");
        println!("{:<28} {:>12}", "1 writer, 8 a commit", format!("{r1:.0}"));
        println!("{:<28} {:>12}", "3 writers, 3 a commit", format!("{r3:.0}"));
        println!("{:<28} {:>12}", "three / one", format!("{:.2}", r3 / r1));
        println!("{:<28} {:>12}", "  each round", rounds.join(" "));
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let profiling = std::env::var_os("FLEET_PROFILE").is_some();
    let mut settings = match profiling {
        true => profile::settings(),
        false => Vec::new(),
    };
    // Settings a run tries against the defaults, side by side (`;` apart: a value may
    // hold commas).
    if let Ok(more) = std::env::var("FLEET_PG_SETTINGS") {
        settings.extend(
            more.split(';')
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
    }
    let Some(pg) = postgres::Cluster::start_durable_with(true, settings) else {
        return;
    };
    println!("daemon: {}", bin());
    println!("load average before: {}", load());
    let pg_url = pg.database();
    let lite = Home::new(None);
    let fleet: Vec<Home> = (0..3).map(|_| Home::new(Some(&pg_url))).collect();
    lite.import(ENDPOINTS, 1);
    fleet[0].import(ENDPOINTS, 2);
    let db = pg_url.rsplit('/').next().unwrap().to_string();
    if profiling {
        let d: Vec<Daemon> = fleet.iter().map(Home::serve).collect();
        profile::run(&pg, &db, [&d[0], &d[1], &d[2]]);
        return;
    }
    if std::env::var_os("FLEET_FLOOR_ONLY").is_some() {
        bench_tables(&pg, &db);
        batching_floor(&pg, &db, lite.dir.path());
        return;
    }
    // Section 4 alone (a quicker look at three daemons against one).
    if std::env::var_os("FLEET_THREE_ONLY").is_some() {
        let d: Vec<Daemon> = fleet.iter().map(Home::serve).collect();
        three::three_against_one(&pg, &db, [&d[0], &d[1], &d[2]]);
        return;
    }
    let dl = lite.serve();
    let d0 = fleet[0].serve();

    // 1. Leases: interleaved rounds.
    let (mut l_lite, mut l_pg) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        l_lite.push(drive(std::slice::from_ref(&dl.sock), lease_release));
        l_pg.push(drive(std::slice::from_ref(&d0.sock), lease_release));
    }
    let (l_lite, l_pg) = (median(l_lite), median(l_pg));
    println!("\n1. ordinary leases/s (lease + release, {CLIENTS} clients, median of {ROUNDS} × {CELL:?})");
    println!(
        "{:<28} {:>12}",
        "one daemon on SQLite",
        format!("{l_lite:.0}")
    );
    println!(
        "{:<28} {:>12}",
        "one daemon on PostgreSQL",
        format!("{l_pg:.0}")
    );
    println!(
        "{:<28} {:>12}",
        "PostgreSQL / SQLite",
        format!("{:.2}", l_pg / l_lite)
    );

    // 2. Transitions, and pgbench's UPDATE + INSERT.
    // Every writing transaction records its change number: their count is the number of
    // group commits.
    let commits = || -> f64 {
        pg.sql(&db, "SELECT count(*) FROM fleet_changes")
            .parse()
            .unwrap()
    };
    let script = lite.dir.path().join("tx.sql");
    std::fs::write(
        &script,
        format!("\\set id random(1, {ENDPOINTS})\nBEGIN;\nUPDATE bench_endpoints SET state = 'cooling', streak = streak + 1, \
         cooldown_ms = 3600000, cooldown_until = now() + interval '1 hour', state_changed_at = now() WHERE id = :id;\n\
         INSERT INTO bench_events (at, endpoint, kind, from_state, to_state, reason, phase) \
         VALUES (now(), :id, 'state_changed', 'available', 'cooling', 'connect_refused', 'connect');\nEND;\n"),
    )
    .unwrap();
    bench_tables(&pg, &db);
    // Its rate, and the transactions it processed (for the CPU per transaction).
    let pgbench = || pgbench_run(&pg, &db, &script, CLIENTS, "simple");
    // Rounds interleaved: SQLite, the daemon on PostgreSQL, pgbench; CPU counted over the
    // daemon's cells, and the server's over pgbench's too.
    let (mut t_lite, mut t_pg, mut t_bench) = (Vec::new(), Vec::new(), Vec::new());
    let (mut one_cpu, mut one_commits) = ((0.0, 0.0), 0.0);
    let (mut bench_cpu, mut bench_ops) = (0.0, 0.0);
    for _ in 0..ROUNDS {
        t_lite.push(drive(std::slice::from_ref(&dl.sock), transition));
        let (c0, p0, n0) = (
            cpu(d0.child.id(), false),
            cpu(pg.server_pid().unwrap(), true),
            commits(),
        );
        t_pg.push(drive(std::slice::from_ref(&d0.sock), transition));
        one_cpu.0 += cpu(d0.child.id(), false) - c0;
        one_cpu.1 += cpu(pg.server_pid().unwrap(), true) - p0;
        one_commits += commits() - n0;
        let server = pg.server_pid().unwrap();
        let (p0, n0) = (cpu(server, true), children(server));
        let (rate, done) = pgbench();
        // Its backends are gone once the postmaster has no more children than before.
        let until = Instant::now() + Duration::from_secs(5);
        while children(server) > n0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        t_bench.push(rate);
        bench_cpu += cpu(pg.server_pid().unwrap(), true) - p0;
        bench_ops += done;
    }
    let rounds: Vec<String> = t_pg
        .iter()
        .zip(&t_bench)
        .map(|(d, b)| format!("{:.2}", d / b))
        .collect();
    let one_ops: f64 = t_pg.iter().sum::<f64>() * CELL.as_secs_f64();
    let one_batch = one_ops / one_commits;
    let (t_lite, t_pg, tps) = (median(t_lite), median(t_pg), median(t_bench));
    println!("\n2. persisted transitions/s (lease + failure report, {CLIENTS} clients; synchronous_commit on, fsync on)");
    println!(
        "{:<28} {:>12}",
        "one daemon on SQLite",
        format!("{t_lite:.0}")
    );
    println!(
        "{:<28} {:>12}",
        "one daemon on PostgreSQL",
        format!("{t_pg:.0}")
    );
    println!(
        "{:<28} {:>12}",
        "pgbench UPDATE + INSERT",
        format!("{tps:.0}")
    );
    println!(
        "{:<28} {:>12}",
        "daemon / pgbench",
        format!("{:.2}", t_pg / tps)
    );
    println!("{:<28} {:>12}", "  each round", rounds.join(" "));
    // Where a group commit's time goes: a commit of transitions and events is one call of
    // the database's function (the change number, one guarded UPDATE per transition, the
    // events' INSERT, NOTIFY) and the flush transaction behind it, in one round trip,
    // then the WAL flush.
    println!(
        "{:<28} {:>12}",
        "transitions per commit",
        format!("{one_batch:.1}")
    );
    println!("{:<28} {:>12}", "statements per commit", "2 (by design)");
    println!("{:<28} {:>12}", "round trips per commit", "1 (by design)");
    // The server's own CPU for one transition and for one pgbench transaction (its
    // backends exit with pgbench: counted once the postmaster has reaped them).
    println!(
        "{:<28} {:>12}",
        "PostgreSQL CPU µs, daemon",
        format!("{:.0}", one_cpu.1 / one_ops * 1e6)
    );
    println!(
        "{:<28} {:>12}",
        "PostgreSQL CPU µs, pgbench",
        format!("{:.0}", bench_cpu / bench_ops * 1e6)
    );

    batching_floor(&pg, &db, lite.dir.path());

    // 3. Propagation from daemon 0 to daemon 1.
    let d1 = fleet[1].serve();
    let mut a = Conn::new(&d0.sock);
    let mut b = Conn::new(&d1.sock);
    let cooling = |c: &mut Conn| {
        c.req(&json!({"op": "status", "pool": "default"}))["pools"][0]["cooling"]
            .as_u64()
            .unwrap()
    };
    // Let daemon 1 settle after its start (it loaded the rows; nothing else writes now).
    let mut last = cooling(&mut b);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = cooling(&mut b);
        if now == last {
            break;
        }
        last = now;
    }
    let mut lat = Vec::new();
    for _ in 0..200 {
        let before = cooling(&mut b);
        assert!(transition(&mut a));
        let t = Instant::now();
        while cooling(&mut b) == before {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "a change did not reach daemon 1"
            );
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(5));
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("\n3. propagation daemon 0 -> daemon 1 (200 failures, acknowledged until seen)");
    println!(
        "{:<28} {:>12}",
        "p50 ms",
        format!("{:.1}", lat[lat.len() / 2])
    );
    println!(
        "{:<28} {:>12}",
        "p99 ms",
        format!("{:.1}", lat[lat.len() * 99 / 100])
    );
    println!(
        "{:<28} {:>12}",
        "max ms",
        format!("{:.1}", lat[lat.len() - 1])
    );

    // 4. Three daemons against one.
    let d2 = fleet[2].serve();
    three::three_against_one(&pg, &db, [&d0, &d1, &d2]);
    println!("\nload average after: {}", load());
}
