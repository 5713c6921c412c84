//! An upstream HTTP/1.1 connection run by the request that uses it.
//!
//! hyper splits a client connection into the half that sends requests and the half that
//! reads and writes the socket, and that half must be polled. A task of its own per
//! connection costs a spawn per request and a wake-up between tasks at every step (the
//! head, each part of the body), often across worker threads. A connection the request
//! dialed is run instead by whoever waits on it: the request's task while the head is
//! awaited, then the client connection's task as it reads the body. Only a connection kept
//! for the next request gets a task, when it is parked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::{Request, Response};

use super::idle::{Body, IdleConns, IdleKey, Sender};
use crate::dial::BoxIo;

/// The half of a new upstream connection that reads and writes its socket.
pub(super) type Conn = hyper::client::conn::http1::Connection<hyper_util::rt::TokioIo<BoxIo>, Body>;

/// One upstream connection: its sending half, and the socket half when this request
/// opened it (a kept connection's runs in the task it was parked with).
pub(super) struct Held {
    sender: Sender,
    conn: Option<Pin<Box<Conn>>>,
}

impl Held {
    pub(super) fn opened(sender: Sender, conn: Conn) -> Held {
        Held {
            sender,
            conn: Some(Box::pin(conn)),
        }
    }

    pub(super) fn kept(sender: Sender) -> Held {
        Held { sender, conn: None }
    }

    /// Send `req` and wait for its response head, running the connection meanwhile.
    pub(super) async fn send(&mut self, req: Request<Body>) -> hyper::Result<Response<Incoming>> {
        let resp = self.sender.send_request(req);
        self.running(resp).await
    }

    /// As [`Held::send`], but a request hyper did not write (the kept connection had
    /// closed) comes back in the error.
    pub(super) async fn try_send(
        &mut self,
        req: Request<Body>,
    ) -> Result<Response<Incoming>, hyper::client::conn::TrySendError<Request<Body>>> {
        let resp = self.sender.try_send_request(req);
        self.running(resp).await
    }

    /// `f`, with the connection run while it waits. When the connection ends first, hyper
    /// has answered `f` (its error) by then.
    async fn running<F: Future>(&mut self, f: F) -> F::Output {
        let conn = &mut self.conn;
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| {
            run(conn, cx);
            f.as_mut().poll(cx)
        })
        .await
    }

    /// The response's body from here on runs the connection as it is read.
    pub(super) fn carry(self, resp: Response<Incoming>) -> Response<Driven> {
        resp.map(|body| Driven {
            body,
            held: Some(self),
            park: None,
            ended: false,
        })
    }
}

/// Poll the connection once; forget it when it has ended (its errors reach the response
/// or its body).
fn run(conn: &mut Option<Pin<Box<Conn>>>, cx: &mut Context<'_>) {
    if let Some(c) = conn {
        if c.as_mut().poll(cx).is_ready() {
            *conn = None;
        }
    }
}

/// A response body that runs the upstream connection it comes on, and parks the
/// connection for the next request when it was read to its end (if asked to).
pub(super) struct Driven {
    body: Incoming,
    held: Option<Held>,
    park: Option<(Arc<IdleConns>, IdleKey)>,
    ended: bool,
}

impl Driven {
    /// Keep the connection for the next request to the same place once this body has been
    /// read to its end.
    pub(super) fn park_in(&mut self, idle: Arc<IdleConns>, key: IdleKey) {
        self.park = Some((idle, key));
    }

    fn poll_body(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(r, Poll::Ready(None)) {
            self.ended = true;
        }
        r
    }
}

impl HttpBody for Driven {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<bytes::Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(r) = this.poll_body(cx) {
            return Poll::Ready(r);
        }
        // Nothing read yet: the connection reads (or ends, which ends the body), and what
        // it read is looked for once more. Both wakers are registered when this pends.
        match &mut this.held {
            Some(h) if h.conn.is_some() => run(&mut h.conn, cx),
            _ => return Poll::Pending,
        }
        this.poll_body(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        let (Some(held), Some((idle, key))) = (self.held.take(), self.park.take()) else {
            // Not kept: dropping the connection closes it.
            return;
        };
        // A body left unread (or one hyper never polled because it is empty) leaves the
        // connection unusable, except an empty one: hyper says when.
        if !(self.ended || self.body.is_end_stream()) || held.sender.is_closed() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Some(conn) = held.conn {
            // Kept connections are run by a task of their own from now on: nobody waits
            // on one while it is idle.
            rt.spawn(async move {
                let _ = conn.await;
            });
        }
        idle.park(key, held.sender);
    }
}
