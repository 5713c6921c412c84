//! An in-process gateway over a real SQLite store, and a raw HTTP/SOCKS5 client for it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use proxypool::ban::BanRules;
use proxypool::config::{GatewayConfig, PoolConfig};
use proxypool::endpoint::{EndpointId, ProxyUrl};
use proxypool::gateway::{Descriptors, Gateway, Limits};
use proxypool::health::State;
use proxypool::pool::engine::Engine;
use proxypool::store::{EndpointRow, EventRow, NewEndpoint, Store};
use proxypool::tls::Leaves;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fakes::{header, read_head};

/// An available endpoint of `pool` at `url` carrying `tags` (`K=V`).
pub fn endpoint(url: &str, pool: &str, tags: &[&str]) -> NewEndpoint {
    NewEndpoint {
        url: ProxyUrl::parse(url).unwrap(),
        pool: pool.into(),
        label: None,
        source: None,
        state: State::Available,
        tags: proxypool::tags::Tags::parse_args(tags).unwrap(),
    }
}

/// The pools `default` and `other`, built in.
fn default_pools() -> Vec<PoolConfig> {
    vec![PoolConfig::builtin("default"), PoolConfig::builtin("other")]
}

/// A gateway serving the pools `default` and `other` from a temp database.
pub struct Gw {
    pub addr: SocketAddr,
    pub engine: Arc<Engine>,
    pub ids: Vec<EndpointId>,
    db: PathBuf,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
    _dir: TempDir,
}

impl Gw {
    /// Endpoints `urls` in pool `default` (in this order), gateway config tweaked by `f`.
    pub async fn start(urls: &[String], f: impl FnOnce(&mut GatewayConfig)) -> Gw {
        Gw::start_with(urls, f, Limits::default()).await
    }

    pub async fn start_with(
        urls: &[String],
        f: impl FnOnce(&mut GatewayConfig),
        limits: Limits,
    ) -> Gw {
        let eps = urls.iter().map(|u| endpoint(u, "default", &[])).collect();
        Gw::start_full(default_pools(), eps, f, limits, Descriptors::unlimited()).await
    }

    /// Endpoints `urls` in pool `default`, answers judged by the `[[ban]]` rules `bans`.
    pub async fn start_bans(
        urls: &[String],
        f: impl FnOnce(&mut GatewayConfig),
        bans: BanRules,
    ) -> Gw {
        let eps = urls.iter().map(|u| endpoint(u, "default", &[])).collect();
        Gw::start_inner(
            default_pools(),
            eps,
            f,
            (Limits::default(), Descriptors::unlimited()),
            bans,
            None,
        )
        .await
    }

    /// Pools `pools` (configured as given), endpoints `eps` (ids in this order).
    pub async fn start_pools(
        pools: Vec<PoolConfig>,
        eps: Vec<NewEndpoint>,
        f: impl FnOnce(&mut GatewayConfig),
    ) -> Gw {
        Gw::start_full(pools, eps, f, Limits::default(), Descriptors::unlimited()).await
    }

    /// A gateway whose client and idle upstream connections hold at most `n` descriptors.
    pub async fn start_descriptors(
        urls: &[String],
        f: impl FnOnce(&mut GatewayConfig),
        n: usize,
    ) -> Gw {
        let eps = urls.iter().map(|u| endpoint(u, "default", &[])).collect();
        Gw::start_full(
            default_pools(),
            eps,
            f,
            Limits::default(),
            Descriptors::new(n),
        )
        .await
    }

    async fn start_full(
        pools: Vec<PoolConfig>,
        eps: Vec<NewEndpoint>,
        f: impl FnOnce(&mut GatewayConfig),
        limits: Limits,
        fds: Descriptors,
    ) -> Gw {
        Gw::start_inner(pools, eps, f, (limits, fds), BanRules::default(), None).await
    }

    /// Endpoints `urls` in pool `default` behind a gateway that intercepts as `f` sets
    /// (`intercept`, `rotate`), minting leaves with `leaves` and trusting the origins'
    /// roots in `extra_roots`; its connections hold at most `n` descriptors.
    pub async fn start_intercepting(
        urls: &[String],
        f: impl FnOnce(&mut GatewayConfig),
        n: usize,
        leaves: Arc<Leaves>,
        extra_roots: PathBuf,
    ) -> Gw {
        let eps = urls.iter().map(|u| endpoint(u, "default", &[])).collect();
        let fds = (Limits::default(), Descriptors::new(n));
        let icpt = Some((leaves, extra_roots));
        Gw::start_inner(default_pools(), eps, f, fds, BanRules::default(), icpt).await
    }

    async fn start_inner(
        pools: Vec<PoolConfig>,
        eps: Vec<NewEndpoint>,
        f: impl FnOnce(&mut GatewayConfig),
        (limits, fds): (Limits, Descriptors),
        bans: BanRules,
        icpt: Option<(Arc<Leaves>, PathBuf)>,
    ) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("gw.db");
        let store = Store::open(&db).unwrap();
        let engine = Engine::open(store, pools).unwrap();
        let ids = if eps.is_empty() {
            Vec::new()
        } else {
            engine.add(eps).await.unwrap()
        };
        let mut cfg = GatewayConfig::new("127.0.0.1:0".parse().unwrap());
        f(&mut cfg);
        let mut gw = Gateway::bind(cfg, engine.clone())
            .await
            .unwrap()
            .with_limits(limits)
            .with_descriptors(fds)
            .with_bans(bans);
        if let Some((leaves, roots)) = icpt {
            gw = gw.with_interception(&leaves, Some(&roots)).unwrap();
        }
        let addr = gw.local_addr();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(gw.run(shutdown.clone()));
        Gw {
            addr,
            engine,
            ids,
            db,
            shutdown,
            task: Some(task),
            _dir: dir,
        }
    }

    /// The endpoint rows as stored (what `proxypool list` would show).
    pub fn rows(&self) -> Vec<EndpointRow> {
        Store::open(&self.db).unwrap().list(None, None).unwrap()
    }

    pub fn row(&self, id: EndpointId) -> EndpointRow {
        self.rows().into_iter().find(|r| r.id == id).unwrap()
    }

    /// The stored (endpoint, destination) pairs of an endpoint.
    pub fn pairs(&self, id: EndpointId) -> Vec<proxypool::store::pairs::PairRecord> {
        Store::open(&self.db)
            .unwrap()
            .pairs_of(id)
            .unwrap()
            .into_iter()
            .map(|p| p.record)
            .collect()
    }

    pub fn events(&self) -> Vec<EventRow> {
        Store::open(&self.db)
            .unwrap()
            .events(None, 0, 10_000)
            .unwrap()
    }

    /// Live leases of pool `default`.
    pub fn leases(&self) -> usize {
        self.engine.status(Some("default")).unwrap()[0].leases
    }

    /// Wait (bounded) until no lease is outstanding; leases given back on drop are
    /// reported by a spawned task, a moment after the connection ends.
    pub async fn until_no_leases(&self) {
        super::eventually_async(Duration::from_secs(5), "no lease outstanding", || {
            let n = self.leases();
            async move {
                match n {
                    0 => Ok(()),
                    n => Err(format!("{n} lease(s)")),
                }
            }
        })
        .await;
        // Reports are committed a moment after the lease count drops.
        self.engine.flush().await.unwrap();
    }

    /// Stop the gateway and wait for it.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("gateway did not stop")
                .unwrap();
        }
    }

    /// The value of one series in the gateway's `/metrics` text (0 when absent).
    pub fn metric(&self, series: &str) -> f64 {
        self.engine
            .metrics()
            .encode()
            .lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    }

    pub async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A response: head and body.
#[derive(Debug)]
pub struct Resp {
    pub head: String,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn status(&self) -> u16 {
        self.head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.head, name)
    }

    pub fn endpoint(&self) -> Option<EndpointId> {
        self.header("x-proxypool-endpoint")?.parse().ok()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Read one response with a Content-Length body (or a body up to close).
pub async fn read_response(s: &mut TcpStream) -> Option<Resp> {
    let (head, mut body) = read_head(s).await?;
    match header(&head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(n) => {
            while body.len() < n {
                let mut chunk = vec![0u8; n - body.len()];
                let got = s.read(&mut chunk).await.ok()?;
                if got == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..got]);
            }
        }
        None => {
            let _ = s.read_to_end(&mut body).await;
        }
    }
    Some(Resp { head, body })
}

/// What the gateway still sends on `s` until it closes it (a reset counts as closed);
/// panics with `what` if it is still open after 5 s.
pub async fn until_closed(s: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .ok();
    rest
}

/// Send raw bytes on a fresh connection and read one response.
pub async fn roundtrip(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).await.unwrap();
    request_on(&mut s, raw).await
}

/// Send raw bytes on an open (keep-alive) connection and read one response.
pub async fn request_on(s: &mut TcpStream, raw: &[u8]) -> Resp {
    s.write_all(raw).await.unwrap();
    read_response(s).await.expect("no response")
}

/// `scheme://127.0.0.1:port`.
pub fn url(scheme: &str, port: u16) -> String {
    format!("{scheme}://127.0.0.1:{port}")
}

/// `Proxy-Authorization` header line for user:pass.
pub fn proxy_auth(user: &str, pass: &str) -> String {
    format!(
        "Proxy-Authorization: Basic {}\r\n",
        super::fakes::base64(format!("{user}:{pass}").as_bytes())
    )
}

/// An absolute-form GET for `http://127.0.0.1:port/path`, keep-alive, extra header lines.
pub fn get(port: u16, path: &str, extra: &str) -> Vec<u8> {
    format!("GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n")
        .into_bytes()
}

/// CONNECT 127.0.0.1:port; returns the stream and the gateway's answer.
pub async fn connect_tunnel(addr: SocketAddr, port: u16, extra: &str) -> (TcpStream, Resp) {
    connect_tunnel_to(addr, &format!("127.0.0.1:{port}"), extra).await
}

/// [`connect_tunnel`] to `authority` (`host:port`).
pub async fn connect_tunnel_to(
    addr: SocketAddr,
    authority: &str,
    extra: &str,
) -> (TcpStream, Resp) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{extra}\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let (head, mut body) = read_head(&mut s).await.expect("no CONNECT answer");
    let resp = if head.starts_with("HTTP/1.1 200") {
        assert!(body.is_empty(), "bytes after the CONNECT answer: {body:?}");
        Resp { head, body }
    } else {
        let n = header(&head, "content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        while body.len() < n {
            let mut chunk = vec![0u8; n - body.len()];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(got) => body.extend_from_slice(&chunk[..got]),
            }
        }
        Resp { head, body }
    };
    (s, resp)
}

/// SOCKS5 handshake to `dest` (IPv4 when it parses, else a domain); returns the stream
/// and the reply code (or the auth failure as `0xA0 + status`, method refusal as 0xFF).
pub async fn socks5_connect(
    addr: SocketAddr,
    creds: Option<(&str, &str)>,
    host: &str,
    port: u16,
) -> (TcpStream, u8) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let method = if creds.is_some() { 2 } else { 0 };
    s.write_all(&[5, 1, method]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    if m[1] == 0xFF {
        return (s, 0xFF);
    }
    if let Some((u, p)) = creds {
        let mut a = vec![1, u.len() as u8];
        a.extend_from_slice(u.as_bytes());
        a.push(p.len() as u8);
        a.extend_from_slice(p.as_bytes());
        s.write_all(&a).await.unwrap();
        let mut r = [0u8; 2];
        s.read_exact(&mut r).await.unwrap();
        if r[1] != 0 {
            return (s, 0xA0 + r[1]);
        }
    }
    let mut req = vec![5, 1, 0];
    match host.parse::<std::net::Ipv4Addr>() {
        Ok(ip) => {
            req.push(1);
            req.extend_from_slice(&ip.octets());
        }
        Err(_) => {
            req.push(3);
            req.push(host.len() as u8);
            req.extend_from_slice(host.as_bytes());
        }
    }
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut r = [0u8; 10];
    s.read_exact(&mut r).await.unwrap();
    (s, r[1])
}
