//! The exit check (docs/exit.md): through an endpoint, ask a page for the address the
//! far side sees, or read the header a provider sets. It is not a health check: whatever
//! goes wrong, the address is unknown and nothing else changes.

use std::net::IpAddr;

use hyper::header::HeaderName;

use super::prober::{Fetched, ProbeError, Prober};
use crate::config::{ExitConfig, ProbeConfig};
use crate::dial::reply_header;
use crate::endpoint::ProxyUrl;

/// An address page's answer is a few dozen bytes; anything past this is not one.
pub const MAX_EXIT_BODY: usize = 4096;

/// Learns exit addresses for one pool; cheap to clone.
#[derive(Clone)]
pub struct ExitChecker {
    fetcher: Prober,
    header: Option<HeaderName>,
}

/// What one exit check learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitCheck {
    Learned(IpAddr),
    /// Why the address is unknown (no credentials: the URL is never in it).
    Unknown(String),
}

impl ExitChecker {
    /// The checker of a pool with `[pool.exit]`: its page asked with the probe's timeout
    /// and extra roots (the probe URL when only a header is set).
    pub fn new(exit: &ExitConfig, probe: &ProbeConfig) -> Result<ExitChecker, ProbeError> {
        let cfg = ProbeConfig {
            url: exit.url.clone().or_else(|| probe.url.clone()),
            method: "GET".into(),
            max_body: MAX_EXIT_BODY,
            timeout: probe.timeout,
            ca_file: probe.ca_file.clone(),
            headers: if exit.url.is_some() {
                Default::default()
            } else {
                probe.headers.clone()
            },
            ..ProbeConfig::default()
        };
        let header = match &exit.header {
            Some(h) => {
                Some(
                    HeaderName::from_bytes(h.as_bytes()).map_err(|e| ProbeError::Request {
                        what: format!("exit header {h:?}"),
                        msg: e.to_string(),
                    })?,
                )
            }
            None => None,
        };
        Ok(ExitChecker {
            fetcher: Prober::new(&cfg)?,
            header,
        })
    }

    /// Learn the exit address of `proxy`.
    pub async fn check(&self, proxy: &ProxyUrl) -> ExitCheck {
        match self.fetcher.fetch(proxy).await {
            Ok(f) => self.read(&f),
            Err(f) => ExitCheck::Unknown(format!(
                "the check failed: {} at {}",
                f.reason.map_or("failure", |r| r.as_str()),
                f.phase.map_or("-", |p| p.as_str())
            )),
        }
    }

    fn read(&self, f: &Fetched) -> ExitCheck {
        if let Some(h) = &self.header {
            // The proxy's own answer to CONNECT first (an https page's answer comes through
            // TLS the proxy cannot touch: its headers are the site's), then the answer.
            let value = reply_header(&f.connect_head, h.as_str())
                .or_else(|| f.headers.get(h).map(|v| v.as_bytes()));
            return match value {
                Some(v) => parse_address(v),
                None => ExitCheck::Unknown(format!("the answer has no {h} header")),
            };
        }
        if f.over {
            return ExitCheck::Unknown(format!("the answer is longer than {MAX_EXIT_BODY} bytes"));
        }
        parse_address(&f.body)
    }
}

/// An address page's answer: the address as text, or JSON with an `"ip"` string.
pub fn parse_address(body: &[u8]) -> ExitCheck {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let ip = text.parse::<IpAddr>().ok().or_else(|| {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        v.get("ip")?.as_str()?.trim().parse().ok()
    });
    match ip.map(|ip| ip.to_canonical()) {
        Some(ip) if !ip.is_unspecified() && !ip.is_multicast() => ExitCheck::Learned(ip),
        Some(ip) => ExitCheck::Unknown(format!("{ip} is no address a site could see")),
        None => ExitCheck::Unknown("the answer holds no address".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_as_an_address_or_unknown() {
        let learned = |s: &str| ExitCheck::Learned(s.parse().unwrap());
        let table: &[(&[u8], Option<&str>)] = &[
            (b"198.51.100.7\n", Some("198.51.100.7")),
            (b"  2001:db8::1 ", Some("2001:db8::1")),
            (b"{\"ip\": \"203.0.113.9\"}", Some("203.0.113.9")),
            (
                b"{\"ip\":\"::ffff:10.0.0.1\",\"country\":\"x\"}",
                Some("10.0.0.1"),
            ),
            (b"::ffff:192.0.2.1", Some("192.0.2.1")),
            (b"", None),
            (b"<html>hello</html>", None),
            (b"{\"ip\": 42}", None),
            (b"{\"addr\": \"1.2.3.4\"}", None),
            (b"1.2.3.4 5.6.7.8", None),
            (b"0.0.0.0", None),
            (b"224.0.0.1", None),
            (b"\xff\xfe1.2.3.4", None),
        ];
        for (body, want) in table {
            let got = parse_address(body);
            match want {
                Some(ip) => assert_eq!(got, learned(ip), "{body:?}"),
                None => assert!(matches!(got, ExitCheck::Unknown(_)), "{body:?}: {got:?}"),
            }
        }
    }

    /// With a header, the proxy's answer to CONNECT is read first (an https page's answer
    /// is the site's, out of the provider's reach), then the answer; the body never.
    #[test]
    fn a_provider_header_is_read_from_the_connect_answer_then_the_answer() {
        let exit = ExitConfig {
            url: Some("https://ip.test/".into()),
            header: Some("x-exit-ip".into()),
            ..ExitConfig::default()
        };
        let checker = ExitChecker::new(&exit, &ProbeConfig::default()).unwrap();
        let fetched = |answer: Option<&str>, connect: &str| {
            let mut headers = hyper::HeaderMap::new();
            if let Some(v) = answer {
                headers.insert("x-exit-ip", v.parse().unwrap());
            }
            Fetched {
                headers,
                body: b"192.0.2.99".to_vec(),
                over: false,
                connect_head: connect.as_bytes().to_vec(),
            }
        };
        let with = "HTTP/1.1 200 Connection established\r\nX-Exit-IP: 198.51.100.2\r\n\r\n";
        let without = "HTTP/1.1 200 Connection established\r\n\r\n";
        let table = [
            (Some("198.51.100.1"), with, Some("198.51.100.2")),
            (Some("198.51.100.1"), without, Some("198.51.100.1")),
            (None, with, Some("198.51.100.2")),
            (None, without, None),
            (None, "", None),
            (Some("not an address"), without, None),
            (Some("not an address"), with, Some("198.51.100.2")),
        ];
        for (answer, connect, want) in table {
            let got = checker.read(&fetched(answer, connect));
            match want {
                Some(ip) => assert_eq!(got, ExitCheck::Learned(ip.parse().unwrap())),
                None => assert!(matches!(got, ExitCheck::Unknown(_)), "{got:?}"),
            }
        }
    }
}
