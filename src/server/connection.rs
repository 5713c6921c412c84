//! One client connection: framed lines in, one response line out per request, in order.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, Decoder, Encoder, Framed};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use tracing::debug;

use super::handler::request_id;
use super::{Handler, AUTH_TIMEOUT, SHUTDOWN_GRACE};
use crate::protocol::{ErrorCode, Response, MAX_LINE};

/// One line as the codec gives it.
type Frame = Result<Bytes, AnyDelimiterCodecError>;

/// Lines read ahead while a request is answered (a client pipelining); past this many the
/// connection is not read until the answer is out.
const READ_AHEAD: usize = 64;

/// Serve one connection until it closes or the server shuts down.
pub async fn serve_conn<S>(stream: S, handler: Arc<Handler>, tcp: bool, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut conn = Conn {
        framed: Framed::new(stream, Lines::new()),
        // A TCP peer must show the token soon: an idle crowd of strangers holds descriptors.
        auth_deadline: tcp.then(|| tokio::time::Instant::now() + AUTH_TIMEOUT),
        ahead: VecDeque::new(),
        closed: false,
    };
    // One waiter on the shutdown for the connection's life, not one registered and
    // dropped per request; the selects are biased, so no random draw per request.
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    while let Some(next) = conn.next(&mut cancelled).await {
        let resp = match next {
            Ok(bytes) => match std::str::from_utf8(&bytes) {
                Ok(line) => {
                    let line = line.strip_suffix('\r').unwrap_or(line);
                    conn.answer(&handler, line, tcp, &mut cancelled).await
                }
                Err(e) => Response::err(
                    None,
                    ErrorCode::BadRequest,
                    format!("request line is not UTF-8: {e}"),
                ),
            },
            Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                let r = Response::err(
                    None,
                    ErrorCode::TooLarge,
                    format!("request line longer than {MAX_LINE} bytes; closing"),
                );
                let _ = conn.framed.send(&r).await;
                break;
            }
            Err(AnyDelimiterCodecError::Io(e)) => {
                debug!(error = %e, "connection error");
                break;
            }
        };
        if conn.framed.send(&resp).await.is_err() {
            break;
        }
    }
}

/// One connection's state between its requests.
struct Conn<S> {
    framed: Framed<S, Lines>,
    /// When a TCP peer must have shown a valid token by.
    auth_deadline: Option<tokio::time::Instant>,
    /// What was read while a request was being answered.
    ahead: VecDeque<Frame>,
    /// The client closed its side.
    closed: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    /// The next request line: read ahead already, or from the socket. None: the
    /// connection is done (closed, shutting down, or no valid token in time).
    async fn next(
        &mut self,
        cancelled: &mut Pin<&mut WaitForCancellationFuture<'_>>,
    ) -> Option<Frame> {
        if let Some(f) = self.ahead.pop_front() {
            return Some(f);
        }
        if self.closed {
            return None;
        }
        let deadline = self.auth_deadline;
        tokio::select! {
            biased;
            _ = cancelled.as_mut() => None,
            n = self.framed.next() => n,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                debug!("no request with a valid token in time; closing");
                None
            }
        }
    }

    /// The answer to `line`. Requests in flight finish on shutdown, but one that could
    /// wait long (a `lease` with `wait`) is cut short after a grace period. While it runs
    /// the connection is still read: a client that closed it is gone, and a lease waiting
    /// for it must not be granted to nobody.
    async fn answer(
        &mut self,
        handler: &Handler,
        line: &str,
        tcp: bool,
        cancelled: &mut Pin<&mut WaitForCancellationFuture<'_>>,
    ) -> Response {
        let gone = CancellationToken::new();
        let answer = handler.answer(line, tcp, &gone);
        tokio::pin!(answer);
        loop {
            tokio::select! {
                // The socket first: a close that is already there is seen before a grant
                // that races it completes (that grant is then given back rather than
                // written to nobody).
                biased;
                n = self.framed.next(), if !self.closed && self.ahead.len() < READ_AHEAD => {
                    self.read_ahead(n, &gone);
                }
                (r, authorized) = &mut answer => {
                    if authorized {
                        self.auth_deadline = None;
                    }
                    return r;
                }
                _ = async {
                    cancelled.as_mut().await;
                    tokio::time::sleep(SHUTDOWN_GRACE).await;
                } => return Response::err(
                    request_id(line),
                    ErrorCode::Internal,
                    "the daemon is shutting down",
                ),
            }
        }
    }

    /// A line read while a request is answered: kept for later, or the client is gone.
    fn read_ahead(&mut self, n: Option<Frame>, gone: &CancellationToken) {
        match n {
            Some(Ok(f)) => self.ahead.push_back(Ok(f)),
            Some(Err(AnyDelimiterCodecError::MaxChunkLengthExceeded)) => {
                self.ahead
                    .push_back(Err(AnyDelimiterCodecError::MaxChunkLengthExceeded));
            }
            None | Some(Err(AnyDelimiterCodecError::Io(_))) => {
                self.closed = true;
                gone.cancel();
            }
        }
    }
}

/// Request lines in, response lines out. Framed on bytes, not `LinesCodec`: a line that is
/// not UTF-8 must get `bad_request` and leave the connection usable, not end it. A
/// response is serialized straight into the connection's write buffer.
struct Lines(AnyDelimiterCodec);

impl Lines {
    fn new() -> Self {
        Lines(AnyDelimiterCodec::new_with_max_length(
            b"\n".to_vec(),
            b"\n".to_vec(),
            MAX_LINE,
        ))
    }
}

impl Decoder for Lines {
    type Item = Bytes;
    type Error = AnyDelimiterCodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, Self::Error> {
        self.0.decode(src)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, Self::Error> {
        self.0.decode_eof(src)
    }
}

impl Encoder<&Response> for Lines {
    type Error = AnyDelimiterCodecError;

    fn encode(&mut self, r: &Response, dst: &mut BytesMut) -> Result<(), Self::Error> {
        r.write_line(dst);
        Ok(())
    }
}
