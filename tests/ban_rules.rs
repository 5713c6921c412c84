//! `[[ban]]` rules through the gateway (docs/ban-rules.md): real tinyproxy upstreams, one
//! of which a fake site answers with a challenge (a header, a gzip'd page, a status); the
//! pair is banned with the rule's name, a GET goes through the other upstream, the client
//! gets the bytes as sent; a hostile regex; bad rules refused naming their key; the rule's
//! name in `list --destination`, `show` and the status page of a real daemon.

mod common;

use std::io::Write as _;

use proxypool::ban::{BanEntry, BanRules};
use proxypool::health::{Phase, Reason, State};

use common::daemon::Home;
use common::fakes::{site_banning, Page};
use common::gateway::{get, roundtrip, Gw, Resp};
use common::tools::free_port;
use common::upstreams::tinyproxy_marked;

fn rules(entries: Vec<BanEntry>) -> BanRules {
    BanRules::compile(entries).unwrap()
}

fn rule(name: &str) -> BanEntry {
    BanEntry {
        name: Some(name.into()),
        ..BanEntry::default()
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// `n` bytes of letters that hardly compress (so a gzip'd page is longer than the bytes
/// a body rule holds).
fn noise(n: usize) -> String {
    let mut x: u32 = 0x9e37_79b9;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

fn proxy(port: u16) -> String {
    format!("http://alice:s3cret@127.0.0.1:{port}")
}

/// GET the site's `/` through the gateway on a fresh connection.
async fn fetch(gw: &Gw, site_port: u16) -> Resp {
    roundtrip(gw.addr, &get(site_port, "/", "Connection: close\r\n")).await
}

/// The one pair of `endpoint`, checked to be the rule's ban of the site's host.
fn assert_banned_by(gw: &Gw, endpoint: i64, rule: &str, reason: Reason, phase: Phase) {
    let pairs = gw.pairs(endpoint);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    let p = &pairs[0];
    assert_eq!(
        (
            p.destination.as_str(),
            p.health.state,
            p.health.reason,
            p.health.phase
        ),
        ("127.0.0.1", State::Cooling, Some(reason), Some(phase)),
        "{p:?}"
    );
    let detail = p.health.detail.as_deref().unwrap_or_default();
    assert!(detail.contains(&format!("ban rule {rule}: ")), "{detail}");
    assert_eq!(proxypool::ban::rule_in_detail(detail), Some(rule));
    let series = format!("proxypool_ban_rule_matches_total{{rule=\"{rule}\"}}");
    assert_eq!(gw.metric(&series), 1.0, "{series}");
    assert_eq!(gw.row(endpoint).state, State::Available);
    // The report and the pair's transition both name the rule.
    let named: Vec<String> = gw
        .events()
        .into_iter()
        .filter(|e| e.endpoint == Some(endpoint))
        .filter(|e| e.detail.as_deref().and_then(proxypool::ban::rule_in_detail) == Some(rule))
        .map(|e| e.kind)
        .collect();
    assert!(
        named.iter().any(|k| k == "report") && named.iter().any(|k| k == "state_changed"),
        "{named:?}"
    );
}

#[tokio::test]
async fn a_challenge_header_bans_the_pair_and_the_get_goes_through_the_other_upstream() {
    let (Some(a), Some(b)) = (
        tinyproxy_marked(&[], "a").await,
        tinyproxy_marked(&[], "b").await,
    ) else {
        return;
    };
    let challenge = Page::new(
        403,
        &[("cf-mitigated", "challenge"), ("content-type", "text/html")],
        b"<title>Just a moment...</title>",
    );
    let site = site_banning("a", challenge, Page::new(200, &[], b"welcome")).await;
    let bans = rules(vec![BanEntry {
        builtin: Some("cloudflare".into()),
        ..BanEntry::default()
    }]);
    // No status ban: the rule alone sees the challenge.
    let gw = Gw::start_bans(
        &[proxy(a.port), proxy(b.port)],
        |c| c.ban_status = vec![],
        bans,
    )
    .await;
    for i in 0..6 {
        let r = fetch(&gw, site.port()).await;
        assert_eq!(
            (r.status(), r.text().as_str()),
            (200, "welcome"),
            "{i}: {r:?}"
        );
        assert_eq!(r.endpoint(), Some(gw.ids[1]), "{i}");
    }
    gw.until_no_leases().await;
    assert_banned_by(
        &gw,
        gw.ids[0],
        "cloudflare-challenge",
        Reason::BodyMismatch,
        Phase::ResponseHead,
    );
    assert!(gw.pairs(gw.ids[1]).is_empty());
    // Upstream a saw the site once: banned after its first challenge.
    let seen_a = site
        .seen()
        .iter()
        .filter(|h| h.to_ascii_lowercase().contains("x-upstream: a"))
        .count();
    assert_eq!(seen_a, 1);
}

#[tokio::test]
async fn a_body_rule_reads_a_gzipped_challenge_and_passes_pages_on_as_sent() {
    let (Some(a), Some(b)) = (
        tinyproxy_marked(&[], "a").await,
        tinyproxy_marked(&[], "b").await,
    ) else {
        return;
    };
    // Both pages are longer than the bytes a body rule holds, gzip'd.
    let challenge = format!(
        "<html><head><title>Just a moment...</title></head><body>{}</body></html>",
        noise(200_000)
    );
    let welcome = format!("<html><title>Shop</title>{}</html>", noise(150_000));
    let (challenge_gz, welcome_gz) = (gzip(challenge.as_bytes()), gzip(welcome.as_bytes()));
    assert!(welcome_gz.len() > 64 * 1024);
    let gz = [("content-encoding", "gzip"), ("content-type", "text/html")];
    let site = site_banning(
        "a",
        Page::new(200, &gz, &challenge_gz),
        Page::new(200, &gz, &welcome_gz),
    )
    .await;
    let bans = || {
        rules(vec![BanEntry {
            body: Some("(?i)<title>just a moment".into()),
            host: vec!["127.0.0.1".into()],
            ..rule("challenge-title")
        }])
    };
    let gw = Gw::start_bans(&[proxy(a.port), proxy(b.port)], |_| {}, bans()).await;
    for i in 0..4 {
        let r = fetch(&gw, site.port()).await;
        assert_eq!(r.status(), 200, "{i}");
        assert_eq!(r.endpoint(), Some(gw.ids[1]), "{i}");
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        assert!(r.body == welcome_gz, "{i}: the encoded bytes, unchanged");
    }
    gw.until_no_leases().await;
    assert_banned_by(
        &gw,
        gw.ids[0],
        "challenge-title",
        Reason::BodyMismatch,
        Phase::ResponseBody,
    );

    // With no other upstream the client gets the last answer: the challenge, as sent.
    let alone = Gw::start_bans(&[proxy(a.port)], |_| {}, bans()).await;
    let r = fetch(&alone, site.port()).await;
    assert_eq!(r.endpoint(), Some(alone.ids[0]));
    assert!(r.body == challenge_gz, "the held bytes, then the rest");
    alone.until_no_leases().await;
    assert_banned_by(
        &alone,
        alone.ids[0],
        "challenge-title",
        Reason::BodyMismatch,
        Phase::ResponseBody,
    );
}

#[tokio::test]
async fn a_status_rule_is_a_destination_status_ban_with_its_name() {
    let (Some(a), Some(b)) = (
        tinyproxy_marked(&[], "a").await,
        tinyproxy_marked(&[], "b").await,
    ) else {
        return;
    };
    let site = site_banning(
        "a",
        Page::new(429, &[("retry-after", "120")], b"slow down"),
        Page::new(200, &[], b"welcome"),
    )
    .await;
    let bans = rules(vec![BanEntry {
        status: Some(vec![429]),
        host: vec!["*.example".into(), "127.0.0.1".into()],
        ..rule("busy")
    }]);
    let gw = Gw::start_bans(
        &[proxy(a.port), proxy(b.port)],
        |c| c.ban_status = vec![],
        bans,
    )
    .await;
    for i in 0..4 {
        let r = fetch(&gw, site.port()).await;
        assert_eq!((r.status(), r.text().as_str()), (200, "welcome"), "{i}");
    }
    gw.until_no_leases().await;
    assert_banned_by(
        &gw,
        gw.ids[0],
        "busy",
        Reason::DestinationStatus,
        Phase::ResponseHead,
    );
    assert_eq!(gw.pairs(gw.ids[0])[0].status, Some(429));
}

#[tokio::test]
async fn a_regex_that_backtracks_elsewhere_answers() {
    let Some(a) = tinyproxy_marked(&[], "a").await else {
        return;
    };
    // `(a+)+$` against a megabyte of `a` ending in `b`: exponential for a backtracking
    // engine, one pass here.
    let mut body = vec![b'a'; proxypool::ban::MAX_BODY_BYTES - 1];
    body.push(b'b');
    let page = Page::new(200, &[], &body);
    let site = site_banning("nobody", page.clone(), page).await;
    let bans = rules(vec![BanEntry {
        body: Some("(a+)+$".into()),
        body_bytes: Some(proxypool::ban::MAX_BODY_BYTES),
        ..rule("evil")
    }]);
    let gw = Gw::start_bans(&[proxy(a.port)], |_| {}, bans).await;
    let r = fetch(&gw, site.port()).await;
    assert_eq!(r.status(), 200);
    assert!(r.body == body);
    gw.until_no_leases().await;
    assert!(gw.pairs(gw.ids[0]).is_empty());
}

#[test]
fn bad_rules_are_refused_naming_the_rule_and_the_key() {
    let gateway = "[[gateway]]\nlisten = \"127.0.0.1:0\"\n";
    let cases = [
        (
            "[[ban]]\nname = \"ok\"\nstatus = [403]\n[[ban]]\nname = \"cap\"\nbody = \"(\"\n",
            "ban[1].body",
            "rule \"cap\"",
        ),
        (
            "[[ban]]\nname = \"big\"\nbody = \"\\\\w{1000}{1000}\"\n",
            "ban[0].body",
            "size limit",
        ),
        (
            "[[ban]]\nname = \"h\"\nheader = \"no colon here\"\n",
            "ban[0].header",
            "Name: regex",
        ),
        ("[[ban]]\nstatus = [403]\n", "ban[0].name", "needs a name"),
        (
            "[[ban]]\nname = \"a\"\nstatus = [403]\n[[ban]]\nname = \"a\"\nstatus = [429]\n",
            "ban[1].name",
            "names are unique",
        ),
        (
            "[[ban]]\nname = \"none\"\n",
            "ban[0]",
            "at least one condition",
        ),
        (
            "[[ban]]\nname = \"x\"\nstatus = [403]\nhost = 7\n",
            "ban[0].host",
            "a host or an array of hosts",
        ),
        (
            "[[ban]]\nname = \"x\"\nstatus = [403]\nwhatever = 1\n",
            "whatever",
            "unknown field",
        ),
    ];
    let good = Home::new(Some(&format!(
        "{gateway}[[ban]]\nbuiltin = \"cloudflare\"\n[[ban]]\nname = \"x\"\nstatus = [403]\n"
    )));
    let summary = good.ok(&["config", "check"]);
    assert!(summary.contains(", 1 gateway, 2 ban rules, "), "{summary}");
    for (bans, key, message) in cases {
        let home = Home::new(Some(&format!("{gateway}{bans}")));
        for args in [&["config", "check"][..], &["serve"][..]] {
            let (_, err) = home.fails(2, args);
            assert!(
                err.contains(key) && err.contains(message),
                "{args:?} {bans}: {err}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_shows_the_rule_in_list_show_and_the_status_page() {
    let (Some(a), Some(b)) = (
        tinyproxy_marked(&[], "a").await,
        tinyproxy_marked(&[], "b").await,
    ) else {
        return;
    };
    let site = site_banning(
        "a",
        Page::new(403, &[("cf-mitigated", "challenge")], b"challenge"),
        Page::new(200, &[], b"welcome"),
    )
    .await;
    let (gw_port, http_port) = (free_port(), free_port());
    let config = format!(
        "[server]\nhttp = \"127.0.0.1:{http_port}\"\n\
         [[endpoint]]\nurl = \"{}\"\n[[endpoint]]\nurl = \"{}\"\n\
         [[gateway]]\nlisten = \"127.0.0.1:{gw_port}\"\nban_status = []\n\
         [[ban]]\nbuiltin = \"cloudflare\"\n",
        proxy(a.port),
        proxy(b.port)
    );
    let site_port = site.port();
    tokio::task::spawn_blocking(move || {
        let home = Home::new(Some(&config));
        let _daemon = home.serve();
        let gw: std::net::SocketAddr = format!("127.0.0.1:{gw_port}").parse().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for i in 0..4 {
            let r = rt.block_on(roundtrip(gw, &get(site_port, "/", "Connection: close\r\n")));
            assert_eq!((r.status(), r.text().as_str()), (200, "welcome"), "{i}");
        }
        let banned = common::eventually(
            std::time::Duration::from_secs(10),
            "the pair stored",
            || {
                let out = home.ok(&["list", "--destination", "127.0.0.1"]);
                match out.contains("cloudflare-challenge") {
                    true => Ok(out),
                    false => Err(out),
                }
            },
        );
        assert!(banned.contains("RULE"), "{banned}");
        let line = banned
            .lines()
            .find(|l| l.contains("cloudflare-challenge"))
            .unwrap();
        assert!(
            line.contains("body_mismatch") && line.contains("403"),
            "{line}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&home.ok(&["list", "--destination", "127.0.0.1", "--json"]))
                .unwrap();
        let banned: Vec<&serde_json::Value> = json
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["pair"]["rule"] == "cloudflare-challenge")
            .collect();
        assert_eq!(banned.len(), 1, "{json}");
        let id = banned[0]["id"].to_string();
        let show = home.ok(&["show", &id]);
        assert!(show.contains("rule=cloudflare-challenge"), "{show}");
        let http: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
        let page = rt.block_on(roundtrip(
            http,
            b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        ));
        let page = page.text();
        assert!(
            page.contains("127.0.0.1 (rule cloudflare-challenge)"),
            "{page}"
        );
        let metrics = rt.block_on(roundtrip(
            http,
            b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        ));
        assert!(
            metrics
                .text()
                .contains("proxypool_ban_rule_matches_total{rule=\"cloudflare-challenge\"} 1"),
            "{}",
            metrics.text()
        );
    })
    .await
    .unwrap();
}
