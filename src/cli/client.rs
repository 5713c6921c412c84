//! A small client for the lease socket, used by the CLI and the benches.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::protocol::{Request, Response};

/// Errors talking to a daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting or I/O failed.
    #[error("socket {path}: {source}")]
    Io {
        /// Socket path.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// The daemon closed the connection or sent something unreadable.
    #[error("bad reply from daemon: {0}")]
    Protocol(String),
}

/// One connection to a daemon.
pub struct Client {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    path: String,
    line: String,
    timeout: Duration,
}

/// How long a reply may take unless a caller says otherwise: a daemon that does not answer
/// must not hang a shell script forever.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl Client {
    /// Connect; `Ok(None)` when no daemon listens there.
    pub async fn connect(path: &Path) -> Result<Option<Client>, ClientError> {
        if !path.exists() {
            return Ok(None);
        }
        let conn = tokio::time::timeout(Duration::from_secs(2), UnixStream::connect(path)).await;
        match conn {
            Ok(Ok(s)) => {
                let (r, w) = s.into_split();
                Ok(Some(Client {
                    reader: BufReader::new(r),
                    writer: w,
                    path: path.display().to_string(),
                    line: String::new(),
                    timeout: DEFAULT_TIMEOUT,
                }))
            }
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
                path: path.display().to_string(),
                source,
            }),
            Err(_) => Err(ClientError::Io {
                path: path.display().to_string(),
                source: std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
            }),
        }
    }

    /// Set how long one request may take (a `lease` with `wait` needs longer).
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Send one request and read its response.
    pub async fn request(&mut self, req: &Request) -> Result<Response, ClientError> {
        let mut line =
            serde_json::to_string(req).map_err(|e| ClientError::Protocol(e.to_string()))?;
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
