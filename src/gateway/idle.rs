//! Idle upstream HTTP/1.1 connections, kept for the next absolute-form request that goes
//! through the same upstream to the same place: a keep-alive forward proxy (any
//! destination), or a tunnel (CONNECT or SOCKS) to one destination.
//!
//! Rotation is untouched: every request still takes its own lease, and only a connection
//! of the upstream the pool granted is reused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use tokio::time::Instant;

use crate::dial::Dest;
use crate::endpoint::ProxyUrl;
use crate::metrics::GatewayMetrics;

/// What the gateway sends upstream and answers with.
pub(super) type Body = BoxBody<Bytes, hyper::Error>;
/// The request side of one upstream HTTP/1.1 connection.
pub(super) type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// Where an idle connection leads. The proxy URL is whole (credentials included, in
/// memory only): an endpoint edited to new credentials or a new address never gets a
/// connection made with the old ones.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct IdleKey {
    proxy: String,
    /// `None` for a connection to a forward proxy, which carries requests to any host.
    dest: Option<String>,
}

impl IdleKey {
    pub(super) fn new(proxy: &ProxyUrl, dest: &Dest, forward: bool) -> IdleKey {
        IdleKey {
            proxy: proxy.to_secret_string(),
            dest: (!forward).then(|| dest.authority()),
        }
    }
}

/// How many idle connections are kept, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleLimits {
    /// An idle connection unused this long is closed. Shorter than the keep-alive timeouts
    /// of common servers and proxies (nginx 75 s, squid 120 s), so the far side rarely
    /// closes first.
    pub timeout: Duration,
    /// Idle connections kept per (upstream, destination).
    pub per_key: usize,
    /// Idle connections kept in all (each is one open descriptor, or two in a tunnel).
    pub total: usize,
}

impl Default for IdleLimits {
    fn default() -> Self {
        IdleLimits {
            timeout: Duration::from_secs(10),
            per_key: 32,
            total: 1024,
        }
    }
}

struct Parked {
    sender: Sender,
    since: Instant,
}

#[derive(Default)]
struct Table {
    by_key: HashMap<IdleKey, Vec<Parked>>,
    total: usize,
}

/// The gateway's idle connections.
pub(super) struct IdleConns {
    table: Mutex<Table>,
    limits: IdleLimits,
    metrics: GatewayMetrics,
}

impl IdleConns {
    pub(super) fn new(limits: IdleLimits, metrics: GatewayMetrics) -> Arc<IdleConns> {
        Arc::new(IdleConns {
            table: Mutex::new(Table::default()),
            limits,
            metrics,
        })
    }

    fn dropped(&self, t: &mut Table, n: usize) {
        t.total -= n;
        self.metrics.idle_upstream(-(n as i64));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic elsewhere while holding this lock leaves only a list of connections.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently parked connection for `key` that is still open and fresh.
    pub(super) fn take(&self, key: &IdleKey) -> Option<Sender> {
        let now = Instant::now();
        let mut t = self.lock();
        let list = t.by_key.get_mut(key)?;
        let mut found = None;
        let mut dropped = 0;
        while let Some(p) = list.pop() {
            dropped += 1;
            if p.sender.is_ready() && now.duration_since(p.since) < self.limits.timeout {
                found = Some(p.sender);
                break;
            }
        }
        if list.is_empty() {
            t.by_key.remove(key);
        }
        self.dropped(&mut t, dropped);
        found
    }

    /// Keep `sender` for the next request once its current response is fully read (hyper
    /// says so by becoming ready); a connection that closes instead is dropped.
    pub(super) fn park(self: &Arc<Self>, key: IdleKey, mut sender: Sender) {
        let idle = self.clone();
        tokio::spawn(async move {
            // Closed by the far side, or a body that never finished: not reusable.
            if let Ok(Ok(())) = tokio::time::timeout(idle.limits.timeout, sender.ready()).await {
                idle.insert(key, sender);
            }
        });
    }

    fn insert(&self, key: IdleKey, sender: Sender) {
        let mut t = self.lock();
        if t.total >= self.limits.total {
            return;
        }
        let list = t.by_key.entry(key).or_default();
        if list.len() >= self.limits.per_key {
            return;
        }
        list.push(Parked {
            sender,
            since: Instant::now(),
        });
        t.total += 1;
        self.metrics.idle_upstream(1);
    }

    /// Close connections idle past the timeout or closed by the far side.
    pub(super) fn sweep(&self) {
        let now = Instant::now();
        let timeout = self.limits.timeout;
        let mut t = self.lock();
        let mut kept = 0;
        t.by_key.retain(|_, list| {
            list.retain(|p| !p.sender.is_closed() && now.duration_since(p.since) < timeout);
            kept += list.len();
            !list.is_empty()
        });
        let gone = t.total - kept;
        self.dropped(&mut t, gone);
    }

    /// Idle connections held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().total
    }

    /// Close every idle connection (the gateway is stopping).
    pub(super) fn clear(&self) {
        let mut t = self.lock();
        t.by_key.clear();
        let all = t.total;
        self.dropped(&mut t, all);
    }

    /// Sweep every `timeout / 2` until `stop`.
    pub(super) async fn sweep_until(&self, stop: tokio_util::sync::CancellationToken) {
        let every = (self.limits.timeout / 2).max(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(every) => self.sweep(),
            }
        }
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::Empty;
    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::metrics::Metrics;

    /// A client connection to an in-memory HTTP/1.1 server, and the server's task (abort
    /// it to close the connection from the far side).
    async fn conn() -> (Sender, tokio::task::JoinHandle<()>) {
        let (client, server) = tokio::io::duplex(4096);
        let server = tokio::spawn(async move {
            let svc = hyper::service::service_fn(|_req| async {
                Ok::<_, Infallible>(hyper::Response::new(Empty::<Bytes>::new()))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(server), svc)
                .await;
        });
        let (sender, c) = hyper::client::conn::http1::handshake(TokioIo::new(client))
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = c.await;
        });
        (sender, server)
    }

    fn key(port: u16, dest: Option<u16>) -> IdleKey {
        let proxy = ProxyUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        match dest {
            Some(d) => IdleKey::new(&proxy, &Dest::new("example.com", d), false),
            None => IdleKey::new(&proxy, &Dest::new("example.com", 80), true),
        }
    }

    async fn settle(idle: &IdleConns, n: usize) {
        for _ in 0..100 {
            if idle.len() == n {
                return;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(idle.len(), n);
    }

    fn limits(per_key: usize, total: usize) -> IdleLimits {
        IdleLimits {
            timeout: Duration::from_secs(10),
            per_key,
            total,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn keeps_per_key_and_in_all_at_most_the_caps() {
        let m = Metrics::new();
        let idle = IdleConns::new(limits(2, 3), m.gateway());
        let mut servers = Vec::new();
        for _ in 0..3 {
            let (s, srv) = conn().await;
            servers.push(srv);
            idle.park(key(1, Some(80)), s);
        }
        settle(&idle, 2).await;
        for _ in 0..2 {
            let (s, srv) = conn().await;
            servers.push(srv);
            idle.park(key(2, Some(80)), s);
        }
        settle(&idle, 3).await;
        assert!(m
            .encode()
            .contains("proxypool_gateway_idle_upstream_connections 3"));
        // Keys differ by upstream, by destination and by forwarding.
        assert!(idle.take(&key(1, Some(81))).is_none());
        assert!(idle.take(&key(1, None)).is_none());
        assert!(idle.take(&key(3, Some(80))).is_none());
        assert!(idle.take(&key(1, Some(80))).is_some());
        assert!(idle.take(&key(1, Some(80))).is_some());
        assert!(idle.take(&key(1, Some(80))).is_none());
        assert_eq!(idle.len(), 1);
        idle.clear();
        assert_eq!(idle.len(), 0);
        assert!(m
            .encode()
            .contains("proxypool_gateway_idle_upstream_connections 0"));
    }

    #[tokio::test(start_paused = true)]
    async fn expired_and_closed_connections_are_never_handed_out() {
        let idle = IdleConns::new(limits(8, 8), Metrics::new().gateway());
        let (s, _srv) = conn().await;
        idle.park(key(1, Some(80)), s);
        settle(&idle, 1).await;
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(idle.take(&key(1, Some(80))).is_none(), "idle 10 s");
        assert_eq!(idle.len(), 0);

        let (s, srv) = conn().await;
        idle.park(key(1, Some(80)), s);
        settle(&idle, 1).await;
        srv.abort();
        let _ = srv.await;
        // The client side sees the close once its connection task runs.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            idle.take(&key(1, Some(80))).is_none(),
            "closed by the far side"
        );

        let (s, _srv) = conn().await;
        idle.park(key(1, Some(80)), s);
        settle(&idle, 1).await;
        tokio::time::advance(Duration::from_secs(9)).await;
        idle.sweep();
        assert_eq!(idle.len(), 1, "9 s idle is kept");
        tokio::time::advance(Duration::from_secs(1)).await;
        idle.sweep();
        assert_eq!(idle.len(), 0, "10 s idle is swept");
    }
}
