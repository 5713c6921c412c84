//! Hand-written fake proxies and destinations on 127.0.0.1 for probe tests.
//!
//! Each fake runs as tokio tasks that stop when the returned handle is dropped. The
//! "real" fakes tunnel bytes for real; the scripted one plays back a fixed byte script so
//! every broken behaviour can be reproduced exactly.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// How long a resetting destination waits for its peer to read what came first.
const WAIT_READ: Duration = Duration::from_secs(10);

/// Aborts the server task on drop.
pub struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running fake: its address and what it saw.
pub struct Fake {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Request heads (HTTP) or request summaries (SOCKS) it received, in order.
    pub seen: Arc<Mutex<Vec<String>>>,
    accept: Option<Task>,
    _conns: Arc<Mutex<Vec<Task>>>,
}

impl Fake {
    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A copy of what it saw so far.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// Close the listening socket (new connections are refused) and keep serving the
    /// connections already open: a proxy that died between two uses of a kept tunnel.
    pub fn stop_accepting(&mut self) {
        self.accept = None;
    }
}

/// Start an accept loop; `serve` runs per connection.
async fn spawn_server<F, Fut>(serve: F) -> Fake
where
    F: Fn(TcpStream, Arc<Mutex<Vec<String>>>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    spawn_server_on(0, serve).await
}

/// `spawn_server` on `port` of 127.0.0.1 (0: any free one).
async fn spawn_server_on<F, Fut>(port: u16, serve: F) -> Fake
where
    F: Fn(TcpStream, Arc<Mutex<Vec<String>>>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let serve = Arc::new(serve);
    // Kept with the fake, so dropping it also drops its open connections.
    let conns = Arc::new(Mutex::new(Vec::new()));
    let conns2 = conns.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                break;
            };
            let fut = serve(sock, seen2.clone());
            conns2.lock().unwrap().push(Task(tokio::spawn(fut)));
        }
    });
    Fake {
        addr,
        seen,
        accept: Some(Task(task)),
        _conns: conns,
    }
}

/// A runtime for the fakes of a synchronous test (one driving the real binary): start them
/// with `rt.block_on(fakes::dest(..))`. Declare it before the fakes so they drop first.
pub fn fake_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The request lines an HTTP proxy fake saw, each with whether it carried Basic
/// credentials `user:pass`.
pub fn proxy_requests(proxy: &Fake, user: &str, pass: &str) -> Vec<(String, bool)> {
    let want = format!("Basic {}", base64(format!("{user}:{pass}").as_bytes()));
    proxy
        .seen()
        .iter()
        .map(|head| {
            let line = head.lines().next().unwrap_or("").to_string();
            (
                line,
                header(head, "proxy-authorization") == Some(want.as_str()),
            )
        })
        .collect()
}

/// A port on 127.0.0.1 where nothing listens: a connection to it is refused. Reserved for
/// the test process (`ports`), so nothing else takes it; a test may still listen on it
/// later (a target that comes back).
pub fn closed_port() -> u16 {
    super::ports::reserve()
}

// ---------------------------------------------------------------------------------------
// Test PKI

/// A throw-away certificate authority.
pub struct TestCa {
    /// The CA certificate, PEM.
    pub pem: String,
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    /// A new CA with a random key.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            cert,
            key,
        }
    }

    /// Write the CA certificate as PEM into `dir`.
    pub fn write_pem(&self, dir: &Path) -> PathBuf {
        let p = dir.join("ca.pem");
        std::fs::write(&p, &self.pem).unwrap();
        p
    }

    /// A TLS server config whose certificate (for localhost and 127.0.0.1) this CA signed.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone()];
        let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, der)
            .unwrap();
        Arc::new(cfg)
    }

    /// The certificate and key PEM files of a fresh leaf, for real daemons.
    pub fn leaf_pem_files(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let (c, k) = (dir.join("leaf.pem"), dir.join("leaf.key"));
        std::fs::write(&c, leaf.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    /// A server leaf this CA signed for `names` (DNS names, `*.` wildcards, IP literals
    /// as IP SANs; the first is also its CN): its certificate and key, PEM.
    pub fn leaf_pem(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cn = names.first().cloned().unwrap_or_default();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (leaf.pem(), key.serialize_pem())
    }
}

// ---------------------------------------------------------------------------------------
// Small protocol helpers

/// Any stream a fake can serve over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Read an HTTP head; returns it and whatever followed it.
pub async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return Some((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The value of a header in a head, case-insensitively.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// RFC 4648 base64, for Basic credentials.
pub fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in input.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

async fn tunnel<A: Io, B: Io>(mut a: A, mut b: B) {
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

// ---------------------------------------------------------------------------------------
// Destination

/// A status and body the test can change while a destination fake runs.
#[derive(Clone)]
pub struct Answer(Arc<Mutex<(u16, Vec<u8>)>>);

impl Answer {
    pub fn new(status: u16, body: &str) -> Answer {
        Answer(Arc::new(Mutex::new((status, body.as_bytes().to_vec()))))
    }

    pub fn set(&self, status: u16, body: &str) {
        *self.0.lock().unwrap() = (status, body.as_bytes().to_vec());
    }

    fn get(&self) -> (u16, Vec<u8>) {
        self.0.lock().unwrap().clone()
    }
}

/// How the fake destination answers every request.
#[derive(Clone)]
pub struct DestCfg {
    /// Status code.
    pub status: u16,
    /// Status of the first response only (later ones get `status`).
    pub first_status: Option<u16>,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Send the body one byte at a time with this pause.
    pub trickle: Option<Duration>,
    /// Send only this many body bytes, then reset the connection.
    pub reset_after: Option<usize>,
    /// Serve TLS with this config.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// A changeable status and body, instead of `status` and `body`.
    pub answer: Option<Answer>,
    /// Keep connections alive for this many answers, then read the next request and close
    /// without answering (a server whose keep-alive ran out just as a request came).
    /// `None`: one answer with `Connection: close`.
    pub keep_alive: Option<usize>,
    /// Listen on this port of 127.0.0.1 (a site that comes back where it was); `None`: any.
    pub port: Option<u16>,
}

impl Default for DestCfg {
    fn default() -> Self {
        DestCfg {
            status: 200,
            first_status: None,
            headers: Vec::new(),
            body: b"hello from the destination".to_vec(),
            trickle: None,
            reset_after: None,
            tls: None,
            answer: None,
            keep_alive: None,
            port: None,
        }
    }
}

/// A fake HTTP(S) destination; `seen` holds the request heads.
pub async fn dest(cfg: DestCfg) -> Fake {
    let port = cfg.port.unwrap_or(0);
    let cfg = Arc::new(cfg);
    spawn_server_on(port, move |sock, seen| {
        let cfg = cfg.clone();
        async move {
            if cfg.reset_after.is_some() {
                // Linger 0 turns the close into a RST.
                #[allow(deprecated)]
                let _ = sock.set_linger(Some(Duration::ZERO));
            }
            let ends = match (sock.local_addr(), sock.peer_addr()) {
                (Ok(local), Ok(peer)) => (local, peer),
                _ => return,
            };
            match &cfg.tls {
                Some(tls) => {
                    let Ok(s) = TlsAcceptor::from(tls.clone()).accept(sock).await else {
                        return;
                    };
                    serve_dest(s, ends, &cfg, seen).await
                }
                None => serve_dest(sock, ends, &cfg, seen).await,
            }
        }
    })
    .await
}

/// `ends`: the connection's (local, peer) addresses.
async fn serve_dest<S: Io>(
    mut s: S,
    ends: (SocketAddr, SocketAddr),
    cfg: &DestCfg,
    seen: Arc<Mutex<Vec<String>>>,
) {
    let Some(answers) = cfg.keep_alive else {
        return answer_once(s, ends, cfg, seen).await;
    };
    for _ in 0..answers {
        let Some((head, _)) = read_head(&mut s).await else {
            return;
        };
        seen.lock().unwrap().push(head);
        let (status, body) = match &cfg.answer {
            Some(a) => a.get(),
            None => (cfg.status, cfg.body.clone()),
        };
        let resp = format!(
            "HTTP/1.1 {status} Whatever\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if s.write_all(resp.as_bytes()).await.is_err() || s.write_all(&body).await.is_err() {
            return;
        }
        let _ = s.flush().await;
    }
    // The next request is read (and seen) and dropped with the connection.
    if let Some((head, _)) = read_head(&mut s).await {
        seen.lock().unwrap().push(head);
    }
}

async fn answer_once<S: Io>(
    mut s: S,
    (local, peer): (SocketAddr, SocketAddr),
    cfg: &DestCfg,
    seen: Arc<Mutex<Vec<String>>>,
) {
    let Some((head, _)) = read_head(&mut s).await else {
        return;
    };
    let nth = {
        let mut seen = seen.lock().unwrap();
        seen.push(head);
        seen.len()
    };
    let (status, body) = match &cfg.answer {
        Some(a) => a.get(),
        None => (cfg.status, cfg.body.clone()),
    };
    let status = match cfg.first_status {
        Some(first) if nth == 1 => first,
        _ => status,
    };
    let reason = match status {
        200 => "OK",
        403 => "Forbidden",
        429 => "Too Many Requests",
        _ => "Whatever",
    };
    let mut resp = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        status,
        body.len()
    );
    for (k, v) in &cfg.headers {
        resp.push_str(&format!("{k}: {v}\r\n"));
    }
    resp.push_str("\r\n");
    if s.write_all(resp.as_bytes()).await.is_err() {
        return;
    }
    let _ = s.flush().await;
    if let Some(n) = cfg.reset_after {
        let _ = s.write_all(&cfg.body[..n.min(body.len())]).await;
        let _ = s.flush().await;
        // The head and the first bytes are read before the reset wipes the peer's queue.
        if let Err(seen) = super::tcp_queue::peer_has_read(local, peer, WAIT_READ).await {
            eprintln!("fake destination: resetting unread bytes: {seen}");
        }
        return;
    }
    match cfg.trickle {
        Some(pause) => {
            for b in &body {
                if s.write_all(&[*b]).await.is_err() || s.flush().await.is_err() {
                    return;
                }
                tokio::time::sleep(pause).await;
            }
        }
        None => {
            let _ = s.write_all(&body).await;
        }
    }
    let _ = s.flush().await;
    let _ = s.shutdown().await;
}

/// One answer of a fake site, as sent (a body already encoded, with the headers saying so).
#[derive(Clone, Debug)]
pub struct Page {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Page {
    pub fn new(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Page {
        Page {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.to_vec(),
        }
    }
}

/// A site that answers every request carrying `X-Upstream: <marked>` (the header
/// `upstreams::tinyproxy_marked` adds) with `banned`, and every other with `others`; one
/// answer per connection.
pub async fn site_banning(marked: &str, banned: Page, others: Page) -> Fake {
    let marked = marked.to_string();
    spawn_server_on(0, move |mut s, seen| {
        let (marked, banned, others) = (marked.clone(), banned.clone(), others.clone());
        async move {
            let Some((head, _)) = read_head(&mut s).await else {
                return;
            };
            let page = match header(&head, "x-upstream") == Some(marked.as_str()) {
                true => banned,
                false => others,
            };
            seen.lock().unwrap().push(head);
            let mut resp = format!(
                "HTTP/1.1 {} Whatever\r\nContent-Length: {}\r\nConnection: close\r\n",
                page.status,
                page.body.len()
            );
            for (k, v) in &page.headers {
                resp.push_str(&format!("{k}: {v}\r\n"));
            }
            resp.push_str("\r\n");
            let mut out = resp.into_bytes();
            out.extend_from_slice(&page.body);
            let _ = s.write_all(&out).await;
            let _ = s.shutdown().await;
        }
    })
    .await
}

// ---------------------------------------------------------------------------------------
// HTTP proxy

/// A fake HTTP proxy: CONNECT tunnels and absolute-form forwarding, optional Basic auth.
#[derive(Clone, Default)]
pub struct HttpProxyCfg {
    /// Required user and password.
    pub auth: Option<(String, String)>,
    /// Serve the proxy itself over TLS (an `https://` proxy).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Refuse CONNECT (403) to any other port, as proxies that tunnel only to 443 do.
    pub connect_ports: Option<Vec<u16>>,
    /// Header lines (`Name: value`) of its `200` answer to CONNECT, as a provider that
    /// names the exit address there does.
    pub connect_headers: Vec<String>,
}

/// Start a fake HTTP proxy; `seen` holds the request heads it received.
pub async fn http_proxy(cfg: HttpProxyCfg) -> Fake {
    let cfg = Arc::new(cfg);
    spawn_server(move |sock, seen| {
        let cfg = cfg.clone();
        async move {
            match &cfg.tls {
                Some(tls) => {
                    let Ok(s) = TlsAcceptor::from(tls.clone()).accept(sock).await else {
                        return;
                    };
                    serve_http_proxy(s, &cfg, seen).await
                }
                None => serve_http_proxy(sock, &cfg, seen).await,
            }
        }
    })
    .await
}

async fn serve_http_proxy<S: Io>(mut s: S, cfg: &HttpProxyCfg, seen: Arc<Mutex<Vec<String>>>) {
    let Some((head, rest)) = read_head(&mut s).await else {
        return;
    };
    seen.lock().unwrap().push(head.clone());
    if let Some((u, p)) = &cfg.auth {
        let want = format!("Basic {}", base64(format!("{u}:{p}").as_bytes()));
        if header(&head, "proxy-authorization") != Some(want.as_str()) {
            let _ = s
                .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"fake\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
            return;
        }
    }
    let first = head.lines().next().unwrap_or("").to_string();
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let upstream_addr = if method == "CONNECT" {
        let port = target.rsplit(':').next().and_then(|p| p.parse().ok());
        if let (Some(allowed), Some(port)) = (&cfg.connect_ports, port) {
            if !allowed.contains(&port) {
                let _ = s
                    .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                    .await;
                return;
            }
        }
        target.to_string()
    } else if let Some(after) = target.strip_prefix("http://") {
        let authority = after.split('/').next().unwrap_or("");
        if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        }
    } else {
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        return;
    };
    let Ok(mut up) = TcpStream::connect(&upstream_addr).await else {
        let _ = s
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    if method == "CONNECT" {
        let mut reply = String::from("HTTP/1.1 200 Connection established\r\n");
        for h in &cfg.connect_headers {
            reply.push_str(h);
            reply.push_str("\r\n");
        }
        reply.push_str("\r\n");
        if s.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    } else {
        // The fake destination accepts the absolute form as is.
        if up.write_all(head.as_bytes()).await.is_err() {
            return;
        }
    }
    if !rest.is_empty() && up.write_all(&rest).await.is_err() {
        return;
    }
    tunnel(s, up).await
}

// ---------------------------------------------------------------------------------------
// SOCKS

/// A fake SOCKS5 server that tunnels for real.
#[derive(Clone, Default)]
pub struct Socks5Cfg {
    /// Required user and password (method 2); otherwise method 0.
    pub auth: Option<(String, String)>,
    /// Reply code to send instead of connecting (0 = connect and tunnel).
    pub reply: u8,
}

/// Start a fake SOCKS5 server; `seen` holds `atyp=N addr=... user=...` per request.
pub async fn socks5(cfg: Socks5Cfg) -> Fake {
    let cfg = Arc::new(cfg);
    spawn_server(move |sock, seen| {
        let cfg = cfg.clone();
        async move {
            let _ = serve_socks5(sock, &cfg, seen).await;
        }
    })
    .await
}

async fn serve_socks5(
    mut s: TcpStream,
    cfg: &Socks5Cfg,
    seen: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let mut hdr = [0u8; 2];
    s.read_exact(&mut hdr).await?;
    if hdr[0] != 5 {
        // Not SOCKS5 (an HTTP CONNECT, say): refused at once, as microsocks and dante do,
        // rather than read as a greeting that announces dozens of methods.
        s.write_all(&[5, 0xff]).await?;
        return Ok(());
    }
    let mut methods = vec![0u8; hdr[1] as usize];
    s.read_exact(&mut methods).await?;
    let mut user = String::new();
    match &cfg.auth {
        Some((u, p)) => {
            if !methods.contains(&2) {
                s.write_all(&[5, 0xff]).await?;
                return Ok(());
            }
            s.write_all(&[5, 2]).await?;
            let mut v = [0u8; 2];
            s.read_exact(&mut v).await?;
            let mut un = vec![0u8; v[1] as usize];
            s.read_exact(&mut un).await?;
            let mut pl = [0u8; 1];
            s.read_exact(&mut pl).await?;
            let mut pw = vec![0u8; pl[0] as usize];
            s.read_exact(&mut pw).await?;
            user = String::from_utf8_lossy(&un).into_owned();
            if un != u.as_bytes() || pw != p.as_bytes() {
                s.write_all(&[1, 1]).await?;
                return Ok(());
            }
            s.write_all(&[1, 0]).await?;
        }
        None => {
            if !methods.contains(&0) {
                s.write_all(&[5, 0xff]).await?;
                return Ok(());
            }
            s.write_all(&[5, 0]).await?;
        }
    }
    let mut req = [0u8; 4];
    s.read_exact(&mut req).await?;
    let atyp = req[3];
    let host = match atyp {
        1 => {
            let mut a = [0u8; 4];
            s.read_exact(&mut a).await?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut l = [0u8; 1];
            s.read_exact(&mut l).await?;
            let mut name = vec![0u8; l[0] as usize];
            s.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        4 => {
            let mut a = [0u8; 16];
            s.read_exact(&mut a).await?;
            format!("[{}]", std::net::Ipv6Addr::from(a))
        }
        _ => return Ok(()),
    };
    let mut port = [0u8; 2];
    s.read_exact(&mut port).await?;
    let port = u16::from_be_bytes(port);
    seen.lock()
        .unwrap()
        .push(format!("atyp={atyp} addr={host}:{port} user={user}"));
    if cfg.reply != 0 {
        s.write_all(&[5, cfg.reply, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
        return Ok(());
    }
    let up = match TcpStream::connect(format!("{host}:{port}")).await {
        Ok(up) => up,
        Err(_) => {
            s.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
            return Ok(());
        }
    };
    s.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0]).await?;
    tunnel(s, up).await;
    Ok(())
}

/// Start a fake SOCKS4/4a server that answers `reply` (90 = grant and tunnel).
pub async fn socks4(reply: u8) -> Fake {
    spawn_server(move |sock, seen| async move {
        let _ = serve_socks4(sock, reply, seen).await;
    })
    .await
}

async fn read_cstr(s: &mut TcpStream) -> std::io::Result<String> {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    loop {
        s.read_exact(&mut b).await?;
        if b[0] == 0 {
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        out.push(b[0]);
    }
}

async fn serve_socks4(
    mut s: TcpStream,
    reply: u8,
    seen: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let mut req = [0u8; 8];
    s.read_exact(&mut req).await?;
    let port = u16::from_be_bytes([req[2], req[3]]);
    let ip = std::net::Ipv4Addr::new(req[4], req[5], req[6], req[7]);
    let user = read_cstr(&mut s).await?;
    let host = if req[4..7] == [0, 0, 0] && req[7] != 0 {
        read_cstr(&mut s).await?
    } else {
        ip.to_string()
    };
    seen.lock()
        .unwrap()
        .push(format!("v={} addr={host}:{port} user={user}", req[0]));
    if reply != 90 {
        s.write_all(&[0, reply, 0, 0, 0, 0, 0, 0]).await?;
        return Ok(());
    }
    let Ok(up) = TcpStream::connect(format!("{host}:{port}")).await else {
        s.write_all(&[0, 91, 0, 0, 0, 0, 0, 0]).await?;
        return Ok(());
    };
    s.write_all(&[0, 90, 0, 0, 0, 0, 0, 0]).await?;
    tunnel(s, up).await;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Scripted

/// One step of a scripted fake.
#[derive(Clone, Debug)]
pub enum Act {
    /// Read once (one client message on loopback) and record it.
    Read,
    /// Write these bytes.
    Write(Vec<u8>),
    /// Pause.
    Sleep(Duration),
    /// Never answer again (until the fake is dropped).
    Hang,
    /// Close with a RST.
    Reset,
}

/// A fake that plays `acts` on every connection, then closes.
pub async fn scripted(acts: Vec<Act>) -> Fake {
    let acts = Arc::new(acts);
    spawn_server(move |mut sock, seen| {
        let acts = acts.clone();
        async move {
            let mut buf = vec![0u8; 65536];
            for act in acts.iter() {
                match act {
                    Act::Read => match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen
                            .lock()
                            .unwrap()
                            .push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                    },
                    Act::Write(b) => {
                        if sock.write_all(b).await.is_err() {
                            return;
                        }
                    }
                    Act::Sleep(d) => tokio::time::sleep(*d).await,
                    Act::Hang => std::future::pending::<()>().await,
                    Act::Reset => {
                        #[allow(deprecated)]
                        let _ = sock.set_linger(Some(Duration::ZERO));
                        return;
                    }
                }
            }
        }
    })
    .await
}

// ---------------------------------------------------------------------------------------
// Hostile far ends

/// A tarpit: accepts, reads and drops whatever comes, never writes, and never closes,
/// not even after the other side's FIN (a half-open far side that holds a tunnel).
pub async fn tarpit() -> Fake {
    spawn_server(|mut sock, seen| async move {
        let mut buf = vec![0u8; 4096];
        loop {
            match sock.read(&mut buf).await {
                Ok(0) => {
                    seen.lock().unwrap().push("eof".into());
                    // Keep the socket (and our sending half) open for ever.
                    std::future::pending::<()>().await;
                }
                Ok(n) => seen
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Err(_) => return,
            }
        }
    })
    .await
}

/// An upstream proxy that accepts, reads the request head (recorded in `seen`) and never
/// answers.
pub async fn silent_upstream() -> Fake {
    spawn_server(|mut sock, seen| async move {
        if let Some((head, _)) = read_head(&mut sock).await {
            seen.lock().unwrap().push(head);
        }
        std::future::pending::<()>().await;
    })
    .await
}

/// A keep-alive HTTP destination that writes each response's head and body in two
/// separate writes (as nginx does without `tcp_nopush`), `body` each time.
pub async fn split_writes_dest(body: &'static [u8]) -> Fake {
    spawn_server(move |mut sock, seen| async move {
        let _ = sock.set_nodelay(true);
        loop {
            let Some((head, _)) = read_head(&mut sock).await else {
                return;
            };
            seen.lock().unwrap().push(head);
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n",
                body.len()
            );
            if sock.write_all(h.as_bytes()).await.is_err() || sock.write_all(body).await.is_err() {
                return;
            }
        }
    })
    .await
}

/// A TLS client over `io` to `name` trusting only the CA certificates in `ca_pem` (PEM),
/// offering `alpn`.
pub async fn tls_client<S>(
    io: S,
    ca_pem: &[u8],
    name: &str,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut &ca_pem[..]) {
        roots.add(c?).map_err(std::io::Error::other)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    let name =
        rustls::pki_types::ServerName::try_from(name.to_string()).map_err(std::io::Error::other)?;
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, io)
        .await
}
