//! Load generator for the gateway benchmark (`benches/gateway/run.sh`, issue 10): drives
//! any HTTP proxy front over loopback and prints one `key=value` line the script parses.
//!
//! - `tunnels`: N clients, each in a loop: connect to the proxy, `CONNECT host:port`, one
//!   small GET inside the tunnel, close. Counts completed tunnels and errors for a fixed
//!   time. Written in Rust so that the client is not what limits a front at 10k+/s.
//! - `idle`: opens `--count` CONNECT tunnels and holds them idle, reading the front's
//!   resident memory (`/proc/PID/status`) before and after; then checks a sample of the
//!   tunnels still carries a GET, so the memory is that of live tunnels.
//! - `floor`: not a load but a front: the bare relay `floor` describes (run.sh gives it
//!   one worker thread per core, as the daemon's runtime has).
//! - `hyper-floor`: a front too, for absolute-form requests: the least a forward proxy
//!   that parses requests and responses with hyper (as the gateway must, to judge the
//!   status) does per request; see `hyper_floor`.
//!
//! - `https-gets`, `handshakes`: HTTPS loads, straight or through a proxy's CONNECT, for
//!   `benches/intercept/run.sh` (see `benches/intercept/load.rs`).
//!
//! Run by hand: `cargo bench --bench gateway_load -- tunnels --proxy 127.0.0.1:8888
//! --target 127.0.0.1:8080`. Without a mode (as in a plain `cargo bench`) it says so and
//! exits: it needs the servers that run.sh starts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

#[path = "intercept/load.rs"]
mod tls_load;

#[derive(Parser)]
struct Args {
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2, global = true)]
    threads: usize,
    #[command(subcommand)]
    mode: Option<Mode>,
}

#[derive(Subcommand)]
enum Mode {
    Tunnels {
        #[arg(long)]
        proxy: SocketAddr,
        /// Destination `host:port` named in CONNECT.
        #[arg(long)]
        target: String,
        #[arg(long, default_value = "/small")]
        path: String,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 10.0)]
        secs: f64,
    },
    /// A bare relay to serve as a front (see `floor`).
    Floor {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        upstream: SocketAddr,
    },
    /// A bare hyper forward proxy to serve as a front (see `hyper_floor`).
    HyperFloor {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        upstream: SocketAddr,
    },
    /// Keep-alive GETs over TLS (see `tls_load`).
    HttpsGets {
        #[command(flatten)]
        way: tls_load::Way,
        #[arg(long, default_value = "/small")]
        path: String,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 10.0)]
        secs: f64,
    },
    /// New TLS handshakes, no request (see `tls_load`).
    Handshakes {
        #[command(flatten)]
        way: tls_load::Way,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 10.0)]
        secs: f64,
    },
    Idle {
        #[arg(long)]
        proxy: SocketAddr,
        #[arg(long)]
        target: String,
        #[arg(long, default_value = "/small")]
        path: String,
        #[arg(long, default_value_t = 10_000)]
        count: usize,
        /// The front whose resident memory is read.
        #[arg(long)]
        pid: u32,
        /// Tunnels being opened at once.
        #[arg(long, default_value_t = 64)]
        parallel: usize,
        /// Time to let the front settle before the second reading.
        #[arg(long, default_value_t = 2.0)]
        settle: f64,
    },
}

/// `floor`: the least a CONNECT-and-forward proxy written with tokio must do for each
/// request, and nothing more: read the head, dial the one upstream, send it the head (a
/// CONNECT as it came), read the upstream's answer and answer the client, then copy bytes
/// both ways. No lease, no parse beyond the head's end, no limits, no report: the floor
/// of doing the gateway's job on this runtime, beside HAProxy's, which does less. An
/// absolute-form response is copied until the upstream closes, and the client's
/// connection stays open for its next request: fine for responses with a length (the
/// bench's nginx), not for one that ends with the connection.
async fn floor(listen: SocketAddr, upstream: SocketAddr) {
    let reported = Arc::new(AtomicBool::new(false));
    serve_each(listen, "floor", move |c| {
        let reported = reported.clone();
        async move {
            if let Err(e) = floor_client(c, upstream).await {
                // The first failure only: the load's own error count says how many.
                if !reported.swap(true, Ordering::Relaxed) {
                    eprintln!("floor: first failure: {e}");
                }
            }
        }
    })
    .await
}

/// Accept on `listen` forever, each connection served by `serve` in a task of its own.
async fn serve_each<F, Fut>(listen: SocketAddr, who: &str, serve: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = tokio::net::TcpListener::bind(listen).await.expect("bind");
    loop {
        match l.accept().await {
            Ok((c, _)) => {
                tokio::spawn(serve(c));
            }
            Err(e) => {
                // Out of descriptors, most likely: give the others time to close.
                eprintln!("{who}: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn floor_client(mut c: TcpStream, upstream: SocketAddr) -> Result<(), Fail> {
    c.set_nodelay(true).map_err(|e| Fail::Io("nodelay", e))?;
    let mut head = Vec::with_capacity(4096);
    loop {
        let end = match read_head(&mut c, &mut head, "client head").await {
            Ok(end) => end,
            // The client is done with this connection.
            Err(_) => return Ok(()),
        };
        let mut up = TcpStream::connect(upstream).await.map_err(Fail::Connect)?;
        up.set_nodelay(true).map_err(|e| Fail::Io("nodelay", e))?;
        up.write_all(&head[..end])
            .await
            .map_err(|e| Fail::Io("upstream head", e))?;
        if head.starts_with(b"CONNECT ") {
            let early = head[end..].to_vec();
            let mut answer = Vec::with_capacity(512);
            let n = read_head(&mut up, &mut answer, "upstream answer").await?;
            if !is_200(&answer) {
                return Err(Fail::ConnectStatus(status_line(&answer)));
            }
            let mut out = b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec();
            out.extend_from_slice(&answer[n..]);
            c.write_all(&out).await.map_err(|e| Fail::Io("answer", e))?;
            if !early.is_empty() {
                up.write_all(&early)
                    .await
                    .map_err(|e| Fail::Io("early", e))?;
            }
            let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
            return Ok(());
        }
        // A request in absolute form: the upstream answers it and closes (tinyproxy does),
        // so its bytes go to the client up to that close; the client may send the next.
        if end < head.len() {
            up.write_all(&head[end..])
                .await
                .map_err(|e| Fail::Io("body", e))?;
        }
        let (mut r, _w) = up.split();
        tokio::io::copy(&mut r, &mut c)
            .await
            .map_err(|e| Fail::Io("response", e))?;
    }
}

/// `hyper-floor`: an absolute-form request read by hyper's HTTP/1.1 server, sent as it
/// came over a new connection to the one upstream by hyper's client, and the response
/// head and body handed back to the client: the gateway's forward path with nothing of
/// its own (no lease, no header hygiene, no status judged, no limits, no report). Its
/// rate beside the gateway's says what the gateway's own work costs; beside HAProxy's,
/// what parsing both heads with hyper costs. CONNECT is not served.
async fn hyper_floor(listen: SocketAddr, upstream: SocketAddr) {
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    serve_each(listen, "hyper-floor", move |c| async move {
        let _ = c.set_nodelay(true);
        let svc = service_fn(
            move |req: hyper::Request<hyper::body::Incoming>| async move {
                let up = TcpStream::connect(upstream).await?;
                up.set_nodelay(true)?;
                let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(up))
                    .await
                    .map_err(std::io::Error::other)?;
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                send.send_request(req).await.map_err(std::io::Error::other)
            },
        );
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(c), svc)
            .await;
    })
    .await
}

/// One step of a tunnel, so an error line says where it failed.
#[derive(Debug)]
enum Fail {
    Connect(std::io::Error),
    ConnectStatus(String),
    Io(&'static str, std::io::Error),
    GetStatus(String),
    Short(usize, usize),
    Timeout,
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Connect(e) => write!(f, "tcp connect to proxy: {e}"),
            Fail::ConnectStatus(l) => write!(f, "CONNECT answered {l:?}"),
            Fail::Io(step, e) => write!(f, "{step}: {e}"),
            Fail::GetStatus(l) => write!(f, "GET in tunnel answered {l:?}"),
            Fail::Short(got, want) => write!(f, "body {got} of {want} bytes"),
            Fail::Timeout => write!(f, "no answer within 5s"),
        }
    }
}

const STEP_TIMEOUT: Duration = Duration::from_secs(5);

fn header_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn status_line(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == b'\r').unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end.min(120)]).into_owned()
}

fn is_200(buf: &[u8]) -> bool {
    buf.starts_with(b"HTTP/1.1 200") || buf.starts_with(b"HTTP/1.0 200")
}

fn content_length(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    text.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}

/// Reads one response head into `buf`; returns its length (body bytes may follow in `buf`).
async fn read_head<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut Vec<u8>,
    step: &'static str,
) -> Result<usize, Fail> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = header_end(buf) {
            return Ok(end);
        }
        let n = s.read(&mut chunk).await.map_err(|e| Fail::Io(step, e))?;
        if n == 0 {
            return Err(Fail::Io(step, std::io::ErrorKind::UnexpectedEof.into()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn open_tunnel(
    proxy: SocketAddr,
    connect_req: &[u8],
    buf: &mut Vec<u8>,
) -> Result<TcpStream, Fail> {
    let mut s = TcpStream::connect(proxy).await.map_err(Fail::Connect)?;
    s.set_nodelay(true).map_err(|e| Fail::Io("nodelay", e))?;
    s.write_all(connect_req)
        .await
        .map_err(|e| Fail::Io("write CONNECT", e))?;
    let end = read_head(&mut s, buf, "read CONNECT answer").await?;
    if !is_200(buf) {
        return Err(Fail::ConnectStatus(status_line(buf)));
    }
    if end != buf.len() {
        return Err(Fail::ConnectStatus("bytes after the CONNECT answer".into()));
    }
    Ok(s)
}

/// One GET inside an open tunnel, read up to its Content-Length.
async fn get_in<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    get_req: &[u8],
    buf: &mut Vec<u8>,
) -> Result<(), Fail> {
    s.write_all(get_req)
        .await
        .map_err(|e| Fail::Io("write GET", e))?;
    let end = read_head(s, buf, "read GET answer").await?;
    if !is_200(buf) {
        return Err(Fail::GetStatus(status_line(buf)));
    }
    let want =
        content_length(&buf[..end]).ok_or_else(|| Fail::GetStatus("no Content-Length".into()))?;
    let mut got = buf.len() - end;
    let mut chunk = [0u8; 4096];
    while got < want {
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| Fail::Io("read GET body", e))?;
        if n == 0 {
            return Err(Fail::Short(got, want));
        }
        got += n;
    }
    Ok(())
}

fn requests(target: &str, path: &str, close: bool) -> (Vec<u8>, Vec<u8>) {
    let connect = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
    let conn = if close { "close" } else { "keep-alive" };
    let get =
        format!("GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: {conn}\r\n\r\n").into_bytes();
    (connect, get)
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Tally {
    fn fail(&self, f: Fail) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            *first = Some(f.to_string());
        }
    }
    fn first_error(&self) -> String {
        self.first_error.lock().unwrap().clone().unwrap_or_default()
    }
}

async fn tunnels(proxy: SocketAddr, target: String, path: String, clients: usize, secs: f64) {
    let (connect, get) = requests(&target, &path, true);
    let (connect, get) = (Arc::new(connect), Arc::new(get));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (connect, get, tally, stop) =
            (connect.clone(), get.clone(), tally.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = Vec::with_capacity(4096);
            while !stop.load(Ordering::Relaxed) {
                let one = async {
                    let mut s = open_tunnel(proxy, &connect, &mut buf).await?;
                    get_in(&mut s, &get, &mut buf).await
                };
                match tokio::time::timeout(STEP_TIMEOUT, one).await {
                    Ok(Ok(())) => {
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(f)) => tally.fail(f),
                    Err(_) => tally.fail(Fail::Timeout),
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    // Tunnels finishing after the deadline are counted but not timed: at most one per
    // client, negligible against thousands per second.
    let elapsed = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    let ok = tally.ok.load(Ordering::Relaxed);
    println!(
        "mode=tunnels ok={ok} errors={} secs={elapsed:.2} rate={:.1} first_error={:?}",
        tally.errors.load(Ordering::Relaxed),
        ok as f64 / elapsed,
        tally.first_error()
    );
}

fn rss_kib(pid: u32) -> std::io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no VmRSS line"))
}

async fn idle(
    proxy: SocketAddr,
    target: String,
    path: String,
    count: usize,
    pid: u32,
    parallel: usize,
    settle: f64,
) -> std::io::Result<()> {
    let (connect, get) = requests(&target, &path, false);
    let connect = Arc::new(connect);
    let before = rss_kib(pid)?;
    let gate = Arc::new(Semaphore::new(parallel));
    let tally = Arc::new(Tally::default());
    let mut opening = Vec::with_capacity(count);
    for _ in 0..count {
        let (connect, gate, tally) = (connect.clone(), gate.clone(), tally.clone());
        opening.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await.ok()?;
            let mut buf = Vec::new();
            match tokio::time::timeout(STEP_TIMEOUT, open_tunnel(proxy, &connect, &mut buf)).await {
                Ok(Ok(s)) => Some(s),
                Ok(Err(f)) => {
                    tally.fail(f);
                    None
                }
                Err(_) => {
                    tally.fail(Fail::Timeout);
                    None
                }
            }
        }));
    }
    let mut open = Vec::with_capacity(count);
    for t in opening {
        if let Ok(Some(s)) = t.await {
            open.push(s);
        }
    }
    tokio::time::sleep(Duration::from_secs_f64(settle)).await;
    let after = rss_kib(pid)?;
    // Every 100th tunnel must still carry a request: memory of dead tunnels proves nothing.
    let mut live = 0;
    let mut checked = 0;
    let mut buf = Vec::new();
    for s in open.iter_mut().step_by(100) {
        checked += 1;
        if let Ok(Ok(())) = tokio::time::timeout(STEP_TIMEOUT, get_in(s, &get, &mut buf)).await {
            live += 1;
        }
    }
    let n = open.len();
    let per = if n > 0 {
        (after.saturating_sub(before) as f64) * 1024.0 / n as f64
    } else {
        0.0
    };
    println!(
        "mode=idle opened={n} errors={} rss_before_kib={before} rss_after_kib={after} bytes_per_tunnel={per:.0} sample_live={live}/{checked} first_error={:?}",
        tally.errors.load(Ordering::Relaxed),
        tally.first_error()
    );
    drop(open);
    Ok(())
}

/// A load that could not start (a bad flag or CA file): said, exit 2.
fn exit_on(r: Result<(), String>) {
    if let Err(e) = r {
        eprintln!("gateway_load: {e}");
        std::process::exit(2);
    }
}

fn main() {
    // `cargo bench` passes `--bench` to every bench binary.
    let args = Args::parse_from(std::env::args().filter(|a| a != "--bench"));
    let Some(mode) = args.mode else {
        println!("gateway_load: no mode given; run benches/gateway/run.sh (it starts the servers this drives)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    match mode {
        Mode::Tunnels {
            proxy,
            target,
            path,
            clients,
            secs,
        } => rt.block_on(tunnels(proxy, target, path, clients, secs)),
        Mode::Floor { listen, upstream } => rt.block_on(floor(listen, upstream)),
        Mode::HyperFloor { listen, upstream } => rt.block_on(hyper_floor(listen, upstream)),
        Mode::HttpsGets {
            way,
            path,
            clients,
            secs,
        } => exit_on(rt.block_on(tls_load::https_gets(way, path, clients, secs))),
        Mode::Handshakes { way, clients, secs } => {
            exit_on(rt.block_on(tls_load::handshakes(way, clients, secs)))
        }
        Mode::Idle {
            proxy,
            target,
            path,
            count,
            pid,
            parallel,
            settle,
        } => {
            if let Err(e) = rt.block_on(idle(proxy, target, path, count, pid, parallel, settle)) {
                eprintln!("gateway_load idle: reading /proc/{pid}/status: {e}");
                std::process::exit(1);
            }
        }
    }
}
