//! Byte counting on an upstream connection for `proxypool_gateway_bytes_total{pool}` and
//! the endpoint's own totals (docs/observability.md, "Per-endpoint statistics").
//!
//! The counts are plain fields of the stream (one task owns it), added to the shared
//! counters once, when the stream is dropped: no atomic per chunk, and the bytes of a
//! tunnel that ends in an error or is cut by shutdown are counted too (the relay's own
//! totals are lost on error, and absolute-form exchanges have none).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use std::sync::Arc;

use crate::dial::BoxIo;
use crate::endpoint::EndpointId;
use crate::metrics::{Direction, PoolMetrics};
use crate::pool::engine::Engine;

/// Where a stream's counts go when it ends.
pub(super) struct Counter {
    /// The endpoint's statistics (`None` in tests of the stream alone).
    pub(super) engine: Option<Arc<Engine>>,
    pub(super) endpoint: EndpointId,
    /// The series of the endpoint's pool.
    pub(super) pool: Option<PoolMetrics>,
}

/// An upstream stream (after the handshake to the destination) that counts what passes.
pub(super) struct Counted {
    io: BoxIo,
    to: Counter,
    /// Read from the upstream: on its way to the client.
    down: u64,
    /// Written to the upstream: from the client.
    up: u64,
}

impl Counted {
    pub(super) fn new(io: BoxIo, to: Counter) -> Counted {
        Counted {
            io,
            to,
            down: 0,
            up: 0,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(m) = &self.to.pool {
            m.gateway_bytes(Direction::ToUpstream, self.up);
            m.gateway_bytes(Direction::ToClient, self.down);
        }
        if let Some(e) = &self.to.engine {
            if self.up > 0 || self.down > 0 {
                e.record_bytes(self.to.endpoint, self.up, self.down);
            }
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        self.down += (buf.filled().len() - before) as u64;
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = r {
            self.up += n as u64;
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            self.up += n as u64;
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn total(m: &Metrics, direction: &str) -> String {
        let series =
            format!("proxypool_gateway_bytes_total{{pool=\"p\",direction=\"{direction}\"}} ");
        m.encode()
            .lines()
            .find_map(|l| l.strip_prefix(&series).map(str::to_string))
            .unwrap()
    }

    #[tokio::test]
    async fn counts_both_directions_once_when_dropped() {
        let m = Metrics::new();
        let (a, mut b) = tokio::io::duplex(64);
        let to = Counter {
            engine: None,
            endpoint: 1,
            pool: Some(m.pool("p")),
        };
        let mut c = Counted::new(Box::new(a), to);
        c.write_all(b"hello").await.unwrap();
        b.write_all(b"0123456789").await.unwrap();
        let mut got = [0u8; 10];
        c.read_exact(&mut got).await.unwrap();
        let mut seen = [0u8; 5];
        b.read_exact(&mut seen).await.unwrap();
        assert_eq!(total(&m, "to_upstream"), "0", "nothing before the end");
        drop(c);
        assert_eq!(total(&m, "to_upstream"), "5");
        assert_eq!(total(&m, "to_client"), "10");
    }
}
