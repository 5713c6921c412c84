//! `proxypool serve`: the engine, its timer, the prober loops, sources and the socket.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::{Config, PoolConfig};
use crate::pool::engine::{Engine, EngineError};
use crate::probe::exit::{ExitCheck, ExitChecker};
use crate::probe::run::{probe_one, probers, run_and_record};
use crate::probe::{ProbeError, Prober};
use crate::protocol::ProbeReport;
use crate::server::token::Tokens;
use crate::server::{self, Handler, ServerError};
use crate::sources;
use reload::Reloader;

mod reload;

mod retention;
mod status;
pub use retention::Retention;
pub use status::DaemonStatus;

/// Errors starting or running the daemon.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Socket setup.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// Engine / store.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Probe configuration.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// A gateway could not start.
    #[error(transparent)]
    Gateway(#[from] crate::gateway::GatewayError),
}

/// How `serve` listens.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Unix socket path.
    pub socket: PathBuf,
    /// Optional TCP listener.
    pub listen_tcp: Option<SocketAddr>,
    /// The TCP listener's tokens, one per role.
    pub tokens: Tokens,
    /// The read-only HTTP listener (`/metrics`, the status page); checked by
    /// `web::check_bind` before the daemon starts.
    pub http: Option<SocketAddr>,
    /// The HTTP listener's bearer token: when set, every request needs it.
    pub http_token: Option<String>,
    /// `serve --gateway`: a gateway besides the config's, which no config reload touches.
    pub gateway: Option<crate::config::GatewayConfig>,
    /// The database served, as `status` names it.
    pub database: Option<String>,
    /// The database lock this daemon holds: its socket is published there once bound.
    pub lock: Option<Arc<crate::store::lock::Held>>,
    /// The config file SIGHUP reloads (none: built-in defaults, nothing to reload).
    pub reload_from: Option<PathBuf>,
    /// The install's CA, loaded and checked (required when a gateway intercepts): its
    /// certificate is served at `/ca.pem`.
    pub ca: Option<Arc<crate::tls::CertAuthority>>,
}

/// The background tasks of each pool (sources, prober), restartable one pool at a time
/// when a reload changes its config.
pub(super) struct PoolTasks {
    engine: Arc<Engine>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    running: HashMap<String, CancellationToken>,
}

impl PoolTasks {
    fn new(engine: Arc<Engine>, tracker: TaskTracker, shutdown: CancellationToken) -> Self {
        PoolTasks {
            engine,
            tracker,
            shutdown,
            running: HashMap::new(),
        }
    }

    /// (Re)start the tasks of `pool`, stopping the ones it had. `first_sniff`: a pool new
    /// to this daemon sniffs at once; the others keep their startup sniff.
    pub(super) fn start(&mut self, pool: &PoolConfig, prober: Option<&Prober>, first_sniff: bool) {
        self.stop(&pool.name);
        let token = self.shutdown.child_token();
        if !pool.sources.is_empty() {
            let (engine, pool, token) = (self.engine.clone(), pool.clone(), token.clone());
            if first_sniff {
                self.tracker.spawn(sources::run(engine, pool, token));
            } else {
                self.tracker
                    .spawn(sources::run_after_startup(engine, pool, token));
            }
        }
        // Config validation guarantees a prober for every pool whose prober recovers.
        if let (true, Some(prober)) = (pool.mode.prober_recovers(), prober) {
            self.tracker.spawn(prober_loop(
                self.engine.clone(),
                pool.clone(),
                prober.clone(),
                token.clone(),
            ));
        }
        if let Some(exit) = &pool.exit {
            // Config validation checked the URL; only the probe's CA file can fail here,
            // and then the prober fails the same way at startup.
            match ExitChecker::new(exit, &pool.probe) {
                Ok(checker) => {
                    self.tracker.spawn(exit_loop(
                        self.engine.clone(),
                        pool.clone(),
                        checker,
                        token.clone(),
                    ));
                }
                Err(e) => warn!(pool = %pool.name, error = %e, "exit checks not started"),
            }
        }
        self.running.insert(pool.name.clone(), token);
    }

    /// Stop the tasks of a pool. Probes in flight finish and are recorded.
    pub(super) fn stop(&mut self, pool: &str) {
        if let Some(t) = self.running.remove(pool) {
            t.cancel();
        }
    }
}

/// Recovery probes and periodic checks of one pool, until `shutdown`.
async fn prober_loop(
    engine: Arc<Engine>,
    pool: PoolConfig,
    prober: Prober,
    shutdown: CancellationToken,
) {
    // Recovery probes are never queued behind a periodic sweep of a large pool: a quarter
    // of the pool's concurrency (at least one) is theirs alone.
    let total = pool.probe.concurrency.max(1);
    let recovery_cap = (total / 4).max(1);
    let sweep_cap = total.saturating_sub(recovery_cap).max(1);
    let sem = Arc::new(Semaphore::new(recovery_cap));
    let tracker = TaskTracker::new();
    if !pool.probe.interval.is_zero() {
        tracker.spawn(sweep_loop(
            engine.clone(),
            pool.clone(),
            prober.clone(),
            sweep_cap,
            shutdown.clone(),
        ));
    }
    loop {
        // Recovery attempts: claim as many as the cap allows.
        while let Ok(permit) = sem.clone().try_acquire_owned() {
            match engine.claim_next(&pool.name).await {
                Ok(Some((id, url))) => {
                    let (engine, prober) = (engine.clone(), prober.clone());
                    let report = ProbeReport::claimed(id, &url, &pool.name);
                    tracker.spawn(async move {
                        if let Err(e) = run_and_record(&engine, &prober, &url, report).await {
                            warn!(endpoint = id, error = %e, "could not record probe result");
                        }
                        drop(permit);
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(pool = %pool.name, error = %e, "claim failed");
                    break;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = engine.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    tracker.close();
    // In-flight probes are dropped: claims are never persisted, so a restart simply
    // admits the attempt again.
}

/// Exit checks of one pool (docs/exit.md): each endpoint every `every` and when it comes
/// back from a cooldown, a quarter of the probe concurrency at a time.
async fn exit_loop(
    engine: Arc<Engine>,
    pool: PoolConfig,
    checker: ExitChecker,
    shutdown: CancellationToken,
) {
    let cap = (pool.probe.concurrency / 4).max(1);
    let sem = Arc::new(Semaphore::new(cap));
    let tracker = TaskTracker::new();
    loop {
        let room = sem.available_permits();
        for (id, url) in engine.exit_due(&pool.name, room) {
            let Ok(permit) = sem.clone().try_acquire_owned() else {
                break;
            };
            let (engine, checker) = (engine.clone(), checker.clone());
            tracker.spawn(async move {
                let learned = match checker.check(&url).await {
                    ExitCheck::Learned(ip) => Ok(ip),
                    ExitCheck::Unknown(why) => Err(why),
                };
                if let Err(e) = engine.exit_learned(id, learned).await {
                    debug!(endpoint = id, error = %e, "exit check not recorded");
                }
                drop(permit);
            });
        }
        // Due checks are looked for each second (an endpoint back from a cooldown is
        // due at once), sooner when the next is planned sooner.
        let next = engine
            .exit_next_due(&pool.name)
            .map_or(Duration::from_secs(1), |at| {
                at.saturating_duration_since(tokio::time::Instant::now())
                    .clamp(Duration::from_millis(50), Duration::from_secs(1))
            });
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(next) => {}
        }
    }
    tracker.close();
}

/// Periodic checks of a pool's available endpoints every `probe.interval` (jittered).
async fn sweep_loop(
    engine: Arc<Engine>,
    pool: PoolConfig,
    prober: Prober,
    cap: usize,
    shutdown: CancellationToken,
) {
    let sem = Arc::new(Semaphore::new(cap));
    let tracker = TaskTracker::new();
    let jittered = |d: Duration| d.mul_f64(0.9 + fastrand::f64() * 0.2);
    loop {
        // A probe target that is down is tried again by its own cooldown (seconds), not
        // at the next sweep (minutes): then ONE endpoint is probed, as its trial.
        let trial_in = engine.probe_target_down(&pool.name);
        let wait = match trial_in {
            Some(d) => d.max(Duration::from_millis(100)),
            None => jittered(pool.probe.interval),
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
        if trial_in.is_some() && engine.probe_target_down(&pool.name).is_some() {
            if let Some(&id) = engine.available_ids(&pool.name).first() {
                if let Err(e) = probe_one(&engine, &prober, id).await {
                    debug!(endpoint = id, error = %e, "probe target trial not recorded");
                }
            }
            continue;
        }
        let ids = engine.available_ids(&pool.name);
        debug!(pool = %pool.name, n = ids.len(), "periodic check");
        for id in ids {
            let permit = tokio::select! {
                p = sem.clone().acquire_owned() => p,
                _ = shutdown.cancelled() => break,
            };
            let Ok(permit) = permit else { break };
            let (engine, prober) = (engine.clone(), prober.clone());
            tracker.spawn(async move {
                if let Err(e) = probe_one(&engine, &prober, id).await {
                    debug!(endpoint = id, error = %e, "periodic probe not recorded");
                }
                drop(permit);
            });
        }
    }
    tracker.close();
}

/// The descriptors the gateways may hold together: the open-file limit less what the lease
/// socket, its TCP listener, the HTTP listener and the probers may take at most.
fn gateway_budget(config: &Config, opts: &ServeOptions) -> usize {
    use crate::server::fd_limit::{default_caps, gateway_budget, nofile};
    let nofile = nofile();
    let (unix, tcp) = default_caps(nofile);
    let unix = config.max_connections.unwrap_or(unix);
    let tcp = match opts.listen_tcp {
        Some(_) => config.max_tcp_connections.unwrap_or(tcp),
        None => 0,
    };
    let http = if opts.http.is_some() {
        crate::web::MAX_CONNECTIONS
    } else {
        0
    };
    let probes: usize = config
        .pools
        .values()
        .filter(|p| p.probe.url.is_some())
        .map(|p| p.probe.concurrency)
        .sum();
    gateway_budget(nofile, unix + tcp + http + probes)
}

/// Run the daemon until `shutdown` is cancelled.
pub async fn serve(
    config: Arc<Config>,
    engine: Arc<Engine>,
    opts: ServeOptions,
    shutdown: CancellationToken,
) -> Result<(), DaemonError> {
    // Listening before anything slow (the startup sniff) happens: a SIGHUP's default
    // action would end the process.
    let hup = opts.reload_from.as_ref().map(|_| Reloader::listen());
    let listeners = Listeners::bind(&config, &engine, &opts).await?;
    listeners.register(&engine, &opts);
    let probers = probers(&config)?;
    let tracker = TaskTracker::new();
    tracker.spawn(engine.clone().run_timer(shutdown.clone().cancelled_owned()));
    let mut tasks = PoolTasks::new(engine.clone(), tracker.clone(), shutdown.clone());
    startup_sniff(&config, &engine, &shutdown).await;
    for pool in config.pools.values() {
        tasks.start(pool, probers.get(&pool.name), false);
    }
    let mut handler = Handler::new(engine.clone(), config.clone(), opts.tokens.clone())
        .with_probers(probers.clone());
    if let Some(db) = &opts.database {
        handler = handler.with_database(db.clone());
    }
    let handler = Arc::new(handler);
    if let (Some(path), Some(Some(hup))) = (opts.reload_from.clone(), hup) {
        let reloader = Reloader::new(path, config.clone(), engine.clone(), handler.clone(), tasks);
        tracker.spawn(reloader.run(hup, shutdown.clone()));
    }
    let Listeners {
        unix,
        tcp,
        gateways,
        http,
    } = listeners;
    let tcp_addr = tcp.as_ref().and_then(|l| l.local_addr().ok());
    if let Some(l) = tcp {
        tracker.spawn(server::run_tcp(l, handler.clone(), shutdown.clone()));
    }
    let gateway: Vec<SocketAddr> = gateways.iter().map(|g| g.local_addr()).collect();
    for g in gateways {
        tracker.spawn(g.run(shutdown.clone()));
    }
    let lost = Arc::new(std::sync::Mutex::new(None));
    tracker.spawn(watch_store_file(
        engine.clone(),
        lost.clone(),
        shutdown.clone(),
    ));
    let http_addr = http.as_ref().and_then(|l| l.local_addr().ok());
    if let Some(l) = http {
        let source = Arc::new(DaemonStatus::new(engine.clone()));
        let app =
            crate::web::HttpApp::new(source, engine.metrics().clone(), opts.http_token.clone())
                .with_ca_pem(
                    opts.ca
                        .as_ref()
                        .map(|ca| ca.certificate().pem().to_string()),
                );
        tracker.spawn(crate::web::serve(l, Arc::new(app), shutdown.clone()));
    }
    tracker.spawn(retention::run(
        engine.clone(),
        Retention::new(config.events_retention),
        shutdown.clone(),
    ));
    announce(&engine, &opts, tcp_addr, &gateway, http_addr);
    server::run(unix, handler, shutdown.clone()).await;
    tracker.close();
    tracker.wait().await;
    engine.unregister();
    crate::server::socket_file::remove_own(&opts.socket);
    if let Some(e) = lost.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e.into());
    }
    engine.flush().await?;
    info!("stopped");
    Ok(())
}

/// Every listener the daemon serves, bound before anything is served so that a port in
/// use fails the start with the address named.
struct Listeners {
    unix: tokio::net::UnixListener,
    tcp: Option<tokio::net::TcpListener>,
    gateways: Vec<crate::gateway::Gateway>,
    http: Option<tokio::net::TcpListener>,
}

impl Listeners {
    /// Register the daemon in its fleet with these listeners: before the startup sniff,
    /// since whose turn it is to sniff goes by the daemons registered (docs/fleet.md,
    /// "Sources in a fleet").
    fn register(&self, engine: &Engine, opts: &ServeOptions) {
        if let Err(e) = engine.register(self.names(opts)) {
            warn!(error = %e, "could not register this daemon in the fleet; it retries with its heartbeat");
        }
    }

    /// What the fleet's registry lists of this daemon: `socket PATH`, `gateway ADDR`...
    fn names(&self, opts: &ServeOptions) -> Vec<String> {
        let mut v = vec![format!("socket {}", opts.socket.display())];
        let addr =
            |l: &Option<tokio::net::TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
        v.extend(addr(&self.tcp).map(|a| format!("tcp {a}")));
        v.extend(
            self.gateways
                .iter()
                .map(|g| format!("gateway {}", g.local_addr())),
        );
        v.extend(addr(&self.http).map(|a| format!("http {a}")));
        v
    }

    async fn bind(
        config: &Config,
        engine: &Arc<Engine>,
        opts: &ServeOptions,
    ) -> Result<Listeners, DaemonError> {
        let unix = server::bind_unix(&opts.socket).await?;
        if let Some(held) = &opts.lock {
            crate::store::lock::publish(held, &opts.socket).map_err(|source| {
                ServerError::Bind {
                    path: "the database lock file".into(),
                    source,
                }
            })?;
        }
        let tcp = match opts.listen_tcp {
            Some(addr) => Some(bind_tcp(addr, addr.to_string()).await?),
            None => None,
        };
        let budget = gateway_budget(config, opts);
        if !config.gateways.is_empty() || opts.gateway.is_some() {
            info!(descriptors = budget, "gateway descriptor budget");
        }
        let fds = crate::gateway::Descriptors::new(budget);
        let mut gateways = Vec::new();
        // One leaf cache for every gateway: a host's leaf is minted once.
        let leaves = opts.ca.as_ref().map(|ca| {
            Arc::new(crate::tls::Leaves::new(
                ca.clone(),
                crate::tls::DEFAULT_CAPACITY,
            ))
        });
        for g in config.gateways.iter().chain(&opts.gateway) {
            let mut gw = crate::gateway::Gateway::bind(g.clone(), engine.clone())
                .await?
                .with_descriptors(fds.clone())
                .with_bans(config.bans.clone());
            if let Some(leaves) = &leaves {
                gw = gw.with_interception(leaves, config.tls.extra_roots.as_deref())?;
            }
            gateways.push(gw);
        }
        let http = match opts.http {
            Some(addr) => Some(bind_tcp(addr, format!("http {addr}")).await?),
            None => None,
        };
        Ok(Listeners {
            unix,
            tcp,
            gateways,
            http,
        })
    }
}

async fn bind_tcp(addr: SocketAddr, path: String) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind { path, source })
}

/// Sniff every pool with sources before the first lease is answered, so that the first
/// lease already sees the sniffed list; and before the prober starts, so the startup
/// sniff's events (`sniff_on_startup` ... `sniff_success`) are one uninterrupted run in
/// the event log.
async fn startup_sniff(config: &Config, engine: &Arc<Engine>, shutdown: &CancellationToken) {
    for pool in config.pools.values() {
        if pool.sources.is_empty() {
            continue;
        }
        tokio::select! {
            // A signal during a slow provider fetch stops the start-up at once.
            _ = shutdown.cancelled() => return,
            r = sources::sniff_in_turn(engine, pool, sources::Trigger::Startup, Duration::ZERO) => {
                if let Err(e) = r {
                    warn!(pool = %pool.name, error = %e, "startup sniff could not be recorded");
                }
            }
        }
    }
}

/// The one `serving` line, and on a first start with nothing to serve, what to do next.
fn announce(
    engine: &Engine,
    opts: &ServeOptions,
    tcp: Option<SocketAddr>,
    gateway: &[SocketAddr],
    http: Option<SocketAddr>,
) {
    let gauges = engine.gauges();
    info!(
        database = %opts.database.as_deref().unwrap_or("-"),
        socket = %opts.socket.display(),
        tcp = %show_addr(tcp),
        gateway = %show_addrs(gateway),
        http = %show_addr(http),
        pools = %pools_line(&gauges),
        "serving"
    );
    let endpoints: u64 = gauges
        .pools
        .iter()
        .map(|p| p.endpoints.iter().sum::<u64>())
        .sum();
    if endpoints == 0 {
        info!(
            config = %opts.reload_from.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "-".into()),
            "no endpoints yet: add some with `proxypool add URL` or `proxypool import FILE`, or list them as [[endpoint]] (or a sniffing pool's sources) in the config file and send SIGHUP"
        );
    }
}

fn show_addr(a: Option<SocketAddr>) -> String {
    a.map_or_else(|| "-".into(), |a| a.to_string())
}

fn show_addrs(a: &[SocketAddr]) -> String {
    if a.is_empty() {
        return "-".into();
    }
    a.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `default=12 residential=3`: each pool with its endpoint count.
fn pools_line(g: &crate::metrics::GaugeSnapshot) -> String {
    g.pools
        .iter()
        .map(|p| format!("{}={}", p.pool, p.endpoints.iter().sum::<u64>()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A database deleted or replaced under a running daemon: every commit already refuses
/// (`internal`); this makes the daemon say so and stop instead of limping on.
async fn watch_store_file(
    engine: Arc<Engine>,
    lost: Arc<std::sync::Mutex<Option<EngineError>>>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(STORE_FILE_CHECK) => {}
        }
        if let Err(e) = engine.check_store_file().await {
            tracing::error!(error = %e, "database file lost; stopping");
            *lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            shutdown.cancel();
            return;
        }
    }
}

/// How often the daemon checks that its database file is still there.
const STORE_FILE_CHECK: std::time::Duration = std::time::Duration::from_secs(2);
