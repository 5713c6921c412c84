//! Section 4 of the fleet bench: three daemons against one at the same client count, in
//! alternating cells of one run (the machine's load moves between cells; a ratio inside
//! one round is what can be read). In a cell of one, the other two daemons are stopped
//! (SIGSTOP), so that it is one daemon as it would serve alone; they are woken (SIGCONT)
//! and have caught up before the next cell of three.
//!
//! Each round also has a cell of one daemon serving while the two others run and follow
//! it: what following alone costs the fleet, the ceiling of any design in which one
//! daemon commits for all (every daemon must still learn every change). And a cell of that
//! daemon serving with the clients of the two others relayed to it (`fleet/relay.rs`): the
//! most such a design could reach, its followers' forwarding made as cheap as a relay.
//!
//! What counts is what the database kept: transitions that wrote a `state_changed` event.
//! A report whose endpoint another daemon had cooled first is answered `cooling` too, but
//! writes nothing (docs/fleet.md, "Ownership"); counting answers would count those.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::support::median;
use super::{cpu, drive, drive_n, lease_release, postgres, relay, transition, waits, Conn, Daemon};
use super::{CELL, CLIENTS, ROUNDS};

/// What one cell of transitions did.
#[derive(Default, Clone, Copy)]
struct Cell {
    /// Reports answered `cooling` a second.
    answered: f64,
    /// Transitions the database kept (`state_changed` events) a second.
    kept: f64,
    /// Writing transactions (group commits) in the cell.
    commits: f64,
    /// CPU seconds of the daemons and of the PostgreSQL server in the cell.
    daemons_cpu: f64,
    server_cpu: f64,
}

/// The database's counters a cell is measured by.
struct Counters<'a> {
    pg: &'a postgres::Cluster,
    db: String,
}

impl Counters<'_> {
    fn count(&self, sql: &str) -> f64 {
        self.pg.sql(&self.db, sql).parse().unwrap()
    }
    fn kept(&self) -> f64 {
        self.count("SELECT count(*) FROM events WHERE kind = 'state_changed'")
    }
    fn commits(&self) -> f64 {
        self.count("SELECT count(*) FROM fleet_changes")
    }
    fn server_cpu(&self) -> f64 {
        cpu(self.pg.server_pid().unwrap(), true)
    }
}

/// Transitions through `socks` with `clients` connections for one cell; `pids` are the
/// daemons whose CPU counts.
fn cell(c: &Counters, socks: &[PathBuf], clients: usize, pids: &[u32]) -> Cell {
    let daemons = || pids.iter().map(|&p| cpu(p, false)).sum::<f64>();
    let (k0, n0, d0, s0) = (c.kept(), c.commits(), daemons(), c.server_cpu());
    let t0 = Instant::now();
    let answered = drive_n(clients, socks, transition);
    // Every answered report was committed before its answer: the counts are final.
    let secs = t0.elapsed().as_secs_f64().max(CELL.as_secs_f64());
    Cell {
        answered,
        kept: (c.kept() - k0) / secs,
        commits: c.commits() - n0,
        daemons_cpu: daemons() - d0,
        server_cpu: c.server_cpu() - s0,
    }
}

pub fn signal(daemons: &[&Daemon], sig: i32) {
    for d in daemons {
        // SAFETY: kill(2) on a child of this process.
        unsafe { libc::kill(d.child.id() as i32, sig) };
    }
}

/// How many endpoints a daemon's memory has cooling.
fn cooling(c: &mut Conn) -> u64 {
    c.req(&serde_json::json!({"op": "status", "pool": "default"}))["pools"][0]["cooling"]
        .as_u64()
        .unwrap()
}

/// Wait until every daemon's memory counts as many cooling endpoints as the first's (the
/// woken ones have read what the first wrote while they were stopped).
pub fn caught_up(socks: &[PathBuf]) {
    let mut conns: Vec<Conn> = socks.iter().map(|s| Conn::new(s)).collect();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let counts: Vec<u64> = conns.iter_mut().map(cooling).collect();
        if counts.iter().all(|&n| n == counts[0]) {
            return;
        }
        assert!(
            Instant::now() < until,
            "the daemons did not catch up: {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn row(name: &str, one: String, three: String) {
    println!("{name:<34} {one:>12} {three:>12}");
}

/// Per transition the database kept, in µs.
fn per_kept(cpu: f64, cells: &[Cell]) -> String {
    let kept: f64 = cells.iter().map(|c| c.kept).sum::<f64>() * CELL.as_secs_f64();
    format!("{:.0}", cpu / kept * 1e6)
}

/// A cell of one daemon serving beside the cells of one daemon alone: its transitions
/// kept a second, and the ratio each round and its median.
fn beside_one(name: &str, short: &str, ones: &[Cell], cells: &[Cell]) {
    let ratios: Vec<f64> = ones
        .iter()
        .zip(cells)
        .map(|(o, c)| c.kept / o.kept)
        .collect();
    let kept = median(cells.iter().map(|c| c.kept).collect());
    row(name, String::new(), format!("{kept:.0}"));
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    row(
        &format!("  {short} / one, each round"),
        String::new(),
        each.join(" "),
    );
    let med = format!("{:.2}", median(ratios));
    row(&format!("  {short} / one (median)"), String::new(), med);
}

/// Section 4; `d` are the three daemons, the first the one that serves alone.
pub fn three_against_one(pg: &postgres::Cluster, db: &str, d: [&Daemon; 3]) {
    let c = Counters {
        pg,
        db: db.to_string(),
    };
    let socks: Vec<PathBuf> = d.iter().map(|d| d.sock.clone()).collect();
    let pids: Vec<u32> = d.iter().map(|d| d.child.id()).collect();
    let (mut ones, mut threes, mut leases) = (Vec::new(), Vec::new(), (Vec::new(), Vec::new()));
    let mut follows = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let relay = relay::Relay::start(dir.path(), &socks[0], 2);
    let (mut relayed, mut relay_cpu) = (Vec::new(), 0.0);
    for _ in 0..ROUNDS {
        signal(&d[1..], libc::SIGSTOP);
        ones.push(cell(&c, &socks[..1], CLIENTS, &pids[..1]));
        leases.0.push(drive(&socks[..1], lease_release));
        signal(&d[1..], libc::SIGCONT);
        caught_up(&socks);
        follows.push(cell(&c, &socks[..1], CLIENTS, &pids));
        caught_up(&socks);
        if let Some(r) = &relay {
            // Spread as in a cell of three (3, 3, 2), so that the clients relayed are
            // those the two others would serve.
            let spread = [socks[0].clone(), r.socks[0].clone(), r.socks[1].clone()];
            let before = cpu(r.pid(), false);
            relayed.push(cell(&c, &spread, CLIENTS, &pids));
            relay_cpu += cpu(r.pid(), false) - before;
            caught_up(&socks);
        }
        threes.push(cell(&c, &socks, CLIENTS, &pids));
        leases.1.push(drive(&socks, lease_release));
    }
    let ratios: Vec<f64> = ones
        .iter()
        .zip(&threes)
        .map(|(o, t)| t.kept / o.kept)
        .collect();
    let med = |cells: &[Cell], f: fn(&Cell) -> f64| median(cells.iter().map(f).collect());
    println!(
        "\n4. three daemons against one ({CLIENTS} clients; alternating cells, the other two \
         stopped in a cell of one; medians of {ROUNDS})"
    );
    println!("{:<34} {:>12} {:>12}", "", "one", "three");
    let f0 = |v: f64| format!("{v:.0}");
    row(
        "transitions kept/s",
        f0(med(&ones, |c| c.kept)),
        f0(med(&threes, |c| c.kept)),
    );
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    row("  three / one, each round", String::new(), each.join(" "));
    row(
        "  three / one (median)",
        String::new(),
        format!("{:.2}", median(ratios.clone())),
    );
    beside_one("one serving, two following", "following", &ones, &follows);
    if relay.is_some() {
        beside_one(
            "one serving, others' clients relayed",
            "relayed",
            &ones,
            &relayed,
        );
        row(
            "  the relay's CPU µs / kept",
            String::new(),
            per_kept(relay_cpu, &relayed),
        );
    }
    row(
        "reports answered/s",
        f0(med(&ones, |c| c.answered)),
        f0(med(&threes, |c| c.answered)),
    );
    let per_commit = |cells: &[Cell]| {
        let kept: f64 = cells.iter().map(|c| c.kept).sum::<f64>() * CELL.as_secs_f64();
        format!("{:.1}", kept / cells.iter().map(|c| c.commits).sum::<f64>())
    };
    row("kept per commit", per_commit(&ones), per_commit(&threes));
    row(
        "leases/s (lease + release)",
        f0(median(leases.0)),
        f0(median(leases.1)),
    );
    let sum = |cells: &[Cell], f: fn(&Cell) -> f64| cells.iter().map(f).sum::<f64>();
    row(
        "daemon CPU µs / kept",
        per_kept(sum(&ones, |c| c.daemons_cpu), &ones),
        per_kept(sum(&threes, |c| c.daemons_cpu), &threes),
    );
    row(
        "PostgreSQL CPU µs / kept",
        per_kept(sum(&ones, |c| c.server_cpu), &ones),
        per_kept(sum(&threes, |c| c.server_cpu), &threes),
    );
    // As many writers per daemon as the one had: each daemon's group commits as large.
    let wide = cell(&c, &socks, 3 * CLIENTS, &pids);
    row(
        &format!("transitions kept/s, {} clients", 3 * CLIENTS),
        String::new(),
        f0(wide.kept),
    );
    // Where the sessions wait, in one more cell of each: not counted above, since the
    // sampler's queries cost the server too.
    signal(&d[1..], libc::SIGSTOP);
    let s = waits::Sampler::start(&pg.url(db));
    drive(&socks[..1], transition);
    let one_waits = s.finish();
    signal(&d[1..], libc::SIGCONT);
    caught_up(&socks);
    let s = waits::Sampler::start(&pg.url(db));
    drive(&socks, transition);
    let three_waits = s.finish();
    println!("\nwhere the daemons' busy PostgreSQL sessions were (share of samples, every 2 ms)");
    println!("  one daemon:    {}", waits::line(&one_waits, 6));
    println!("  three daemons: {}", waits::line(&three_waits, 6));
}
