//! One try of a request inside an intercepted connection: an upstream leased (or the
//! session's, for `rotate = "connection"`), a kept connection to the origin through it or a
//! new one (a tunnel, then verified TLS: `origin`), the request sent over HTTP/1.1 or
//! HTTP/2 as the origin chose, and the answer judged as a plain-HTTP answer is (`verdict`).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::{Request, Response};

use super::deadline::head_within;
use super::driven::Driven;
use super::headers::{closes, framing_conflict, upstream_request};
use super::idle::{Body, IdleKey};
use super::interception::Interception;
use super::lease::LeaseGuard;
use super::origin::{H2Sender, Kept, OriginWay, Spoken};
use super::outgoing::Outgoing;
use super::routing::Routing;
use super::send::{send, Again, Sent};
use super::upstream::{Link, Tries};
use super::verdict::{judge, not_sent, Try};
use super::Shared;
use crate::dial::{self, Dest, DialFailure, Dialed};
use crate::health::{Phase, Reason};

/// An origin's answer: over HTTP/1.1 (its connection driven by the body) or HTTP/2.
type Answer = Response<OriginBody>;

/// The body of an origin's answer, over either protocol.
pub(super) enum OriginBody {
    Http1(Driven),
    Http2(Incoming),
}

impl hyper::body::Body for OriginBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            OriginBody::Http1(b) => Pin::new(b).poll_frame(cx),
            OriginBody::Http2(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OriginBody::Http1(b) => b.is_end_stream(),
            OriginBody::Http2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OriginBody::Http1(b) => b.size_hint(),
            OriginBody::Http2(b) => b.size_hint(),
        }
    }
}

pub(super) async fn one_try(
    shared: &Shared,
    icpt: &Interception,
    routing: &Routing,
    out: &mut Outgoing,
    tries: &mut Tries,
) -> Try {
    let dest = out.target.dest.clone();
    let way = OriginWay {
        origins: icpt.origins(),
        idle: &shared.idle,
        dest: &dest,
        once_body: out.once_body(),
    };
    let (guard, link) = match shared
        .upstream
        .connect_or_reuse(routing, &out.target, tries, &way)
        .await
    {
        Ok(v) => v,
        Err(e) => return Try::Failed(super::answer::upstream_error(e)),
    };
    let sent = match link {
        Link::Dialed(Spoken::Http2(s)) | Link::Reused(Kept::Http2(s)) => {
            on_http2(shared, icpt, &guard, s, out).await
        }
        Link::Dialed(Spoken::Http1(io)) => on_new_http1(shared, &guard, io, icpt, out).await,
        Link::Reused(Kept::Http1(sender, key)) => {
            over_http1(shared, &guard, Link::Reused(sender), key, icpt, out).await
        }
    };
    match sent {
        Ok(resp) if framing_conflict(resp.headers()) => {
            let f = DialFailure::new(
                Reason::ProxyProtocolError,
                Phase::ResponseHead,
                "the origin's response has both Content-Length and Transfer-Encoding (RFC 9112 §6.3): its body cannot be framed",
            );
            not_sent(shared, guard, Sent::Failed(f), out, tries).await
        }
        Ok(resp) => judge(shared, guard, resp, out, tries).await,
        Err(e) => not_sent(shared, guard, e, out, tries).await,
    }
}

/// The request on a new HTTP/1.1 connection to the origin (TLS over `io`).
async fn on_new_http1(
    shared: &Shared,
    guard: &LeaseGuard,
    io: crate::dial::BoxIo,
    icpt: &Interception,
    out: &mut Outgoing,
) -> Result<Answer, Sent> {
    let key = IdleKey::tls(guard.proxy(), &out.target.dest);
    let d = Dialed {
        io,
        forward: false,
        connect_status: None,
        connect_head: Vec::new(),
    };
    over_http1(shared, guard, Link::Dialed(d), key, icpt, out).await
}

/// The request on an HTTP/1.1 connection to the origin, which goes back to the idle list
/// under `key` once its answer has been read, unless the origin closes it.
async fn over_http1(
    shared: &Shared,
    guard: &LeaseGuard,
    link: Link<super::idle::Sender>,
    key: IdleKey,
    icpt: &Interception,
    out: &mut Outgoing,
) -> Result<Answer, Sent> {
    let (body, body_end) = out.body();
    let req = upstream_request(&out.parts, body, None, true);
    let again = Again {
        parts: &out.parts,
        kept: out.kept(),
        dest: &out.target.dest,
        forward: false,
        body_end: body_end.as_ref(),
        origin: Some(icpt.origins()),
    };
    let mut resp = send(shared, guard, link, req, again).await?;
    if !closes(resp.headers()) {
        resp.body_mut().park_in(shared.idle.clone(), key);
    }
    Ok(resp.map(OriginBody::Http1))
}

/// New HTTP/2 connections a GET or HEAD may go on after the one it met failed under it.
const H2_AGAIN: usize = 2;

/// How a request that failed on an HTTP/2 connection may go again.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Afterwards {
    /// The origin refused its stream (`REFUSED_STREAM`) or closed the connection below it
    /// (`GOAWAY` without an error): HTTP/2 promises it was not processed (RFC 9113 §8.7),
    /// and the origin said so itself: no fault of the upstream.
    Refused,
    /// The connection was gone before the request went out: nothing of it was sent, but
    /// whose doing that was (the origin ending a kept connection, or the path through the
    /// upstream dying) only a new connection tells.
    Gone,
    /// The connection broke under it (an I/O error): the origin may have closed it on its
    /// way out, or the path through the upstream died. A GET or HEAD may go again
    /// (RFC 9110 §9.2.2); a new connection that cannot be made, or that breaks as well,
    /// tells which.
    Broken,
    /// The failure is the request's own (a reset stream, no head in time).
    Final,
}

/// The request on a shared HTTP/2 connection to the origin. The connection may be kept or
/// just made; either way others share it, so it may be on its way out (`GOAWAY`) before
/// this request goes, or break as the origin closes it. A GET or HEAD then goes again on
/// another connection through the same upstream (one another request made meanwhile, else
/// a new one; a body that can go out only once cannot), and the upstream is blamed only
/// for what that does not cure: an origin that refuses it every time blames nobody.
async fn on_http2(
    shared: &Shared,
    icpt: &Interception,
    guard: &LeaseGuard,
    mut sender: H2Sender,
    out: &mut Outgoing,
) -> Result<Answer, Sent> {
    let dest = out.target.dest.clone();
    let mut again = 0;
    loop {
        let (e, afterwards) = match over_http2(shared, sender, out).await {
            Ok(a) => return Ok(a),
            Err(failed) => failed,
        };
        icpt.origins().forget(guard.proxy(), &dest);
        let resendable = out.kept().is_some();
        match afterwards {
            Afterwards::Final => return Err(e),
            Afterwards::Refused | Afterwards::Gone | Afterwards::Broken
                if resendable && again < H2_AGAIN =>
            {
                again += 1
            }
            Afterwards::Refused if resendable => return Err(Sent::NotTaken),
            // Nothing went out: not blamed, and not sent again.
            Afterwards::Refused | Afterwards::Gone if !resendable => return Err(Sent::Unsendable),
            Afterwards::Refused | Afterwards::Gone | Afterwards::Broken => return Err(e),
        }
        // One GOAWAY fails every stream of its connection: the first of them to get here
        // makes the new connection, the others ride on it.
        if let Some(s) = icpt.origins().reuse(guard.proxy(), &dest) {
            sender = s;
            continue;
        }
        match new_connection(shared, icpt, guard, &dest).await? {
            Spoken::Http2(s) => sender = s,
            Spoken::Http1(io) => return on_new_http1(shared, guard, io, icpt, out).await,
        }
    }
}

/// A new TLS connection to `dest` through the lease's upstream.
async fn new_connection(
    shared: &Shared,
    icpt: &Interception,
    guard: &LeaseGuard,
    dest: &Dest,
) -> Result<Spoken, Sent> {
    let deadline = tokio::time::Instant::now() + shared.cfg.connect_timeout;
    let d = shared
        .upstream
        .dial(
            guard,
            dest,
            crate::dial::Route::Tunnel,
            crate::dial::Carries::More,
        )
        .await
        .map_err(Sent::Unreachable)?;
    icpt.origins()
        .handshake(d.io, guard.proxy(), dest, deadline)
        .await
        .map_err(Sent::Unreachable)
}

/// How a request that failed on an HTTP/2 connection with `e` may go again.
fn afterwards(e: &hyper::Error) -> Afterwards {
    if e.is_canceled() {
        return Afterwards::Gone;
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(h2) = c.downcast_ref::<h2::Error>() {
            let reason = h2.reason();
            let refused = reason == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away() && h2.is_remote() && reason == Some(h2::Reason::NO_ERROR));
            return match (refused, h2.is_io()) {
                (true, _) => Afterwards::Refused,
                (false, true) => Afterwards::Broken,
                (false, false) => Afterwards::Final,
            };
        }
        if c.is::<std::io::Error>() {
            return Afterwards::Broken;
        }
        cause = c.source();
    }
    Afterwards::Final
}

/// The request on a shared HTTP/2 connection to the origin, its head within
/// `response_timeout`; on failure, also how it may go again (`Afterwards`).
async fn over_http2(
    shared: &Shared,
    mut sender: H2Sender,
    out: &mut Outgoing,
) -> Result<Answer, (Sent, Afterwards)> {
    let (body, body_end) = out.body();
    let mut req = upstream_request(&out.parts, body, None, true);
    to_http2(&mut req, &out.parts.uri);
    let within = shared.cfg.response_timeout;
    shared.metrics.upstream_connection(true);
    let sent = async {
        // A connection gone before the request went out took nothing of it.
        if let Err(e) = sender.ready().await {
            return Err((e, Afterwards::Gone));
        }
        sender.send_request(req).await.map_err(|e| {
            let how = afterwards(&e);
            (e, how)
        })
    };
    match head_within(within, body_end.as_deref(), sent).await {
        None => Err((
            Sent::Slow(DialFailure::new(
                Reason::SlowResponse,
                Phase::ResponseHead,
                format!(
                    "no response head within the gateway's response_timeout ({})",
                    humantime::format_duration(within)
                ),
            )),
            Afterwards::Final,
        )),
        Some(Ok(resp)) => Ok(resp.map(OriginBody::Http2)),
        Some(Err((e, how))) => Err((
            Sent::Failed(dial::hyper_failure(&e, Phase::ResponseHead)),
            how,
        )),
    }
}

/// An HTTP/1.1-shaped request made fit for HTTP/2: the absolute URI gives `:scheme` and
/// `:authority`, and `Host` goes (its value is the authority's).
fn to_http2(req: &mut Request<Body>, absolute: &hyper::Uri) {
    *req.uri_mut() = absolute.clone();
    *req.version_mut() = hyper::Version::HTTP_2;
    req.headers_mut().remove(hyper::header::HOST);
}
