//! `proxypool serve --gateway` and `[[gateway]]` end to end: refusal to start without a
//! token off loopback (exit 2), traffic through the daemon's gateway, orderly shutdown.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::daemon::*;
use common::fakes::{self, dest, http_proxy, DestCfg, HttpProxyCfg};
use common::tools::free_port;

#[test]
fn non_loopback_gateway_without_token_refuses_to_start() {
    let home = Home::new(None);
    let o = home.run(&["serve", "--gateway", "0.0.0.0:0"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr.contains("--gateway") && o.stderr.contains("PROXYPOOL_GATEWAY_TOKEN"),
        "{o:?}"
    );
    let home = Home::new(Some("[[gateway]]\nlisten = \"0.0.0.0:0\"\n"));
    let o = home.run(&["serve"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("gateway[0].token"), "{o:?}");
}

#[test]
fn unusable_gateway_ca_file_refuses_to_start() {
    let home = Home::new(Some(
        "[[gateway]]\nlisten = \"127.0.0.1:0\"\nca_file = \"/nonexistent/gw-ca.pem\"\n",
    ));
    let o = home.run(&["serve"]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("/nonexistent/gw-ca.pem"), "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_the_gateway_and_stops_it() {
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let home = Home::new(None);
    let upstream = format!("http://127.0.0.1:{}", up.port());
    let port = free_port();
    let gw = format!("127.0.0.1:{port}");
    let (dport, token) = (d.port(), "t0ken-secret");
    // The gateway's own secret; the socket's admin token (even a weak one, with no TCP
    // listener to guard) is not the gateway's and does not stop it starting.
    let mut daemon = tokio::task::spawn_blocking({
        let gw = gw.clone();
        move || {
            let ids = home.add(&[&upstream]);
            let daemon = home.serve_with(
                &["--gateway", &gw],
                &[
                    ("PROXYPOOL_GATEWAY_TOKEN", token),
                    ("PROXYPOOL_TOKEN", "not-the-gw"),
                ],
            );
            (home, ids, daemon)
        }
    })
    .await
    .unwrap();
    let resp = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let auth = fakes::base64(format!(":{token}").as_bytes());
        write!(
            s,
            "GET http://127.0.0.1:{dport}/ HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {auth}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    })
    .await
    .unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        resp.to_ascii_lowercase()
            .contains(&format!("x-proxypool-endpoint: {}", daemon.1[0])),
        "{resp}"
    );
    assert!(resp.ends_with("hello from the destination"), "{resp}");
    let log = daemon.2.log_text();
    assert!(log.contains("gateway listening"), "{log}");
    assert!(!log.contains(token), "token in the log:\n{log}");
    let status = tokio::task::spawn_blocking(move || {
        let st = daemon
            .2
            .signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
        (st, daemon)
    })
    .await
    .unwrap();
    assert!(status.0.success(), "{:?}", status.0);
    daemon = status.1;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "gateway still listening after shutdown"
    );
    drop(daemon);
}
