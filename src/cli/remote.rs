//! `--connect tcp://HOST:PORT` (or `PROXYPOOL_CONNECT`): a daemon on another host, reached
//! over its TCP listener with a token (docs/operators.md, "TCP clients").

use super::client::Client;
use super::secrets::client_token;
use super::CliError;

/// A daemon's TCP listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// `host:port` as `connect` takes it (an IPv6 host in brackets).
    addr: String,
    /// `tcp://host:port`, for messages.
    shown: String,
}

impl Remote {
    /// `tcp://HOST:PORT`; anything else is an error naming what to write.
    pub fn parse(text: &str) -> Result<Remote, String> {
        let expected = || format!("--connect {text:?}: expected tcp://HOST:PORT");
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(format!(
                "--connect {text:?}: expected tcp://HOST:PORT (the Unix socket is --socket)"
            ));
        };
        if !scheme.eq_ignore_ascii_case("tcp") {
            return Err(expected());
        }
        if let Some((_, host)) = rest.rsplit_once('@') {
            return Err(format!(
                "--connect tcp://{host}: give the token in PROXYPOOL_LEASE_TOKEN or PROXYPOOL_TOKEN, not in the address"
            ));
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (host, port) = match rest.strip_prefix('[') {
            Some(v6) => {
                let (h, p) = v6.split_once("]:").ok_or_else(expected)?;
                (h, p)
            }
            None => rest.rsplit_once(':').ok_or_else(expected)?,
        };
        let bad_host = host.is_empty()
            || host
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':')))
            || (host.contains(':') && !rest.starts_with('['));
        let port: u16 = port.parse().ok().filter(|p| *p != 0).ok_or_else(expected)?;
        if bad_host {
            return Err(expected());
        }
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_ascii_lowercase()
        };
        Ok(Remote {
            addr: format!("{host}:{port}"),
            shown: format!("tcp://{host}:{port}"),
        })
    }

    /// `tcp://host:port`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Connect, with the token of the environment; without one nothing is sent, since
    /// the daemon would refuse every request.
    pub(super) async fn connect(&self) -> Result<Client, CliError> {
        let Some(token) = client_token() else {
            return Err(CliError::usage(format!(
                "{} needs a token: set PROXYPOOL_LEASE_TOKEN (role lease) or PROXYPOOL_TOKEN (role admin)",
                self.shown
            )));
        };
        Client::connect_tcp(&self.addr, &self.shown, Some(token))
            .await
            .map_err(|e| {
                CliError::failed(format!("cannot reach the daemon at {}: {e}", self.shown))
            })
    }
}

/// The error of a command that reads the database itself, given `--connect`.
pub(super) fn local_only(what: &str, r: &Remote) -> CliError {
    CliError::usage(format!(
        "{what} reads the daemon's database directly, which --connect {} cannot reach: run it on the daemon's host",
        r.shown
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let ok = |a: &str| Ok(a.to_string());
        let cases: &[(&str, Result<String, &str>)] = &[
            ("tcp://127.0.0.1:7000", ok("127.0.0.1:7000")),
            ("TCP://Daemon.LAN:7000/", ok("daemon.lan:7000")),
            ("tcp://[::1]:7000", ok("[::1]:7000")),
            ("tcp://pp-1.internal:65535", ok("pp-1.internal:65535")),
            ("127.0.0.1:7000", Err("the Unix socket is --socket")),
            ("unix:///run/pp.sock", Err("expected tcp://HOST:PORT")),
            ("http://127.0.0.1:7000", Err("expected tcp://HOST:PORT")),
            ("tcp://127.0.0.1", Err("expected tcp://HOST:PORT")),
            ("tcp://127.0.0.1:0", Err("expected tcp://HOST:PORT")),
            ("tcp://127.0.0.1:70000", Err("expected tcp://HOST:PORT")),
            ("tcp://:7000", Err("expected tcp://HOST:PORT")),
            ("tcp://::1:7000", Err("expected tcp://HOST:PORT")),
            ("tcp://h:7000/path", Err("expected tcp://HOST:PORT")),
            ("tcp://h st:7000", Err("expected tcp://HOST:PORT")),
            ("tcp://s3cret@127.0.0.1:7000", Err("not in the address")),
        ];
        for (text, want) in cases {
            let got = Remote::parse(text);
            match (&got, want) {
                (Ok(r), Ok(addr)) => {
                    assert_eq!(&r.addr, addr, "{text}");
                    assert_eq!(r.shown, format!("tcp://{addr}"));
                }
                (Err(e), Err(part)) => {
                    assert!(e.contains(part), "{text}: {e}");
                    assert!(!e.contains("s3cret"), "{e}");
                }
                _ => panic!("{text}: {got:?}, want {want:?}"),
            }
        }
    }
}
