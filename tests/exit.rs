//! Exit identity (docs/exit.md) with real parts: tinyproxy upstreams each leaving from a
//! loopback address of their own, a daemon learning those addresses through them from a
//! site that answers the caller's address, and what it shows; bad answers (garbage, a
//! huge body, an address that changes at every check) leave the address unknown or
//! follow it, and never cool an endpoint.

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::{json, Value};

use common::daemon::{Daemon, Home};
use common::eventually;
use common::exit_site::ExitSite;
use common::tools::ToolDaemon;
use common::upstreams::tinyproxy_bound;

const WAIT: Duration = Duration::from_secs(20);

/// Three upstreams: two leave from 127.0.1.2 (one address, two entries), one from
/// 127.0.1.3.
async fn upstreams() -> Option<Vec<(ToolDaemon, Ipv4Addr)>> {
    let mut out = Vec::new();
    for ip in [[127, 0, 1, 2], [127, 0, 1, 2], [127, 0, 1, 3]] {
        let ip = Ipv4Addr::from(ip);
        out.push((tinyproxy_bound(ip, &[]).await?, ip));
    }
    Some(out)
}

fn endpoint(port: u16) -> String {
    format!("http://alice:s3cret@127.0.0.1:{port}")
}

/// A pool `default` learning exits from `exit` (TOML lines of `[pool.exit]`).
fn config(ports: &[u16], exit: &str) -> String {
    let mut c = format!("[[pool]]\nname = \"default\"\n[pool.exit]\n{exit}\n");
    for p in ports {
        c.push_str(&format!("[[endpoint]]\nurl = \"{}\"\n", endpoint(*p)));
    }
    c
}

fn exits_of(h: &Home) -> Vec<Value> {
    h.list().iter().map(|e| e["exit_ip"].clone()).collect()
}

fn exit_events(h: &Home) -> Vec<Value> {
    h.events()
        .into_iter()
        .filter(|e| e["kind"] == "exit_changed")
        .collect()
}

fn serve(h: &Home) -> Daemon {
    h.serve()
}

#[tokio::test]
async fn each_endpoint_learns_the_address_it_leaves_from() {
    let Some(ups) = upstreams().await else { return };
    let site = ExitSite::start();
    let ports: Vec<u16> = ups.iter().map(|(u, _)| u.port).collect();
    let h = Home::new(Some(&config(
        &ports,
        &format!("url = \"{}\"\nevery = \"1h\"", site.url("/ip")),
    )));
    let d = serve(&h);
    let want: Vec<Value> = ups.iter().map(|(_, ip)| json!(ip.to_string())).collect();
    eventually(WAIT, "every exit learned", || {
        let got = exits_of(&h);
        (got == want).then_some(()).ok_or(format!("{got:?}"))
    });
    // Learned through each endpoint: the site saw each address.
    let callers = site.callers("/ip");
    for (_, ip) in &ups {
        assert!(callers.contains(&(*ip).into()), "{callers:?}");
    }
    // Shown everywhere: list --json (with when), list, show, events, status.
    for e in h.list() {
        assert!(e["exit_seen_at"].is_string(), "{e}");
    }
    let table = h.ok(&["list"]);
    assert!(
        table.contains("EXIT") && table.contains("127.0.1.3"),
        "{table}"
    );
    let show = h.ok(&["show", "1"]);
    assert!(show.contains("exit_ip: 127.0.1.2"), "{show}");
    let evs = exit_events(&h);
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert!(evs.iter().all(|e| e["detail"]
        .as_str()
        .is_some_and(|d| d.starts_with("unknown -> 127.0.1."))));
    let x = &d.status()["exit"];
    assert_eq!(
        (x["addresses"].clone(), x["known"].clone()),
        (json!(2), json!(3)),
        "{x}"
    );
    assert_eq!(
        (x["shared_endpoints"].clone(), x["shared_addresses"].clone()),
        (json!(2), json!(1)),
        "two entries leave through one address: {x}"
    );
    let status = h.ok(&["status"]);
    assert!(
        status.contains("2 endpoint(s) share 1 address(es)"),
        "{status}"
    );
    // Nothing cooled, nothing changed state.
    assert!(h.list().iter().all(|e| e["state"] == "available"));
}

#[tokio::test]
async fn json_answers_and_a_provider_header_are_read() {
    let Some(ups) = upstreams().await else { return };
    let site = ExitSite::start();
    let ports = [ups[2].0.port];
    for exit in [
        format!("url = \"{}\"", site.url("/ip.json")),
        format!("url = \"{}\"\nheader = \"X-Exit-Ip\"", site.url("/header")),
    ] {
        let h = Home::new(Some(&config(&ports, &exit)));
        let _d = serve(&h);
        eventually(WAIT, "the exit learned", || {
            let got = exits_of(&h);
            (got == vec![json!("127.0.1.3")])
                .then_some(())
                .ok_or(format!("{exit}: {got:?}"))
        });
    }
}

/// An endpoint whose exit check fails (no address in the answer, an answer too long, a
/// page that answers 404) stays available, its address unknown, and leases go on.
#[tokio::test]
async fn a_failed_exit_check_cools_nothing_and_leaves_the_address_unknown() {
    let Some(ups) = upstreams().await else { return };
    let site = ExitSite::start();
    let ports = [ups[0].0.port];
    for path in ["/garbage", "/huge", "/nowhere"] {
        let url = site.url(path);
        let h = Home::new(Some(&config(
            &ports,
            &format!("url = \"{url}\"\nevery = \"1s\""),
        )));
        let d = serve(&h);
        // Checked at least twice, through the proxy.
        eventually(WAIT, "two checks", || {
            let n = site.callers(path).len();
            (n >= 2).then_some(()).ok_or(format!("{n} checks"))
        });
        let e = h.listed(1);
        assert_eq!(
            (e["state"].clone(), e["exit_ip"].clone()),
            (json!("available"), Value::Null),
            "{url}: {e}"
        );
        assert!(exit_events(&h).is_empty(), "{url}");
        assert!(
            !h.events().iter().any(|e| e["kind"] == "state_changed"),
            "{url}: an exit check changed a state"
        );
        let r = d.req(json!({"op": "lease", "pool": "default"}));
        assert_eq!(r["ok"], json!(true), "{url}: {r}");
    }
}

/// A page answering another address at every check: each change is an `exit_changed`,
/// the endpoint follows the newest, and old addresses are not kept.
#[tokio::test]
async fn an_address_that_changes_at_every_check_is_followed() {
    let Some(ups) = upstreams().await else { return };
    let site = ExitSite::start();
    let ports = [ups[0].0.port, ups[2].0.port];
    let h = Home::new(Some(&config(
        &ports,
        &format!("url = \"{}\"\nevery = \"1s\"", site.url("/rotating")),
    )));
    let d = serve(&h);
    eventually(WAIT, "six changes", || {
        let n = exit_events(&h).len();
        (n >= 6).then_some(()).ok_or(format!("{n} changes"))
    });
    let x = d.status()["exit"].clone();
    assert_eq!(x["known"], json!(2), "{x}");
    assert_eq!(x["addresses"], json!(2), "old addresses are let go: {x}");
    let evs = exit_events(&h);
    let later: Vec<&str> = evs.iter().filter_map(|e| e["detail"].as_str()).collect();
    assert!(
        later
            .iter()
            .skip(2)
            .all(|d| d.starts_with("10.9.") && d.contains(" -> 10.9.")),
        "{later:?}"
    );
    assert!(h.list().iter().all(|e| e["state"] == "available"));
}

/// An endpoint back from a cooldown (here: disabled, then enabled) is checked again at
/// once, not `every` later: it may leave from another address now.
#[tokio::test]
async fn an_endpoint_back_from_a_cooldown_is_checked_again() {
    let Some(ups) = upstreams().await else { return };
    let site = ExitSite::start();
    let h = Home::new(Some(&config(
        &[ups[0].0.port],
        &format!("url = \"{}\"\nevery = \"1h\"", site.url("/rotating")),
    )));
    let _d = serve(&h);
    eventually(WAIT, "the first address", || {
        let got = exits_of(&h);
        (got == vec![json!("10.9.0.1")])
            .then_some(())
            .ok_or(format!("{got:?}"))
    });
    h.ok(&["disable", "1"]);
    h.ok(&["enable", "--now", "1"]);
    eventually(WAIT, "the address learned again", || {
        let got = exits_of(&h);
        (got == vec![json!("10.9.0.2")])
            .then_some(())
            .ok_or(format!("{got:?}"))
    });
    assert_eq!(site.callers("/rotating").len(), 2);
}

#[test]
fn a_bad_exit_section_is_refused_naming_its_key() {
    let cases = [
        ("every = \"1h\"", "pool.default.exit.url"),
        ("url = \"ftp://x/\"", "pool.default.exit.url"),
        (
            "url = \"http://x/\"\nevery = \"10ms\"",
            "pool.default.exit.every",
        ),
        (
            "url = \"http://x/\"\nheader = \"a b\"",
            "pool.default.exit.header",
        ),
        (
            "url = \"http://x/\"\nsubnet_v4 = 33",
            "pool.default.exit.subnet_v4",
        ),
        (
            "url = \"http://x/\"\nsubnet_v6 = 0",
            "pool.default.exit.subnet_v6",
        ),
        (
            "url = \"http://x/\"\nsubnet_after = 0",
            "pool.default.exit.subnet_after",
        ),
        (
            "url = \"http://x/\"\nsubnet_window = \"0s\"",
            "pool.default.exit.subnet_window",
        ),
        ("url = \"http://x/\"\nbogus = 1", "bogus"),
    ];
    for (exit, key) in cases {
        let h = Home::new(Some(&config(&[], exit)));
        let cfg = h.config.clone().unwrap();
        let (_, err) = h.fails(2, &["config", "check", "--config", cfg.to_str().unwrap()]);
        assert!(err.contains(key), "{exit}: {err}");
    }
    let h = Home::new(Some(&config(&[], "url = \"http://x/ip\"")));
    let cfg = h.config.clone().unwrap();
    h.ok(&["config", "check", "--config", cfg.to_str().unwrap()]);
}

/// PostgreSQL stores `exit_ip` and `exit_seen_at` like SQLite; a daemon starting on the
/// same database takes the addresses learned as they are and asks nothing before
/// `every` has passed.
#[tokio::test]
async fn postgres_keeps_the_exit_and_another_daemon_loads_it() {
    let Some(pg) = common::postgres::shared() else {
        return;
    };
    let Some(ups) = upstreams().await else { return };
    let site = ExitSite::start();
    let ports: Vec<u16> = ups.iter().map(|(u, _)| u.port).collect();
    let text = config(
        &ports,
        &format!("url = \"{}\"\nevery = \"1h\"", site.url("/ip")),
    );
    let mut h = Home::new(Some(&text));
    h.db = std::path::PathBuf::from(pg.database());
    let d = serve(&h);
    let want: Vec<Value> = ups.iter().map(|(_, ip)| json!(ip.to_string())).collect();
    eventually(WAIT, "every exit stored", || {
        let got = exits_of(&h);
        (got == want).then_some(()).ok_or(format!("{got:?}"))
    });
    assert!(h.list().iter().all(|e| e["exit_seen_at"].is_string()));
    assert_eq!(exit_events(&h).len(), 3);
    drop(d);
    let asked = site.callers("/ip").len();
    let d = serve(&h);
    let x = d.status()["exit"].clone();
    assert_eq!(
        (x["known"].clone(), x["shared_endpoints"].clone()),
        (json!(3), json!(2)),
        "{x}"
    );
    assert_eq!(
        site.callers("/ip").len(),
        asked,
        "asked again before `every`"
    );
}

/// One plain-HTTP GET through the gateway at `gw`; the status it answered.
fn get_through(gw: std::net::SocketAddr, url: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(gw).unwrap();
    let host = url.trim_start_matches("http://").split('/').next().unwrap();
    write!(
        s,
        "GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    got.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A site that bans 127.0.1.2: the first endpoint leaving from it is banned there, and the
/// second one, which leaves from the same address, is never sent there at all; the
/// gateway serves every request through 127.0.1.3.
#[tokio::test]
async fn the_second_endpoint_of_a_banned_address_is_never_used_for_that_host() {
    let Some(ups) = upstreams().await else { return };
    let site = ExitSite::start();
    site.ban("127.0.1.2".parse().unwrap());
    let ports: Vec<u16> = ups.iter().map(|(u, _)| u.port).collect();
    let gw_port = common::tools::free_port();
    let mut text = config(
        &ports,
        &format!("url = \"{}\"\nevery = \"1h\"", site.url("/ip")),
    );
    text.push_str(&format!(
        "[[gateway]]\nlisten = \"127.0.0.1:{gw_port}\"\npool = \"default\"\nretry_status = [403]\n"
    ));
    let h = Home::new(Some(&text));
    let d = serve(&h);
    eventually(WAIT, "every exit learned", || {
        let x = d.status()["exit"]["known"].clone();
        (x == json!(3)).then_some(()).ok_or(format!("{x}"))
    });
    let gw: std::net::SocketAddr = format!("127.0.0.1:{gw_port}").parse().unwrap();
    for i in 0..12 {
        assert_eq!(get_through(gw, &site.url("/guarded")), 200, "request {i}");
    }
    let banned: std::net::IpAddr = "127.0.1.2".parse().unwrap();
    let from_banned = site
        .callers("/guarded")
        .into_iter()
        .filter(|ip| *ip == banned)
        .count();
    assert_eq!(
        from_banned, 1,
        "the address's second endpoint was sent there"
    );
    // The other host is still served by both endpoints of that address.
    let pairs = h.ok(&["list", "--destination", "127.0.0.1"]);
    assert_eq!(pairs.matches("cooling").count(), 1, "{pairs}");
    let x = d.status()["exit"].clone();
    assert_eq!(x["address_bans"], json!(1), "{x}");
}

async fn upstreams_at(ips: &[[u8; 4]]) -> Option<Vec<(ToolDaemon, Ipv4Addr)>> {
    let mut out = Vec::new();
    for ip in ips {
        let ip = Ipv4Addr::from(*ip);
        out.push((tinyproxy_bound(ip, &[]).await?, ip));
    }
    Some(out)
}

/// A daemon over `ups` with a gateway re-sending 403s, learning exits from `site`,
/// suspecting a /24 after two of its addresses are banned.
fn gateway_home(
    ups: &[(ToolDaemon, Ipv4Addr)],
    site: &ExitSite,
) -> (Home, std::net::SocketAddr, u16) {
    let ports: Vec<u16> = ups.iter().map(|(u, _)| u.port).collect();
    let (gw_port, http_port) = (common::tools::free_port(), common::tools::free_port());
    let exit = format!(
        "url = \"{}\"\nevery = \"1h\"\nsubnet_after = 2",
        site.url("/ip")
    );
    let mut text = format!("[server]\nhttp = \"127.0.0.1:{http_port}\"\n\n");
    text.push_str(&config(&ports, &exit));
    text.push_str(&format!(
        "[[gateway]]\nlisten = \"127.0.0.1:{gw_port}\"\npool = \"default\"\nretry_status = [403]\n"
    ));
    let gw = format!("127.0.0.1:{gw_port}").parse().unwrap();
    (Home::new(Some(&text)), gw, http_port)
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    got
}

/// A site banning the whole of 127.0.1.0/24: once two of its addresses are banned, the
/// subnet is suspect for the site, and its third address is never sent there while an
/// endpoint of another subnet is left.
#[tokio::test]
async fn the_third_address_of_a_banned_subnet_is_avoided_while_others_exist() {
    let ips = [
        [127, 0, 1, 2],
        [127, 0, 1, 3],
        [127, 0, 2, 2],
        [127, 0, 1, 4],
    ];
    let Some(ups) = upstreams_at(&ips).await else {
        return;
    };
    let site = ExitSite::start();
    site.ban_subnet(Ipv4Addr::new(127, 0, 1, 9));
    let (h, gw, http) = gateway_home(&ups, &site);
    let d = serve(&h);
    eventually(WAIT, "every exit learned", || {
        let x = d.status()["exit"]["known"].clone();
        (x == json!(4)).then_some(()).ok_or(format!("{x}"))
    });
    for i in 0..12 {
        assert_eq!(get_through(gw, &site.url("/guarded")), 200, "request {i}");
    }
    let callers = site.callers("/guarded");
    let third: std::net::IpAddr = "127.0.1.4".parse().unwrap();
    assert!(
        !callers.contains(&third),
        "the suspect subnet's third address: {callers:?}"
    );
    let x = d.status()["exit"].clone();
    assert_eq!(
        x["suspect_subnets"],
        json!([{"subnet": "127.0.1.0/24", "host": "127.0.0.1", "addresses": 2}]),
        "{x}"
    );
    let ev: Vec<Value> = h
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "subnet_suspect")
        .collect();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["destination"], "127.0.0.1");
    let metrics = http_get(http, "/metrics");
    assert!(
        metrics.contains("proxypool_suspect_subnets{pool=\"default\"} 1"),
        "{metrics}"
    );
    let status = h.ok(&["status"]);
    assert!(
        status.contains("subnet 127.0.1.0/24 suspect for 127.0.0.1"),
        "{status}"
    );
    let page = http_get(http, "/");
    assert!(
        page.contains("Subnet 127.0.1.0/24 suspect for 127.0.0.1"),
        "{page}"
    );
}

/// Only the suspect subnet left: its endpoints are leased after all, never refused.
#[tokio::test]
async fn a_suspect_subnet_alone_is_still_used() {
    let ips = [[127, 0, 1, 2], [127, 0, 1, 3], [127, 0, 1, 4]];
    let Some(ups) = upstreams_at(&ips).await else {
        return;
    };
    let site = ExitSite::start();
    site.ban("127.0.1.2".parse().unwrap());
    site.ban("127.0.1.3".parse().unwrap());
    let (h, gw, _) = gateway_home(&ups, &site);
    let d = serve(&h);
    eventually(WAIT, "every exit learned", || {
        let x = d.status()["exit"]["known"].clone();
        (x == json!(3)).then_some(()).ok_or(format!("{x}"))
    });
    for i in 0..6 {
        assert_eq!(get_through(gw, &site.url("/guarded")), 200, "request {i}");
    }
    let x = d.status()["exit"].clone();
    assert_eq!(x["suspect_subnets"][0]["subnet"], "127.0.1.0/24", "{x}");
    let third: std::net::IpAddr = "127.0.1.4".parse().unwrap();
    assert!(site.callers("/guarded").contains(&third));
}

/// A provider that names the exit address in its answer to CONNECT: the gateway's tunnels
/// teach the pool the address (over what the check learned), without a check, and an
/// answer that names the known address again writes nothing.
// Two workers: the fake proxy runs while the test waits (blocking) for the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_header_on_the_connect_answer_is_learned_from_gateway_tunnels() {
    use common::fakes::{http_proxy, HttpProxyCfg};
    let up = http_proxy(HttpProxyCfg {
        connect_headers: vec!["X-Exit-Ip: 203.0.113.7".into()],
        ..HttpProxyCfg::default()
    })
    .await;
    let site = ExitSite::start();
    let gw_port = common::tools::free_port();
    let mut text = config(
        &[up.port()],
        &format!(
            "url = \"{}\"\nheader = \"X-Exit-Ip\"\nevery = \"1h\"",
            site.url("/header")
        ),
    );
    text.push_str(&format!(
        "[[gateway]]\nlisten = \"127.0.0.1:{gw_port}\"\npool = \"default\"\n"
    ));
    let h = Home::new(Some(&text));
    let _d = serve(&h);
    // The check goes by plain HTTP: the site's header names the caller, 127.0.0.1.
    eventually(WAIT, "the check's address", || {
        let got = exits_of(&h);
        (got == vec![json!("127.0.0.1")])
            .then_some(())
            .ok_or(format!("{got:?}"))
    });
    let authority = format!("127.0.0.1:{}", site.addr.port());
    for _ in 0..3 {
        let head = connect_via(gw_port, &authority);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    eventually(WAIT, "the tunnel's address", || {
        let got = exits_of(&h);
        (got == vec![json!("203.0.113.7")])
            .then_some(())
            .ok_or(format!("{got:?}"))
    });
    // More tunnels naming the address known: no event, no write (its time stays).
    let seen = h.list()[0]["exit_seen_at"].clone();
    for _ in 0..3 {
        let head = connect_via(gw_port, &authority);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let details: Vec<Value> = exit_events(&h)
        .iter()
        .map(|e| e["detail"].clone())
        .collect();
    assert_eq!(
        details,
        vec![
            json!("unknown -> 127.0.0.1"),
            json!("127.0.0.1 -> 203.0.113.7")
        ]
    );
    assert_eq!(
        h.list()[0]["exit_seen_at"],
        seen,
        "a sighting of the known address wrote"
    );
    assert!(h.list().iter().all(|e| e["state"] == "available"));
}

/// A CONNECT to `authority` through the gateway on `port`; the head it answered.
fn connect_via(port: u16, authority: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).unwrap() == 1 {
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}
