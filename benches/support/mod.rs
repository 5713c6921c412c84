//! What several benches share: a JSON-lines socket client, synthetic endpoints, and a
//! daemon on a runtime of its own.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proxypool::config::{Config, Durability, PoolConfig};
use proxypool::endpoint::ProxyUrl;
use proxypool::health::State;
use proxypool::pool::engine::{Engine, EngineOptions};
use proxypool::server::{self, Handler};
use proxypool::store::{NewEndpoint, Store};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

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

/// A daemon (engine + lease socket server) on a runtime thread of its own, as `proxypool
/// serve` runs it.
pub struct Daemon {
    pub sock: PathBuf,
    pub token: CancellationToken,
    pub engine: Arc<Engine>,
}

/// Start a daemon named `name` under `dir` holding `endpoints` in one pool, `pool`.
pub fn daemon(
    dir: &Path,
    name: &str,
    endpoints: &[NewEndpoint],
    pool: PoolConfig,
    opts: EngineOptions,
    durability: Durability,
) -> Daemon {
    let mut store = Store::open_with(&dir.join(format!("{name}.db")), durability).unwrap();
    store.add_endpoints(endpoints).unwrap();
    daemon_on(store, dir.join(format!("{name}.sock")), pool, opts)
}

/// Start a daemon on `store` (opened and filled by the caller), serving `sock`.
pub fn daemon_on(store: Store, sock: PathBuf, pool: PoolConfig, opts: EngineOptions) -> Daemon {
    let slot = Arc::new(std::sync::OnceLock::new());
    let slot2 = slot.clone();
    let token = CancellationToken::new();
    let (sock2, tok2) = (sock.clone(), token.clone());
    on_own_runtime(move |ready| async move {
        let engine = Engine::open_with(store, [pool], opts).unwrap();
        let _ = slot2.set(engine.clone());
        tokio::spawn(engine.clone().run_timer(tok2.clone().cancelled_owned()));
        let l = server::bind_unix(&sock2).await.unwrap();
        let h = Arc::new(Handler::new(
            engine,
            Arc::new(Config::default()),
            Default::default(),
        ));
        ready.send(()).unwrap();
        server::run(l, h, tok2).await;
    });
    let engine = slot.get().expect("set before ready").clone();
    Daemon {
        sock,
        token,
        engine,
    }
}

/// Run a server on its own 1-thread runtime; returns once it says it is ready.
pub fn on_own_runtime<F, Fut>(server: F)
where
    F: FnOnce(std::sync::mpsc::Sender<()>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            // Named apart from the client's threads, for `perf report --sort comm`.
            .thread_name("server")
            .enable_all()
            .build()
            .unwrap()
            .block_on(server(tx));
    });
    rx.recv().unwrap();
}

/// Runs cell `i` of `n` (`run(i)`) once per round for `rounds` rounds, A B A B ..., the
/// order flipped every other round so that neither end of a round favours one cell;
/// returns each cell's results in round order.
pub fn interleaved(rounds: usize, n: usize, mut run: impl FnMut(usize) -> f64) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::new(); n];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..n).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            out[i].push(run(i));
        }
    }
    out
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Wait for every client of `set`, each giving back (operations, errors): operations a
/// second since the call, and errors summed.
pub async fn rate_of(mut set: tokio::task::JoinSet<(u64, u64)>) -> (f64, u64) {
    let start = std::time::Instant::now();
    let (mut ops, mut errs) = (0, 0);
    while let Some(r) = set.join_next().await {
        let (o, e) = r.unwrap();
        ops += o;
        errs += e;
    }
    (ops as f64 / start.elapsed().as_secs_f64(), errs)
}
