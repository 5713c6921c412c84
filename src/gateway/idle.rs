//! Idle upstream HTTP/1.1 connections, kept for the next absolute-form request that goes
//! through the same upstream to the same place: a keep-alive forward proxy (any
//! destination), or a tunnel (CONNECT or SOCKS) to one destination.
//!
//! Rotation is untouched: every request still takes its own lease, and only a connection
//! of the upstream the pool granted is reused.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use tokio::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use super::descriptors::Descriptors;
use crate::dial::Dest;
use crate::endpoint::ProxyUrl;
use crate::metrics::GatewayMetrics;

/// What the gateway sends upstream and answers with.
pub(super) type Body = UnsyncBoxBody<Bytes, hyper::Error>;
/// The request side of one upstream HTTP/1.1 connection.
pub(super) type Sender = hyper::client::conn::http1::SendRequest<Body>;
/// The half of an upstream connection that reads and writes its socket.
pub(super) type Conn =
    hyper::client::conn::http1::Connection<hyper_util::rt::TokioIo<crate::dial::BoxIo>, Body>;

/// Where an idle connection leads. The proxy URL is whole (credentials included, in
/// memory only): an endpoint edited to new credentials or a new address never gets a
/// connection made with the old ones.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct IdleKey {
    proxy: String,
    /// A connection to a forward proxy could carry requests to any host, but a proxy that
    /// merely relays the connection after its first request would then send the next one
    /// to the first host: kept per destination all the same.
    dest: String,
    forward: bool,
    /// TLS with the destination runs inside (an intercepted request's): never handed to a
    /// plain-HTTP request to the same host and port, nor the other way round.
    tls: bool,
}

impl IdleKey {
    pub(super) fn new(proxy: &ProxyUrl, dest: &Dest, forward: bool) -> IdleKey {
        IdleKey {
            proxy: proxy.to_secret_string(),
            dest: dest.authority(),
            forward,
            tls: false,
        }
    }

    /// A connection through `proxy` to `dest` that speaks TLS with it.
    pub(super) fn tls(proxy: &ProxyUrl, dest: &Dest) -> IdleKey {
        IdleKey {
            tls: true,
            ..IdleKey::new(proxy, dest, false)
        }
    }

    /// The connection goes to a forward proxy (absolute-form requests), not a tunnel.
    pub(super) fn forward(&self) -> bool {
        self.forward
    }
}

/// How many idle connections are kept, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleLimits {
    /// An idle connection unused this long is closed. Through a tunnel the far side is the
    /// destination, and many servers close idle keep-alive connections after 5 s (Apache,
    /// Node.js, uvicorn): closing first avoids most races with them.
    pub timeout: Duration,
    /// A request whose body can be sent only once takes a connection idle at most this
    /// long (else a new one): if the far side closed it meanwhile, the request is lost.
    pub once_timeout: Duration,
    /// Idle connections kept per (upstream, destination).
    pub per_key: usize,
    /// Idle connections kept in all (each is one open descriptor, or two in a tunnel).
    pub total: usize,
}

impl Default for IdleLimits {
    fn default() -> Self {
        IdleLimits {
            timeout: Duration::from_secs(4),
            once_timeout: Duration::from_secs(1),
            per_key: 32,
            total: 1024,
        }
    }
}

struct Parked {
    sender: Sender,
    since: Instant,
    /// Its descriptor, of the gateways' budget.
    _fd: OwnedSemaphorePermit,
}

#[derive(Default)]
struct Table {
    by_key: HashMap<IdleKey, Vec<Parked>>,
    total: usize,
    /// The gateway stopped: nothing is kept any more.
    closed: bool,
}

/// The gateway's idle connections.
pub(super) struct IdleConns {
    table: Mutex<Table>,
    limits: IdleLimits,
    metrics: GatewayMetrics,
    fds: Descriptors,
}

impl IdleConns {
    pub(super) fn new(
        limits: IdleLimits,
        metrics: GatewayMetrics,
        fds: Descriptors,
    ) -> Arc<IdleConns> {
        Arc::new(IdleConns {
            table: Mutex::new(Table::default()),
            limits,
            metrics,
            fds,
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

    /// The most recently parked connection for `key` that is still open and fresh (idle
    /// under `once_timeout` for a request whose body can be sent only once).
    pub(super) fn take(&self, key: &IdleKey, once_body: bool) -> Option<Sender> {
        let now = Instant::now();
        let fresh = if once_body {
            self.limits.once_timeout
        } else {
            self.limits.timeout
        };
        let mut t = self.lock();
        let list = t.by_key.get_mut(key)?;
        let mut found = None;
        let mut dropped = 0;
        while let Some(p) = list.pop() {
            let age = now.duration_since(p.since);
            if once_body && p.sender.is_ready() && age >= fresh && age < self.limits.timeout {
                // Too old for this request, fine for a later GET: kept (the newest are
                // at the end, so every older one is too old as well).
                list.push(p);
                break;
            }
            dropped += 1;
            if p.sender.is_ready() && age < fresh {
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

    /// Keep `sender`, whose response the caller read to its end, for the next request once
    /// hyper is ready for one; a connection that closes instead is dropped. `conn`, when the
    /// caller ran the connection itself, is run from now on by the same task.
    pub(super) fn park(
        self: &Arc<Self>,
        key: IdleKey,
        mut sender: Sender,
        conn: Option<Pin<Box<Conn>>>,
    ) {
        let idle = self.clone();
        tokio::spawn(async move {
            let Some(mut conn) = conn else {
                // Run by a task of its own already.
                if sender.ready().await.is_ok() {
                    idle.insert(key, sender);
                }
                return;
            };
            // Ready once hyper has taken in the response's end; the connection ending
            // first (the far side closed it) drops both.
            let ready = tokio::select! {
                r = sender.ready() => r.is_ok(),
                _ = conn.as_mut() => false,
            };
            if ready {
                idle.insert(key, sender);
                // Errors reach whoever sends on it next.
                let _ = conn.await;
            }
        });
    }

    fn insert(&self, key: IdleKey, sender: Sender) {
        let mut t = self.lock();
        if t.closed || t.total >= self.limits.total {
            return;
        }
        let list = t.by_key.entry(key).or_default();
        if list.len() >= self.limits.per_key {
            return;
        }
        // Kept only within the descriptor budget: clients come first.
        let Some(fd) = self.fds.idle() else {
            return;
        };
        list.push(Parked {
            sender,
            since: Instant::now(),
            _fd: fd,
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

    /// Close every idle connection and keep none from now on (the gateway is stopping).
    pub(super) fn clear(&self) {
        let mut t = self.lock();
        t.closed = true;
        t.by_key.clear();
        let all = t.total;
        self.dropped(&mut t, all);
    }

    /// Sweep every `timeout / 2` until `stop`, then close them all.
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

impl Drop for IdleConns {
    fn drop(&mut self) {
        // The gauge is shared by every gateway: take this one's share out of it.
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
            once_timeout: Duration::from_secs(1),
            per_key,
            total,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn keeps_per_key_and_in_all_at_most_the_caps() {
        let m = Metrics::new();
        let idle = IdleConns::new(limits(2, 3), m.gateway(), Descriptors::unlimited());
        let mut servers = Vec::new();
        for _ in 0..3 {
            let (s, srv) = conn().await;
            servers.push(srv);
            idle.park(key(1, Some(80)), s, None);
        }
        settle(&idle, 2).await;
        for _ in 0..2 {
            let (s, srv) = conn().await;
            servers.push(srv);
            idle.park(key(2, Some(80)), s, None);
        }
        settle(&idle, 3).await;
        assert!(m
            .encode()
            .contains("proxypool_gateway_idle_upstream_connections 3"));
        // Keys differ by upstream, by destination and by forwarding.
        assert!(idle.take(&key(1, Some(81)), false).is_none());
        assert!(idle.take(&key(1, None), false).is_none());
        assert!(idle.take(&key(3, Some(80)), false).is_none());
        assert!(idle.take(&key(1, Some(80)), false).is_some());
        assert!(idle.take(&key(1, Some(80)), false).is_some());
        assert!(idle.take(&key(1, Some(80)), false).is_none());
        assert_eq!(idle.len(), 1);
        idle.clear();
        assert_eq!(idle.len(), 0);
        assert!(m
            .encode()
            .contains("proxypool_gateway_idle_upstream_connections 0"));
    }

    #[tokio::test(start_paused = true)]
    async fn expired_and_closed_connections_are_never_handed_out() {
        let idle = IdleConns::new(
            limits(8, 8),
            Metrics::new().gateway(),
            Descriptors::unlimited(),
        );
        let (s, _srv) = conn().await;
        idle.park(key(1, Some(80)), s, None);
        settle(&idle, 1).await;
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(idle.take(&key(1, Some(80)), false).is_none(), "idle 10 s");
        assert_eq!(idle.len(), 0);

        let (s, srv) = conn().await;
        idle.park(key(1, Some(80)), s, None);
        settle(&idle, 1).await;
        srv.abort();
        let _ = srv.await;
        // The client side sees the close once its connection task runs.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(
            idle.take(&key(1, Some(80)), false).is_none(),
            "closed by the far side"
        );

        let (s, _srv) = conn().await;
        idle.park(key(1, Some(80)), s, None);
        settle(&idle, 1).await;
        tokio::time::advance(Duration::from_secs(9)).await;
        idle.sweep();
        assert_eq!(idle.len(), 1, "9 s idle is kept");
        tokio::time::advance(Duration::from_secs(1)).await;
        idle.sweep();
        assert_eq!(idle.len(), 0, "10 s idle is swept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_once_only_body_takes_only_a_connection_idle_under_a_second() {
        let idle = IdleConns::new(
            limits(8, 8),
            Metrics::new().gateway(),
            Descriptors::unlimited(),
        );
        let (s, _srv) = conn().await;
        idle.park(key(1, Some(80)), s, None);
        settle(&idle, 1).await;
        tokio::time::advance(Duration::from_millis(999)).await;
        let s = idle.take(&key(1, Some(80)), true).expect("idle 999 ms");
        idle.park(key(1, Some(80)), s, None);
        settle(&idle, 1).await;
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(idle.take(&key(1, Some(80)), true).is_none(), "idle 1 s");
        // Still there for a request that can be sent again.
        assert_eq!(idle.len(), 1);
        assert!(idle.take(&key(1, Some(80)), false).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_kept_after_clear_and_the_gauge_returns_to_zero() {
        let m = Metrics::new();
        let idle = IdleConns::new(limits(8, 8), m.gateway(), Descriptors::unlimited());
        let (s, _srv) = conn().await;
        idle.park(key(1, Some(80)), s, None);
        settle(&idle, 1).await;
        idle.clear();
        let (s, _srv2) = conn().await;
        idle.park(key(1, Some(80)), s, None);
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        assert_eq!(idle.len(), 0, "parked after the gateway stopped");
        let other = IdleConns::new(limits(8, 8), m.gateway(), Descriptors::unlimited());
        let (s, _srv3) = conn().await;
        other.park(key(2, Some(80)), s, None);
        settle(&other, 1).await;
        assert!(m
            .encode()
            .contains("proxypool_gateway_idle_upstream_connections 1"));
        drop(other);
        assert!(m
            .encode()
            .contains("proxypool_gateway_idle_upstream_connections 0"));
    }

    #[test]
    fn keys_differ_by_credentials() {
        let d = Dest::new("example.com", 80);
        let a = ProxyUrl::parse("http://u:one@127.0.0.1:1").unwrap();
        let b = ProxyUrl::parse("http://u:two@127.0.0.1:1").unwrap();
        assert!(IdleKey::new(&a, &d, true) != IdleKey::new(&b, &d, true));
        assert!(IdleKey::new(&a, &d, true) != IdleKey::new(&a, &d, false));
        assert!(IdleKey::new(&a, &d, true) == IdleKey::new(&a, &d, true));
    }
}
