//! The operator CLI: argument definitions and the commands behind them.

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand};
use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::client::{Client, ClientError};
use crate::config::{self, Config, ConfigError, DEFAULT_POOL};
use crate::daemon::{self, ProbeReport, ServeOptions};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::{Input, State};
use crate::lock::{self, Owner};
use crate::pool::engine::{initial_state, sync_config_endpoints, Engine, EngineError};
use crate::store::{EndpointRow, EventRow, NewEndpoint, ResolveError, Store, StoreError};

/// `proxypool`: a forward-proxy pool manager.
#[derive(Debug, Parser)]
#[command(name = "proxypool", version, about, long_about = None)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: Global,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted before or after the subcommand.
#[derive(Debug, Args, Clone)]
pub struct Global {
    /// SQLite database [default: $XDG_DATA_HOME/proxypool/proxypool.db]
    #[arg(long, global = true, env = "PROXYPOOL_DB", value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Config file [default: $XDG_CONFIG_HOME/proxypool/proxies.toml if it exists]
    #[arg(long, global = true, env = "PROXYPOOL_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Daemon socket [default: config [server] socket, else $XDG_RUNTIME_DIR/proxypool.sock]
    #[arg(long, global = true, env = "PROXYPOOL_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// More logging (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less logging (errors only).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub quiet: u8,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Add endpoints (all or nothing).
    Add {
        /// scheme://[user[:password]@]host:port
        #[arg(required = true)]
        urls: Vec<String>,
        /// Pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
        /// Label.
        #[arg(long)]
        label: Option<String>,
    },
    /// Import endpoints from a file, one URL a line ('-' = stdin); a bad line rejects the file.
    Import {
        /// File or '-'.
        file: String,
        /// Pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
        /// Label.
        #[arg(long)]
        label: Option<String>,
    },
    /// List endpoints.
    List {
        /// Only this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Only this state.
        #[arg(long)]
        state: Option<String>,
        /// JSON array.
        #[arg(long)]
        json: bool,
        /// Show passwords.
        #[arg(long)]
        show_secrets: bool,
    },
    /// Show one endpoint with its recent events.
    Show {
        /// Id or URL.
        endpoint: String,
        /// JSON.
        #[arg(long)]
        json: bool,
        /// Number of events.
        #[arg(long, default_value_t = 20)]
        events: usize,
    },
    /// Take endpoints out of service (sticky until enabled).
    Disable {
        /// Ids or URLs.
        #[arg(required = true)]
        endpoints: Vec<String>,
        /// Why (kept in the event log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Return endpoints to service: one probe decides, or --now straight to available.
    Enable {
        /// Ids or URLs.
        #[arg(required = true)]
        endpoints: Vec<String>,
        /// Skip the probe.
        #[arg(long)]
        now: bool,
    },
    /// Delete endpoints for good.
    Remove {
        /// Ids or URLs.
        #[arg(required = true)]
        endpoints: Vec<String>,
    },
    /// Probe endpoints with a full transaction to the pool's probe URL.
    Probe {
        /// Ids or URLs.
        endpoints: Vec<String>,
        /// Every endpoint (of --pool if given).
        #[arg(long)]
        all: bool,
        /// Only this pool.
        #[arg(long)]
        pool: Option<String>,
        /// JSON lines.
        #[arg(long)]
        json: bool,
        /// Parallel probes.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// Run the daemon: health core, prober, sources and the lease socket.
    Serve {
        /// Also listen on TCP (requires PROXYPOOL_TOKEN).
        #[arg(long, value_name = "ADDR")]
        listen_tcp: Option<SocketAddr>,
    },
    /// Lease an endpoint from a running daemon and print its URL.
    Lease {
        /// Pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
        /// Lease lifetime.
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// Wait this long for an endpoint.
        #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
        wait: Duration,
        /// Sticky session key.
        #[arg(long)]
        session: Option<String>,
        /// All fields as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The event log, oldest first.
    Events {
        /// Only this endpoint.
        #[arg(long)]
        endpoint: Option<EndpointId>,
        /// Keep printing new events.
        #[arg(long)]
        follow: bool,
        /// JSON lines.
        #[arg(long)]
        json: bool,
        /// Only the last N.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Sources of sniffing pools and their last sniff.
    Sources {
        /// Only this pool.
        #[arg(long)]
        pool: Option<String>,
        /// JSON.
        #[arg(long)]
        json: bool,
    },
    /// Counts by state (from a running daemon, else the database).
    Status {
        /// Only this pool.
        #[arg(long)]
        pool: Option<String>,
        /// JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A failed command: the message and the exit code (1 failed, 2 bad usage or input).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// Exit code.
    pub code: u8,
    /// Message (never a password).
    pub message: String,
}

impl CliError {
    /// Bad usage or input: exit 2, nothing changed.
    pub fn usage(m: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: m.into(),
        }
    }
    /// The operation failed: exit 1.
    pub fn failed(m: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: m.into(),
        }
    }
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::usage(e.to_string())
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Duplicate { .. }
            | StoreError::DuplicateInBatch { .. }
            | StoreError::NotFound(_)
            | StoreError::Ambiguous { .. }
            | StoreError::HardLinked { .. } => CliError::usage(e.to_string()),
            _ => CliError::failed(e.to_string()),
        }
    }
}

impl From<ResolveError> for CliError {
    fn from(e: ResolveError) -> Self {
        match e {
            ResolveError::Store(s) => s.into(),
            other => CliError::usage(other.to_string()),
        }
    }
}

impl From<EngineError> for CliError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Pool(p) => CliError::usage(p.to_string()),
            EngineError::Store(m) => CliError::failed(m),
        }
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError::failed(e.to_string())
    }
}

/// Resolved paths and config for a command.
pub struct Context {
    /// Validated config.
    pub config: Arc<Config>,
    /// Database path.
    pub db: PathBuf,
    /// Socket path.
    pub socket: PathBuf,
    /// The database's shared lock while this command writes without a daemon.
    held: std::sync::Mutex<Option<lock::Held>>,
}

impl Context {
    /// Resolve config, database and socket with precedence flag > env > config > default.
    pub fn resolve(g: &Global) -> Result<Context, CliError> {
        let config = match &g.config {
            Some(p) => Config::load(p)?,
            None => {
                let p = config::default_config_path();
                if p.exists() {
                    Config::load(&p)?
                } else {
                    Config::default()
                }
            }
        };
        let db =
            g.db.clone()
                .or_else(|| config.store_path.clone())
                .unwrap_or_else(config::default_db_path);
        let socket = g
            .socket
            .clone()
            .or_else(|| config.socket.clone())
            .unwrap_or_else(|| config::default_socket_path(&db));
        Ok(Context {
            config: Arc::new(config),
            db,
            socket,
            held: std::sync::Mutex::new(None),
        })
    }

    fn open_store(&self) -> Result<Store, CliError> {
        Ok(Store::open_with(&self.db, self.config.durability)?)
    }

    /// Resolve every `ID|URL` argument before anything changes, so that one bad argument
    /// changes nothing; an endpoint named twice counts once.
    fn resolve_ids(&self, targets: &[String]) -> Result<Vec<EndpointId>, CliError> {
        let store = self.open_store()?;
        let mut ids: Vec<EndpointId> = Vec::with_capacity(targets.len());
        for t in targets {
            let id = store.resolve(t)?.id;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    fn store(&self) -> Result<Store, CliError> {
        let mut s = self.open_store()?;
        // A running daemon synced the config when it started and owns the pool state:
        // inserting rows behind its back (e.g. re-adding a config endpoint just removed)
        // would make `list` show endpoints that the daemon never leases.
        let owner = lock::owner(&self.db).map_err(|e| CliError::failed(e.to_string()))?;
        if let Owner::Free(_held) = owner {
            sync_config_endpoints(&mut s, &self.config)?;
        }
        Ok(s)
    }

    /// The daemon serving this database, found through its lock file; `None` when no
    /// daemon serves it, and then this command holds the database's shared lock until it
    /// ends, so that a daemon starting meanwhile cannot miss its writes.
    async fn daemon(&self) -> Result<Option<Client>, CliError> {
        match lock::owner(&self.db).map_err(|e| CliError::failed(e.to_string()))? {
            Owner::Daemon(sock) => match Client::connect(&sock).await? {
                Some(c) => Ok(Some(c)),
                None => Err(CliError::failed(format!(
                    "a daemon holds {} but does not answer on {:?}; is it stuck?",
                    lock::lock_path(&self.db).display(),
                    sock
                ))),
            },
            Owner::Free(held) => {
                *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(held);
                Ok(None)
            }
        }
    }

    fn engine(&self) -> Result<Arc<Engine>, CliError> {
        Ok(Engine::open(
            self.store()?,
            self.config.pools.values().cloned(),
        )?)
    }

    fn check_pool(&self, pool: &str) -> Result<(), CliError> {
        if pool == DEFAULT_POOL || self.config.pools.contains_key(pool) {
            Ok(())
        } else {
            Err(CliError::usage(format!(
                "unknown pool {pool:?}: declare it in the config with [[pool]] name = {pool:?}"
            )))
        }
    }
}

/// Run a parsed command line.
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let ctx = Context::resolve(&cli.global)?;
    match cli.command {
        Command::Add { urls, pool, label } => {
            ctx.check_pool(&pool)?;
            let eps = parse_urls(
                urls.iter().map(|u| (0, u.as_str())),
                &pool,
                &label,
                &ctx,
                false,
            )?;
            let ids = add(&ctx, eps, &urls).await?;
            for id in ids {
                println!("{id}");
            }
            Ok(())
        }
        Command::Import { file, pool, label } => import(&ctx, &file, &pool, &label).await,
        Command::List {
            pool,
            state,
            json,
            show_secrets,
        } => {
            let state = parse_state(state.as_deref())?;
            let rows = ctx.store()?.list(pool.as_deref(), state)?;
            if json {
                let v: Vec<_> = rows.iter().map(|r| r.view(show_secrets)).collect();
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print_table(&rows, show_secrets);
            }
            Ok(())
        }
        Command::Show {
            endpoint,
            json,
            events,
        } => {
            let store = ctx.store()?;
            let row = store.resolve(&endpoint)?;
            let evs = store.recent_events(Some(row.id), events)?;
            if json {
                let mut v = serde_json::to_value(row.view(false)).unwrap_or_default();
                v["events"] = serde_json::to_value(&evs).unwrap_or_default();
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print_show(&row, &evs);
            }
            Ok(())
        }
        Command::Disable { endpoints, reason } => {
            operator(&ctx, &endpoints, |r| {
                (
                    json!({"op": "disable", "endpoint": r, "reason": reason}),
                    Input::Disable {
                        detail: reason.clone(),
                    },
                )
            })
            .await
        }
        Command::Enable { endpoints, now } => {
            operator(&ctx, &endpoints, |r| {
                (
                    json!({"op": "enable", "endpoint": r, "now": now}),
                    Input::Enable { now },
                )
            })
            .await
        }
        Command::Remove { endpoints } => remove(&ctx, &endpoints).await,
        Command::Probe {
            endpoints,
            all,
            pool,
            json,
            concurrency,
        } => probe(&ctx, endpoints, all, pool, json, concurrency).await,
        Command::Serve { listen_tcp } => serve(&ctx, listen_tcp).await,
        Command::Lease {
            pool,
            ttl,
            wait,
            session,
            json,
        } => {
            // This database's daemon, else whatever serves the configured socket: a
            // lease changes nothing in the database.
            let c = match ctx.daemon().await? {
                Some(c) => Some(c),
                None => Client::connect(&ctx.socket).await?,
            };
            let Some(mut c) = c else {
                return Err(CliError::failed(format!(
                    "no daemon is serving on {}; start one with `proxypool serve`",
                    ctx.socket.display()
                )));
            };
            c.set_timeout(wait + crate::client::DEFAULT_TIMEOUT);
            let resp = c
                .request(
                    &json!({"op": "lease", "pool": pool, "ttl": ttl.as_secs_f64(),
                    "wait": wait.as_secs_f64(), "session": session}),
                )
                .await?;
            if resp["ok"] != Value::Bool(true) {
                return Err(daemon_error(&resp));
            }
            if json {
                println!("{resp}");
            } else {
                println!("{}", resp["proxy"].as_str().unwrap_or_default());
            }
            Ok(())
        }
        Command::Events {
            endpoint,
            follow,
            json,
            limit,
        } => events(&ctx, endpoint, follow, json, limit).await,
        Command::Sources { pool, json } => {
            let store = ctx.store()?;
            let rows = store.sources(pool.as_deref())?;
            let mut out = Vec::new();
            for p in ctx.config.pools.values() {
                if pool.as_ref().is_some_and(|x| x != &p.name) {
                    continue;
                }
                for s in &p.sources {
                    let name = s.name();
                    let last = rows.iter().find(|r| r.pool == p.name && r.name == name);
                    out.push(json!({
                        "pool": p.name, "source": name, "preferred": s.preferred,
                        "refresh": humantime::format_duration(s.refresh).to_string(),
                        "last_at": last.and_then(|l| l.last_at.clone()),
                        "last_ok": last.and_then(|l| l.last_ok),
                        "last_count": last.and_then(|l| l.last_count),
                        "last_detail": last.and_then(|l| l.last_detail.clone()),
                    }));
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
            } else {
                let mut t = table([
                    "POOL",
                    "SOURCE",
                    "PREFERRED",
                    "LAST SNIFF",
                    "RESULT",
                    "COUNT",
                    "DETAIL",
                ]);
                for o in &out {
                    t.add_row([
                        s(&o["pool"]),
                        s(&o["source"]),
                        s(&o["preferred"]),
                        s(&o["last_at"]),
                        match o["last_ok"].as_bool() {
                            Some(true) => "ok".into(),
                            Some(false) => "failed".into(),
                            None => "-".into(),
                        },
                        s(&o["last_count"]),
                        s(&o["last_detail"]),
                    ]);
                }
                println!("{t}");
            }
            Ok(())
        }
        Command::Status { pool, json } => {
            let pools = match ctx.daemon().await? {
                Some(mut c) => {
                    let resp = c.request(&json!({"op": "status", "pool": pool})).await?;
                    if resp["ok"] != Value::Bool(true) {
                        return Err(daemon_error(&resp));
                    }
                    resp["pools"].clone()
                }
                None => {
                    let e = ctx.engine()?;
                    let st = e.status(pool.as_deref())?;
                    serde_json::to_value(st).unwrap_or_default()
                }
            };
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&pools).unwrap_or_default()
                );
            } else {
                let mut t = table([
                    "POOL",
                    "MODE",
                    "AVAILABLE",
                    "COOLING",
                    "PROBE_ALLOWED",
                    "DISABLED",
                    "LEASES",
                ]);
                for p in pools.as_array().into_iter().flatten() {
                    t.add_row([
                        s(&p["pool"]),
                        s(&p["mode"]),
                        s(&p["available"]),
                        s(&p["cooling"]),
                        s(&p["probe_allowed"]),
                        s(&p["disabled"]),
                        s(&p["leases"]),
                    ]);
                }
                println!("{t}");
            }
            Ok(())
        }
    }
}

/// A table in the CLI's style with this header.
fn table<const N: usize>(header: [&str; N]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(header);
    t
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(x) => x.clone(),
        other => other.to_string(),
    }
}

fn daemon_error(resp: &Value) -> CliError {
    let code = resp["error"]["code"].as_str().unwrap_or("internal");
    let msg = resp["error"]["message"].as_str().unwrap_or("daemon error");
    match code {
        "bad_request" | "unknown_pool" | "unknown_op" => CliError::usage(msg),
        _ => CliError::failed(msg),
    }
}

fn parse_state(s: Option<&str>) -> Result<Option<State>, CliError> {
    s.map(|s| s.parse::<State>())
        .transpose()
        .map_err(|e| CliError::usage(format!("--state: {e}")))
}

fn parse_urls<'a>(
    lines: impl Iterator<Item = (usize, &'a str)>,
    pool: &str,
    label: &Option<String>,
    ctx: &Context,
    numbered: bool,
) -> Result<Vec<NewEndpoint>, CliError> {
    let state = initial_state(ctx.config.pool(pool));
    let mut out = Vec::new();
    for (n, line) in lines {
        let url = ProxyUrl::parse(line).map_err(|e| {
            if numbered {
                CliError::usage(format!("line {n}: {e}; nothing was imported"))
            } else {
                CliError::usage(format!("{e}; nothing was added"))
            }
        })?;
        out.push(NewEndpoint {
            url,
            pool: pool.to_string(),
            label: label.clone(),
            source: Some("cli".into()),
            state,
        });
    }
    Ok(out)
}

async fn add(
    ctx: &Context,
    eps: Vec<NewEndpoint>,
    _raw: &[String],
) -> Result<Vec<EndpointId>, CliError> {
    if let Some(mut c) = ctx.daemon().await? {
        let pool = eps.first().map(|e| e.pool.clone());
        let label = eps.first().and_then(|e| e.label.clone());
        let urls: Vec<String> = eps.iter().map(|e| e.url.to_secret_string()).collect();
        let req = json!({"op": "add", "urls": urls, "pool": pool, "label": label});
        let resp = if req.to_string().len() < crate::protocol::MAX_LINE - 1024 {
            c.request(&req).await?
        } else {
            // Too big for one request line: hand the daemon a private file instead,
            // so a large import stays one all-or-nothing batch.
            let path = spill(&ctx.db, &urls)?;
            let r = c
                .request(&json!({"op": "import", "path": path, "pool": pool, "label": label}))
                .await;
            let _ = std::fs::remove_file(&path);
            r?
        };
        if resp["ok"] != Value::Bool(true) {
            return Err(daemon_error(&resp));
        }
        return Ok(resp["ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_i64)
            .collect());
    }
    Ok(ctx.store()?.add_endpoints(&eps)?)
}

/// Write URLs (with their passwords) to a new file only this user can read.
fn spill(db: &std::path::Path, urls: &[String]) -> Result<PathBuf, CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = db.as_os_str().to_owned();
    name.push(format!(
        ".import-{}-{:x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let path = PathBuf::from(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?;
    let mut text = urls.join("\n");
    text.push('\n');
    if let Err(e) = f.write_all(text.as_bytes()) {
        let _ = std::fs::remove_file(&path);
        return Err(CliError::failed(format!(
            "cannot write {}: {e}",
            path.display()
        )));
    }
    Ok(std::path::absolute(&path).unwrap_or(path))
}

async fn import(
    ctx: &Context,
    file: &str,
    pool: &str,
    label: &Option<String>,
) -> Result<(), CliError> {
    ctx.check_pool(pool)?;
    let text = if file == "-" {
        let mut buf = String::new();
        for line in std::io::stdin().lock().lines() {
            buf.push_str(&line.map_err(|e| CliError::usage(format!("stdin: {e}")))?);
            buf.push('\n');
        }
        buf
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| CliError::usage(format!("cannot read {file}: {e}")))?
    };
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let bar = if std::io::stderr().is_terminal() {
        let b = ProgressBar::new(lines.len() as u64);
        b.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_message("checking");
        b
    } else {
        ProgressBar::hidden()
    };
    let mut eps = Vec::with_capacity(lines.len());
    for chunk in lines.chunks(1000) {
        eps.extend(parse_urls(chunk.iter().copied(), pool, label, ctx, true)?);
        bar.inc(chunk.len() as u64);
    }
    bar.set_message("saving");
    let ids = add(ctx, eps, &[]).await?;
    bar.finish_and_clear();
    eprintln!("imported {} endpoints into pool {pool:?}", ids.len());
    Ok(())
}

async fn operator(
    ctx: &Context,
    targets: &[String],
    make: impl Fn(Value) -> (Value, Input),
) -> Result<(), CliError> {
    if let Some(mut c) = ctx.daemon().await? {
        for id in ctx.resolve_ids(targets)? {
            let (req, _) = make(Value::from(id));
            let resp = c.request(&req).await?;
            if resp["ok"] != Value::Bool(true) {
                return Err(daemon_error(&resp));
            }
            println!("{id}\t{}", s(&resp["state"]));
        }
        return Ok(());
    }
    let ids = ctx.resolve_ids(targets)?;
    let engine = ctx.engine()?;
    for id in ids {
        let (_, input) = make(Value::from(id));
        let detail =
            matches!(input, Input::Enable { .. }).then(|| "enabled by operator".to_string());
        let (_, state) = engine.input(id, input, "", detail).await?;
        println!("{id}\t{state}");
    }
    engine.flush().await?;
    Ok(())
}

async fn remove(ctx: &Context, targets: &[String]) -> Result<(), CliError> {
    let ids = ctx.resolve_ids(targets)?;
    if let Some(mut c) = ctx.daemon().await? {
        let resp = c
            .request(&json!({"op": "remove", "endpoints": ids}))
            .await?;
        if resp["ok"] != Value::Bool(true) {
            return Err(daemon_error(&resp));
        }
    } else {
        ctx.store()?.remove(&ids)?;
    }
    for id in ids {
        println!("{id}\tremoved");
    }
    Ok(())
}

async fn probe(
    ctx: &Context,
    targets: Vec<String>,
    all: bool,
    pool: Option<String>,
    json_out: bool,
    concurrency: usize,
) -> Result<(), CliError> {
    if concurrency == 0 {
        return Err(CliError::usage("--concurrency must be >= 1"));
    }
    if targets.is_empty() && !all && pool.is_none() {
        return Err(CliError::usage(
            "name endpoints to probe, or use --all / --pool",
        ));
    }
    if let Some(p) = &pool {
        ctx.check_pool(p)?;
    }
    let reports: Vec<ProbeReport> = if let Some(mut c) = ctx.daemon().await? {
        // The daemon owns the pool state: let it run the probes and apply the results.
        // A sweep of a large pool takes as long as it takes.
        c.set_timeout(Duration::from_secs(24 * 3600));
        let resp = c
            .request(&json!({"op": "probe", "endpoints": targets, "pool": pool,
                "all": all, "concurrency": concurrency}))
            .await?;
        if resp["ok"] != Value::Bool(true) {
            return Err(daemon_error(&resp));
        }
        let reports: Vec<ProbeReport> = serde_json::from_value(resp["results"].clone())
            .map_err(|e| CliError::failed(format!("bad probe results from daemon: {e}")))?;
        if json_out {
            for r in &reports {
                println!("{}", serde_json::to_string(r).unwrap_or_default());
            }
        }
        reports
    } else {
        let engine = ctx.engine()?;
        let ids: Vec<EndpointId> = if targets.is_empty() {
            engine.pools().ids(pool.as_deref())
        } else {
            ctx.resolve_ids(&targets)?
        };
        let probers = daemon::probers(&ctx.config).map_err(|e| CliError::usage(e.to_string()))?;
        let bar = if std::io::stderr().is_terminal() && !json_out {
            let b = ProgressBar::new(ids.len() as u64);
            b.set_style(
                ProgressStyle::with_template("{spinner} probing [{bar:30}] {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        } else {
            ProgressBar::hidden()
        };
        let reports = daemon::probe_many(&engine, &probers, ids, concurrency, |rep| {
            if json_out {
                println!("{}", serde_json::to_string(rep).unwrap_or_default());
            }
            bar.inc(1);
        })
        .await?;
        bar.finish_and_clear();
        engine.flush().await?;
        reports
    };
    if !json_out {
        let mut t = table([
            "ID", "URL", "RESULT", "REASON", "PHASE", "STATUS", "STATE", "TOTAL", "PHASES",
        ]);
        for r in &reports {
            t.add_row([
                r.id.to_string(),
                r.url.clone(),
                if r.skipped.is_some() {
                    "skipped".into()
                } else if r.ok {
                    "ok".into()
                } else {
                    "FAILED".into()
                },
                r.reason.map(|x| x.to_string()).unwrap_or("-".into()),
                r.phase.map(|x| x.to_string()).unwrap_or("-".into()),
                r.status.map(|x| x.to_string()).unwrap_or("-".into()),
                r.state.map(|x| x.to_string()).unwrap_or("-".into()),
                format!("{:.0}ms", r.total_ms),
                r.phases_ms
                    .iter()
                    .map(|(p, ms)| format!("{p}={ms:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
            ]);
        }
        println!("{t}");
    }
    let failed = reports
        .iter()
        .filter(|r| !r.ok && r.skipped.is_none())
        .count();
    if failed > 0 {
        return Err(CliError::failed(format!(
            "{failed} of {} probes failed",
            reports.len()
        )));
    }
    Ok(())
}

async fn serve(ctx: &Context, listen_tcp: Option<SocketAddr>) -> Result<(), CliError> {
    let token = std::env::var("PROXYPOOL_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    if listen_tcp.is_some() && token.is_none() {
        return Err(CliError::usage(
            "--listen-tcp needs a token: set PROXYPOOL_TOKEN (clients send it as \"token\")",
        ));
    }
    if let (Some(_), Some(t)) = (listen_tcp, &token) {
        crate::token::validate(t).map_err(|e| CliError::usage(e.to_string()))?;
    }
    crate::socket_file::check(&ctx.socket).map_err(|e| CliError::usage(e.to_string()))?;
    // Own the database before reading it: a second daemon is refused, and CLI commands
    // writing right now finish first (their writes are then in what we load).
    let socket = std::path::absolute(&ctx.socket).unwrap_or_else(|_| ctx.socket.clone());
    let held = Arc::new(
        lock::daemon_lock(&ctx.db, Duration::from_secs(10))
            .map_err(|e| CliError::failed(e.to_string()))?,
    );
    let mut store = ctx.open_store()?;
    sync_config_endpoints(&mut store, &ctx.config)?;
    let engine = Engine::open(store, ctx.config.pools.values().cloned())?;
    let shutdown = CancellationToken::new();
    let sd = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        sd.cancel();
        // A second signal means "now": do not wait for the orderly stop.
        wait_for_signal().await;
        eprintln!("proxypool: second signal, exiting at once");
        std::process::exit(1);
    });
    let r = daemon::serve(
        ctx.config.clone(),
        engine,
        ServeOptions {
            socket,
            listen_tcp,
            token,
            lock: Some(held.clone()),
        },
        shutdown,
    )
    .await
    .map_err(|e| CliError::failed(e.to_string()));
    lock::clear(&held);
    r
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn events(
    ctx: &Context,
    endpoint: Option<EndpointId>,
    follow: bool,
    json_out: bool,
    limit: Option<usize>,
) -> Result<(), CliError> {
    let store = ctx.store()?;
    let mut after = 0;
    if let Some(n) = limit {
        let recent = store.recent_events(endpoint, n)?;
        after = recent.last().map(|e| e.id - 1).unwrap_or(0);
    }
    let mut out = std::io::stdout().lock();
    loop {
        let batch = store.events(endpoint, after, 1000)?;
        for e in &batch {
            let line = if json_out {
                serde_json::to_string(e).unwrap_or_default()
            } else {
                fmt_event(e)
            };
            if writeln!(out, "{line}").is_err() {
                return Ok(());
            }
            after = e.id;
        }
        if batch.len() == 1000 {
            continue;
        }
        if !follow {
            return Ok(());
        }
        let _ = out.flush();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn fmt_event(e: &EventRow) -> String {
    let mut s = format!("{} #{} {}", e.at, e.id, e.kind);
    if let Some(id) = e.endpoint {
        s.push_str(&format!(" endpoint={id}"));
    }
    if e.from.is_some() || e.to.is_some() {
        s.push_str(&format!(
            " {}->{}",
            e.from.as_deref().unwrap_or("-"),
            e.to.as_deref().unwrap_or("-")
        ));
    }
    for (k, v) in [
        ("reason", &e.reason),
        ("phase", &e.phase),
        ("lease", &e.lease),
        ("detail", &e.detail),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(" {k}={v}"));
        }
    }
    s
}

fn until_text(row: &EndpointRow) -> String {
    match (row.state, row.cooldown_until) {
        (State::Cooling, Some(t)) => match t.duration_since(SystemTime::now()) {
            Ok(d) => format!(
                "in {}",
                humantime::format_duration(Duration::from_secs(d.as_secs()))
            ),
            Err(_) => "due".into(),
        },
        _ => "-".into(),
    }
}

fn print_table(rows: &[EndpointRow], secrets: bool) {
    let mut t = table([
        "ID", "URL", "POOL", "STATE", "REASON", "PHASE", "STREAK", "COOLDOWN", "LABEL",
    ]);
    for r in rows {
        t.add_row([
            r.id.to_string(),
            if secrets {
                r.url.to_secret_string()
            } else {
                r.url.to_redacted_string()
            },
            r.pool.clone(),
            r.state.to_string(),
            r.reason.map(|x| x.to_string()).unwrap_or("-".into()),
            r.phase.map(|x| x.to_string()).unwrap_or("-".into()),
            r.streak.to_string(),
            until_text(r),
            r.label.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    println!("{t}");
    let mut counts: HashMap<State, usize> = HashMap::new();
    for r in rows {
        *counts.entry(r.state).or_default() += 1;
    }
    let summary: Vec<String> = State::ALL
        .iter()
        .filter_map(|s| counts.get(s).map(|n| format!("{n} {s}")))
        .collect();
    println!(
        "{} endpoints{}{}",
        rows.len(),
        if summary.is_empty() { "" } else { ": " },
        summary.join(", ")
    );
}

fn print_show(r: &EndpointRow, evs: &[EventRow]) {
    let kv = [
        ("id", r.id.to_string()),
        ("url", r.url.to_redacted_string()),
        ("pool", r.pool.clone()),
        ("label", r.label.clone().unwrap_or("-".into())),
        ("source", r.source.clone().unwrap_or("-".into())),
        ("state", r.state.to_string()),
        (
            "reason",
            r.reason.map(|x| x.to_string()).unwrap_or("-".into()),
        ),
        (
            "phase",
            r.phase.map(|x| x.to_string()).unwrap_or("-".into()),
        ),
        ("detail", r.detail.clone().unwrap_or("-".into())),
        ("streak", r.streak.to_string()),
        (
            "cooldown",
            r.cooldown_ms
                .map(|ms| humantime::format_duration(Duration::from_millis(ms)).to_string())
                .unwrap_or("-".into()),
        ),
        (
            "cooldown_until",
            r.cooldown_until
                .map(crate::store::fmt_time)
                .map(|t| format!("{t} ({})", until_text(r)))
                .unwrap_or("-".into()),
        ),
        ("state_changed_at", r.state_changed_at.clone()),
        ("created_at", r.created_at.clone()),
    ];
    for (k, v) in kv {
        println!("{k:>16}: {v}");
    }
    println!("\nrecent events (newest first):");
    for e in evs {
        println!("  {}", fmt_event(e));
    }
}
