//! `FLEET_PROFILE=1 cargo bench --bench fleet`: instead of the sections, where the time of
//! one cell of one daemon and one of three goes. PostgreSQL's statements by total time
//! (`pg_stat_statements`), and, when `perf` can sample the whole machine, the CPU by
//! process and by the server's functions. Prints and exits; no figure of BENCHMARKS.md's
//! tables comes from it.

use std::path::PathBuf;
use std::process::Command;

use super::three::{caught_up, signal};
use super::{drive, postgres, transition, Daemon, CELL};

/// The server settings the profile needs.
pub fn settings() -> Vec<String> {
    vec![
        "shared_preload_libraries=pg_stat_statements".into(),
        "pg_stat_statements.track=all".into(),
        "pg_stat_statements.track_planning=on".into(),
    ]
}

fn statements(pg: &postgres::Cluster, db: &str) {
    let top = pg.sql(
        db,
        "SELECT round(total_exec_time::numeric, 1) || ' ms | ' || calls || ' calls | ' || \
           round((total_exec_time / calls * 1000)::numeric, 1) || ' µs | ' || rows || ' rows | ' || \
           plans || ' plans ' || round(total_plan_time::numeric, 1) || ' ms | ' || \
           left(regexp_replace(query, '\\s+', ' ', 'g'), 110) \
         FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 18",
    );
    println!("{top}");
}

fn perf_report(data: &str, how: &[&str], n: usize) {
    let out = Command::new("perf")
        .args(["report", "-i", data, "--stdio", "--no-children"])
        .args(how)
        .output();
    let Ok(out) = out else { return };
    let text = String::from_utf8_lossy(&out.stdout);
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .take(n)
    {
        println!("  {l}");
    }
}

/// One cell through `socks`, profiled under `label`.
fn cell(pg: &postgres::Cluster, db: &str, label: &str, socks: &[PathBuf]) {
    pg.sql(db, "SELECT pg_stat_statements_reset()");
    let data = format!("/tmp/fleet-{label}.perf");
    // More `perf record` arguments (a call graph: `--call-graph dwarf`).
    let more = std::env::var("FLEET_PERF_ARGS").unwrap_or_default();
    let perf = Command::new("perf")
        .args(["record", "-a", "-F", "997", "-o", &data])
        .args(more.split_whitespace())
        .args(["--", "sleep"])
        .arg(CELL.as_secs().to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let rate = drive(socks, transition);
    let perf = perf.and_then(|mut p| p.wait());
    println!("\n== {label}: {rate:.0} reports answered/s");
    statements(pg, db);
    if perf.is_ok_and(|s| s.success()) {
        println!("CPU by process:");
        perf_report(&data, &["--sort", "comm"], 8);
        println!("the server's processes:");
        perf_report(&data, &["--comms", "postgres", "--sort", "pid"], 14);
        println!("{}", pg.sql(db, "SELECT pid || ' ' || backend_type || ' ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 60) FROM pg_stat_activity"));
        println!("the server's functions:");
        perf_report(&data, &["--comms", "postgres", "--sort", "dso,sym"], 30);
        for comm in [
            "proxypool-store",
            "tokio-rt-worker",
            "proxypool-pg",
            "proxypool-follo",
        ] {
            println!("{comm}'s functions:");
            perf_report(&data, &["--comms", comm, "--sort", "dso,sym"], 25);
        }
    }
}

pub fn run(pg: &postgres::Cluster, db: &str, d: [&Daemon; 3]) {
    pg.sql(db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    let socks: Vec<PathBuf> = d.iter().map(|d| d.sock.clone()).collect();
    caught_up(&socks);
    signal(&d[1..], libc::SIGSTOP);
    cell(pg, db, "one", &socks[..1]);
    signal(&d[1..], libc::SIGCONT);
    caught_up(&socks);
    cell(pg, db, "three", &socks);
}
