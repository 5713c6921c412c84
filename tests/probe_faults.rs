//! Every probe failure class against scripted fakes, plus the success paths.

mod common;

use std::time::Duration;

use common::fakes::*;
use proxypool::config::ProbeConfig;
use proxypool::endpoint::ProxyUrl;
use proxypool::health::{Phase, Reason};
use proxypool::probe::{ProbeResult, Prober};

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
    check_failed("probe", r, (reason, phase));
}

/// A failure with exactly `want` (reason, phase), no password in the detail, and the
/// failed phase timed last; `name` labels the case in a table.
#[track_caller]
fn check_failed(name: &str, r: &ProbeResult, want: (Reason, Phase)) {
    let (reason, phase) = want;
    assert!(!r.ok, "{name}: expected failure, got {r:?}");
    let f = r.failure.as_ref().expect("failure");
    assert_eq!(
        (f.reason, f.phase),
        (Some(reason), Some(phase)),
        "{name}: detail: {:?}",
        f.detail
    );
    let detail = f.detail.as_deref().unwrap_or("");
    assert!(
        !detail.contains(SECRET),
        "{name}: password leaked: {detail}"
    );
    // The failed phase is the last one timed.
    assert_eq!(r.phases.last().map(|p| p.0), Some(phase), "{name}: {r:?}");
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
    let port = closed_port();
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
// Proxy faults: one table of fake proxy → expected (reason, phase)

/// The fake proxy of a fault case.
enum ProxyFake {
    /// Plays these acts on every connection.
    Script(Vec<Act>),
    /// A SOCKS5 server answering this reply code.
    Socks5Reply(u8),
    /// A SOCKS4 server answering this reply code.
    Socks4Reply(u8),
}

/// One probe through a faulty proxy: `proxy` is the endpoint URL with `{port}` for the
/// fake's port and `{pw}` for `SECRET`.
struct ProxyFault {
    name: &'static str,
    fake: ProxyFake,
    proxy: &'static str,
    target: &'static str,
    timeout: Option<Duration>,
    want: (Reason, Phase),
    /// The status both the result and the failure carry.
    status: Option<u16>,
    retry_after: Option<Duration>,
    detail_has: Option<&'static str>,
    /// What the fake read first (the client's greeting).
    first_seen: Option<&'static [u8]>,
    /// The probe gives up well before the configured 1.5 s.
    max_total: Option<Duration>,
}

impl ProxyFault {
    fn new(
        name: &'static str,
        fake: ProxyFake,
        proxy: &'static str,
        target: &'static str,
        want: (Reason, Phase),
    ) -> ProxyFault {
        ProxyFault {
            name,
            fake,
            proxy,
            target,
            timeout: None,
            want,
            status: None,
            retry_after: None,
            detail_has: None,
            first_seen: None,
            max_total: None,
        }
    }
}

fn connect_reply(name: &'static str, head: &str, want: (Reason, Phase)) -> ProxyFault {
    let acts = vec![Act::Read, Act::Write(head.as_bytes().to_vec()), Act::Hang];
    ProxyFault::new(
        name,
        ProxyFake::Script(acts),
        "http://alice:{pw}@127.0.0.1:{port}",
        "https://localhost:9/",
        want,
    )
}

fn proxy_faults() -> Vec<ProxyFault> {
    use ProxyFake::{Script, Socks4Reply, Socks5Reply};
    const HANDSHAKE: Phase = Phase::ProxyHandshake;
    const PLAIN: &str = "http://127.0.0.1:9/";
    const TLS: &str = "https://localhost:9/";
    const SOCKS5: &str = "socks5://127.0.0.1:{port}";
    const HTTP: &str = "http://127.0.0.1:{port}";
    let quick = Some(Duration::from_millis(300));
    vec![
        ProxyFault {
            timeout: quick,
            // The 300 ms deadline, with room for a loaded machine.
            max_total: Some(Duration::from_millis(2000)),
            ..ProxyFault::new(
                "silent socks proxy",
                Script(vec![Act::Hang]),
                SOCKS5,
                PLAIN,
                (Reason::SlowResponse, HANDSHAKE),
            )
        },
        ProxyFault {
            // Asked for the target and silent: most likely still trying to reach it,
            // which the pool judges against the other endpoints (docs/blame.md).
            timeout: quick,
            detail_has: Some("no answer to the connect request within probe timeout"),
            ..ProxyFault::new(
                "silent CONNECT proxy",
                Script(vec![Act::Read, Act::Hang]),
                HTTP,
                TLS,
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault {
            timeout: quick,
            detail_has: Some("no answer to the connect request"),
            ..ProxyFault::new(
                "socks5 proxy silent after its greeting",
                Script(vec![
                    Act::Read,
                    Act::Write(vec![0x05, 0x00]),
                    Act::Read,
                    Act::Hang,
                ]),
                SOCKS5,
                PLAIN,
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault {
            timeout: quick,
            ..ProxyFault::new(
                "CONNECT reply that stops half way",
                Script(vec![
                    Act::Read,
                    Act::Write(b"HTTP/1.1 200 Con".to_vec()),
                    Act::Hang,
                ]),
                HTTP,
                TLS,
                (Reason::SlowResponse, HANDSHAKE),
            )
        },
        ProxyFault {
            detail_has: Some("code 1"),
            ..ProxyFault::new(
                "socks5 general failure",
                Socks5Reply(1),
                SOCKS5,
                PLAIN,
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault {
            detail_has: Some("code 7"),
            ..ProxyFault::new(
                "socks5 command not supported",
                Socks5Reply(7),
                SOCKS5,
                PLAIN,
                (Reason::ProxyProtocolError, HANDSHAKE),
            )
        },
        ProxyFault {
            status: Some(403),
            ..connect_reply(
                "CONNECT 403",
                "HTTP/1.1 403 Access violation\r\nContent-Length: 0\r\n\r\n",
                (Reason::ProxyRejected, HANDSHAKE),
            )
        },
        ProxyFault {
            status: Some(500),
            ..connect_reply(
                "CONNECT 500 (tinyproxy's Unable to connect)",
                "HTTP/1.1 500 Unable to connect\r\nContent-Length: 0\r\n\r\n",
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault {
            status: Some(502),
            ..connect_reply(
                "CONNECT 502 saying the name does not resolve",
                "HTTP/1.1 502 DNS resolution failed\r\nContent-Length: 0\r\n\r\n",
                (Reason::DnsFailed, HANDSHAKE),
            )
        },
        ProxyFault::new(
            "garbage CONNECT reply",
            Script(vec![
                Act::Read,
                Act::Write(b"SSH-2.0-OpenSSH_9.2\r\n".to_vec()),
                Act::Hang,
            ]),
            HTTP,
            TLS,
            (Reason::ProxyProtocolError, HANDSHAKE),
        ),
        ProxyFault::new(
            "bad socks version byte",
            Script(vec![Act::Read, Act::Write(vec![0x04, 0x00]), Act::Hang]),
            SOCKS5,
            PLAIN,
            (Reason::ProxyProtocolError, HANDSHAKE),
        ),
        ProxyFault::new(
            "eof mid socks handshake",
            Script(vec![Act::Read, Act::Write(vec![0x05])]),
            SOCKS5,
            PLAIN,
            (Reason::ConnectionReset, HANDSHAKE),
        ),
        ProxyFault::new(
            "eof mid CONNECT reply",
            Script(vec![Act::Read, Act::Write(b"HTTP/1.1 200 Conn".to_vec())]),
            HTTP,
            TLS,
            (Reason::ConnectionReset, HANDSHAKE),
        ),
        ProxyFault {
            // The greeting offers no-auth and user/password.
            first_seen: Some(&[5, 2, 0, 2]),
            ..ProxyFault::new(
                "socks5 auth rejected",
                Script(vec![
                    Act::Read,
                    Act::Write(vec![0x05, 0x02]),
                    Act::Read,
                    Act::Write(vec![0x01, 0x01]),
                ]),
                "socks5://alice:{pw}@127.0.0.1:{port}",
                PLAIN,
                (Reason::ProxyAuthRejected, HANDSHAKE),
            )
        },
        ProxyFault::new(
            "socks5 no acceptable method",
            Script(vec![Act::Read, Act::Write(vec![0x05, 0xff])]),
            SOCKS5,
            PLAIN,
            (Reason::ProxyAuthRejected, HANDSHAKE),
        ),
        ProxyFault {
            detail_has: Some("code 4"),
            ..ProxyFault::new(
                "socks5 host unreachable",
                Socks5Reply(4),
                SOCKS5,
                PLAIN,
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault {
            detail_has: Some("code 2"),
            ..ProxyFault::new(
                "socks5 not allowed",
                Socks5Reply(2),
                SOCKS5,
                PLAIN,
                (Reason::ProxyRejected, HANDSHAKE),
            )
        },
        ProxyFault {
            detail_has: Some("code 5"),
            ..ProxyFault::new(
                "socks5 connection refused",
                Socks5Reply(5),
                SOCKS5,
                PLAIN,
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault {
            detail_has: Some("91"),
            ..ProxyFault::new(
                "socks4 rejected or failed",
                Socks4Reply(91),
                "socks4://127.0.0.1:{port}",
                PLAIN,
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault::new(
            "socks4 ident mismatch",
            Socks4Reply(93),
            "socks4://bob@127.0.0.1:{port}",
            PLAIN,
            (Reason::ProxyAuthRejected, HANDSHAKE),
        ),
        ProxyFault {
            status: Some(407),
            ..connect_reply(
                "CONNECT 407",
                "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n",
                (Reason::ProxyAuthRejected, HANDSHAKE),
            )
        },
        ProxyFault {
            status: Some(401),
            ..connect_reply(
                "CONNECT 401",
                "HTTP/1.1 401 Unauthorized\r\n\r\n",
                (Reason::ProxyAuthRejected, HANDSHAKE),
            )
        },
        ProxyFault {
            status: Some(502),
            ..connect_reply(
                "CONNECT 502",
                "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault {
            status: Some(503),
            retry_after: Some(Duration::from_secs(30)),
            ..connect_reply(
                "CONNECT 503 with Retry-After",
                "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\n\r\n",
                (Reason::UpstreamUnreachable, HANDSHAKE),
            )
        },
        ProxyFault::new(
            "https proxy speaking plain http",
            Script(vec![
                Act::Read,
                Act::Write(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
            ]),
            "https://localhost:{port}",
            PLAIN,
            (Reason::TlsFailed, Phase::ProxyTls),
        ),
    ]
}

#[tokio::test]
async fn every_proxy_fault_has_its_reason_and_phase() {
    for case in proxy_faults() {
        let fake = match case.fake {
            ProxyFake::Script(acts) => scripted(acts).await,
            ProxyFake::Socks5Reply(code) => {
                socks5(Socks5Cfg {
                    reply: code,
                    ..Default::default()
                })
                .await
            }
            ProxyFake::Socks4Reply(code) => socks4(code).await,
        };
        let mut c = cfg(case.target);
        if let Some(t) = case.timeout {
            c.timeout = t;
        }
        let proxy = case
            .proxy
            .replace("{port}", &fake.port().to_string())
            .replace("{pw}", SECRET);
        let r = probe(&c, &proxy).await;
        let name = case.name;
        check_failed(name, &r, case.want);
        let f = r.failure.clone().unwrap();
        if let Some(st) = case.status {
            assert_eq!(f.status, Some(st), "{name}: failure status");
            assert_eq!(r.status, Some(st), "{name}: result status");
        }
        assert_eq!(f.retry_after, case.retry_after, "{name}: retry-after");
        if let Some(part) = case.detail_has {
            let detail = f.detail.unwrap_or_default();
            assert!(detail.contains(part), "{name}: detail {detail:?}");
        }
        if let Some(greeting) = case.first_seen {
            assert_eq!(fake.seen()[0].as_bytes(), greeting, "{name}: greeting");
        }
        if let Some(max) = case.max_total {
            assert!(r.total < max, "{name}: {r:?}");
        }
    }
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

/// The fake destination of a fault case.
enum DestFake {
    Cfg(DestCfg),
    Script(Vec<Act>),
}

/// One probe through a working SOCKS5 proxy to a faulty destination.
struct DestFault {
    name: &'static str,
    fake: DestFake,
    probe: fn(&mut ProbeConfig),
    want: (Reason, Phase),
    status: Option<u16>,
    /// Whether the failure itself carries `status` (a CONNECT-level status does not).
    failure_status: bool,
    retry_after: Option<Duration>,
    max_total: Option<Duration>,
    phases: Option<&'static [Phase]>,
}

impl DestFault {
    fn new(name: &'static str, fake: DestFake, want: (Reason, Phase)) -> DestFault {
        DestFault {
            name,
            fake,
            probe: |_| {},
            want,
            status: None,
            failure_status: false,
            retry_after: None,
            max_total: None,
            phases: None,
        }
    }
}

fn dest_faults() -> Vec<DestFault> {
    use DestFake::{Cfg, Script};
    vec![
        DestFault {
            status: Some(403),
            failure_status: true,
            ..DestFault::new(
                "destination 403",
                Cfg(DestCfg {
                    status: 403,
                    ..Default::default()
                }),
                (Reason::DestinationStatus, Phase::ResponseHead),
            )
        },
        DestFault {
            status: Some(429),
            failure_status: true,
            retry_after: Some(Duration::from_secs(120)),
            ..DestFault::new(
                "destination 429 with Retry-After",
                Cfg(DestCfg {
                    status: 429,
                    headers: vec![("Retry-After".into(), "120".into())],
                    ..Default::default()
                }),
                (Reason::DestinationStatus, Phase::ResponseHead),
            )
        },
        DestFault {
            probe: |c| c.expect_body = Some("Example Domain".into()),
            status: Some(200),
            ..DestFault::new(
                "wrong body",
                Cfg(DestCfg::default()),
                (Reason::BodyMismatch, Phase::ResponseBody),
            )
        },
        DestFault {
            probe: |c| c.timeout = Duration::from_millis(700),
            // The 700 ms deadline counts for the whole body, which would take 5.2 s to
            // trickle in; the bound leaves a loaded machine room.
            max_total: Some(Duration::from_millis(3000)),
            ..DestFault::new(
                "trickling body",
                Cfg(DestCfg {
                    trickle: Some(Duration::from_millis(200)),
                    ..Default::default()
                }),
                (Reason::SlowResponse, Phase::ResponseBody),
            )
        },
        DestFault {
            probe: |c| c.timeout = Duration::from_millis(300),
            phases: Some(&[
                Phase::Connect,
                Phase::ProxyHandshake,
                Phase::Request,
                Phase::ResponseHead,
            ]),
            ..DestFault::new(
                "silent destination",
                Script(vec![Act::Read, Act::Hang]),
                (Reason::SlowResponse, Phase::ResponseHead),
            )
        },
        DestFault::new(
            "reset mid body",
            Cfg(DestCfg {
                body: vec![b'x'; 1000],
                reset_after: Some(10),
                ..Default::default()
            }),
            (Reason::ConnectionReset, Phase::ResponseBody),
        ),
        DestFault::new(
            "close mid head",
            Script(vec![
                Act::Read,
                Act::Write(b"HTTP/1.1 200 OK\r\nContent-Le".to_vec()),
            ]),
            (Reason::ConnectionReset, Phase::ResponseHead),
        ),
    ]
}

#[tokio::test]
async fn every_destination_fault_has_its_reason_and_phase() {
    for case in dest_faults() {
        let d = match case.fake {
            DestFake::Cfg(cfg) => dest(cfg).await,
            DestFake::Script(acts) => scripted(acts).await,
        };
        let proxy = socks5(Socks5Cfg::default()).await;
        let mut c = cfg(http_url(&d));
        (case.probe)(&mut c);
        let r = probe(&c, &format!("socks5://127.0.0.1:{}", proxy.port())).await;
        let name = case.name;
        check_failed(name, &r, case.want);
        let f = r.failure.clone().unwrap();
        if let Some(st) = case.status {
            assert_eq!(r.status, Some(st), "{name}: result status");
        }
        if case.failure_status {
            assert_eq!(f.status, case.status, "{name}: failure status");
        }
        assert_eq!(f.retry_after, case.retry_after, "{name}: retry-after");
        if let Some(max) = case.max_total {
            assert!(r.total < max, "{name}: {r:?}");
        }
        if let Some(want) = case.phases {
            assert_eq!(phases(&r), want, "{name}: phases");
        }
    }
}

async fn via_socks(d: DestCfg, c: impl FnOnce(&mut ProbeConfig)) -> ProbeResult {
    let d = dest(d).await;
    let proxy = socks5(Socks5Cfg::default()).await;
    let mut pc = cfg(http_url(&d));
    c(&mut pc);
    probe(&pc, &format!("socks5://127.0.0.1:{}", proxy.port())).await
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

/// An HTTP proxy's own error page to an absolute-form probe (tinyproxy's "500 Unable to
/// connect", no `Via`) is its failure to reach the site (docs/blame.md), not the site's
/// status; the same 5xx forwarded from the site (with `Via`) is the site's.
#[tokio::test]
async fn a_5xx_the_proxy_wrote_itself_is_its_failure_to_reach_the_site() {
    for (head, want) in [
        (
            "HTTP/1.1 500 Unable to connect\r\nContent-Length: 0\r\n\r\n",
            (Reason::UpstreamUnreachable, Phase::ProxyHandshake),
        ),
        (
            "HTTP/1.1 503 Service Unavailable\r\nX-Squid-Error: ERR_DNS_FAIL 0\r\nVia: 1.1 squid\r\nContent-Length: 0\r\n\r\n",
            (Reason::DnsFailed, Phase::ProxyHandshake),
        ),
        (
            "HTTP/1.1 503 Service Unavailable\r\nVia: 1.1 proxy\r\nContent-Length: 0\r\n\r\n",
            (Reason::DestinationStatus, Phase::ResponseHead),
        ),
    ] {
        let fake = scripted(vec![Act::Read, Act::Write(head.as_bytes().to_vec())]).await;
        let r = probe(
            &cfg("http://site.example:9/"),
            &format!("http://127.0.0.1:{}", fake.port()),
        )
        .await;
        let f = r.failure.clone().unwrap_or_else(|| panic!("{head}: {r:?}"));
        assert_eq!((f.reason, f.phase), (Some(want.0), Some(want.1)), "{head}: {r:?}");
    }
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
    // The fake resolves "localhost" itself and tries each address it gets (as a proxy
    // does), so it reaches the destination on 127.0.0.1 even where ::1 comes first.
    let seen = proxy.seen();
    assert_eq!(seen[0], format!("atyp=3 addr=localhost:{} user=", d.port()));
    assert!(
        r.ok,
        "the probe through the hostname failed: {:?}",
        r.failure
    );
    assert_eq!(r.status, Some(200), "{r:?}");
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
