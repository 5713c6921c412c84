//! What crosses the gateway in headers: hop-by-hop ones stay on their hop, the gateway's
//! own (`X-Proxypool-*`) are its alone, `Host` comes from the request target.

use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Uri, Version};

use super::idle::Body;
use crate::dial;
use crate::endpoint::ProxyUrl;

/// The request as sent upstream: absolute form with the proxy's credentials to a forward
/// proxy (`proxy` set), origin form inside a tunnel; `Connection: close` unless the
/// connection is to be kept. `Host` is always the request target's host and port (RFC
/// 9112 §3.2.2), never what the client wrote: a name-based virtual host must serve the
/// site the URL names. Userinfo in the URL goes nowhere.
pub(super) fn upstream_request(
    parts: &Parts,
    body: Body,
    proxy: Option<&ProxyUrl>,
    keep: bool,
) -> Request<Body> {
    let mut out = Request::new(body);
    *out.method_mut() = parts.method.clone();
    *out.version_mut() = Version::HTTP_11;
    *out.headers_mut() = parts.headers.clone();
    let host = host_port(&parts.uri);
    *out.uri_mut() = if proxy.is_some() {
        format!("http://{host}{}", dial::origin_form(&parts.uri))
            .parse()
            .unwrap_or_else(|_| parts.uri.clone())
    } else {
        dial::origin_form(&parts.uri)
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"))
    };
    let h = out.headers_mut();
    match HeaderValue::from_str(&host) {
        Ok(v) => {
            h.insert(header::HOST, v);
        }
        Err(_) => {
            h.remove(header::HOST);
        }
    }
    if let Some(auth) = proxy.and_then(dial::basic_auth) {
        if let Ok(v) = HeaderValue::from_str(&auth) {
            h.insert(header::PROXY_AUTHORIZATION, v);
        }
    }
    if !keep {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    out
}

/// A response whose body length cannot be told: `Content-Length` and `Transfer-Encoding`
/// both (a request-smuggling shape; RFC 9112 §6.3 has a proxy refuse it).
pub(super) fn framing_conflict(h: &HeaderMap) -> bool {
    h.contains_key(header::TRANSFER_ENCODING) && h.contains_key(header::CONTENT_LENGTH)
}

/// The message says its connection closes after it (`Connection: close`).
pub(super) fn closes(h: &HeaderMap) -> bool {
    h.get_all(header::CONNECTION)
        .iter()
        .any(|v| names_close(v.as_bytes()))
}

/// A `Connection` header value that has the `close` token.
pub(super) fn names_close(value: &[u8]) -> bool {
    value
        .split(|b| *b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
}

/// `host[:port]` of an absolute URL as `Host` wants it: the port only when the URL has one,
/// an IPv6 address in brackets, no userinfo.
pub(super) fn host_port(uri: &Uri) -> String {
    let host = uri.host().unwrap_or_default();
    match uri.port_u16() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

/// Take out every `X-Proxypool-*` header.
pub(super) fn strip_own(h: &mut HeaderMap) {
    // Most messages have none: nothing is collected then.
    let own = |n: &HeaderName| {
        n.as_str()
            .get(..OWN_PREFIX.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(OWN_PREFIX))
    };
    if !h.keys().any(own) {
        return;
    }
    let names: Vec<HeaderName> = h.keys().filter(|n| own(n)).cloned().collect();
    for n in names {
        h.remove(n);
    }
}

/// The gateway's own header names start with this (`answer::ENDPOINT_HEADER`, …).
const OWN_PREFIX: &str = "x-proxypool-";

pub(super) fn proxy_auth(status: u16, headers: &HeaderMap) -> bool {
    dial::proxy_auth_answer(status, headers)
}

/// Takes out the headers of one hop. `TE: trailers` is the exception: it says the client
/// takes trailers (gRPC needs them), which every hop of the way must carry on (the only
/// `TE` HTTP/2 allows), so it goes on as `trailers` alone.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
    let trailers = h
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("trailers")
        });
    // Headers the Connection header names are hop-by-hop too (RFC 9110 §7.6.1).
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        h.remove(n);
    }
    for n in [
        header::CONNECTION,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
    ] {
        h.remove(n);
    }
    h.remove("keep-alive");
    h.remove("proxy-connection");
    if trailers {
        h.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::answer::empty;

    #[test]
    fn hop_by_hop_headers_stay_on_their_hop() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret-Hop"),
            ("x-secret-hop", "1"),
            ("proxy-authorization", "Basic Zm9vOmJhcg=="),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("te", "gzip"),
            ("host", "example.com"),
            ("cookie", "a=b"),
        ] {
            h.insert(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["cookie", "host"]);
    }

    #[test]
    fn te_trailers_goes_on_alone_whatever_else_te_named() {
        for (te, connection, kept) in [
            ("trailers", None, Some("trailers")),
            ("gzip, Trailers", Some("te"), Some("trailers")),
            (
                "trailers;q=0.5, deflate",
                Some("TE, keep-alive"),
                Some("trailers"),
            ),
            ("gzip", None, None),
            ("trailersx", None, None),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::TE, HeaderValue::from_static(te));
            if let Some(c) = connection {
                h.insert(header::CONNECTION, HeaderValue::from_static(c));
            }
            strip_hop_by_hop(&mut h);
            let got = h.get(header::TE).map(|v| v.to_str().unwrap());
            assert_eq!(got, kept, "TE: {te}, Connection: {connection:?}");
            assert!(h.get(header::CONNECTION).is_none());
        }
    }

    #[test]
    fn own_headers_are_taken_out_whatever_their_case() {
        let mut h = HeaderMap::new();
        for k in [
            "x-proxypool-error",
            "X-ProxyPool-Endpoint",
            "x-proxypool-",
            "x-proxy",
            "host",
        ] {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_static("1"),
            );
        }
        strip_own(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort();
        assert_eq!(left, ["host", "x-proxy"]);
    }

    #[test]
    fn host_comes_from_the_url_and_only_from_it() {
        let parts = |url: &str, host: &str| {
            let (p, _) = Request::builder()
                .uri(url)
                .header("host", host)
                .body(())
                .unwrap()
                .into_parts();
            p
        };
        let p = parts("http://u:pw@127.0.0.1:8080/a?b=1", "evil.example");
        let tunnel = upstream_request(&p, empty(), None, true);
        assert_eq!(tunnel.headers()[header::HOST], "127.0.0.1:8080");
        assert_eq!(tunnel.uri(), "/a?b=1");
        let proxy = ProxyUrl::parse("http://127.0.0.1:3128").unwrap();
        let fwd = upstream_request(&p, empty(), Some(&proxy), false);
        assert_eq!(fwd.uri(), "http://127.0.0.1:8080/a?b=1");
        assert_eq!(fwd.headers()[header::HOST], "127.0.0.1:8080");
        assert_eq!(fwd.headers()[header::CONNECTION], "close");
        let p = parts("http://Shop.Example/", "x");
        let r = upstream_request(&p, empty(), None, true);
        assert_eq!(r.headers()[header::HOST], "Shop.Example");
        let p = parts("http://[::1]:81/", "x");
        assert_eq!(
            upstream_request(&p, empty(), None, true).headers()[header::HOST],
            "[::1]:81"
        );
    }
}
