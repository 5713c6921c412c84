//! The response deadline of a plain-HTTP request (`response_timeout`): the time from the
//! request's last byte going upstream to the response head coming back. An upload that
//! takes long is not a slow response: for a body that streams, the clock starts when the
//! body has ended.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

/// Set once a request body has gone out to its end (or failed).
#[derive(Default)]
pub(super) struct BodyEnd {
    ended: AtomicBool,
    notify: Notify,
}

impl BodyEnd {
    fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.notify.notify_waiters();
        }
    }

    /// The body has gone out to its end (or failed).
    pub(super) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_ended() {
                return;
            }
            notified.await;
        }
    }
}

/// A request body that says when it has ended.
pub(super) struct Tracked<B> {
    inner: B,
    end: Arc<BodyEnd>,
}

impl<B> Tracked<B> {
    pub(super) fn new(inner: B, end: Arc<BodyEnd>) -> Tracked<B> {
        Tracked { inner, end }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.end.end();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        let end = self.inner.is_end_stream();
        if end {
            self.end.end();
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        // Dropped unfinished (the exchange failed): nothing more will be sent.
        self.end.end();
    }
}

/// `fut` (the response head), within `within` of the request body's end (`body`; none:
/// the whole request is already out, so from now). `None` when the deadline passed.
pub(super) async fn head_within<F: Future>(
    within: Duration,
    body: Option<&BodyEnd>,
    fut: F,
) -> Option<F::Output> {
    tokio::pin!(fut);
    if let Some(end) = body {
        tokio::select! {
            r = &mut fut => return Some(r),
            _ = end.wait() => {}
        }
    }
    tokio::time::timeout(within, fut).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body that ends when its sender is dropped.
    struct Upload(tokio::sync::oneshot::Receiver<()>);

    impl Body for Upload {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Pin::new(&mut self.0).poll(cx).map(|_| None)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_clock_starts_when_the_body_has_ended() {
        let end = Arc::new(BodyEnd::default());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut tracked = Tracked::new(Upload(rx), end.clone());
        let t0 = tokio::time::Instant::now();
        let head = head_within(Duration::from_secs(5), Some(&end), async {
            // An upload of 60 s, then a response head 4 s later: in time.
            tokio::time::sleep(Duration::from_secs(64)).await;
            "head"
        });
        let upload = async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(tx);
            assert!(tracked.frame().await.is_none());
        };
        let (got, ()) = tokio::join!(head, upload);
        assert_eq!(got, Some("head"));
        assert_eq!(t0.elapsed(), Duration::from_secs(64));
        // Without a body to wait for, the deadline counts from the call.
        let late = head_within(Duration::from_secs(5), None, async {
            tokio::time::sleep(Duration::from_secs(6)).await;
        })
        .await;
        assert_eq!(late, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_ends_never_starts_the_clock_but_its_drop_does() {
        let end = Arc::new(BodyEnd::default());
        let (_tx, rx) = tokio::sync::oneshot::channel();
        let tracked = Tracked::new(Upload(rx), end.clone());
        let waiting = head_within(
            Duration::from_secs(1),
            Some(&end),
            std::future::pending::<()>(),
        );
        tokio::pin!(waiting);
        let early = tokio::time::timeout(Duration::from_secs(100), &mut waiting).await;
        assert!(early.is_err(), "the clock started before the body ended");
        drop(tracked);
        let t0 = tokio::time::Instant::now();
        assert_eq!(waiting.await, None);
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
    }
}
