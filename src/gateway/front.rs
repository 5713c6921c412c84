//! Front detection: the first byte a client sends decides the protocol.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use super::quick_connect::{self, Handoff, Tunnel};
use super::{Shared, Slot};
use crate::metrics::{GatewayMetrics, GatewayOutcome, GatewayProtocol};

/// What the first byte says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// 0x05.
    Socks5,
    /// 0x04: a SOCKS4 client, which this gateway does not serve.
    Socks4,
    /// Anything else is given to the HTTP parser, which answers garbage with 400.
    Http,
}

/// The front for a connection whose first byte is `b`.
pub fn detect(b: u8) -> Front {
    match b {
        0x05 => Front::Socks5,
        0x04 => Front::Socks4,
        _ => Front::Http,
    }
}

/// Options every client connection gets: no Nagle delay on small proxy answers, and
/// keepalive probes, because a client that vanishes without a FIN (a dead laptop, a dropped
/// NAT entry) would otherwise hold its tunnel and lease forever.
pub(super) fn client_options(s: &socket2::SockRef<'_>) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(15))
        .with_retries(4);
    let _ = s.set_tcp_nodelay(true);
    let _ = s.set_tcp_keepalive(&keepalive);
}

/// Bytes of a connection's start looked at before choosing its front: a CONNECT head
/// with a browser's `User-Agent` and a long routing username fits.
const PEEK: usize = 2048;

/// Serve one accepted client connection to its end, or until the gateway stops.
pub(super) async fn serve(shared: Arc<Shared>, stream: TcpStream, slot: Slot) {
    let stopping = shared.shutdown.clone();
    let tunnel = tokio::select! {
        _ = stopping.cancelled() => return,
        tunnel = start(shared.clone(), stream, slot) => tunnel,
    };
    // Outside the select: the tunnel watches the shutdown itself, and its report at the
    // end must not be cut short by it.
    if let Some(tunnel) = tunnel {
        tunnel.run(&shared).await;
    }
}

/// Choose the front and serve it; a tunnel the quick CONNECT path opened, to run.
async fn start(shared: Arc<Shared>, mut stream: TcpStream, slot: Slot) -> Option<Box<Tunnel>> {
    // Linux copies these from the listener to every accepted socket (set once in
    // `client_options`); five system calls per connection saved.
    #[cfg(not(target_os = "linux"))]
    client_options(&socket2::SockRef::from(&stream));
    // As much as a usual CONNECT head: if it came whole, it is served without hyper.
    let mut first = vec![0u8; PEEK];
    match tokio::time::timeout(shared.limits.first_request, stream.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 => first.truncate(n),
        Ok(_) => return None,
        Err(_) => {
            debug!("gateway client sent nothing in time; closed");
            return None;
        }
    }
    match detect(first[0]) {
        Front::Socks5 => {
            drop(first);
            super::socks5::serve(shared, stream).await;
            drop(slot);
        }
        Front::Http => match quick_connect::serve(&shared, stream, slot, first).await {
            Handoff::Nothing => {}
            Handoff::Tunnel(tunnel) => return Some(tunnel),
            Handoff::Hyper(stream, slot, answered) => {
                super::http::serve(shared, stream, slot, answered).await
            }
        },
        Front::Socks4 => {
            drop(first);
            // Take in what the client sent (closing with unread bytes would reset the
            // connection before it reads the answer), then SOCKS4 "request rejected".
            let mut hello = [0u8; 512];
            let _ = stream.read(&mut hello).await;
            let _ = stream.write_all(&[0, 0x5B, 0, 0, 0, 0, 0, 0]).await;
            let _ = stream.shutdown().await;
            debug!("gateway refused a SOCKS4 client (SOCKS5 and HTTP only)");
        }
    }
    None
}

/// Answer a client the descriptor budget has no room for: `503 local_resources` to an
/// HTTP client, "no acceptable method" to a SOCKS5 one; then close. A second at most.
pub(super) async fn refuse(mut stream: TcpStream, metrics: &GatewayMetrics) {
    let mut head = [0u8; 1024];
    let n = match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut head)).await {
        Ok(Ok(n)) if n > 0 => n,
        _ => return,
    };
    let (protocol, answer): (_, &[u8]) = match detect(head[0]) {
        Front::Socks5 => (GatewayProtocol::Socks5, &[5, 0xFF]),
        Front::Socks4 => return,
        Front::Http => {
            let protocol = if head[..n].starts_with(b"CONNECT ") {
                GatewayProtocol::HttpConnect
            } else {
                GatewayProtocol::HttpForward
            };
            (protocol, REFUSED_FOR_DESCRIPTORS.as_bytes())
        }
    };
    metrics.request(protocol, GatewayOutcome::LocalResources);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
        // Take in the rest of the request so the close is not a reset that eats the answer.
        let mut rest = [0u8; 1024];
        while let Ok(n) = stream.read(&mut rest).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    debug!("gateway over its descriptor budget; a client was refused");
}

const REFUSED_FOR_DESCRIPTORS: &str = "HTTP/1.1 503 Service Unavailable\r\n\
    Content-Type: text/plain; charset=utf-8\r\nX-Proxypool-Error: local_resources\r\n\
    Retry-After: 1\r\nConnection: close\r\nContent-Length: 135\r\n\r\n\
    proxypool gateway: local_resources: out of local resources (the gateway holds its descriptor budget); nothing was reported; try again.\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_one_whole_http_answer() {
        let (head, body) = REFUSED_FOR_DESCRIPTORS.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, body.len(), "{body:?}");
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains("\r\nX-Proxypool-Error: local_resources\r\n"));
    }

    #[test]
    fn first_byte_decides() {
        assert_eq!(detect(0x05), Front::Socks5);
        assert_eq!(detect(0x04), Front::Socks4);
        for b in [b'G', b'C', b'P', 0x16, 0x00, 0xFF] {
            assert_eq!(detect(b), Front::Http, "{b:#x}");
        }
    }
}
