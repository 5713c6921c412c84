//! How far a proxy handshake got when its deadline passed. A proxy that greeted us and
//! was asked for the target, then said nothing, is most likely still trying to reach it:
//! that is the target's question (judged by contrast), not a slow proxy.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Clock, DialFailure};
use crate::health::{Phase, Reason};

const GREETING: u8 = 0;
const RESOLVING: u8 = 1;
const ASKED: u8 = 2;
const ANSWERING: u8 = 3;

/// Shared between the handshake and the deadline that may cut it short.
#[derive(Debug, Clone, Default)]
pub(super) struct Progress(Arc<AtomicU8>);

impl Progress {
    fn set(&self, stage: u8) {
        self.0.store(stage, Ordering::Relaxed);
    }

    /// This process is resolving the target's name (SOCKS variants without remote DNS).
    pub(super) fn resolving(&self) {
        self.set(RESOLVING);
    }

    /// Back to the greeting, after a local resolution.
    pub(super) fn greeting(&self) {
        self.set(GREETING);
    }

    /// The proxy has been asked to connect to the target and has not answered yet.
    pub(super) fn asked(&self) {
        self.set(ASKED);
    }

    /// The proxy has begun its answer to the connect request.
    pub(super) fn answering(&self) {
        self.set(ANSWERING);
    }

    /// The failure for the handshake's deadline, by how far it got.
    pub(super) fn deadline_failure(&self, clock: &Clock) -> DialFailure {
        let budget = humantime::format_duration(clock.budget);
        match self.0.load(Ordering::Relaxed) {
            ASKED => DialFailure::new(
                Reason::UpstreamUnreachable,
                Phase::ProxyHandshake,
                format!(
                    "no answer to the connect request within {} ({budget})",
                    clock.what
                ),
            ),
            RESOLVING => DialFailure::new(
                Reason::DnsFailed,
                Phase::ProxyHandshake,
                format!(
                    "resolving the destination took longer than {} ({budget})",
                    clock.what
                ),
            ),
            _ => clock.deadline_failure(Phase::ProxyHandshake),
        }
    }
}

/// Watches the bytes a SOCKS5 proxy sends during the handshake: its method choice (and,
/// when it chose username/password, the verdict on them) is the greeting; whatever comes
/// after is the answer to the connect request.
pub(super) struct Socks5Watch<S> {
    pub(super) inner: S,
    progress: Progress,
    read: Arc<AtomicUsize>,
    /// Bytes of greeting expected: 2, or 4 once the proxy chose username/password.
    greeting: usize,
    first: [u8; 2],
}

impl<S> Socks5Watch<S> {
    pub(super) fn new(inner: S, progress: Progress) -> Self {
        Socks5Watch {
            inner,
            progress,
            read: Arc::default(),
            greeting: 2,
            first: [0; 2],
        }
    }

    fn saw(&mut self, bytes: &[u8]) {
        let before = self.read.fetch_add(bytes.len(), Ordering::Relaxed);
        for (i, b) in bytes.iter().enumerate() {
            if let Some(slot) = self.first.get_mut(before + i) {
                *slot = *b;
            }
        }
        let total = before + bytes.len();
        if total >= 2 && self.first[1] == 0x02 {
            self.greeting = 4;
        }
        if total > self.greeting {
            self.progress.answering();
        } else if total == self.greeting {
            self.progress.asked();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Socks5Watch<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let fresh = buf.filled()[before..].to_vec();
            self.saw(&fresh);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Socks5Watch<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reason_after(bytes: &[&[u8]]) -> Reason {
        let p = Progress::default();
        let mut w = Socks5Watch::new((), p.clone());
        for b in bytes {
            w.saw(b);
        }
        let clock = Clock::start(Duration::from_secs(10), "gateway connect_timeout");
        p.deadline_failure(&clock).reason
    }

    #[test]
    fn a_socks5_deadline_is_blamed_by_how_far_the_handshake_got() {
        use Reason::*;
        // Nothing, or half the method choice: the proxy is slow.
        assert_eq!(reason_after(&[]), SlowResponse);
        assert_eq!(reason_after(&[&[5]]), SlowResponse);
        // No authentication chosen: the next thing is the connect request.
        assert_eq!(reason_after(&[&[5, 0]]), UpstreamUnreachable);
        assert_eq!(reason_after(&[&[5], &[0]]), UpstreamUnreachable);
        // Username/password chosen: the greeting ends with the verdict on them.
        assert_eq!(reason_after(&[&[5, 2]]), SlowResponse);
        assert_eq!(reason_after(&[&[5, 2], &[1, 0]]), UpstreamUnreachable);
        assert_eq!(reason_after(&[&[5, 2, 1, 0]]), UpstreamUnreachable);
        // The answer has begun: a proxy that stops mid-answer is slow.
        assert_eq!(reason_after(&[&[5, 0, 5]]), SlowResponse);
        assert_eq!(reason_after(&[&[5, 2, 1, 0], &[5, 0]]), SlowResponse);
    }

    #[test]
    fn stages_name_their_failure() {
        let clock = Clock::start(Duration::from_secs(3), "probe timeout");
        let p = Progress::default();
        assert_eq!(p.deadline_failure(&clock).reason, Reason::SlowResponse);
        p.resolving();
        let f = p.deadline_failure(&clock);
        assert_eq!(
            (f.reason, f.phase),
            (Reason::DnsFailed, Phase::ProxyHandshake)
        );
        p.greeting();
        assert_eq!(p.deadline_failure(&clock).reason, Reason::SlowResponse);
        p.asked();
        let f = p.deadline_failure(&clock);
        assert_eq!(f.reason, Reason::UpstreamUnreachable);
        assert!(f.detail.contains("probe timeout (3s)"), "{}", f.detail);
        p.answering();
        assert_eq!(p.deadline_failure(&clock).reason, Reason::SlowResponse);
    }
}
