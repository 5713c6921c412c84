//! What several benches share: a JSON-lines socket client and synthetic endpoints.
#![allow(dead_code)]

use std::path::Path;

use proxypool::endpoint::ProxyUrl;
use proxypool::health::State;
use proxypool::store::NewEndpoint;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// One connection to the lease socket, a request line at a time.
pub struct Conn {
    r: BufReader<tokio::net::unix::OwnedReadHalf>,
    w: tokio::net::unix::OwnedWriteHalf,
    buf: String,
}

impl Conn {
    pub async fn open(p: &Path) -> Conn {
        let (r, w) = UnixStream::connect(p).await.unwrap().into_split();
        Conn {
            r: BufReader::new(r),
            w,
            buf: String::new(),
        }
    }

    /// Send one line, return the answer line.
    pub async fn rt(&mut self, line: &str) -> &str {
        self.w.write_all(line.as_bytes()).await.unwrap();
        self.buf.clear();
        self.r.read_line(&mut self.buf).await.unwrap();
        &self.buf
    }
}

/// `n` distinct available endpoints of pool `default` (never dialled: 10.x addresses).
pub fn endpoints(n: usize, scheme: &str, port: u16) -> Vec<NewEndpoint> {
    (0..n)
        .map(|i| NewEndpoint {
            url: ProxyUrl::parse(&format!(
                "{scheme}://u{i}:p{i}@10.{}.{}.{}:{port}",
                (i >> 16) & 255,
                (i >> 8) & 255,
                i & 255
            ))
            .unwrap(),
            pool: "default".into(),
            label: None,
            source: None,
            state: State::Available,
            tags: Default::default(),
        })
        .collect()
}
