//! A small client for the lease socket, on the Unix socket or over TCP with a token; used
//! by the CLI.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpStream, UnixStream};

use crate::protocol::{Request, Response};

/// Errors talking to a daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting or I/O failed.
    #[error("socket {path}: {source}")]
    Io {
        /// Socket path or `tcp://` address.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// The daemon closed the connection or sent something unreadable.
    #[error("bad reply from daemon: {0}")]
    Protocol(String),
}

type Reader = BufReader<Box<dyn AsyncRead + Send + Unpin>>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// One connection to a daemon.
pub struct Client {
    reader: Reader,
    writer: Writer,
    /// The socket path or `tcp://HOST:PORT`, for messages.
    path: String,
    /// Sent with every request (TCP only).
    token: Option<String>,
    line: String,
    timeout: Duration,
}

/// How long a reply may take unless a caller says otherwise: a daemon that does not answer
/// must not hang a shell script forever.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Client {
    fn new<S>(stream: S, path: String, token: Option<String>) -> Client
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (r, w) = tokio::io::split(stream);
        Client {
            reader: BufReader::new(Box::new(r)),
            writer: Box::new(w),
            path,
            token,
            line: String::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Connect; `Ok(None)` when no daemon listens there.
    pub async fn connect(path: &Path) -> Result<Option<Client>, ClientError> {
        if !path.exists() {
            return Ok(None);
        }
        let shown = path.display().to_string();
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, UnixStream::connect(path)).await;
        match conn {
            Ok(Ok(s)) => Ok(Some(Client::new(s, shown, None))),
            // A stale socket file from a crashed daemon: nobody is serving.
            Ok(Err(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ) =>
            {
                Ok(None)
            }
            Ok(Err(source)) => Err(ClientError::Io {
                path: shown,
                source,
            }),
            Err(_) => Err(timed_out(shown)),
        }
    }

    /// Connect to a daemon's TCP listener (`host:port`), sending `token` with every
    /// request; `shown` names it in errors.
    pub async fn connect_tcp(
        addr: &str,
        shown: &str,
        token: Option<String>,
    ) -> Result<Client, ClientError> {
        let io = |source| ClientError::Io {
            path: shown.to_string(),
            source,
        };
        let s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out(shown.to_string()))?
            .map_err(io)?;
        let _ = s.set_nodelay(true);
        Ok(Client::new(s, shown.to_string(), token))
    }

    /// Where this client is connected (a socket path or `tcp://HOST:PORT`).
    pub fn address(&self) -> &str {
        &self.path
    }

    /// Whether this client speaks TCP (a remote daemon: no database of its own here).
    pub fn is_tcp(&self) -> bool {
        self.path.starts_with("tcp://")
    }

    /// Set how long one request may take (a `lease` with `wait` needs longer).
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Send one request and read its response.
    pub async fn request(&mut self, req: &Request) -> Result<Response, ClientError> {
        let mut line = self.encode(req)?;
        line.push('\n');
        let t = self.timeout;
        let exchange = async {
            self.send_raw(line.as_bytes()).await?;
            self.read_reply().await
        };
        tokio::time::timeout(t, exchange).await.map_err(|_| {
            ClientError::Protocol(format!("no reply within {}", humantime::format_duration(t)))
        })?
    }

    /// The request line, with the token when there is one.
    fn encode(&self, req: &Request) -> Result<String, ClientError> {
        let bad = |e: serde_json::Error| ClientError::Protocol(e.to_string());
        let Some(token) = &self.token else {
            return serde_json::to_string(req).map_err(bad);
        };
        let mut v = serde_json::to_value(req).map_err(bad)?;
        if let Value::Object(m) = &mut v {
            m.insert("token".into(), Value::String(token.clone()));
        }
        serde_json::to_string(&v).map_err(bad)
    }

    /// Write raw bytes (pipelining, tests).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let path = self.path.clone();
        self.writer
            .write_all(bytes)
            .await
            .map_err(|source| ClientError::Io { path, source })
    }

    /// Read one response line.
    pub async fn read_reply(&mut self) -> Result<Response, ClientError> {
        self.line.clear();
        let n = self
            .reader
            .read_line(&mut self.line)
            .await
            .map_err(|source| ClientError::Io {
                path: self.path.clone(),
                source,
            })?;
        if n == 0 {
            return Err(ClientError::Protocol("connection closed".into()));
        }
        serde_json::from_str(&self.line).map_err(|e| ClientError::Protocol(e.to_string()))
    }
}

fn timed_out(path: String) -> ClientError {
    ClientError::Io {
        path,
        source: std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
    }
}
