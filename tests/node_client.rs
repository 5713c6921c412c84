//! Runs the Node package's test suite (`clients/node/test`, Node's own test runner)
//! against a real daemon of this build: its Unix socket, its TCP listener with an admin
//! and a lease token, and a rotating gateway in front of three real tinyproxy upstreams,
//! each leaving from a loopback address of its own, towards a real nginx site whose
//! `/guarded` answers 403 to one of those addresses. The suite crawls that site with
//! real Crawlee (`CheerioCrawler`, `HttpCrawler`, and `PlaywrightCrawler` driving
//! Debian's Chromium) through the gateway.
//!
//! It needs Node (`PROXYPOOL_NODE`, else `node` on the `PATH`) and the package's
//! development dependencies (`npm ci` in `clients/node`; `.ci/run` does it). Without
//! them the test is skipped with a note, unless `CI` is set: then it fails, and so does
//! any test the suite skips.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use common::daemon::{ok, tcp_req, wait_output, Daemon, Home, BIN};
use common::origin::NginxOrigin;
use common::tools::{free_port, in_ci, need, skip_unless_ci, ToolDaemon, CHROMIUM_FLAGS};
use common::upstreams::tinyproxy_bound;

const ADMIN: &str = "node-suite-admin-token-0123456789";
const LEASE: &str = "node-suite-lease-token-0123456789";
/// The gateway's token: with characters a URL must escape, as users' tokens have.
const GATEWAY_TOKEN: &str = "gw:tok@n/with#odd&chars=+";

/// The upstreams' exit addresses; the site refuses the second.
const EXITS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 1, 2),
    Ipv4Addr::new(127, 0, 2, 2),
    Ipv4Addr::new(127, 0, 3, 2),
];
const BANNED: Ipv4Addr = EXITS[1];

/// Pools of the three real upstreams, one per suite that changes their health.
const UPSTREAM_POOLS: [&str; 5] = ["gw", "cheerio", "http", "browser", "drift"];

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/node")
}

/// Node, and the package's dependencies installed, or None (skipped) outside CI.
fn node() -> Option<PathBuf> {
    let fix = "CI runs the Node client tests: `npm ci` in clients/node, see .ci/run";
    let node = match std::env::var("PROXYPOOL_NODE")
        .ok()
        .filter(|p| !p.is_empty())
    {
        Some(p) => PathBuf::from(p),
        None => need("node", "apt-get install -y nodejs npm")?,
    };
    let modules = package_dir().join("node_modules");
    for dep in ["typescript", "crawlee", "playwright-core", "@crawlee/core"] {
        if !modules.join(dep).join("package.json").is_file() {
            return skip_unless_ci(&format!("clients/node/node_modules has no {dep}"), fix);
        }
    }
    Some(node)
}

/// `node scripts/build.mjs`: dist/esm and dist/cjs from the sources as they are now.
fn build(node: &Path) {
    let child = Command::new(node)
        .arg("scripts/build.mjs")
        .current_dir(package_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the package build");
    let out = wait_output(child, Duration::from_secs(300)).expect("the build timed out");
    assert!(
        out.status.success(),
        "the package does not build:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn upstream_url(port: u16) -> String {
    format!("http://alice:s3cret@127.0.0.1:{port}")
}

/// The daemon's config: a pool per suite, the upstreams' pools cooling a ban for 30
/// minutes (so a crawl sees the pair banned from its first report to its end), and the
/// gateway: with a token, judging no status itself, so that the bans the suite sees are
/// the ones the client reports by session (as for HTTPS, where the gateway sees nothing).
fn config(upstream_ports: &[u16], gateway: &str, drift_gateway: &str) -> String {
    let mut c = String::from(
        "[[pool]]\nname = \"default\"\n\n[[pool]]\nname = \"empty\"\n\n\
         [[pool]]\nname = \"safety\"\n\n[[pool]]\nname = \"phases\"\n\n[[pool]]\nname = \"scratch\"\n\n\
         [[pool]]\nname = \"waiting\"\nmax_leases_per_endpoint = 1\n\n\
         [[pool]]\nname = \"tight\"\nmax_leases_per_endpoint = 1\n\
         [pool.cooldown]\nbase = \"10m\"\nfactor = 1.0\nmax = \"10m\"\njitter = 0.0\n\n",
    );
    for pool in UPSTREAM_POOLS {
        c.push_str(&format!(
            "[[pool]]\nname = \"{pool}\"\n[pool.cooldown]\nbase = \"30m\"\nfactor = 1.0\nmax = \"30m\"\njitter = 0.0\n\n"
        ));
        for port in upstream_ports {
            c.push_str(&format!(
                "[[endpoint]]\nurl = \"{}\"\npool = \"{pool}\"\n\n",
                upstream_url(*port)
            ));
        }
    }
    let token = GATEWAY_TOKEN;
    c.push_str(&format!(
        "[[gateway]]\nlisten = \"{gateway}\"\npool = \"gw\"\ntoken = \"{token}\"\nban_status = []\n\n\
         [[gateway]]\nlisten = \"{drift_gateway}\"\npool = \"drift\"\ntoken = \"{token}\"\n"
    ));
    c
}

/// Each upstream pool's endpoints: id and the address the upstream leaves from.
fn endpoints_by_pool(tcp: &str, ports: &[u16]) -> Value {
    let mut pools = serde_json::Map::new();
    for pool in UPSTREAM_POOLS {
        let r = ok(tcp_req(
            tcp,
            &json!({"op": "endpoints", "pool": pool, "token": ADMIN}),
        ));
        let list: Vec<Value> = r["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let url = e["url"].as_str().unwrap();
                let i = ports
                    .iter()
                    .position(|p| url.ends_with(&format!(":{p}")))
                    .unwrap_or_else(|| panic!("{url} is none of the upstreams {ports:?}"));
                json!({"id": e["id"], "exit": EXITS[i].to_string()})
            })
            .collect();
        assert_eq!(list.len(), ports.len(), "{pool}: {r}");
        pools.insert(pool.to_string(), Value::Array(list));
    }
    Value::Object(pools)
}

/// The suite's files (`test/*.test.mjs`), or those `PROXYPOOL_NODE_TESTS` names while
/// working on them.
fn test_files() -> Vec<String> {
    if let Ok(files) = std::env::var("PROXYPOOL_NODE_TESTS") {
        assert!(
            !in_ci(),
            "PROXYPOOL_NODE_TESTS runs part of the suite: not under CI"
        );
        return files.split_whitespace().map(str::to_string).collect();
    }
    let mut files: Vec<String> = std::fs::read_dir(package_dir().join("test"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".test.mjs"))
        .map(|n| format!("test/{n}"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "clients/node/test has only {files:?}");
    files
}

/// The suite's TAP output: (passed test names, skipped lines, the summary).
fn tap_results(stdout: &str) -> (Vec<String>, Vec<String>) {
    let passed = stdout
        .lines()
        .map(str::trim_start)
        .filter_map(|l| l.strip_prefix("ok "))
        .filter(|l| !l.contains("# SKIP"))
        .map(|l| l.split_once(" - ").map(|x| x.1).unwrap_or(l).to_string())
        .collect();
    let skipped = stdout
        .lines()
        .filter(|l| l.contains("# SKIP") || l.contains("# TODO"))
        .map(str::to_string)
        .collect();
    (passed, skipped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_client_suite_passes() {
    let Some(node) = node() else {
        return;
    };
    let chromium = need("chromium", "apt-get install -y chromium");
    let mut upstreams: Vec<ToolDaemon> = Vec::new();
    for exit in EXITS {
        let Some(t) = tinyproxy_bound(exit, &[443]).await else {
            return;
        };
        upstreams.push(t);
    }
    let Some(origin) = NginxOrigin::banning(&[IpAddr::V4(BANNED)]).await else {
        return;
    };
    tokio::task::spawn_blocking(move || run_suite(&node, chromium, &upstreams, &origin))
        .await
        .unwrap();
}

fn run_suite(
    node: &Path,
    chromium: Option<PathBuf>,
    upstreams: &[ToolDaemon],
    origin: &NginxOrigin,
) {
    build(node);
    let ports: Vec<u16> = upstreams.iter().map(|t| t.port).collect();
    let (gateway, drift_gateway) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let home = Home::new(Some(&config(&ports, &gateway, &drift_gateway)));
    let tcp = format!("127.0.0.1:{}", free_port());
    let daemon = home.serve_with(
        &["--listen-tcp", &tcp],
        &[("PROXYPOOL_TOKEN", ADMIN), ("PROXYPOOL_LEASE_TOKEN", LEASE)],
    );
    let env: serde_json::Map<String, Value> = home
        .envs()
        .into_iter()
        .map(|(k, v)| (k, json!(v)))
        .collect();
    let fixtures = json!({
        "bin": BIN,
        "root": env!("CARGO_MANIFEST_DIR"),
        "env": env,
        "socket": home.socket,
        "tcp": format!("tcp://{tcp}"),
        "adminToken": ADMIN,
        "leaseToken": LEASE,
        "gateway": format!("http://{gateway}"),
        "driftGateway": format!("http://{drift_gateway}"),
        "gatewayToken": GATEWAY_TOKEN,
        "site": format!("http://127.0.0.1:{}", origin.http_port),
        "banned": BANNED.to_string(),
        "pools": endpoints_by_pool(&tcp, &ports),
        "chromium": chromium,
        "chromiumArgs": CHROMIUM_FLAGS.iter().filter(|f| **f != "--headless").collect::<Vec<_>>(),
    });
    let path = home.dir.path().join("fixtures.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&fixtures).unwrap()).unwrap();
    let stdout = run_node(node, &path, &home.dir.path().join("crawlee"), &daemon);
    if std::env::var_os("PROXYPOOL_NODE_TESTS").is_some() {
        eprintln!("{stdout}");
        return; // a partial run: the checks below are the whole suite's
    }
    check_results(&stdout);
    check_crawls_at_the_site(origin);
}

/// `node --test` on the suite's files; its TAP output, once it passed.
fn run_node(node: &Path, fixtures: &Path, crawlee: &Path, daemon: &Daemon) -> String {
    let child = Command::new(node)
        // A test that hangs fails alone, with its name, instead of the whole run timing out.
        .args([
            "--test",
            "--test-concurrency=1",
            "--test-timeout=120000",
            "--test-reporter=tap",
        ])
        .args(test_files())
        .current_dir(package_dir())
        .env("PROXYPOOL_TEST_FIXTURES", fixtures)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .env("CRAWLEE_STORAGE_DIR", crawlee)
        .env_remove("PROXYPOOL_SOCKET")
        .env_remove("PROXYPOOL_CONNECT")
        .env_remove("PROXYPOOL_TOKEN")
        .env_remove("PROXYPOOL_LEASE_TOKEN")
        .env_remove("PROXYPOOL_GATEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node --test");
    let out =
        wait_output(child, Duration::from_secs(600)).expect("node --test timed out after 600 s");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "node --test failed ({}):\n{stdout}\n{}\ndaemon log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log_tail(40)
    );
    stdout
}

/// The tests that need real software really ran, and under CI nothing was skipped.
fn check_results(stdout: &str) {
    let (passed, skipped) = tap_results(stdout);
    for test in [
        "a Cheerio crawl of 50 pages fetches every page and bans only the blocking pair, by session",
        "an HttpCrawler crawl reports its bans by session too",
        "a Playwright crawl in Chromium fetches every page and bans only the blocking pair",
        "concurrent calls on one client never swap answers",
        "random aborts leave no lease behind",
        "a lease aborted while it waits is never granted",
        "a lease that times out, or is aborted in flight, is given back when granted late",
        "the lease role over TCP: leases, reports, and is refused operator ops",
        "the package version is the daemon's",
        "the reasons are the daemon's",
        "the phases are the daemon's",
        "every error code of the daemon has its class",
        "the default ban statuses are the gateway's",
        "a ban seen through the gateway is classified and reported by session",
        "the ESM and CommonJS builds export the same names, with types",
    ] {
        assert!(
            passed.iter().any(|p| p == test),
            "{test:?} did not pass:\n{stdout}"
        );
    }
    if in_ci() {
        assert!(
            skipped.is_empty(),
            "skipped under CI: {skipped:?}\n{stdout}"
        );
    }
    let summary: Vec<&str> = stdout.lines().filter(|l| l.starts_with("# ")).collect();
    eprintln!("{}", summary.join("\n"));
}

/// The site's own log: every page of each crawl was served (200) through an upstream it
/// does not refuse, and the refused upstream got nothing but 403s.
fn check_crawls_at_the_site(origin: &NginxOrigin) {
    let requests = origin.requests();
    for (crawl, pages) in [("cheerio", 50), ("http", 20), ("browser", 12)] {
        for page in 0..pages {
            let uri = format!("/guarded?crawl={crawl}&page={page}");
            let served: Vec<&Value> = requests.iter().filter(|r| r["uri"] == json!(uri)).collect();
            assert!(
                served
                    .iter()
                    .any(|r| r["status"] == json!("200") && r["ip"] != json!(BANNED.to_string())),
                "{uri} was never served: {served:?}"
            );
            for r in &served {
                let refused = r["ip"] == json!(BANNED.to_string());
                assert_eq!(r["status"] == json!("403"), refused, "{r}");
            }
        }
    }
}
