//! An upstream HTTP/1.1 connection run by the request that uses it.
//!
//! hyper splits a client connection into the half that sends requests and the half that
//! reads and writes the socket, and that half must be polled. A task of its own per
//! connection costs a spawn per request and a wake-up between tasks at every step (the
//! head, each part of the body), often across worker threads. A connection the request
//! dialed is run instead by the task that serves the client connection, which waits on
//! it: for the response head, then as it reads the body out to the client. Only a
//! connection kept for the next request, or one still sending a body after its answer
//! came, gets a task of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::{Request, Response};

use super::deadline::BodyEnd;
use super::idle::{Body, Conn, IdleConns, IdleKey, Sender};

/// One upstream connection: its sending half, and the socket half when this request
/// opened it (a kept connection's runs in the task it was parked with).
pub(super) struct Held {
    sender: Sender,
    conn: Option<Pin<Box<Conn>>>,
    /// The request's one-time body, which may still be going out when the answer is done.
    uploading: Option<Arc<BodyEnd>>,
}

impl Held {
    pub(super) fn opened(sender: Sender, conn: Conn, uploading: Option<Arc<BodyEnd>>) -> Held {
        Held {
            sender,
            conn: Some(Box::pin(conn)),
            uploading,
        }
    }

    pub(super) fn kept(sender: Sender) -> Held {
        Held {
            sender,
            conn: None,
            uploading: None,
        }
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
        let Some(held) = self.held.take() else {
            return;
        };
        // A body not read to its end leaves the connection unusable; an empty one, which
        // hyper never polls, is complete all the same.
        let complete = self.ended || self.body.is_end_stream();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        match self.park.take() {
            Some((idle, key)) if complete && !held.sender.is_closed() => {
                idle.park(key, held.sender, held.conn);
            }
            _ => {
                // An answer that came before the request's body was all sent (a 413, a
                // redirect): the body still goes out, as the client is sending it.
                let sending = held.uploading.as_ref().is_some_and(|e| !e.is_ended());
                if let (Some(conn), true) = (held.conn, sending) {
                    rt.spawn(async move {
                        let _ = conn.await;
                    });
                }
                // Otherwise dropping the connection closes it.
            }
        }
    }
}
