//! A client stream with bytes already read from it put back in front: what a client sent
//! right after its CONNECT (its TLS hello, often) was read with the CONNECT and must reach
//! the TLS server first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub(super) struct Rewound<S> {
    early: Vec<u8>,
    /// How much of `early` has been read again.
    at: usize,
    inner: S,
}

impl<S> Rewound<S> {
    pub(super) fn new(early: Vec<u8>, inner: S) -> Self {
        Rewound {
            early,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.early.len() {
            let n = buf.remaining().min(this.early.len() - this.at);
            buf.put_slice(&this.early[this.at..this.at + n]);
            this.at += n;
            if this.at == this.early.len() {
                // Replayed: not held for the connection's life.
                this.early = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn early_bytes_come_first_then_the_stream() {
        let (a, mut b) = tokio::io::duplex(64);
        b.write_all(b" world").await.unwrap();
        drop(b);
        let mut r = Rewound::new(b"hello".to_vec(), a);
        let mut small = [0u8; 3];
        r.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"hel");
        let mut rest = String::new();
        r.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "lo world");
    }

    #[tokio::test]
    async fn writes_go_straight_through() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut r = Rewound::new(Vec::new(), a);
        r.write_all(b"out").await.unwrap();
        let mut got = [0u8; 3];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"out");
    }
}
