//! The `[[ban]]` rules applied to an answer on its way to the client (docs/ban-rules.md):
//! the head judged at once, and when a rule needs the body, its first bytes held (at most
//! the rules' `body_bytes`, at most `response_timeout`) and judged, then passed on ahead
//! of the rest, as they came.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper::{header, Response};

use crate::ban::{Ban, BanKind, BanRules, Screen};
use crate::dial::DialFailure;
use crate::health::{Phase, Reason};
use crate::retry_after::parse_retry_after;

/// Judge `resp`, an answer from `host` (as leases name it), by `rules`. The answer comes
/// back whole: what was held is sent first. Reading the held bytes stops after `within`
/// (the rules then judge what came by then).
pub(super) async fn screen<'r, B>(
    rules: &'r BanRules,
    host: &str,
    resp: Response<B>,
    within: Duration,
) -> (Response<Replay<B>>, Option<Ban<'r>>)
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    let (parts, body) = resp.into_parts();
    let mut body = Replay::new(body);
    let ban = match rules.screen(host, parts.status.as_u16(), &parts.headers) {
        Screen::Clean => None,
        Screen::Banned(ban) => Some(ban),
        Screen::NeedsBody(open) => {
            let held = body.hold(open.hold(), within).await;
            open.judge(&held)
        }
    };
    (Response::from_parts(parts, body), ban)
}

/// The report of an answer a rule matched: `destination_status` for a rule of statuses,
/// `body_mismatch` for one that looked at a header or the body, with the status, its
/// `Retry-After`, and the rule's name in the detail.
pub(super) fn rule_failure<B>(ban: &Ban<'_>, resp: &Response<B>) -> DialFailure {
    let status = resp.status().as_u16();
    let reason = match ban.kind {
        BanKind::Status => Reason::DestinationStatus,
        BanKind::Content => Reason::BodyMismatch,
    };
    let phase = match ban.by_body {
        true => Phase::ResponseBody,
        false => Phase::ResponseHead,
    };
    let mut f = DialFailure::new(
        reason,
        phase,
        ban.detail(&format!("destination answered {status}")),
    );
    f.status = Some(status);
    f.retry_after = resp
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    f
}

/// A body whose first frames were read ahead (to be judged) and are given out again
/// first; then the rest of the body, untouched.
pub(super) struct Replay<B: HttpBody> {
    held: VecDeque<Frame<Bytes>>,
    /// Bytes of data held.
    held_len: usize,
    /// The error that stopped the read ahead, given out after the held frames.
    failed: Option<B::Error>,
    /// The body ended while it was read ahead.
    ended: bool,
    inner: B,
}

impl<B: HttpBody<Data = Bytes> + Unpin> Replay<B>
where
    B::Error: Unpin,
{
    fn new(inner: B) -> Replay<B> {
        Replay {
            held: VecDeque::new(),
            held_len: 0,
            failed: None,
            ended: false,
            inner,
        }
    }

    /// Read ahead until `limit` bytes of data, the end of the body, an error, or
    /// `within`; the data held, joined (at most `limit` bytes of it: a frame that
    /// crosses the limit is held whole but looked at only up to it).
    async fn hold(&mut self, limit: usize, within: Duration) -> Vec<u8> {
        let mut joined = Vec::new();
        let read = async {
            while joined.len() < limit {
                match self.inner.frame().await {
                    None => {
                        self.ended = true;
                        break;
                    }
                    Some(Err(e)) => {
                        self.failed = Some(e);
                        break;
                    }
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            let take = data.len().min(limit - joined.len());
                            joined.extend_from_slice(&data[..take]);
                            self.held_len += data.len();
                        }
                        self.held.push_back(frame);
                    }
                }
            }
        };
        // What came by the deadline is judged; the rest streams when the client reads.
        let _ = tokio::time::timeout(within, read).await;
        joined
    }
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for Replay<B>
where
    B::Error: Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.held.pop_front() {
            if let Some(d) = frame.data_ref() {
                this.held_len -= d.len();
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(e) = this.failed.take() {
            this.ended = true;
            return Poll::Ready(Some(Err(e)));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_empty() && self.failed.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let rest = match self.ended || self.failed.is_some() {
            true => SizeHint::with_exact(0),
            false => self.inner.size_hint(),
        };
        let held = self.held_len as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + held);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ban::BanEntry;
    use http_body_util::{Full, StreamBody};

    fn frames(parts: &[&'static [u8]]) -> impl HttpBody<Data = Bytes, Error = String> + Unpin {
        let items: Vec<Result<Frame<Bytes>, String>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        StreamBody::new(futures_util::stream::iter(items))
    }

    fn rules(body_bytes: usize) -> BanRules {
        BanRules::compile(vec![BanEntry {
            name: Some("n".into()),
            body: Some("needle".into()),
            body_bytes: Some(body_bytes),
            ..BanEntry::default()
        }])
        .unwrap()
    }

    /// Screen `resp` by a body rule of `limit` bytes: the answer, and whether it matched.
    async fn run<B>(
        limit: usize,
        resp: Response<B>,
        within: Duration,
    ) -> (Response<Replay<B>>, bool)
    where
        B: HttpBody<Data = Bytes> + Unpin,
        B::Error: Unpin,
    {
        let rules = rules(limit);
        let (resp, ban) = screen(&rules, "h", resp, within).await;
        let banned = ban.is_some();
        (resp, banned)
    }

    async fn all<B: HttpBody<Data = Bytes> + Unpin>(b: B) -> Vec<u8>
    where
        B::Error: std::fmt::Debug,
    {
        b.collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn the_held_prefix_goes_out_first_and_the_rest_unchanged() {
        let parts: &[&'static [u8]] = &[b"hay", b"stack nee", b"dle and ", b"more"];
        // (body_bytes, judged a ban): the needle ends at byte 15.
        for (limit, banned) in [
            (1, false),
            (12, false),
            (14, false),
            (15, true),
            (1000, true),
        ] {
            let resp = Response::new(frames(parts));
            let (resp, ban) = run(limit, resp, Duration::from_secs(5)).await;
            assert_eq!(ban, banned, "{limit}");
            let hint = resp.body().size_hint().lower();
            assert!(hint <= 24, "{limit}: {hint}");
            assert_eq!(all(resp.into_body()).await, b"haystack needle and more");
        }
    }

    #[tokio::test]
    async fn an_exact_length_stays_exact() {
        let body = Full::new(Bytes::from_static(b"a needle here"));
        let (resp, ban) = run(5, Response::new(body), Duration::from_secs(5)).await;
        assert!(!ban);
        assert_eq!(resp.body().size_hint().exact(), Some(13));
        let (resp, ban) = run(
            100,
            Response::new(Full::new(Bytes::from_static(b"a needle"))),
            Duration::from_secs(5),
        )
        .await;
        assert!(ban);
        assert_eq!(resp.body().size_hint().exact(), Some(8));
        assert!(!resp.body().is_end_stream());
        assert_eq!(all(resp.into_body()).await, b"a needle");
    }

    #[tokio::test]
    async fn an_error_while_holding_comes_after_the_held_bytes() {
        let items: Vec<Result<Frame<Bytes>, String>> = vec![
            Ok(Frame::data(Bytes::from_static(b"needle"))),
            Err("cut".into()),
        ];
        let body = StreamBody::new(futures_util::stream::iter(items));
        let (resp, ban) = run(100, Response::new(body), Duration::from_secs(5)).await;
        assert!(ban);
        let mut b = resp.into_body();
        let first = b.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "needle");
        assert_eq!(b.frame().await.unwrap().unwrap_err(), "cut");
        assert!(b.frame().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_is_judged_on_what_came() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, String>>(4);
        tx.send(Ok(Frame::data(Bytes::from_static(b"need"))))
            .await
            .unwrap();
        let body = StreamBody::new(tokio_stream_rx(rx));
        let (resp, ban) = run(100, Response::new(body), Duration::from_secs(30)).await;
        assert!(!ban);
        tx.send(Ok(Frame::data(Bytes::from_static(b"le"))))
            .await
            .unwrap();
        drop(tx);
        assert_eq!(all(resp.into_body()).await, b"needle");
    }

    fn tokio_stream_rx<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures_util::Stream<Item = T> + Unpin {
        Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }

    #[test]
    fn reports_name_the_rule() {
        let rules = BanRules::compile(vec![
            BanEntry {
                name: Some("slow".into()),
                status: Some(vec![429]),
                ..BanEntry::default()
            },
            BanEntry {
                name: Some("cf".into()),
                header: Some("cf-mitigated: challenge".into()),
                ..BanEntry::default()
            },
        ])
        .unwrap();
        let resp = Response::builder()
            .status(429)
            .header("retry-after", "7")
            .body(())
            .unwrap();
        let Screen::Banned(ban) = rules.screen("h", 429, resp.headers()) else {
            panic!();
        };
        let f = rule_failure(&ban, &resp);
        assert_eq!(
            (f.reason, f.phase, f.status, f.retry_after),
            (
                Reason::DestinationStatus,
                Phase::ResponseHead,
                Some(429),
                Some(Duration::from_secs(7))
            )
        );
        assert_eq!(f.detail, "ban rule slow: destination answered 429");
        let resp = Response::builder()
            .status(200)
            .header("cf-mitigated", "challenge")
            .body(())
            .unwrap();
        let Screen::Banned(ban) = rules.screen("h", 200, resp.headers()) else {
            panic!();
        };
        let f = rule_failure(&ban, &resp);
        assert_eq!(
            (f.reason, f.phase),
            (Reason::BodyMismatch, Phase::ResponseHead)
        );
    }
}
