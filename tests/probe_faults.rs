//! Every probe failure class against scripted fakes, plus the success paths.

mod support;

use std::time::Duration;

use proxypool::config::ProbeConfig;
use proxypool::endpoint::ProxyUrl;
use proxypool::health::{Phase, Reason};
use proxypool::probe::{ProbeResult, Prober};
use support::*;

const SECRET: &str = "s3cr3t-pw";

fn cfg(url: impl Into<String>) -> ProbeConfig {
    ProbeConfig {
        url: Some(url.into()),
        timeout: Duration::from_millis(1500),
        ..Default::default()
    }
}

async fn probe(cfg: &ProbeConfig, proxy: &str) -> ProbeResult {
    let prober = Prober::new(cfg).expect("probe config");
    prober
        .probe(&ProxyUrl::parse(proxy).expect("proxy url"))
        .await
}

#[track_caller]
fn assert_failed(r: &ProbeResult, reason: Reason, phase: Phase) {
    assert!(!r.ok, "expected failure, got {r:?}");
    let f = r.failure.as_ref().expect("failure");
    assert_eq!(
        (f.reason, f.phase),
        (Some(reason), Some(phase)),
        "detail: {:?}",
        f.detail
    );
    let detail = f.detail.as_deref().unwrap_or("");
    assert!(!detail.contains(SECRET), "password leaked: {detail}");
    // The failed phase is the last one timed.
    assert_eq!(r.phases.last().map(|p| p.0), Some(phase), "{r:?}");
}

#[track_caller]
fn assert_ok(r: &ProbeResult) {
    assert!(r.ok, "expected success, got {r:?}");
    assert!(r.failure.is_none());
    assert_eq!(r.status, Some(200));
}

fn phases(r: &ProbeResult) -> Vec<Phase> {
    r.phases.iter().map(|p| p.0).collect()
}

fn http_url(d: &Fake) -> String {
    format!("http://127.0.0.1:{}/probe", d.port())
}

fn https_url(d: &Fake) -> String {
    format!("https://localhost:{}/probe", d.port())
}

async fn plain_dest() -> Fake {
    dest(DestCfg::default()).await
}

// ---------------------------------------------------------------------------------------
// Connect

#[tokio::test]
async fn refused_port_is_connect_refused() {
    let port = closed_port().await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("http://127.0.0.1:{port}"),
    )
    .await;
    assert_failed(&r, Reason::ConnectRefused, Phase::Connect);
}

#[tokio::test]
async fn unresolvable_proxy_host_is_dns_failed() {
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        "socks5://no-such-proxy.invalid:1080",
    )
    .await;
    assert_failed(&r, Reason::DnsFailed, Phase::Connect);
}

// ---------------------------------------------------------------------------------------
// Proxy handshake: silence, garbage, early close

#[tokio::test]
async fn silent_socks_proxy_is_slow_handshake() {
    let fake = scripted(vec![Act::Hang]).await;
    let mut c = cfg("http://127.0.0.1:9/");
    c.timeout = Duration::from_millis(300);
    let r = probe(&c, &format!("socks5://127.0.0.1:{}", fake.port())).await;
    assert_failed(&r, Reason::SlowResponse, Phase::ProxyHandshake);
    assert!(r.total < Duration::from_millis(1000), "{r:?}");
}

#[tokio::test]
async fn silent_connect_proxy_is_slow_handshake() {
    let fake = scripted(vec![Act::Read, Act::Hang]).await;
    let mut c = cfg("https://localhost:9/");
    c.timeout = Duration::from_millis(300);
    let r = probe(&c, &format!("http://127.0.0.1:{}", fake.port())).await;
    assert_failed(&r, Reason::SlowResponse, Phase::ProxyHandshake);
}

#[tokio::test]
async fn garbage_connect_reply_is_protocol_error() {
    let fake = scripted(vec![
        Act::Read,
        Act::Write(b"SSH-2.0-OpenSSH_9.2\r\n".to_vec()),
        Act::Hang,
    ])
    .await;
    let r = probe(
        &cfg("https://localhost:9/"),
        &format!("http://127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyProtocolError, Phase::ProxyHandshake);
}

#[tokio::test]
async fn bad_socks_version_byte_is_protocol_error() {
    let fake = scripted(vec![Act::Read, Act::Write(vec![0x04, 0x00]), Act::Hang]).await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("socks5://127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyProtocolError, Phase::ProxyHandshake);
}

#[tokio::test]
async fn eof_mid_socks_handshake_is_connection_reset() {
    let fake = scripted(vec![Act::Read, Act::Write(vec![0x05])]).await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("socks5://127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ConnectionReset, Phase::ProxyHandshake);
}

#[tokio::test]
async fn eof_mid_connect_reply_is_connection_reset() {
    let fake = scripted(vec![Act::Read, Act::Write(b"HTTP/1.1 200 Conn".to_vec())]).await;
    let r = probe(
        &cfg("https://localhost:9/"),
        &format!("http://127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ConnectionReset, Phase::ProxyHandshake);
}

// ---------------------------------------------------------------------------------------
// SOCKS replies

#[tokio::test]
async fn socks5_auth_rejected() {
    let fake = scripted(vec![
        Act::Read,
        Act::Write(vec![0x05, 0x02]),
        Act::Read,
        Act::Write(vec![0x01, 0x01]),
    ])
    .await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("socks5://alice:{SECRET}@127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake);
    // The fake saw the greeting offering no-auth and user/password.
    assert_eq!(fake.seen()[0].as_bytes(), &[5, 2, 0, 2]);
}

#[tokio::test]
async fn socks5_no_acceptable_method_is_auth_rejected() {
    let fake = scripted(vec![Act::Read, Act::Write(vec![0x05, 0xff])]).await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("socks5://127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake);
}

async fn socks5_reply(code: u8) -> ProbeResult {
    let fake = socks5(Socks5Cfg {
        reply: code,
        ..Default::default()
    })
    .await;
    probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("socks5://127.0.0.1:{}", fake.port()),
    )
    .await
}

#[tokio::test]
async fn socks5_host_unreachable_is_upstream_unreachable() {
    let r = socks5_reply(4).await;
    assert_failed(&r, Reason::UpstreamUnreachable, Phase::ProxyHandshake);
    assert!(r.failure.unwrap().detail.unwrap().contains("code 4"));
}

#[tokio::test]
async fn socks5_not_allowed_is_proxy_rejected() {
    let r = socks5_reply(2).await;
    assert_failed(&r, Reason::ProxyRejected, Phase::ProxyHandshake);
    assert!(r.failure.unwrap().detail.unwrap().contains("code 2"));
}

#[tokio::test]
async fn socks5_connection_refused_is_upstream_unreachable() {
    let r = socks5_reply(5).await;
    assert_failed(&r, Reason::UpstreamUnreachable, Phase::ProxyHandshake);
    assert!(r.failure.unwrap().detail.unwrap().contains("code 5"));
}

#[tokio::test]
async fn socks4_rejected_is_proxy_rejected() {
    let fake = socks4(91).await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("socks4://127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyRejected, Phase::ProxyHandshake);
    assert!(r.failure.unwrap().detail.unwrap().contains("91"));
}

#[tokio::test]
async fn socks4_ident_mismatch_is_auth_rejected() {
    let fake = socks4(93).await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("socks4://bob@127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake);
}

// ---------------------------------------------------------------------------------------
// CONNECT replies

async fn connect_reply(head: &str) -> ProbeResult {
    let fake = scripted(vec![
        Act::Read,
        Act::Write(head.as_bytes().to_vec()),
        Act::Hang,
    ])
    .await;
    probe(
        &cfg("https://localhost:9/"),
        &format!("http://alice:{SECRET}@127.0.0.1:{}", fake.port()),
    )
    .await
}

#[tokio::test]
async fn connect_407_is_auth_rejected() {
    let r = connect_reply("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n").await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake);
    assert_eq!(r.status, Some(407));
    assert_eq!(r.failure.unwrap().status, Some(407));
}

#[tokio::test]
async fn connect_401_is_auth_rejected() {
    let r = connect_reply("HTTP/1.1 401 Unauthorized\r\n\r\n").await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake);
    assert_eq!(r.status, Some(401));
}

#[tokio::test]
async fn connect_502_is_upstream_unreachable() {
    let r = connect_reply("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n").await;
    assert_failed(&r, Reason::UpstreamUnreachable, Phase::ProxyHandshake);
    assert_eq!(r.status, Some(502));
}

#[tokio::test]
async fn connect_503_is_proxy_rejected_with_retry_after() {
    let r = connect_reply("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\n\r\n").await;
    assert_failed(&r, Reason::ProxyRejected, Phase::ProxyHandshake);
    let f = r.failure.unwrap();
    assert_eq!(f.status, Some(503));
    assert_eq!(f.retry_after, Some(Duration::from_secs(30)));
}

#[tokio::test]
async fn connect_request_is_well_formed() {
    let fake = scripted(vec![
        Act::Read,
        Act::Write(b"HTTP/1.1 403 Forbidden\r\n\r\n".to_vec()),
    ])
    .await;
    let r = probe(
        &cfg("https://localhost:8443/x"),
        &format!("http://alice:{SECRET}@127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyRejected, Phase::ProxyHandshake);
    let req = &fake.seen()[0];
    assert!(
        req.starts_with("CONNECT localhost:8443 HTTP/1.1\r\n"),
        "{req}"
    );
    assert_eq!(header(req, "host"), Some("localhost:8443"));
    let want = format!("Basic {}", base64(format!("alice:{SECRET}").as_bytes()));
    assert_eq!(header(req, "proxy-authorization"), Some(want.as_str()));
}

// ---------------------------------------------------------------------------------------
// TLS

#[tokio::test]
async fn https_proxy_speaking_plain_http_is_tls_failed() {
    let fake = scripted(vec![
        Act::Read,
        Act::Write(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
    ])
    .await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("https://localhost:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::TlsFailed, Phase::ProxyTls);
}

#[tokio::test]
async fn https_proxy_with_untrusted_cert_is_tls_failed() {
    let rogue = TestCa::new("rogue");
    let proxy = http_proxy(HttpProxyCfg {
        tls: Some(rogue.server_config()),
        ..Default::default()
    })
    .await;
    let d = plain_dest().await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("https://localhost:{}", proxy.port()),
    )
    .await;
    assert_failed(&r, Reason::TlsFailed, Phase::ProxyTls);
}

#[tokio::test]
async fn destination_with_untrusted_ca_is_tls_failed() {
    let dir = tempfile::tempdir().unwrap();
    let trusted = TestCa::new("trusted");
    let rogue = TestCa::new("rogue");
    let d = dest(DestCfg {
        tls: Some(rogue.server_config()),
        ..Default::default()
    })
    .await;
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let mut c = cfg(https_url(&d));
    c.ca_file = Some(trusted.write_pem(dir.path()));
    let r = probe(&c, &format!("http://127.0.0.1:{}", proxy.port())).await;
    assert_failed(&r, Reason::TlsFailed, Phase::DestinationTls);
    assert_eq!(r.status, Some(200), "the CONNECT status is kept");
    assert_eq!(r.failure.unwrap().status, None);
}

// ---------------------------------------------------------------------------------------
// Destination answers

async fn via_socks(d: DestCfg, c: impl FnOnce(&mut ProbeConfig)) -> ProbeResult {
    let d = dest(d).await;
    let proxy = socks5(Socks5Cfg::default()).await;
    let mut pc = cfg(http_url(&d));
    c(&mut pc);
    probe(&pc, &format!("socks5://127.0.0.1:{}", proxy.port())).await
}

#[tokio::test]
async fn destination_403_is_destination_status() {
    let r = via_socks(
        DestCfg {
            status: 403,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    assert_failed(&r, Reason::DestinationStatus, Phase::ResponseHead);
    assert_eq!(r.status, Some(403));
    assert_eq!(r.failure.unwrap().status, Some(403));
}

#[tokio::test]
async fn destination_429_carries_retry_after() {
    let r = via_socks(
        DestCfg {
            status: 429,
            headers: vec![("Retry-After".into(), "120".into())],
            ..Default::default()
        },
        |_| {},
    )
    .await;
    assert_failed(&r, Reason::DestinationStatus, Phase::ResponseHead);
    let f = r.failure.unwrap();
    assert_eq!(f.status, Some(429));
    assert_eq!(f.retry_after, Some(Duration::from_secs(120)));
}

#[tokio::test]
async fn wrong_body_is_body_mismatch() {
    let r = via_socks(DestCfg::default(), |c| {
        c.expect_body = Some("Example Domain".into())
    })
    .await;
    assert_failed(&r, Reason::BodyMismatch, Phase::ResponseBody);
    assert_eq!(r.status, Some(200));
}

#[tokio::test]
async fn expected_body_within_max_body() {
    let r = via_socks(DestCfg::default(), |c| {
        c.expect_body = Some("from the".into())
    })
    .await;
    assert_ok(&r);
    // Only the first 4 bytes are read, so the text is not found.
    let r = via_socks(DestCfg::default(), |c| {
        c.expect_body = Some("from the".into());
        c.max_body = 4;
    })
    .await;
    assert_failed(&r, Reason::BodyMismatch, Phase::ResponseBody);
}

#[tokio::test]
async fn trickling_body_is_slow_response() {
    let r = via_socks(
        DestCfg {
            trickle: Some(Duration::from_millis(200)),
            ..Default::default()
        },
        |c| c.timeout = Duration::from_millis(700),
    )
    .await;
    assert_failed(&r, Reason::SlowResponse, Phase::ResponseBody);
    assert!(r.total < Duration::from_millis(1200), "{r:?}");
}

#[tokio::test]
async fn silent_destination_is_slow_head() {
    let d = scripted(vec![Act::Read, Act::Hang]).await;
    let proxy = socks5(Socks5Cfg::default()).await;
    let mut c = cfg(http_url(&d));
    c.timeout = Duration::from_millis(300);
    let r = probe(&c, &format!("socks5://127.0.0.1:{}", proxy.port())).await;
    assert_failed(&r, Reason::SlowResponse, Phase::ResponseHead);
    assert_eq!(
        phases(&r),
        [
            Phase::Connect,
            Phase::ProxyHandshake,
            Phase::Request,
            Phase::ResponseHead
        ]
    );
}

#[tokio::test]
async fn reset_mid_body_is_connection_reset() {
    let r = via_socks(
        DestCfg {
            body: vec![b'x'; 1000],
            reset_after: Some(10),
            ..Default::default()
        },
        |_| {},
    )
    .await;
    assert_failed(&r, Reason::ConnectionReset, Phase::ResponseBody);
}

#[tokio::test]
async fn close_mid_head_is_connection_reset() {
    let d = scripted(vec![
        Act::Read,
        Act::Write(b"HTTP/1.1 200 OK\r\nContent-Le".to_vec()),
    ])
    .await;
    let proxy = socks5(Socks5Cfg::default()).await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("socks5://127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert_failed(&r, Reason::ConnectionReset, Phase::ResponseHead);
}

// ---------------------------------------------------------------------------------------
// Success paths

#[tokio::test]
async fn http_proxy_to_http_destination_uses_absolute_form() {
    let d = plain_dest().await;
    let proxy = http_proxy(HttpProxyCfg {
        auth: Some(("alice".into(), SECRET.into())),
        ..Default::default()
    })
    .await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("http://alice:{SECRET}@127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert_ok(&r);
    assert_eq!(
        phases(&r),
        [
            Phase::Connect,
            Phase::Request,
            Phase::ResponseHead,
            Phase::ResponseBody
        ]
    );
    let head = &proxy.seen()[0];
    let want = format!("GET http://127.0.0.1:{}/probe HTTP/1.1\r\n", d.port());
    assert!(head.starts_with(&want), "{head}");
    assert_eq!(
        header(head, "host"),
        Some(format!("127.0.0.1:{}", d.port()).as_str())
    );
    assert!(header(head, "user-agent")
        .unwrap()
        .starts_with("proxypool/"));
    assert_eq!(header(head, "connection"), Some("close"));
    assert!(header(head, "proxy-authorization").is_some());
}

#[tokio::test]
async fn http_proxy_407_to_absolute_form_is_auth_rejected() {
    let d = plain_dest().await;
    let proxy = http_proxy(HttpProxyCfg {
        auth: Some(("alice".into(), "right".into())),
        ..Default::default()
    })
    .await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("http://alice:{SECRET}@127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert!(!r.ok);
    let f = r.failure.unwrap();
    assert_eq!(
        (f.reason, f.phase, f.status),
        (
            Some(Reason::ProxyAuthRejected),
            Some(Phase::ProxyHandshake),
            Some(407)
        )
    );
    assert!(d.seen().is_empty());
}

#[tokio::test]
async fn http_proxy_to_https_destination_uses_connect_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test ca");
    let d = dest(DestCfg {
        tls: Some(ca.server_config()),
        ..Default::default()
    })
    .await;
    let proxy = http_proxy(HttpProxyCfg {
        auth: Some(("alice".into(), SECRET.into())),
        ..Default::default()
    })
    .await;
    let mut c = cfg(https_url(&d));
    c.ca_file = Some(ca.write_pem(dir.path()));
    c.expect_body = Some("destination".into());
    c.headers.insert("X-Probe".into(), "yes".into());
    let r = probe(
        &c,
        &format!("http://alice:{SECRET}@127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert_ok(&r);
    assert_eq!(
        phases(&r),
        [
            Phase::Connect,
            Phase::ProxyHandshake,
            Phase::DestinationTls,
            Phase::Request,
            Phase::ResponseHead,
            Phase::ResponseBody
        ]
    );
    assert!(proxy.seen()[0].starts_with(&format!("CONNECT localhost:{} HTTP/1.1", d.port())));
    let head = &d.seen()[0];
    assert!(head.starts_with("GET /probe HTTP/1.1\r\n"), "{head}");
    assert_eq!(header(head, "x-probe"), Some("yes"));
    assert!(
        header(head, "proxy-authorization").is_none(),
        "credentials must not reach the destination"
    );
}

#[tokio::test]
async fn https_proxy_to_https_destination_nests_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("test ca");
    let d = dest(DestCfg {
        tls: Some(ca.server_config()),
        ..Default::default()
    })
    .await;
    let proxy = http_proxy(HttpProxyCfg {
        tls: Some(ca.server_config()),
        ..Default::default()
    })
    .await;
    let mut c = cfg(https_url(&d));
    c.ca_file = Some(ca.write_pem(dir.path()));
    let r = probe(&c, &format!("https://localhost:{}", proxy.port())).await;
    assert_ok(&r);
    assert_eq!(
        phases(&r)[..3],
        [Phase::Connect, Phase::ProxyTls, Phase::ProxyHandshake]
    );
}

#[tokio::test]
async fn socks5_with_password_to_http_destination() {
    let d = plain_dest().await;
    let proxy = socks5(Socks5Cfg {
        auth: Some(("alice".into(), SECRET.into())),
        ..Default::default()
    })
    .await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("socks5://alice:{SECRET}@127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert_ok(&r);
    assert_eq!(
        phases(&r),
        [
            Phase::Connect,
            Phase::ProxyHandshake,
            Phase::Request,
            Phase::ResponseHead,
            Phase::ResponseBody
        ]
    );
    assert_eq!(
        proxy.seen(),
        [format!("atyp=1 addr=127.0.0.1:{} user=alice", d.port())]
    );
    assert!(d.seen()[0].starts_with("GET /probe HTTP/1.1\r\n"));
}

#[tokio::test]
async fn socks5_wrong_password_is_auth_rejected() {
    let d = plain_dest().await;
    let proxy = socks5(Socks5Cfg {
        auth: Some(("alice".into(), "right".into())),
        ..Default::default()
    })
    .await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("socks5://alice:{SECRET}@127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake);
}

#[tokio::test]
async fn socks5h_sends_the_hostname() {
    let d = plain_dest().await;
    let proxy = socks5(Socks5Cfg::default()).await;
    let url = format!("http://localhost:{}/", d.port());
    let r = probe(&cfg(url), &format!("socks5h://127.0.0.1:{}", proxy.port())).await;
    // The fake resolves "localhost" itself; it may pick ::1 where the destination is not.
    let seen = proxy.seen();
    assert_eq!(seen[0], format!("atyp=3 addr=localhost:{} user=", d.port()));
    if !r.ok {
        let f = r.failure.unwrap();
        assert_eq!(f.reason, Some(Reason::UpstreamUnreachable), "{f:?}");
    }
}

#[tokio::test]
async fn socks5_resolves_locally() {
    let d = plain_dest().await;
    let proxy = socks5(Socks5Cfg::default()).await;
    let url = format!("http://localhost:{}/", d.port());
    let _ = probe(&cfg(url), &format!("socks5://127.0.0.1:{}", proxy.port())).await;
    let seen = proxy.seen();
    assert!(
        seen[0].starts_with("atyp=1 ") || seen[0].starts_with("atyp=4 "),
        "{seen:?}"
    );
}

#[tokio::test]
async fn socks4_to_http_destination() {
    let d = plain_dest().await;
    let proxy = socks4(90).await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("socks4://bob@127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert_ok(&r);
    assert_eq!(
        proxy.seen(),
        [format!("v=4 addr=127.0.0.1:{} user=bob", d.port())]
    );
}

#[tokio::test]
async fn socks4a_sends_the_hostname() {
    let d = plain_dest().await;
    let proxy = socks4(90).await;
    let url = format!("http://localhost:{}/", d.port());
    let _ = probe(&cfg(url), &format!("socks4a://127.0.0.1:{}", proxy.port())).await;
    assert_eq!(
        proxy.seen(),
        [format!("v=4 addr=localhost:{} user=", d.port())]
    );
}

#[tokio::test]
async fn socks4_resolves_localhost_to_ipv4() {
    let d = plain_dest().await;
    let proxy = socks4(90).await;
    let url = format!("http://localhost:{}/", d.port());
    let r = probe(&cfg(url), &format!("socks4://127.0.0.1:{}", proxy.port())).await;
    assert_ok(&r);
    assert_eq!(
        proxy.seen(),
        [format!("v=4 addr=127.0.0.1:{} user=", d.port())]
    );
}

#[tokio::test]
async fn phase_times_add_up() {
    let d = plain_dest().await;
    let proxy = socks5(Socks5Cfg::default()).await;
    let r = probe(
        &cfg(http_url(&d)),
        &format!("socks5://127.0.0.1:{}", proxy.port()),
    )
    .await;
    assert_ok(&r);
    let sum: Duration = r.phases.iter().map(|p| p.1).sum();
    assert!(sum <= r.total, "{r:?}");
}

#[tokio::test]
async fn proxy_own_401_to_absolute_form_is_auth_rejected() {
    let fake = scripted(vec![
        Act::Read,
        Act::Write(b"HTTP/1.0 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"p\"\r\nConnection: close\r\n\r\n".to_vec()),
    ])
    .await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("http://alice:{SECRET}@127.0.0.1:{}", fake.port()),
    )
    .await;
    let f = r.failure.unwrap();
    assert_eq!(
        (f.reason, f.phase, f.status),
        (
            Some(Reason::ProxyAuthRejected),
            Some(Phase::ProxyHandshake),
            Some(401)
        )
    );
}

#[tokio::test]
async fn forwarded_401_is_destination_status() {
    let fake = scripted(vec![
        Act::Read,
        Act::Write(
            b"HTTP/1.1 401 Unauthorized\r\nVia: 1.1 fakeproxy\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        ),
    ])
    .await;
    let r = probe(
        &cfg("http://127.0.0.1:9/"),
        &format!("http://127.0.0.1:{}", fake.port()),
    )
    .await;
    assert_failed(&r, Reason::DestinationStatus, Phase::ResponseHead);
    assert_eq!(r.status, Some(401));
}

#[tokio::test]
async fn silent_https_proxy_is_slow_proxy_tls() {
    let fake = scripted(vec![Act::Read, Act::Hang]).await;
    let mut c = cfg("http://127.0.0.1:9/");
    c.timeout = Duration::from_millis(300);
    let r = probe(&c, &format!("https://localhost:{}", fake.port())).await;
    assert_failed(&r, Reason::SlowResponse, Phase::ProxyTls);
}

#[tokio::test]
async fn silent_tls_destination_is_slow_destination_tls() {
    let d = scripted(vec![Act::Read, Act::Hang]).await;
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let mut c = cfg(https_url(&d));
    c.timeout = Duration::from_millis(300);
    let r = probe(&c, &format!("http://127.0.0.1:{}", proxy.port())).await;
    assert_failed(&r, Reason::SlowResponse, Phase::DestinationTls);
}

#[tokio::test]
async fn an_expected_401_without_via_passes() {
    // A probe target that is supposed to answer 401 (a login wall): an "elite" proxy that
    // strips Via must not turn that expected answer into proxy_auth_rejected.
    let fake = scripted(vec![
        Act::Read,
        Act::Write(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno"
                .to_vec(),
        ),
    ])
    .await;
    let mut c = cfg("http://127.0.0.1:9/");
    c.expect_status = "401".parse().unwrap();
    let r = probe(&c, &format!("http://127.0.0.1:{}", fake.port())).await;
    assert!(r.ok && r.failure.is_none(), "{r:?}");
    assert_eq!(r.status, Some(401));
}
