//! WebSocket (RFC 6455) just far enough for tests: an echo server as a tokio task (what
//! `NginxOrigin` proxies `/ws` to) and a client that upgrades any stream (plain, TLS, a
//! proxy's tunnel) and exchanges messages. Frames up to 64 KiB; no extensions.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::fakes::{base64, header, read_head, Io};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// The `Sec-WebSocket-Accept` answer to a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    base64(&sha1(format!("{key}{GUID}").as_bytes()))
}

/// SHA-1, which the handshake needs and nothing in the dependency tree exposes.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            (e, d, c, b, a) = (d, c, b.rotate_left(30), a, t);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// One frame: FIN and opcode as sent, payload unmasked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub fin: bool,
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// Read a frame (masked or not), after `pending` bytes already read from `s`.
async fn read_frame<S: Io>(s: &mut S, pending: &mut Vec<u8>) -> Option<Frame> {
    async fn fill<S: Io>(s: &mut S, buf: &mut Vec<u8>, n: usize) -> Option<()> {
        let mut chunk = [0u8; 8192];
        while buf.len() < n {
            let got = s.read(&mut chunk).await.ok()?;
            if got == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..got]);
        }
        Some(())
    }
    fill(s, pending, 2).await?;
    let (b0, b1) = (pending[0], pending[1]);
    let (masked, len7) = (b1 & 0x80 != 0, usize::from(b1 & 0x7f));
    let ext = match len7 {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    fill(s, pending, 2 + ext).await?;
    let len = match ext {
        2 => usize::from(u16::from_be_bytes([pending[2], pending[3]])),
        8 => u64::from_be_bytes(pending[2..10].try_into().unwrap()) as usize,
        _ => len7,
    };
    let start = 2 + ext + if masked { 4 } else { 0 };
    fill(s, pending, start + len).await?;
    let mut payload = pending[start..start + len].to_vec();
    if masked {
        let mask = &pending[2 + ext..2 + ext + 4];
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    pending.drain(..start + len);
    Some(Frame {
        fin: b0 & 0x80 != 0,
        opcode: b0 & 0x0f,
        payload,
    })
}

/// The bytes of a frame; a client's carry a mask (RFC 6455 §5.3), a server's none.
fn encode(frame: &Frame, mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![u8::from(frame.fin) << 7 | frame.opcode];
    let bit = if mask.is_some() { 0x80 } else { 0 };
    let len = frame.payload.len();
    match len {
        0..=125 => out.push(bit | len as u8),
        126..=65535 => {
            out.push(bit | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(bit | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    match mask {
        Some(m) => {
            out.extend_from_slice(&m);
            out.extend(frame.payload.iter().enumerate().map(|(i, b)| b ^ m[i % 4]));
        }
        None => out.extend_from_slice(&frame.payload),
    }
    out
}

/// A WebSocket echo server on 127.0.0.1: every data frame comes back as sent, a ping as
/// a pong, a close as a close. It stops accepting when dropped.
pub struct EchoServer {
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl EchoServer {
    pub async fn start() -> EchoServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(echo(sock));
            }
        });
        EchoServer { addr, accept }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn echo(mut s: tokio::net::TcpStream) {
    let Some((head, mut pending)) = read_head(&mut s).await else {
        return;
    };
    let Some(key) = header(&head, "sec-websocket-key") else {
        let _ = s
            .write_all(b"HTTP/1.1 426 Upgrade Required\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key)
    );
    if s.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    while let Some(mut f) = read_frame(&mut s, &mut pending).await {
        let close = f.opcode == CLOSE;
        if f.opcode == PING {
            f.opcode = PONG;
        }
        if s.write_all(&encode(&f, None)).await.is_err() || close {
            return;
        }
    }
}

/// A client end of an upgraded connection.
pub struct WsClient<S> {
    stream: S,
    pending: Vec<u8>,
    /// The server's `101` head.
    pub head: String,
}

impl<S: Io> WsClient<S> {
    /// Upgrade `stream` with `GET path` for `host`; panics unless the answer is a `101`
    /// with the right `Sec-WebSocket-Accept`.
    pub async fn connect(mut stream: S, host: &str, path: &str) -> WsClient<S> {
        let key = base64(&fastrand::u128(..).to_be_bytes());
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(req.as_bytes()).await.unwrap();
        let (head, pending) = read_head(&mut stream)
            .await
            .expect("the connection closed before the upgrade's answer");
        assert!(head.starts_with("HTTP/1.1 101"), "upgrade refused:\n{head}");
        assert_eq!(
            header(&head, "sec-websocket-accept"),
            Some(accept_key(&key).as_str()),
            "{head}"
        );
        WsClient {
            stream,
            pending,
            head,
        }
    }

    pub async fn send(&mut self, opcode: u8, payload: &[u8]) {
        let frame = Frame {
            fin: true,
            opcode,
            payload: payload.to_vec(),
        };
        let mask = fastrand::u32(..).to_be_bytes();
        self.stream
            .write_all(&encode(&frame, Some(mask)))
            .await
            .unwrap();
    }

    /// The next frame, or `None` once the connection closed.
    pub async fn recv(&mut self) -> Option<Frame> {
        read_frame(&mut self.stream, &mut self.pending).await
    }

    /// Send `text` and return the next frame's payload as text.
    pub async fn echo(&mut self, text: &str) -> String {
        self.send(TEXT, text.as_bytes()).await;
        let f = self.recv().await.expect("closed before the echo");
        assert_eq!(f.opcode, TEXT, "{f:?}");
        String::from_utf8(f.payload).unwrap()
    }
}
