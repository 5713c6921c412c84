//! The HTTPS loads of `benches/intercept/run.sh` (issue 48), modes of the gateway load
//! generator: a TLS client (rustls, trusting one CA's PEM, ALPN `http/1.1` only so that
//! every front is asked the same thing) that reaches its server either straight or through
//! an HTTP proxy's `CONNECT`.
//!
//! - `https-gets`: N clients, each opens one connection (CONNECT, TLS) and sends keep-alive
//!   GETs on it, one after the other, until the time is up; a connection that fails is
//!   counted as an error and opened again. Counts completed GETs: what a crawler that keeps
//!   its connections pays per page once they are open.
//! - `handshakes`: N clients, each in a loop: connect, CONNECT (through a proxy), a full
//!   TLS handshake (the client remembers no session: nothing is resumed), close, no
//!   request. Counts completed handshakes: the cost of the TLS server.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::{get_in, open_tunnel, Fail, Tally, STEP_TIMEOUT};

/// Where a client's TLS goes and how it gets there.
#[derive(clap::Args)]
pub struct Way {
    /// The HTTP proxy to ask for a tunnel; none: straight to `target`.
    #[arg(long)]
    pub proxy: Option<SocketAddr>,
    /// `host:port` named in CONNECT (dialled itself without a proxy).
    #[arg(long)]
    pub target: String,
    /// The name TLS asks for (SNI) and verifies; `target`'s host when not given.
    #[arg(long)]
    pub name: Option<String>,
    /// `user:password` for the proxy's `Proxy-Authorization`.
    #[arg(long)]
    pub proxy_auth: Option<String>,
    /// The CA (PEM) that signs the server's certificate.
    #[arg(long)]
    pub cacert: std::path::PathBuf,
}

/// What every connection of a load shares: the request bytes and the TLS client.
struct Client {
    proxy: Option<SocketAddr>,
    target: String,
    connect: Vec<u8>,
    tls: TlsConnector,
    name: ServerName<'static>,
}

impl Client {
    fn new(way: Way) -> Result<Client, String> {
        let host = match way.target.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
            None => return Err(format!("--target {:?} is not host:port", way.target)),
        };
        let name = way.name.as_deref().unwrap_or(host).to_string();
        let name = ServerName::try_from(name).map_err(|e| format!("TLS name: {e}"))?;
        let auth = way.proxy_auth.as_ref().map_or(String::new(), |a| {
            let b = base64::engine::general_purpose::STANDARD.encode(a);
            format!("Proxy-Authorization: Basic {b}\r\n")
        });
        let t = &way.target;
        let connect = format!("CONNECT {t} HTTP/1.1\r\nHost: {t}\r\n{auth}\r\n").into_bytes();
        Ok(Client {
            proxy: way.proxy,
            target: way.target.clone(),
            connect,
            tls: TlsConnector::from(client_config(&way.cacert)?),
            name,
        })
    }

    /// A new TCP connection (through the proxy's tunnel when there is one) and a full TLS
    /// handshake over it.
    async fn open(&self, buf: &mut Vec<u8>) -> Result<TlsStream<TcpStream>, Fail> {
        let tcp = match self.proxy {
            Some(p) => open_tunnel(p, &self.connect, buf).await?,
            None => {
                let s = TcpStream::connect(&self.target)
                    .await
                    .map_err(|e| Fail::Io("tcp connect", e))?;
                s.set_nodelay(true).map_err(|e| Fail::Io("nodelay", e))?;
                s
            }
        };
        self.tls
            .connect(self.name.clone(), tcp)
            .await
            .map_err(|e| Fail::Io("TLS handshake", e))
    }
}

/// Trusts the certificates of `cacert` only; offers `http/1.1`; remembers no session, so
/// every handshake is a full one.
fn client_config(cacert: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let pem = std::fs::read(cacert).map_err(|e| format!("{}: {e}", cacert.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        let c = c.map_err(|e| format!("{}: {e}", cacert.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", cacert.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no certificate", cacert.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(cfg))
}

/// Runs `clients` copies of `each` for `secs`, then prints the tally as one `key=value`
/// line led by `mode=NAME`, with `connections` (TLS connections opened).
async fn drive<F, Fut>(name: &str, clients: usize, secs: f64, each: F)
where
    F: Fn(Arc<Tally>, Arc<AtomicU64>, Arc<AtomicBool>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let tally = Arc::new(Tally::default());
    let opened = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| tokio::spawn(each(tally.clone(), opened.clone(), stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    // What finishes after the deadline is counted but not timed: one step per client at
    // most, negligible against thousands per second.
    let elapsed = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    let ok = tally.ok.load(Ordering::Relaxed);
    println!(
        "mode={name} ok={ok} errors={} connections={} secs={elapsed:.2} rate={:.1} first_error={:?}",
        tally.errors.load(Ordering::Relaxed),
        opened.load(Ordering::Relaxed),
        ok as f64 / elapsed,
        tally.first_error()
    );
}

/// `https-gets`: keep-alive GETs of `path` on connections kept open (see the module).
pub async fn https_gets(way: Way, path: String, clients: usize, secs: f64) -> Result<(), String> {
    let client = Arc::new(Client::new(way)?);
    let host = client.target.clone();
    let get = Arc::new(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\n\r\n")
            .into_bytes(),
    );
    drive("https-gets", clients, secs, move |tally, opened, stop| {
        let (client, get) = (client.clone(), get.clone());
        async move {
            let mut buf = Vec::with_capacity(4096);
            while !stop.load(Ordering::Relaxed) {
                let mut s = match tokio::time::timeout(STEP_TIMEOUT, client.open(&mut buf)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(f)) => {
                        tally.fail(f);
                        continue;
                    }
                    Err(_) => {
                        tally.fail(Fail::Timeout);
                        continue;
                    }
                };
                opened.fetch_add(1, Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) {
                    match tokio::time::timeout(STEP_TIMEOUT, get_in(&mut s, &get, &mut buf)).await {
                        Ok(Ok(())) => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Err(f)) => {
                            tally.fail(f);
                            break;
                        }
                        Err(_) => {
                            tally.fail(Fail::Timeout);
                            break;
                        }
                    }
                }
            }
        }
    })
    .await;
    Ok(())
}

/// `handshakes`: new connections, each a full TLS handshake and nothing more (see the
/// module).
pub async fn handshakes(way: Way, clients: usize, secs: f64) -> Result<(), String> {
    let client = Arc::new(Client::new(way)?);
    drive("handshakes", clients, secs, move |tally, opened, stop| {
        let client = client.clone();
        async move {
            let mut buf = Vec::with_capacity(4096);
            while !stop.load(Ordering::Relaxed) {
                match tokio::time::timeout(STEP_TIMEOUT, client.open(&mut buf)).await {
                    Ok(Ok(s)) => {
                        opened.fetch_add(1, Ordering::Relaxed);
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                        drop(s);
                    }
                    Ok(Err(f)) => tally.fail(f),
                    Err(_) => tally.fail(Fail::Timeout),
                }
            }
        }
    })
    .await;
    Ok(())
}
