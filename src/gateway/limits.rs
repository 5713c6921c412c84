//! Per-connection limits: a first usable request within a deadline, every request head
//! within a deadline of its first byte, idle keep-alive closed, head size capped. Time
//! comes from `tokio::time`.

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
    /// A request head must be complete this long after its first byte (every head, not
    /// only the first: a byte now and then must not hold a connection).
    pub head: Duration,
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
            head: Duration::from_secs(10),
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
    /// Milliseconds after `start` (plus one; 0: none) of the first byte of a request head
    /// not yet complete: read while no request is in flight and no response is going out.
    head_from: AtomicU64,
    in_flight: AtomicUsize,
    /// Responses whose bodies are still going out.
    responding: AtomicUsize,
    served: AtomicBool,
}

impl Activity {
    pub(super) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            last: AtomicU64::new(0),
            head_from: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            responding: AtomicUsize::new(0),
            served: AtomicBool::new(false),
        })
    }

    fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last.fetch_max(self.elapsed_ms(), Ordering::Relaxed);
    }

    /// Bytes came in. Between requests they are a head's: its clock starts with the first.
    fn read(&self) {
        let at = self.elapsed_ms();
        self.last.fetch_max(at, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.responding.load(Ordering::Relaxed) == 0
        {
            let _ =
                self.head_from
                    .compare_exchange(0, at + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The connection had a request answered before hyper took it over (the quick
    /// CONNECT path's failure): the keep-alive limits apply from now, not the first
    /// request's.
    pub(super) fn served_before(&self) {
        self.served.store(true, Ordering::Relaxed);
        self.touch();
    }

    /// A request (its head complete) is being handled until the returned guard drops.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        self.served.store(true, Ordering::Relaxed);
        self.head_from.store(0, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// A response body is going out until the returned guard drops: bytes the client
    /// sends meanwhile are not a head that is late.
    pub(super) fn responding(self: &Arc<Self>) -> Responding {
        self.responding.fetch_add(1, Ordering::Relaxed);
        Responding(self.clone())
    }

    /// Resolves when the connection broke a limit; the caller then closes it.
    ///
    /// A head that starts while the watchdog sleeps is due `head` after its first byte, so
    /// a sleep never longer than `head` ends before that: the watchdog then looks again
    /// and sleeps to it. Nothing wakes it per request (a timer set anew and a wake-up for
    /// every head cost more than the rest of this watch).
    pub(super) async fn expired(&self, limits: &Limits) -> &'static str {
        let most = limits.head.max(Duration::from_millis(1));
        loop {
            let now = Instant::now();
            let (deadline, why) = self.deadline(limits, now);
            if deadline <= now {
                return why;
            }
            tokio::time::sleep_until(deadline.min(now + most)).await;
        }
    }

    /// The nearest limit and what breaking it means.
    fn deadline(&self, limits: &Limits, now: Instant) -> (Instant, &'static str) {
        let ms = |v: &AtomicU64| Duration::from_millis(v.load(Ordering::Relaxed));
        if !self.served.load(Ordering::Relaxed) {
            return (
                self.start + limits.first_request,
                "no usable request in time",
            );
        }
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return (now + limits.idle, "idle keep-alive");
        }
        let idle = (self.start + ms(&self.last) + limits.idle, "idle keep-alive");
        let head_from = self.head_from.load(Ordering::Relaxed);
        if head_from == 0 || self.responding.load(Ordering::Relaxed) > 0 {
            return idle;
        }
        let head = self.start + Duration::from_millis(head_from - 1) + limits.head;
        if head < idle.0 {
            (head, "request head not complete in time")
        } else {
            idle
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

/// Marks a response body going out.
pub(super) struct Responding(Arc<Activity>);

impl Drop for Responding {
    fn drop(&mut self) {
        self.0.touch();
        self.0.responding.fetch_sub(1, Ordering::Relaxed);
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
            this.activity.read();
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

/// A response body that holds `_guard` until it is dropped, and keeps the body's size hint
/// (a `Content-Length` answer stays one; `map_frame` would make it chunked).
pub(super) struct Holding<G> {
    body: super::idle::Body,
    _guard: G,
}

impl<G> Holding<G> {
    pub(super) fn new(body: super::idle::Body, guard: G) -> Self {
        Holding {
            body,
            _guard: guard,
        }
    }
}

impl<G: Send + Unpin> hyper::body::Body for Holding<G> {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
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

    #[tokio::test(start_paused = true)]
    async fn a_head_must_complete_within_its_deadline_of_its_first_byte() {
        let limits = Limits::default();
        let a = Activity::new();
        drop(a.busy());
        let watchdog = {
            let (a, limits) = (a.clone(), limits.clone());
            tokio::spawn(async move { a.expired(&limits).await })
        };
        // Idle between requests is not a late head.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!watchdog.is_finished());
        // A byte every 5 s resets the idle timer, never the head's clock.
        let first = Instant::now();
        let trickle = {
            let a = a.clone();
            tokio::spawn(async move {
                loop {
                    a.read();
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            })
        };
        assert_eq!(watchdog.await.unwrap(), "request head not complete in time");
        trickle.abort();
        let took = first.elapsed();
        assert!(
            took >= Duration::from_secs(10) && took <= Duration::from_millis(10_002),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_during_a_request_or_a_response_body_start_no_head_clock() {
        let limits = Limits::default();
        let a = Activity::new();
        let busy = a.busy();
        a.read(); // a request body
        drop(busy);
        let body = a.responding();
        a.read(); // a client pipelining while its answer streams
        let (deadline, why) = a.deadline(&limits, Instant::now());
        assert_eq!(why, "idle keep-alive");
        assert!(deadline >= Instant::now() + Duration::from_secs(59));
        drop(body);
        // A complete head clears its clock.
        a.read();
        assert_eq!(
            a.deadline(&limits, Instant::now()).1,
            "request head not complete in time"
        );
        drop(a.busy());
        assert_eq!(a.deadline(&limits, Instant::now()).1, "idle keep-alive");
    }
}
