//! HTTP CONNECT through http(s) proxies, and what an HTTP proxy's answers mean.

use std::fmt::Write as _;
use std::io;
use std::time::SystemTime;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::progress::Progress;
use super::{auth::basic_auth, find, BoxIo, Dest, DialFailure};
use crate::endpoint::ProxyUrl;
use crate::health::{Phase, Reason};
use crate::retry_after::parse_retry_after;

/// A proxy's reply head larger than this is treated as a protocol error.
const MAX_PROXY_HEAD: usize = 64 * 1024;

/// The `CONNECT` request for `dest` through `proxy`: one buffer, written once, so a
/// tunnel's request costs no allocation beyond it. Only what the tunnel needs: most
/// tunnels carry a client's traffic, and a `User-Agent` here would tell every proxy
/// provider that a pool manager sits in front of it (the request inside the tunnel, a
/// probe's included, carries its own).
pub(super) fn request(proxy: &ProxyUrl, dest: &Dest) -> String {
    let mut req = String::with_capacity(256);
    let _ = write!(req, "CONNECT {dest} HTTP/1.1\r\nHost: {dest}\r\n");
    if let Some(auth) = basic_auth(proxy) {
        let _ = write!(req, "Proxy-Authorization: {auth}\r\n");
    }
    req.push_str("\r\n");
    req
}

/// Send what of the `CONNECT` request is still `unsent` (the TCP connect may have sent it
/// already) and read the proxy's answer.
pub(super) async fn connect(
    io: BoxIo,
    unsent: &[u8],
    progress: &Progress,
) -> Result<(BoxIo, u16, Vec<u8>), DialFailure> {
    let phase = Phase::ProxyHandshake;
    // The reader keeps whatever follows the head; it belongs to the tunnel. A reply head
    // is rarely longer than a few hundred bytes.
    let mut io = BufReader::with_capacity(4096, io);
    if !unsent.is_empty() {
        io.write_all(unsent)
            .await
            .map_err(|e| io_failure(&e, phase, "sending CONNECT"))?;
        io.flush()
            .await
            .map_err(|e| io_failure(&e, phase, "sending CONNECT"))?;
    }
    // An HTTP proxy has no greeting: from here on it is trying to reach the target.
    progress.asked();
    let head = read_proxy_head(&mut io, progress).await?;
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let status = match resp.parse(&head) {
        Ok(httparse::Status::Complete(_)) => resp.code.unwrap_or(0),
        Ok(httparse::Status::Partial) => {
            return Err(DialFailure::new(
                Reason::ProxyProtocolError,
                phase,
                "incomplete CONNECT reply",
            ))
        }
        Err(e) => {
            return Err(DialFailure::new(
                Reason::ProxyProtocolError,
                phase,
                format!("unparsable CONNECT reply: {e}"),
            ))
        }
    };
    let squid = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-squid-error"))
        .and_then(|h| std::str::from_utf8(h.value).ok());
    match connect_answer_reason(status, resp.reason.unwrap_or(""), squid) {
        // The reader's buffer is freed unless the proxy already sent tunnel bytes: a
        // tunnel may stay open for hours, mostly idle.
        None if io.buffer().is_empty() => Ok((io.into_inner(), status, head)),
        None => Ok((Box::new(io), status, head)),
        Some(reason) => {
            let retry_after = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("retry-after"))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now()));
            let reason_phrase = resp.reason.unwrap_or("");
            let mut f = DialFailure::new(
                reason,
                phase,
                format!("proxy answered CONNECT with {status} {reason_phrase}")
                    .trim_end()
                    .to_string(),
            );
            f.status = Some(status);
            f.retry_after = retry_after;
            Err(f)
        }
    }
}

/// The value of header `name` in a proxy's reply `head`, if it has one.
pub fn reply_header<'h>(head: &'h [u8], name: &str) -> Option<&'h [u8]> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    resp.parse(head).ok()?;
    resp.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

/// Read the proxy's reply head, consuming nothing past its blank line.
async fn read_proxy_head(
    io: &mut BufReader<BoxIo>,
    progress: &Progress,
) -> Result<Vec<u8>, DialFailure> {
    let phase = Phase::ProxyHandshake;
    let mut head: Vec<u8> = Vec::new();
    loop {
        let (n, end) = {
            let avail = io
                .fill_buf()
                .await
                .map_err(|e| io_failure(&e, phase, "reading the CONNECT reply"))?;
            if avail.is_empty() {
                return Err(DialFailure::new(
                    Reason::ConnectionReset,
                    phase,
                    format!(
                        "proxy closed the connection after {} bytes of its CONNECT reply",
                        head.len()
                    ),
                ));
            }
            progress.answering();
            let from = head.len().saturating_sub(3);
            head.extend_from_slice(avail);
            let end = find(&head[from..], b"\r\n\r\n").map(|i| from + i + 4);
            (avail.len(), end)
        };
        match end {
            Some(end) => {
                let before = head.len() - n;
                io.consume(end - before);
                head.truncate(end);
                return Ok(head);
            }
            None => io.consume(n),
        }
        // Fail fast on garbage instead of waiting for a blank line that never comes.
        let mut headers = [httparse::EMPTY_HEADER; 64];
        if let Err(e) = httparse::Response::new(&mut headers).parse(&head) {
            return Err(DialFailure::new(
                Reason::ProxyProtocolError,
                phase,
                format!("unparsable CONNECT reply: {e}"),
            ));
        }
        if head.len() > MAX_PROXY_HEAD {
            return Err(DialFailure::new(
                Reason::ProxyProtocolError,
                phase,
                "CONNECT reply head too large",
            ));
        }
    }
}

fn io_failure(e: &io::Error, phase: Phase, doing: &str) -> DialFailure {
    DialFailure::new(Reason::ConnectionReset, phase, format!("{doing}: {e}"))
}

/// True when an answer to an absolute-form request is the proxy refusing our credentials.
///
/// 407 only ever comes from a proxy. Some proxies (tinyproxy) answer 401 instead; a 401
/// the proxy merely forwarded from the destination carries the `Via` header that RFC 9110
/// requires of forwarded messages, so a 401 without one is taken as the proxy's own.
pub fn proxy_auth_answer(status: u16, headers: &hyper::HeaderMap) -> bool {
    status == 407 || (status == 401 && !headers.contains_key(hyper::header::VIA))
}

/// The reason for a non-2xx answer to CONNECT; `None` when the tunnel is up. docs/blame.md
/// has the table of whom each counts against.
pub fn connect_status_reason(status: u16) -> Option<Reason> {
    match status {
        200..=299 => None,
        // Some proxies send 401 where 407 is meant; 511 is a captive portal's "log in".
        401 | 407 | 511 => Some(Reason::ProxyAuthRejected),
        // 501: the proxy does not do CONNECT (for this target, or at all: an endpoint
        // that refuses every target others reach is escalated).
        501 => Some(Reason::ProxyRejected),
        // The proxy tried and could not get there (tinyproxy's "500 Unable to connect",
        // squid's 503, a 502 or 504): judged against the other endpoints.
        500..=599 => Some(Reason::UpstreamUnreachable),
        // 400, 403, 405 and the rest: the proxy's own policy for this target.
        _ => Some(Reason::ProxyRejected),
    }
}

/// The reason for a failed CONNECT answer, where the answer's words can say more than its
/// status: a 5xx whose reason phrase or squid's `X-Squid-Error` says the name did not
/// resolve is `dns_failed`.
pub fn connect_answer_reason(
    status: u16,
    phrase: &str,
    squid_error: Option<&str>,
) -> Option<Reason> {
    let reason = connect_status_reason(status)?;
    if reason == Reason::UpstreamUnreachable && says_unresolved(phrase, squid_error) {
        return Some(Reason::DnsFailed);
    }
    Some(reason)
}

fn says_unresolved(phrase: &str, squid_error: Option<&str>) -> bool {
    if squid_error.is_some_and(|e| e.trim_start().starts_with("ERR_DNS_FAIL")) {
        return true;
    }
    let p = phrase.to_ascii_lowercase();
    [
        "dns",
        "resolv",
        "name not known",
        "unknown host",
        "no such host",
        "host not found",
    ]
    .iter()
    .any(|w| p.contains(w))
}

/// The reason when an HTTP proxy's answer to an absolute-form request is its own failure
/// to reach the destination rather than the destination's answer: a 5xx without the `Via`
/// header every forwarded response carries (RFC 9110 §7.6.3), or with squid's
/// `X-Squid-Error`. `None`: the answer is the destination's.
pub fn proxy_failure_answer(status: u16, headers: &hyper::HeaderMap) -> Option<Reason> {
    if !(500..=599).contains(&status) {
        return None;
    }
    let squid = headers.get("x-squid-error").and_then(|v| v.to_str().ok());
    if headers.contains_key(hyper::header::VIA) && squid.is_none() {
        return None;
    }
    let reason = if says_unresolved("", squid) {
        Reason::DnsFailed
    } else {
        Reason::UpstreamUnreachable
    };
    Some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn a_reply_header_is_found_by_any_case_and_only_in_a_whole_head() {
        let head = b"HTTP/1.1 200 OK\r\nX-Exit-Ip: 203.0.113.7\r\nVia: p\r\n\r\n";
        assert_eq!(reply_header(head, "x-exit-ip"), Some(&b"203.0.113.7"[..]));
        assert_eq!(reply_header(head, "X-EXIT-IP"), Some(&b"203.0.113.7"[..]));
        assert_eq!(reply_header(head, "x-other"), None);
        assert_eq!(reply_header(b"", "x-exit-ip"), None);
        assert_eq!(reply_header(b"garbage\r\n\r\n", "x-exit-ip"), None);
    }

    #[test]
    fn connect_statuses() {
        use Reason::*;
        let table = [
            (200, None),
            (204, None),
            (407, Some(ProxyAuthRejected)),
            (401, Some(ProxyAuthRejected)),
            (511, Some(ProxyAuthRejected)),
            (400, Some(ProxyRejected)),
            (403, Some(ProxyRejected)),
            (405, Some(ProxyRejected)),
            (429, Some(ProxyRejected)),
            (301, Some(ProxyRejected)),
            (501, Some(ProxyRejected)),
            (500, Some(UpstreamUnreachable)),
            (502, Some(UpstreamUnreachable)),
            (503, Some(UpstreamUnreachable)),
            (504, Some(UpstreamUnreachable)),
            (599, Some(UpstreamUnreachable)),
        ];
        for (status, want) in table {
            assert_eq!(connect_status_reason(status), want, "{status}");
        }
    }

    #[test]
    fn an_answer_that_says_the_name_did_not_resolve_is_dns_failed() {
        use Reason::*;
        let table = [
            (502, "Bad Gateway", None, UpstreamUnreachable),
            (500, "Unable to connect", None, UpstreamUnreachable),
            (502, "DNS resolution failed", None, DnsFailed),
            (504, "Could not resolve host", None, DnsFailed),
            (
                503,
                "Service Unavailable",
                Some("ERR_DNS_FAIL 0"),
                DnsFailed,
            ),
            (
                503,
                "Service Unavailable",
                Some("ERR_CONNECT_FAIL 111"),
                UpstreamUnreachable,
            ),
            // Only failures to reach are refined: a refusal stays one.
            (403, "DNS blocked", None, ProxyRejected),
        ];
        for (status, phrase, squid, want) in table {
            assert_eq!(
                connect_answer_reason(status, phrase, squid),
                Some(want),
                "{status} {phrase}"
            );
        }
    }

    #[test]
    fn a_5xx_the_proxy_wrote_itself_is_its_failure_to_reach() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut m = hyper::HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_static(v));
            }
            m
        };
        let via = [("via", "1.1 proxy")];
        // tinyproxy's own "500 Unable to connect" page carries no Via.
        assert_eq!(
            proxy_failure_answer(500, &h(&[])),
            Some(Reason::UpstreamUnreachable)
        );
        assert_eq!(
            proxy_failure_answer(502, &h(&[])),
            Some(Reason::UpstreamUnreachable)
        );
        // The destination's own 5xx, forwarded, carries Via.
        assert_eq!(proxy_failure_answer(503, &h(&via)), None);
        // Below 500 the answer is never taken for the proxy's failure to reach.
        assert_eq!(proxy_failure_answer(404, &h(&[])), None);
        assert_eq!(proxy_failure_answer(403, &h(&[])), None);
        // squid marks its own error pages, Via or not.
        let squid_dns = [("via", "1.1 squid"), ("x-squid-error", "ERR_DNS_FAIL 0")];
        assert_eq!(
            proxy_failure_answer(503, &h(&squid_dns)),
            Some(Reason::DnsFailed)
        );
        let squid_conn = [
            ("via", "1.1 squid"),
            ("x-squid-error", "ERR_CONNECT_FAIL 111"),
        ];
        assert_eq!(
            proxy_failure_answer(503, &h(&squid_conn)),
            Some(Reason::UpstreamUnreachable)
        );
    }

    #[test]
    fn absolute_form_auth_answers() {
        let mut h = hyper::HeaderMap::new();
        assert!(proxy_auth_answer(407, &h));
        assert!(proxy_auth_answer(401, &h));
        assert!(!proxy_auth_answer(403, &h));
        h.insert(hyper::header::VIA, HeaderValue::from_static("1.1 proxy"));
        assert!(proxy_auth_answer(407, &h));
        assert!(
            !proxy_auth_answer(401, &h),
            "a forwarded 401 is the destination's"
        );
    }

    #[tokio::test]
    async fn bytes_past_the_head_stay_in_the_tunnel() {
        let (mut server, client) = tokio::io::duplex(4096);
        let proxy = ProxyUrl::parse("http://u:p@h:1").unwrap();
        let dest = Dest::new("example.com", 443);
        let srv = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 1024];
            let n = server.read(&mut buf).await.unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            server
                .write_all(b"HTTP/1.1 200 OK\r\n\r\nearly bytes")
                .await
                .unwrap();
            req
        });
        let req = request(&proxy, &dest);
        let (mut io, status, _) = connect(Box::new(client), req.as_bytes(), &Progress::default())
            .await
            .unwrap();
        assert_eq!(status, 200);
        let req = srv.await.unwrap();
        // Only what the tunnel needs: no User-Agent, nothing of a client's.
        assert_eq!(
            req,
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\
             Proxy-Authorization: Basic dTpw\r\n\r\n"
        );
        let mut got = [0u8; 11];
        tokio::io::AsyncReadExt::read_exact(&mut io, &mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"early bytes");
    }

    #[tokio::test]
    async fn without_early_bytes_later_bytes_pass_both_ways() {
        let (mut server, client) = tokio::io::duplex(4096);
        let proxy = ProxyUrl::parse("http://h:1").unwrap();
        let dest = Dest::new("example.com", 443);
        let srv = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 1024];
            let _ = server.read(&mut buf).await.unwrap();
            server.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
            server
        });
        let req = request(&proxy, &dest);
        let (mut io, status, _) = connect(Box::new(client), req.as_bytes(), &Progress::default())
            .await
            .unwrap();
        assert_eq!(status, 200);
        // Bytes sent after the reply (the destination's, later) arrive through the
        // unwrapped stream, and bytes written reach the proxy.
        let mut server = srv.await.unwrap();
        server.write_all(b"later").await.unwrap();
        let mut got = [0u8; 5];
        tokio::io::AsyncReadExt::read_exact(&mut io, &mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"later");
        io.write_all(b"up").await.unwrap();
        let mut up = [0u8; 2];
        tokio::io::AsyncReadExt::read_exact(&mut server, &mut up)
            .await
            .unwrap();
        assert_eq!(&up, b"up");
    }
}
