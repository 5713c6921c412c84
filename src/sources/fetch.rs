//! A source's list: fetched over HTTP(S), read from a file or a command's output, and
//! parsed (one URL a line, or a JSON array of URLs or of objects with tags).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;

use crate::config::{SourceConfig, SourceKind};
use crate::endpoint::ProxyUrl;
use crate::tags::Tags;

/// Why a source gave no usable list.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    File {
        /// File.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// The fetch or command took too long.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// HTTP failure.
    #[error("HTTP: {0}")]
    Http(String),
    /// The command failed.
    #[error("command: {0}")]
    Command(String),
    /// The output exceeded `max_bytes`.
    #[error("output larger than {0} bytes")]
    TooLarge(usize),
    /// A line is not a proxy URL.
    #[error("line {line}: {message}")]
    BadLine {
        /// Line number (or array index + 1).
        line: usize,
        /// Why.
        message: String,
    },
    /// No endpoints at all.
    #[error("the list is empty")]
    Empty,
}

/// One endpoint a source lists, with the tags the list gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub url: ProxyUrl,
    pub tags: Tags,
}

impl From<ProxyUrl> for Listed {
    fn from(url: ProxyUrl) -> Listed {
        Listed {
            url,
            tags: Tags::default(),
        }
    }
}

/// A JSON array item: a URL string, or `{"url": "...", "tags": {"country": "us"}}`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Item {
    Url(String),
    Tagged(TaggedItem),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TaggedItem {
    url: String,
    #[serde(default)]
    tags: std::collections::BTreeMap<String, String>,
}

/// Parse a list: a JSON array of URL strings (or `{"url", "tags"}` objects), or one URL a
/// line with `#` comments. One bad entry rejects the whole list: a garbled provider answer
/// must change nothing.
pub fn parse_list(text: &str) -> Result<Vec<Listed>, SourceError> {
    // A byte-order mark (lists saved by Windows editors) is not part of the first URL.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let trimmed = text.trim_start();
    let mut out = Vec::new();
    if trimmed.starts_with('[') {
        let items: Vec<serde_json::Value> =
            serde_json::from_str(trimmed).map_err(|e| SourceError::BadLine {
                line: e.line(),
                message: format!("invalid JSON array: {e}"),
            })?;
        for (i, v) in items.into_iter().enumerate() {
            let bad = |message: String| SourceError::BadLine {
                line: i + 1,
                message,
            };
            let (url, tags) = match serde_json::from_value::<Item>(v) {
                Ok(Item::Url(u)) => (u, Default::default()),
                Ok(Item::Tagged(t)) => (t.url, t.tags),
                Err(_) => return Err(bad(
                    "array items must be URL strings or {\"url\": ..., \"tags\": {...}} objects"
                        .into(),
                )),
            };
            out.push(Listed {
                url: ProxyUrl::parse(&url).map_err(|e| bad(e.to_string()))?,
                tags: Tags::try_from(tags).map_err(|e| bad(e.to_string()))?,
            });
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            let Some(url) = ProxyUrl::parse_line(line) else {
                continue;
            };
            out.push(Listed::from(url.map_err(|e| SourceError::BadLine {
                line: i + 1,
                message: e.to_string(),
            })?));
        }
    }
    if out.is_empty() {
        return Err(SourceError::Empty);
    }
    Ok(out)
}

/// Fetch and parse one source; every entry carries the source's `tags` under its own.
pub async fn fetch(src: &SourceConfig) -> Result<Vec<Listed>, SourceError> {
    let text = tokio::time::timeout(src.timeout, fetch_text(src))
        .await
        .map_err(|_| SourceError::Timeout(src.timeout))??;
    let mut list = parse_list(&text)?;
    if !src.tags.is_empty() {
        for (i, l) in list.iter_mut().enumerate() {
            let own: std::collections::BTreeMap<String, String> = l
                .tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            l.tags = src.tags.edited(&own).map_err(|e| SourceError::BadLine {
                line: i + 1,
                message: e.to_string(),
            })?;
        }
    }
    Ok(list)
}

async fn fetch_text(src: &SourceConfig) -> Result<String, SourceError> {
    let bytes = match &src.kind {
        SourceKind::File(p) => {
            let f = tokio::fs::File::open(p)
                .await
                .map_err(|source| SourceError::File {
                    path: p.display().to_string(),
                    source,
                })?;
            let mut buf = Vec::new();
            f.take(src.max_bytes as u64 + 1)
                .read_to_end(&mut buf)
                .await
                .map_err(|source| SourceError::File {
                    path: p.display().to_string(),
                    source,
                })?;
            buf
        }
        SourceKind::Url(u) => http_get(u, src.max_bytes).await?,
        SourceKind::Command(argv) => run_command(argv, src.dir.as_deref(), src.max_bytes).await?,
    };
    if bytes.len() > src.max_bytes {
        return Err(SourceError::TooLarge(src.max_bytes));
    }
    String::from_utf8(bytes).map_err(|_| SourceError::BadLine {
        line: 0,
        message: "output is not UTF-8".into(),
    })
}

async fn run_command(
    argv: &[String],
    dir: Option<&std::path::Path>,
    max: usize,
) -> Result<Vec<u8>, SourceError> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| SourceError::Command("empty command".into()))?;
    let mut cmd = tokio::process::Command::new(prog);
    if let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
        cmd.current_dir(d);
    }
    let mut child = cmd
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        // Dropped on timeout: the child must not outlive the sniff.
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| SourceError::Command(format!("cannot run {prog:?}: {e}")))?;
    let mut out = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        stdout
            .take(max as u64 + 1)
            .read_to_end(&mut out)
            .await
            .map_err(|e| SourceError::Command(e.to_string()))?;
    }
    if out.len() > max {
        return Err(SourceError::TooLarge(max));
    }
    let status = child
        .wait()
        .await
        .map_err(|e| SourceError::Command(e.to_string()))?;
    if !status.success() {
        return Err(SourceError::Command(format!(
            "{prog:?} exited with {status}"
        )));
    }
    Ok(out)
}

async fn http_get(url: &str, max: usize) -> Result<Vec<u8>, SourceError> {
    let herr = |e: &dyn std::fmt::Display| SourceError::Http(e.to_string());
    let uri: hyper::Uri = url.parse().map_err(|e| herr(&e))?;
    let host = uri
        .host()
        .ok_or_else(|| SourceError::Http("no host".into()))?
        .to_string();
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let tcp = tokio::net::TcpStream::connect((bare.as_str(), port))
        .await
        .map_err(|e| herr(&e))?;
    // Credentials in the URL become Basic auth; they never go into `Host`.
    let default_port = uri.port_u16().is_none();
    let host_header = if default_port {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    let auth = uri
        .authority()
        .and_then(|a| a.as_str().rsplit_once('@'))
        .map(|(ui, _)| {
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            let (u, p) = ui.split_once(':').unwrap_or((ui, ""));
            format!(
                "Basic {}",
                crate::dial::base64(format!("{}:{}", decode(u), decode(p)).as_bytes())
            )
        });
    let mut req = hyper::Request::get(crate::dial::origin_form(&uri))
        .header(hyper::header::HOST, host_header)
        .header(hyper::header::USER_AGENT, crate::dial::USER_AGENT)
        .header(hyper::header::CONNECTION, "close");
    if let Some(a) = auth {
        req = req.header(hyper::header::AUTHORIZATION, a);
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| herr(&e))?;
    let resp = if https {
        let cfg = crate::dial::client_config(None).map_err(|e| herr(&e))?;
        let name = rustls::pki_types::ServerName::try_from(bare.clone()).map_err(|e| herr(&e))?;
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| herr(&e))?;
        send(TokioIo::new(tls), req).await?
    } else {
        send(TokioIo::new(tcp), req).await?
    };
    if !resp.status().is_success() {
        return Err(SourceError::Http(format!("status {}", resp.status())));
    }
    let body = Limited::new(resp.into_body(), max)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                SourceError::TooLarge(max)
            } else {
                SourceError::Http(e.to_string())
            }
        })?;
    Ok(body.to_bytes().to_vec())
}

async fn send<T>(
    io: T,
    req: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, SourceError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| SourceError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| SourceError::Http(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_rejects_garbage_whole() {
        assert_eq!(
            parse_list("# c\n\nhttp://a:1\nsocks5://u:p@b:2\n")
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            parse_list(r#"["http://a:1", "socks5h://b:2"]"#)
                .unwrap()
                .len(),
            2
        );
        assert!(matches!(
            parse_list("# only comments\n"),
            Err(SourceError::Empty)
        ));
        assert!(matches!(parse_list("[]"), Err(SourceError::Empty)));
        match parse_list("http://a:1\n<html>oops</html>\n") {
            Err(SourceError::BadLine { line: 2, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(parse_list(r#"["http://a:1", 3]"#).is_err());
        let tagged =
            parse_list(r#"["http://a:1", {"url": "http://b:2", "tags": {"country": "us"}}]"#)
                .unwrap();
        assert_eq!(tagged[0].tags, Tags::default());
        assert_eq!(tagged[1].tags.to_string(), "country=us");
        for bad in [
            r#"[{"url": "http://b:2", "tags": {"Country": "us"}}]"#,
            r#"[{"url": "http://b:2", "label": "x"}]"#,
            r#"[{"tags": {"country": "us"}}]"#,
        ] {
            assert!(
                matches!(parse_list(bad), Err(SourceError::BadLine { line: 1, .. })),
                "{bad}"
            );
        }
        let err = parse_list("socks5://u:sekrit@h\n").unwrap_err().to_string();
        assert!(!err.contains("sekrit"), "{err}");
    }

    fn urls(text: &str) -> Vec<String> {
        parse_list(text)
            .unwrap()
            .iter()
            .map(|l| l.url.to_redacted_string())
            .collect()
    }

    #[test]
    fn a_provider_line_is_refused_without_its_password() {
        // The error becomes a sniff_failure event, a log line and the status page's detail.
        for text in [
            "http://10.0.0.1:3128\n10.0.0.2:3128:alice:pr0v1der\n",
            "[\"10.0.0.2:3128:alice:pr0v1der\"]",
        ] {
            let e = parse_list(text).unwrap_err().to_string();
            assert!(e.contains("10.0.0.2:3128:***"), "{e}");
            assert!(!e.contains("pr0v1der"), "{e}");
        }
    }

    #[test]
    fn parses_crlf_indented_comments_blank_lines_and_a_bom() {
        let want = vec!["http://a:1".to_string(), "socks5h://b:2".to_string()];
        assert_eq!(urls("http://a:1\r\nsocks5h://b:2\r\n"), want);
        assert_eq!(urls("http://a:1\r\n\r\n   # note\r\nsocks5h://b:2"), want);
        assert_eq!(urls("  \t http://a:1 \n\t# x\nsocks5h://b:2/\n\n"), want);
        assert_eq!(urls("\u{feff}http://a:1\nsocks5h://b:2\n"), want);
        assert_eq!(urls("\u{feff}[\"http://a:1\", \"socks5h://b:2\"]"), want);
        // A bad line is reported with its 1-based number, CRLF or not.
        match parse_list("http://a:1\r\n# c\r\nftp://x:1\r\n") {
            Err(SourceError::BadLine { line: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_json_arrays_across_lines_and_rejects_non_arrays() {
        assert_eq!(
            urls("\n  [\n  \"http://u:p@a:1\",\r\n  \"socks4a://b:2\"\n]\n"),
            vec!["http://u:***@a:1".to_string(), "socks4a://b:2".to_string()]
        );
        // Not an array of strings or {url, tags} objects, not JSON at all, or a trailing
        // mess: the whole answer is rejected.
        for bad in [
            r#"[{"link": "http://a:1"}]"#,
            r#"["http://a:1",]"#,
            r#"["http://a:1"] trailing"#,
            r#"["http://a:1""#,
            r#"[null]"#,
            r#"["not a url"]"#,
            r#"{"proxies": ["http://a:1"]}"#,
        ] {
            assert!(parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keeps_duplicates_for_reconcile_to_fold_and_rejects_inline_junk() {
        // Duplicates within a list are kept here; `reconcile` folds them by identity.
        assert_eq!(urls("http://a:1\nhttp://a:1\n").len(), 2);
        assert_eq!(urls(r#"["http://a:1", "http://a:1"]"#).len(), 2);
        // No inline comments, no bare host:port, no HTML: one such line rejects the list.
        for bad in [
            "http://a:1 # eu-west\n",
            "10.0.0.1:8080\n",
            "http://a:1\n<html><body>Service Unavailable</body></html>\n",
            "<!DOCTYPE html>\n<html>\n",
        ] {
            assert!(parse_list(bad).is_err(), "{bad:?}");
        }
    }
}
