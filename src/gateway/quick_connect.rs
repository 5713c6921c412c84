//! The usual CONNECT, served without hyper: a client opening a tunnel sends its whole head
//! at once, and it is already in the socket when the connection's first bytes are peeked.
//! Such a head is parsed from the peeked bytes, taken off the socket, and the tunnel runs
//! in the connection's own task, its answer written directly. hyper's connection, its
//! request and answer maps, the hand-over of the socket and a task per tunnel were a
//! quarter of the gateway's own CPU per tunnel (BENCHMARKS.md).
//!
//! Anything else — a head in pieces, any other method, HTTP/1.0, a head with a body, a
//! refused token or target — is left in the socket untouched for hyper, which answers it
//! as it always did; so is the connection after an upstream failure's answer here.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::header::{self, HeaderValue};
use hyper::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use super::answer::outcome;
use super::headers::names_close;
use super::idle::Body;
use super::routing::Routing;
use super::target::Target;
use super::tunnel::{self, Opened};
use super::{Shared, Slot};
use crate::metrics::GatewayProtocol;

/// Headers a CONNECT head may carry and still be served here; more goes to hyper.
const MAX_HEADERS: usize = 32;

/// Bytes a client may send ahead of its tunnel's `200` that are read and kept meanwhile.
const MAX_EARLY: usize = 64 * 1024;

/// A CONNECT head the quick path serves.
struct Head {
    len: usize,
    target: Target,
    routing: Routing,
}

/// What the quick path left of a connection.
pub(super) enum Handoff {
    /// Nothing: served to its end, or closed.
    Nothing,
    /// For hyper: untouched (`false`), or open for the next request after a failure's
    /// answer (`true`).
    Hyper(TcpStream, Slot, bool),
    /// A tunnel answered `200`, to run.
    Tunnel(Box<Tunnel>),
}

/// A tunnel the quick path opened and answered.
pub(super) struct Tunnel {
    opened: Opened,
    client: TcpStream,
    /// What the client sent while its tunnel was being opened.
    early: Vec<u8>,
    slot: Slot,
}

impl Tunnel {
    /// Relay until the tunnel ends or the gateway stops, then report. Run outside any
    /// cancellation: the report at the end must not be cut short.
    pub(super) async fn run(self, shared: &Shared) {
        self.opened.run(shared, self.client, self.early).await;
        drop(self.slot);
    }
}

/// Open and answer the tunnel if `peeked` (the connection's first bytes, still in the
/// socket) holds a whole CONNECT head this path takes.
pub(super) async fn serve(
    shared: &Arc<Shared>,
    mut stream: TcpStream,
    slot: Slot,
    mut peeked: Vec<u8>,
) -> Handoff {
    let Some(head) = parse(shared, &peeked) else {
        return Handoff::Hyper(stream, slot, false);
    };
    // The bytes are there: this read returns at once, and leaves what the client sent
    // past its head (a TLS hello, often) in the socket.
    peeked.truncate(head.len);
    if stream.read_exact(&mut peeked).await.is_err() {
        return Handoff::Nothing;
    }
    drop(peeked);
    let mut early = Vec::new();
    let opened = tokio::select! {
        opened = tunnel::open(shared, &head.routing, &head.target) => opened,
        () = client_left(&mut stream, &mut early) => {
            // As hyper drops a request whose client is gone: the dial stops, and the
            // lease (if one was granted) goes back unreported.
            debug!("gateway client left while its tunnel was being opened");
            return Handoff::Nothing;
        }
    };
    // Not held for the tunnel's life.
    drop(head);
    match opened {
        Ok(opened) => {
            if !answer(shared, &mut stream, opened.answer()).await {
                // Dropped, the lease goes back unreported.
                return Handoff::Nothing;
            }
            Handoff::Tunnel(Box::new(Tunnel {
                opened,
                client: stream,
                early,
                slot,
            }))
        }
        Err(failure) => {
            let close = failure.headers().contains_key(header::CONNECTION);
            if answer(shared, &mut stream, failure).await && !close && early.is_empty() {
                return Handoff::Hyper(stream, slot, true);
            }
            Handoff::Nothing
        }
    }
}

/// What the client sends while its tunnel is being opened goes into `early`, up to
/// `MAX_EARLY`; resolves when the client closes its side or the connection fails.
async fn client_left(stream: &mut TcpStream, early: &mut Vec<u8>) {
    while early.len() < MAX_EARLY {
        early.reserve(4096);
        match stream.read_buf(early).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
    // Full: the rest waits in the socket, and a close goes unseen until the dial ends.
    std::future::pending().await
}

/// The head in `peeked` if it is a whole CONNECT this path serves, checked as hyper and
/// the gateway would check it (size cap, target, token and username).
fn parse(shared: &Shared, peeked: &[u8]) -> Option<Head> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(peeked) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => return None,
    };
    if req.method != Some("CONNECT") || req.version != Some(1) || len > shared.limits.max_head {
        return None;
    }
    let mut auth = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length")
            || h.name.eq_ignore_ascii_case("transfer-encoding")
        {
            return None;
        }
        // hyper answers a request that asks to close with `Connection: close`, and closes.
        if h.name.eq_ignore_ascii_case("connection") && names_close(h.value) {
            return None;
        }
        if h.name.eq_ignore_ascii_case("proxy-authorization") {
            if auth.is_some() {
                return None;
            }
            // `HeaderValue::to_str`'s rule, as on hyper's path: httparse has refused
            // control bytes already, so visible ASCII is ASCII.
            auth = Some(std::str::from_utf8(h.value).ok().filter(|v| v.is_ascii()));
        }
    }
    let uri = req.path?.parse::<hyper::Uri>().ok()?;
    let target = Target::connect(&uri).ok()?;
    // Hyper's path answers it, and hands the connection over for its TLS to end here.
    if shared.intercepts(&target) {
        return None;
    }
    let routing = tunnel::route(shared, auth.flatten()).ok()?;
    Some(Head {
        len,
        target,
        routing,
    })
}

/// Write `resp` to the client, within the idle limit, and count the request by it; false
/// if the client did not take it.
async fn answer(shared: &Shared, stream: &mut TcpStream, resp: Response<Body>) -> bool {
    shared
        .metrics
        .request(GatewayProtocol::HttpConnect, outcome(&resp));
    let bytes = encode(resp).await;
    matches!(
        tokio::time::timeout(shared.limits.idle, stream.write_all(&bytes)).await,
        Ok(Ok(()))
    )
}

/// An answer to CONNECT as one buffer, as hyper writes it: a `2xx` has no body and no
/// length (the tunnel follows); any other status carries its length and body.
async fn encode(resp: Response<Body>) -> Vec<u8> {
    let (parts, body) = resp.into_parts();
    // The gateway's own bodies are whole in memory: this does not wait.
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(128 + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .status
            .canonical_reason()
            .unwrap_or("Unknown")
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    let mut headers = parts.headers;
    if !parts.status.is_success() {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    for (name, value) in &headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !parts.status.is_success() {
        out.extend_from_slice(&body);
    }
    out
}
