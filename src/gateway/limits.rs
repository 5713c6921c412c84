//! Per-connection limits: a first usable request within a deadline, idle keep-alive
//! closed, head size capped. Time comes from `tokio::time`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The gateway's limits on one client connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// A client that has not sent a complete, usable request by then is closed.
    pub first_request: Duration,
    /// A keep-alive connection without traffic and without a request in flight is closed.
    pub idle: Duration,
    /// Largest request head (HTTP answers 431 beyond it).
    pub max_head: usize,
    /// Idle upstream connections kept for later absolute-form requests.
    pub upstream_idle: super::IdleLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            first_request: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            max_head: 64 * 1024,
            upstream_idle: super::IdleLimits::default(),
        }
    }
}

/// What the watchdog of one connection knows.
pub(super) struct Activity {
    start: Instant,
    /// Milliseconds after `start` of the last byte moved.
    last: AtomicU64,
    in_flight: AtomicUsize,
    served: AtomicBool,
}

impl Activity {
    pub(super) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
        })
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// A request is being handled until the returned guard drops.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        self.served.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// Resolves when the connection broke a limit; the caller then closes it.
    pub(super) async fn expired(&self, limits: &Limits) -> &'static str {
        loop {
            let now = Instant::now();
            let deadline = if !self.served.load(Ordering::Relaxed) {
                self.start + limits.first_request
            } else if self.in_flight.load(Ordering::Relaxed) > 0 {
                now + limits.idle
            } else {
                self.start + Duration::from_millis(self.last.load(Ordering::Relaxed)) + limits.idle
            };
            if deadline <= now {
                return if self.served.load(Ordering::Relaxed) {
                    "idle keep-alive"
                } else {
                    "no usable request in time"
                };
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Marks a request in flight.
pub(super) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A client stream that records when bytes move.
pub(super) struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub(super) fn new(inner: S, activity: Arc<Activity>) -> Self {
        Watched { inner, activity }
    }

    /// The stream, once no limit watches it any more (an upgraded tunnel).
    pub(super) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn silent_client_closes_at_the_first_request_deadline() {
        let limits = Limits::default();
        let a = Activity::new();
        let t0 = Instant::now();
        assert_eq!(a.expired(&limits).await, "no usable request in time");
        assert_eq!(t0.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_byte_and_never_during_a_request() {
        let limits = Limits::default();
        let a = Activity::new();
        let busy = a.busy();
        let watchdog = {
            let a = a.clone();
            let limits = limits.clone();
            tokio::spawn(async move { a.expired(&limits).await })
        };
        // A slow upstream: two minutes in flight is not idleness.
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert!(!watchdog.is_finished());
        drop(busy);
        let done_at = Instant::now();
        assert_eq!(watchdog.await.unwrap(), "idle keep-alive");
        // Rounded to the millisecond the activity clock keeps.
        let waited = done_at.elapsed();
        assert!(
            waited >= Duration::from_secs(59) && waited <= Duration::from_secs(61),
            "{waited:?}"
        );
    }
}
