//! Regression tests from the second adversarial run (issue 20) at the gateway, with real
//! upstreams from Debian (tinyproxy, microsocks, dante) and small hostile fakes (a tarpit,
//! a silent upstream): destinations checked once on every front, `Host` rebuilt,
//! `X-Proxypool-*` never crossing, conflicting framing answered, half-open tunnels and
//! slow heads closed, a response deadline, session keys bounded, a descriptor budget.

mod common;

use std::time::Duration;

use common::fakes::{
    dest, http_proxy, scripted, silent_upstream, tarpit, Act, DestCfg, HttpProxyCfg,
};
use common::gateway::{proxy_auth, read_response, roundtrip, socks5_connect, Gw, Resp};
use common::upstreams::{dante, microsocks, tinyproxy};
use common::wait::eventually_async;
use proxypool::gateway::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Read until the peer closes (or `within` passes): true when it closed.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

fn no_control(s: &str) -> bool {
    !s.chars().any(|c| c.is_control())
}

#[tokio::test]
async fn a_socks5_name_that_is_not_a_host_is_refused_before_any_lease() {
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let site = dest(DestCfg::default()).await;
    let gw = Gw::start(&[common::gateway::url("http", proxy.port())], |_| {}).await;
    for name in [
        "127.0.0.1\r\nx-injected:1\r\nx-b",
        "site.example\0",
        "\x1b[31mred.example",
        "a b.example",
        "127.0.0.1:8080",
        "under_score..example",
    ] {
        let (_s, code) = socks5_connect(gw.addr, None, name, site.port()).await;
        assert_eq!(code, 0x01, "{name:?}");
    }
    // Port 0 is no port.
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", 0).await;
    assert_eq!(code, 0x01);
    assert!(
        proxy.seen().is_empty(),
        "reached the upstream: {:?}",
        proxy.seen()
    );
    // A real name still goes through, and the upstream's CONNECT is clean.
    let (_s, code) = socks5_connect(gw.addr, None, "localhost", site.port()).await;
    assert_eq!(code, 0x00);
    let seen = proxy.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with(&format!("CONNECT localhost:{} HTTP/1.1\r\n", site.port())),
        "{seen:?}"
    );
    assert!(gw
        .events()
        .iter()
        .all(|e| e.detail.as_deref().is_none_or(no_control)
            && e.destination.as_deref().is_none_or(no_control)));
}

#[tokio::test]
async fn bad_connect_and_url_targets_get_400_and_nothing_is_leased() {
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[common::gateway::url("http", proxy.port())], |_| {}).await;
    for target in [
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:99999",
        "example.com:https",
    ] {
        let r = roundtrip(
            gw.addr,
            format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(r.status(), 400, "CONNECT {target}: {}", r.head);
        assert_eq!(
            r.header("x-proxypool-error"),
            Some("bad_request"),
            "{target}"
        );
    }
    for url in ["http://127.0.0.1:99999/", "http://127.0.0.1:0/x"] {
        let r = roundtrip(
            gw.addr,
            format!("GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        assert_eq!(r.status(), 400, "GET {url}: {}", r.head);
    }
    assert!(proxy.seen().is_empty(), "{:?}", proxy.seen());
    assert_eq!(gw.leases(), 0);
}

/// What a destination behind real tinyproxy saw of one absolute-form request.
async fn seen_through_tinyproxy(mode: &str, request: impl Fn(u16) -> String) -> (Resp, String) {
    let site = dest(DestCfg {
        headers: vec![
            ("X-Proxypool-Error".into(), "destination_down".into()),
            ("X-Proxypool-Endpoint".into(), "999".into()),
            ("X-Proxypool-Anything".into(), "1".into()),
        ],
        ..Default::default()
    })
    .await;
    let tp = tinyproxy(&[site.port()])
        .await
        .expect("checked by the caller");
    let plain = match mode {
        "tunnel" => proxypool::config::PlainHttp::Tunnel,
        _ => proxypool::config::PlainHttp::Forward,
    };
    let gw = Gw::start(
        &[format!("http://alice:s3cret@127.0.0.1:{}", tp.port)],
        |c| c.plain_http = plain,
    )
    .await;
    let r = roundtrip(gw.addr, request(site.port()).as_bytes()).await;
    let seen = site.seen();
    assert_eq!(seen.len(), 1, "{mode}: {seen:?} / {}", r.head);
    (r, seen[0].clone())
}

#[tokio::test]
async fn host_is_rebuilt_from_the_url_and_proxypool_headers_never_cross() {
    if common::tools::need("tinyproxy", common::upstreams::INSTALL).is_none() {
        return;
    }
    for mode in ["tunnel", "forward"] {
        let (r, head) = seen_through_tinyproxy(mode, |port| {
            format!(
                "GET http://127.0.0.1:{port}/page HTTP/1.1\r\nHost: evil.example\r\n\
                 X-Proxypool-Endpoint: 1\r\nX-Proxypool-Error: pool_empty\r\n\
                 x-proxypool-session: s\r\nConnection: close\r\n\r\n"
            )
        })
        .await;
        let port = head
            .lines()
            .find_map(|l| l.strip_prefix("GET ").map(|_| ()))
            .map(|_| ());
        assert!(port.is_some(), "{mode}: {head}");
        let host = common::fakes::header(&head, "host").unwrap_or("");
        assert!(
            host.starts_with("127.0.0.1:"),
            "{mode}: Host {host:?} in\n{head}"
        );
        assert!(
            !head.to_ascii_lowercase().contains("x-proxypool"),
            "{mode}: a client's X-Proxypool-* reached the destination:\n{head}"
        );
        // The destination's X-Proxypool-* are dropped; the gateway's own come after.
        assert_eq!(r.status(), 200, "{mode}: {}", r.head);
        assert!(
            r.header("x-proxypool-error").is_none(),
            "{mode}: {}",
            r.head
        );
        assert!(
            r.header("x-proxypool-anything").is_none(),
            "{mode}: {}",
            r.head
        );
        assert_ne!(
            r.header("x-proxypool-endpoint"),
            Some("999"),
            "{mode}: {}",
            r.head
        );
        assert_eq!(
            r.head.matches("x-proxypool-endpoint").count()
                + r.head.matches("X-Proxypool-Endpoint").count(),
            1,
            "{mode}: {}",
            r.head
        );
    }
    // Userinfo in the URL never becomes the Host.
    let (_, head) = seen_through_tinyproxy("tunnel", |port| {
        format!("GET http://user:pw@127.0.0.1:{port}/ HTTP/1.1\r\nConnection: close\r\n\r\n")
    })
    .await;
    let host = common::fakes::header(&head, "host").unwrap_or("");
    assert!(
        host.starts_with("127.0.0.1:") && !head.contains("pw"),
        "{head}"
    );
}

#[tokio::test]
async fn conflicting_framing_from_an_upstream_is_a_502_with_a_reason_and_reported() {
    let bad = scripted(vec![
        Act::Read,
        Act::Write(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
        ),
        Act::Hang,
    ])
    .await;
    let gw = Gw::start(&[common::gateway::url("http", bad.port())], |_| {}).await;
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        roundtrip(
            gw.addr,
            b"GET http://127.0.0.1:9/x HTTP/1.1\r\nHost: 127.0.0.1:9\r\nConnection: close\r\n\r\n",
        ),
    )
    .await
    .expect("no answer in 10 s");
    assert_eq!(r.status(), 502, "{}", r.head);
    assert_eq!(
        r.header("x-proxypool-error"),
        Some("proxy_protocol_error"),
        "{}",
        r.head
    );
    assert!(r.text().contains("Content-Length"), "{}", r.text());
    gw.until_no_leases().await;
    let ev = gw.events();
    let report = ev
        .iter()
        .find(|e| e.kind == "report" || e.kind == "state_changed")
        .unwrap_or_else(|| panic!("nothing recorded: {ev:?}"));
    assert_eq!(
        report.reason.as_deref(),
        Some("proxy_protocol_error"),
        "{ev:?}"
    );
    assert_eq!(report.phase.as_deref(), Some("response_head"), "{ev:?}");
}

/// Through `upstream` to a tarpit: the client half-closes, the tarpit never does.
async fn half_open_tunnel_closes(upstream: String) {
    let pit = tarpit().await;
    let gw = Gw::start(&[upstream], |c| {
        c.half_close_timeout = Duration::from_millis(300);
        c.max_connections = 1;
    })
    .await;
    let (mut s, code) = socks5_connect(gw.addr, None, "127.0.0.1", pit.port()).await;
    assert_eq!(code, 0);
    s.write_all(b"hello").await.unwrap();
    s.shutdown().await.unwrap();
    // The tarpit saw the FIN and keeps its side open; the gateway closes the tunnel.
    assert!(
        closed_within(&mut s, Duration::from_secs(5)).await,
        "the half-open tunnel stayed open"
    );
    gw.until_no_leases().await;
    // Its slot is free again.
    let (_s2, code) = socks5_connect(gw.addr, None, "127.0.0.1", pit.port()).await;
    assert_eq!(code, 0);
}

#[tokio::test]
async fn a_half_open_tunnel_through_dante_closes_after_half_close_timeout() {
    let Some(dt) = dante().await else { return };
    half_open_tunnel_closes(format!("socks5h://127.0.0.1:{}", dt.port)).await;
}

#[tokio::test]
async fn a_tunnel_whose_far_side_closed_closes_when_the_client_goes_quiet() {
    let Some(ms) = microsocks().await else { return };
    // The destination answers and closes at once; the client keeps its half open.
    let gone = scripted(vec![Act::Write(b"bye".to_vec())]).await;
    let gw = Gw::start(
        &[format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port)],
        |c| {
            c.half_close_timeout = Duration::from_millis(300);
        },
    )
    .await;
    let (mut s, code) = socks5_connect(gw.addr, None, "127.0.0.1", gone.port()).await;
    assert_eq!(code, 0);
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .expect("the far side's close never arrived")
        .unwrap();
    assert_eq!(got, b"bye");
    // The client never closes its half: the tunnel (and its lease) end all the same.
    gw.until_no_leases().await;
}

#[tokio::test]
async fn a_407_closes_the_connection() {
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[common::gateway::url("http", proxy.port())], |c| {
        c.token = Some("gateway-token-123".into());
    })
    .await;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut s).await.unwrap();
    assert_eq!(r.status(), 407);
    assert_eq!(r.header("connection"), Some("close"), "{}", r.head);
    // The gateway's own answers keep their length (they are not streamed chunked).
    assert!(r.header("content-length").is_some(), "{}", r.head);
    assert!(
        closed_within(&mut s, Duration::from_secs(5)).await,
        "a 407'd connection stays open"
    );
    // With the token, keep-alive as usual.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    let auth = proxy_auth("", "gateway-token-123");
    s.write_all(format!("GET /origin-form HTTP/1.1\r\nHost: x\r\n{auth}\r\n").as_bytes())
        .await
        .unwrap();
    let r = read_response(&mut s).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.header("connection").is_none(), "{}", r.head);
}

#[tokio::test]
async fn a_head_trickled_after_the_first_request_is_closed_at_the_head_deadline() {
    let gw = Gw::start_with(
        &[],
        |_| {},
        Limits {
            head: Duration::from_millis(400),
            ..Limits::default()
        },
    )
    .await;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    // The second head's deadline starts after the first request: not before this.
    let started = tokio::time::Instant::now();
    // A first request, answered (400: origin-form), keeps the connection alive.
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut s).await.unwrap();
    assert_eq!(r.status(), 400);
    // Then one byte every 100 ms: each resets an idle timer, none completes a head.
    let mut closed = false;
    for b in b"GET http://127.0.0.1:9/ HTTP/1.1\r\nX-Slow: "
        .iter()
        .cycle()
        .take(100)
    {
        if s.write_all(&[*b]).await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            _ => {}
        }
    }
    // Closed by the head's deadline, however slowly the bytes went: never sooner than
    // it, never after the whole trickle.
    assert!(closed, "a trickled head held the connection for 10 s");
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn a_silent_upstream_times_out_and_a_get_goes_through_another() {
    let silent = silent_upstream().await;
    let site = dest(DestCfg::default()).await;
    let good = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(
        &[
            common::gateway::url("http", silent.port()),
            common::gateway::url("http", good.port()),
        ],
        |c| {
            c.response_timeout = Duration::from_millis(300);
            c.retries = 1;
        },
    )
    .await;
    let get = format!(
        "GET http://127.0.0.1:{0}/ HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\nConnection: close\r\n\r\n",
        site.port()
    );
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_secs(10), roundtrip(gw.addr, get.as_bytes()))
            .await
            .expect("a GET through a silent upstream hung");
        assert_eq!(r.status(), 200, "{}", r.head);
        assert_eq!(r.endpoint(), Some(gw.ids[1]));
    }
    gw.until_no_leases().await;
    let ev = gw.events();
    let slow = ev
        .iter()
        .find(|e| e.endpoint == Some(gw.ids[0]) && e.reason.as_deref() == Some("slow_response"))
        .unwrap_or_else(|| panic!("the silent upstream was never blamed: {ev:?}"));
    assert_eq!(slow.phase.as_deref(), Some("response_head"), "{slow:?}");
    // A POST is never sent twice: 502 when its upstream is the silent one.
    silent.seen.lock().unwrap().clear();
    let gw = Gw::start(&[common::gateway::url("http", silent.port())], |c| {
        c.response_timeout = Duration::from_millis(300);
    })
    .await;
    let post = format!(
        "POST http://127.0.0.1:{0}/ HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
        site.port()
    );
    let r = tokio::time::timeout(Duration::from_secs(10), roundtrip(gw.addr, post.as_bytes()))
        .await
        .expect("a POST through a silent upstream hung");
    assert_eq!(r.status(), 502, "{}", r.head);
    assert_eq!(r.header("x-proxypool-error"), Some("slow_response"));
}

#[tokio::test]
async fn a_session_key_over_128_bytes_is_a_client_error_at_the_gateway() {
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[common::gateway::url("http", proxy.port())], |_| {}).await;
    let long = format!("session-{}", "k".repeat(129));
    let r = roundtrip(
        gw.addr,
        format!(
            "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n{}\r\n",
            proxy_auth(&long, "x")
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.status(), 400, "{}", r.head);
    assert!(r.text().contains("128"), "{}", r.text());
    let (_s, code) = socks5_connect(gw.addr, Some((&long, "x")), "127.0.0.1", 9).await;
    assert_eq!(code, 0xA1, "SOCKS5 auth failure");
    assert!(proxy.seen().is_empty());
    // 128 bytes is a key.
    let ok = format!("session-{}", "k".repeat(128));
    let target = dest(DestCfg::default()).await;
    let (_s, code) = socks5_connect(gw.addr, Some((&ok, "x")), "127.0.0.1", target.port()).await;
    assert_eq!(code, 0);
}

#[tokio::test]
async fn beyond_its_descriptor_budget_a_new_client_gets_503() {
    let pit = tarpit().await;
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    // (The tarpit keeps its half open: a closed tunnel ends after half_close_timeout.)
    let gw = Gw::start_descriptors(
        &[common::gateway::url("http", proxy.port())],
        |c| c.half_close_timeout = Duration::from_millis(300),
        4,
    )
    .await;
    // Two tunnels hold four descriptors (client and upstream each).
    let mut held = Vec::new();
    for _ in 0..2 {
        let (s, r) = common::gateway::connect_tunnel(gw.addr, pit.port(), "").await;
        assert_eq!(r.status(), 200, "{}", r.head);
        held.push(s);
    }
    let r = roundtrip(
        gw.addr,
        format!(
            "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: x\r\n\r\n",
            pit.port()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(r.status(), 503, "{}", r.head);
    assert_eq!(
        r.header("x-proxypool-error"),
        Some("local_resources"),
        "{}",
        r.head
    );
    assert!(r.header("retry-after").is_some(), "{}", r.head);
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0xFF], "SOCKS5: no method acceptable");
    // One tunnel closes: its descriptors come back.
    drop(held.pop());
    eventually_async(Duration::from_secs(5), "a tunnel again", || async {
        let (_s, r) = common::gateway::connect_tunnel(gw.addr, pit.port(), "").await;
        match r.status() {
            200 => Ok(()),
            s => Err(format!("{s}")),
        }
    })
    .await;
}

#[tokio::test]
async fn prompt_heads_on_a_kept_connection_are_served_however_long_it_idles_between() {
    // The head deadline is per head: a client that sends its heads promptly is served
    // on a kept connection for as long as it likes.
    let site = dest(DestCfg {
        keep_alive: Some(100),
        ..Default::default()
    })
    .await;
    let Some(tp) = tinyproxy(&[site.port()]).await else {
        return;
    };
    let gw = Gw::start_with(
        &[format!("http://alice:s3cret@127.0.0.1:{}", tp.port)],
        |c| c.plain_http = proxypool::config::PlainHttp::Tunnel,
        Limits {
            head: Duration::from_millis(400),
            ..Limits::default()
        },
    )
    .await;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    for i in 0..3 {
        s.write_all(
            format!(
                "GET http://127.0.0.1:{0}/{i} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
                site.port()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let r = read_response(&mut s).await.unwrap();
        assert_eq!(r.status(), 200, "{}", r.head);
        // Idle between requests longer than the head deadline: idle is not a slow head.
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
}

/// `rotate = "request"`: the streams of one HTTP/2 client connection each go through an
/// upstream connection of their own. The client's two descriptors cover one of them; the
/// others in flight hold one of the budget each, and past it a stream is answered `503
/// local_resources` (nothing dialed, nothing reported) while the rest are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intercepted_streams_beyond_the_descriptor_budget_get_503() {
    use common::fakes::TestCa;
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use proxypool::config::{CaFiles, Everything, HostPatterns, Rotate};
    use proxypool::tls::{CertAuthority, Leaves};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let origin_ca = TestCa::new("origin roots");
    // Every answer takes about a second (its body trickles), so the streams overlap.
    let origin = dest(DestCfg {
        tls: Some(origin_ca.server_config()),
        body: b"0123456789".to_vec(),
        trickle: Some(Duration::from_millis(100)),
        ..DestCfg::default()
    })
    .await;
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let ca = Arc::new(CertAuthority::create(&CaFiles::in_dir(dir.path()), false).unwrap());
    let leaves = Arc::new(Leaves::new(ca.clone(), 100));
    // The client's two, and three more.
    let gw = Gw::start_intercepting(
        &[common::gateway::url("http", proxy.port())],
        |c| {
            c.intercept = HostPatterns::parse(&["localhost".into()], Everything::Allowed).unwrap();
            c.intercept_ports = vec![origin.port()];
            c.rotate = Rotate::Request;
        },
        5,
        leaves,
        origin_ca.write_pem(dir.path()),
    )
    .await;
    let authority = format!("localhost:{}", origin.port());
    let (tunnel, r) = common::gateway::connect_tunnel_to(gw.addr, &authority, "").await;
    assert_eq!(r.status(), 200, "{}", r.head);
    let ca_pem = ca.certificate().pem().as_bytes();
    let tls = common::fakes::tls_client(tunnel, ca_pem, "localhost", &[b"h2"])
        .await
        .expect("TLS with the gateway");
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .expect("HTTP/2 with the gateway");
    tokio::spawn(conn);
    let streams = (0..6).map(|_| {
        let mut send = send.clone();
        let url = format!("https://{authority}/");
        async move {
            let req = hyper::Request::get(url)
                .body(Empty::<bytes::Bytes>::new())
                .unwrap();
            let resp = send.send_request(req).await.expect("an answer");
            let status = resp.status().as_u16();
            let code = resp
                .headers()
                .get("x-proxypool-error")
                .map(|v| v.to_str().unwrap().to_string());
            let body = resp.into_body().collect().await.expect("the body");
            (status, code, body.to_bytes())
        }
    });
    let answers = futures_util::future::join_all(streams).await;
    let served = answers.iter().filter(|(s, ..)| *s == 200).count();
    let refused: Vec<_> = answers.iter().filter(|(s, ..)| *s == 503).collect();
    assert_eq!((served, refused.len()), (4, 2), "{answers:?}");
    for (_, code, _) in &refused {
        assert_eq!(code.as_deref(), Some("local_resources"), "{answers:?}");
    }
    for (s, _, body) in &answers {
        if *s == 200 {
            assert_eq!(&body[..], b"0123456789");
        }
    }
    // Nothing was held against the upstream, and its descriptors came back: the next
    // streams are served.
    assert_eq!(gw.row(gw.ids[0]).state, proxypool::health::State::Available);
    let failures: Vec<_> = gw
        .events()
        .into_iter()
        .filter(|e| e.reason.is_some())
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
    let mut send = send.clone();
    let req = hyper::Request::get(format!("https://{authority}/"))
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    assert_eq!(send.send_request(req).await.unwrap().status(), 200);
}
