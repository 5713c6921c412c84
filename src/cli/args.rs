//! Argument definitions: global options and the subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::config::DEFAULT_POOL;
use crate::endpoint::{EndpointId, Scheme};
use crate::protocol::ReportOutcome;

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
    /// SQLite database file, or a postgresql:// URL that several daemons share
    /// [default: config [store] path or url, else $XDG_DATA_HOME/proxypool/proxypool.db]
    #[arg(long, global = true, env = "PROXYPOOL_DB", value_name = "PATH|URL")]
    pub db: Option<PathBuf>,
    /// Config file [default: $XDG_CONFIG_HOME/proxypool/proxies.toml if it exists]
    #[arg(long, global = true, env = "PROXYPOOL_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Daemon socket [default: config [server] socket, else $XDG_RUNTIME_DIR/proxypool.sock,
    /// else beside the database, named after it]
    #[arg(long, global = true, env = "PROXYPOOL_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// A daemon's TCP listener instead (token: PROXYPOOL_LEASE_TOKEN, else PROXYPOOL_TOKEN)
    #[arg(
        long,
        global = true,
        env = "PROXYPOOL_CONNECT",
        value_name = "tcp://HOST:PORT"
    )]
    pub connect: Option<String>,
    /// More logging (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less logging (errors only).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub quiet: u8,
    /// Log line format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        value_name = "FORMAT"
    )]
    pub log_format: super::logging::LogFormat,
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
        /// Tag every endpoint KEY=VALUE (repeatable), e.g. --tag country=us.
        #[arg(long = "tag", value_name = "K=V")]
        tags: Vec<String>,
    },
    /// Import endpoints from a file, one a line ('-' = stdin); a bad line rejects the file.
    ///
    /// A line is a proxy URL, or host:port:user:pass, user:pass@host:port or host:port
    /// (with --scheme).
    Import {
        /// File or '-'.
        file: String,
        /// Pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
        /// Label.
        #[arg(long)]
        label: Option<String>,
        /// Tag every endpoint KEY=VALUE (repeatable), e.g. --tag country=us.
        #[arg(long = "tag", value_name = "K=V")]
        tags: Vec<String>,
        /// Scheme of lines without one (host:port:user:pass, user:pass@host:port, host:port).
        #[arg(long, default_value = "http", value_parser = parse_scheme)]
        scheme: Scheme,
        /// Add only the endpoints not in the pool yet; count the rest.
        #[arg(long)]
        skip_existing: bool,
    },
    /// List endpoints.
    List(ListArgs),
    /// Show one endpoint with its recent events.
    Show {
        /// Id or URL.
        endpoint: String,
        /// Only endpoints of this pool (a URL may be in several pools).
        #[arg(long)]
        pool: Option<String>,
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
        /// Only endpoints of this pool (a URL may be in several pools).
        #[arg(long)]
        pool: Option<String>,
        /// Why (kept in the event log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Return endpoints to service: one probe decides, or --now straight to available.
    Enable {
        /// Ids or URLs.
        #[arg(required_unless_present = "target")]
        endpoints: Vec<String>,
        /// Only endpoints of this pool (a URL may be in several pools).
        #[arg(long)]
        pool: Option<String>,
        /// Skip the probe.
        #[arg(long)]
        now: bool,
        /// Clear only the endpoint's pair for this destination (host).
        #[arg(long, conflicts_with = "now")]
        destination: Option<String>,
        /// Clear a target (HOST:PORT) that is down, for every endpoint, instead of an endpoint (through the running daemon).
        #[arg(long, value_name = "HOST:PORT", conflicts_with_all = ["endpoints", "now", "destination"])]
        target: Option<String>,
    },
    /// Delete endpoints for good.
    Remove {
        /// Ids or URLs.
        #[arg(required = true)]
        endpoints: Vec<String>,
        /// Only endpoints of this pool (a URL may be in several pools).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Replace an endpoint's URL (e.g. a rotated password), label or tags, keeping its id, state and history.
    Edit {
        /// Id or URL.
        endpoint: String,
        /// Only endpoints of this pool (a URL may be in several pools).
        #[arg(long)]
        pool: Option<String>,
        /// New URL, in the same pool (scheme://[user[:password]@]host:port).
        #[arg(long)]
        url: Option<String>,
        /// New label ("" clears it).
        #[arg(long)]
        label: Option<String>,
        /// Set a tag KEY=VALUE (repeatable); KEY= removes it.
        #[arg(long = "tag", value_name = "K=V")]
        tags: Vec<String>,
    },
    /// Probe endpoints with a full transaction to the pool's probe URL.
    Probe(ProbeArgs),
    /// Run the daemon: health core, prober, sources and the lease socket.
    Serve {
        /// Also listen on TCP (requires a token: PROXYPOOL_TOKEN, PROXYPOOL_LEASE_TOKEN or
        /// `[server] token_file` / `lease_token_file`).
        #[arg(long, value_name = "ADDR")]
        listen_tcp: Option<SocketAddr>,
        /// Also run a rotating gateway (HTTP proxy + SOCKS5) on ADDR; a non-loopback
        /// address requires PROXYPOOL_GATEWAY_TOKEN, which clients send as the proxy
        /// password.
        #[arg(long, value_name = "ADDR")]
        gateway: Option<SocketAddr>,
        /// Serve /metrics, the status page and the JSON API on ADDR (e.g. 127.0.0.1:9464;
        /// else `[server] http`). A non-loopback ADDR needs PROXYPOOL_HTTP_TOKEN (or
        /// `[server] http_token_file`).
        #[arg(long, value_name = "ADDR", env = "PROXYPOOL_HTTP")]
        http: Option<SocketAddr>,
    },
    /// Create or upgrade the database's schema; with --from and --to, move a SQLite pool
    /// whole into an empty PostgreSQL schema (all or nothing).
    Migrate {
        /// The SQLite database to move.
        #[arg(long, value_name = "PATH", requires = "to")]
        from: Option<PathBuf>,
        /// The PostgreSQL database to move it into (postgresql://...).
        #[arg(long, value_name = "URL", requires = "from")]
        to: Option<String>,
    },
    /// Lease an endpoint from a running daemon and print its URL.
    Lease(LeaseArgs),
    /// Report how a lease went (needs a running daemon); prints the endpoint's state.
    Report(ReportArgs),
    /// Give a lease back without an outcome (needs a running daemon).
    Release {
        /// Lease id.
        lease: String,
    },
    /// The event log, oldest first.
    Events(EventsArgs),
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
    /// Config files: `config check` validates one without a daemon.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// The install's own CA, for HTTPS interception: `ca init` creates it, `ca show`
    /// prints its certificate.
    Ca {
        #[command(subcommand)]
        action: CaAction,
    },
    /// Print a shell completion script.
    Completions {
        /// Shell.
        #[arg(value_enum)]
        shell: ShellArg,
    },
    /// Print the man page (roff) generated from this command line.
    Man {
        /// Instead write proxypool.1 and one proxypool-COMMAND.1 per command into DIR.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

/// `config ...`.
#[derive(Debug, Clone, Copy, Subcommand)]
pub enum ConfigAction {
    /// Validate the file of --config (else PROXYPOOL_CONFIG, else the default path): exit 0
    /// and a summary, or exit 2 naming the key and its line.
    Check,
}

/// `ca ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum CaAction {
    /// Create the CA: an ECDSA P-256 certificate (ca.pem) and its key (ca.key, mode 0600,
    /// never printed) [default place: [tls] ca_cert and ca_key, else beside the database].
    Init {
        /// Write ca.pem and ca.key into DIR instead.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Replace an existing CA (every client must then trust the new one).
        #[arg(long)]
        force: bool,
    },
    /// Print the CA certificate (PEM), its SHA-256 fingerprint and its public key's
    /// SHA-256 (base64), and check that its key is usable.
    Show,
}

/// `lease`.
#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// Pool.
    #[arg(long, default_value = DEFAULT_POOL)]
    pub pool: String,
    /// Lease lifetime.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// Wait this long for an endpoint.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub wait: Duration,
    /// Sticky session key.
    #[arg(long)]
    pub session: Option<String>,
    /// Host the lease is for: endpoints banned by it are skipped.
    #[arg(long, value_name = "HOST")]
    pub destination: Option<String>,
    /// Only endpoints of this scheme (repeat for several), e.g. socks5h.
    #[arg(long = "scheme", value_name = "SCHEME")]
    pub schemes: Vec<String>,
    /// Only endpoints with this tag (repeatable: all must match), e.g. country=us.
    #[arg(long = "tag", value_name = "K=V")]
    pub tags: Vec<String>,
    /// All fields as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Lease id.
    pub lease: String,
    /// success | failure.
    #[arg(long, value_enum)]
    pub outcome: ReportOutcome,
    /// Why it failed (required for a failure), e.g. connect_timeout.
    #[arg(long)]
    pub reason: Option<String>,
    /// Where it failed, e.g. connect.
    #[arg(long)]
    pub phase: Option<String>,
    /// HTTP status seen.
    #[arg(long)]
    pub status: Option<u16>,
    /// Retry-After seen: seconds, a duration like 90s, or an HTTP date.
    #[arg(long, value_name = "VALUE")]
    pub retry_after: Option<String>,
    /// Free text kept in the event log.
    #[arg(long, value_name = "TEXT")]
    pub detail: Option<String>,
    /// The host the use was for: scopes the failure.
    #[arg(long, value_name = "HOST")]
    pub destination: Option<String>,
    /// How long the use took, in milliseconds.
    #[arg(long, value_name = "MS")]
    pub duration_ms: Option<u64>,
}

/// `events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only this endpoint.
    #[arg(long)]
    pub endpoint: Option<EndpointId>,
    /// Keep printing new events.
    #[arg(long)]
    pub follow: bool,
    /// JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Only the last N (with --follow: print the last N, then follow; default 10).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Only events of this kind (repeatable), e.g. state_changed, report.
    #[arg(long = "kind", value_name = "K")]
    pub kind: Vec<String>,
    /// Only events since a duration ago (90m, 2d) or an RFC 3339 time.
    #[arg(long, value_name = "DURATION|RFC3339")]
    pub since: Option<String>,
}

fn parse_scheme(s: &str) -> Result<Scheme, String> {
    s.parse::<Scheme>().map_err(|e| e.to_string())
}

/// `report --outcome` takes the socket's own values.
impl clap::ValueEnum for ReportOutcome {
    fn value_variants<'a>() -> &'a [Self] {
        &[ReportOutcome::Success, ReportOutcome::Failure]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            ReportOutcome::Success => "success",
            ReportOutcome::Failure => "failure",
        }))
    }
}

/// `completions SHELL`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ShellArg {
    Bash,
    Zsh,
    Fish,
}

/// What `list` shows: which endpoints, in which form.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this pool.
    #[arg(long)]
    pub pool: Option<String>,
    /// Only this state.
    #[arg(long)]
    pub state: Option<String>,
    /// JSON array.
    #[arg(long)]
    pub json: bool,
    /// Show passwords.
    #[arg(long)]
    pub show_secrets: bool,
    /// Each endpoint's state for this destination (host).
    #[arg(long)]
    pub destination: Option<String>,
    /// Only endpoints with this tag (repeatable: all must match).
    #[arg(long = "tag", value_name = "K=V")]
    pub tags: Vec<String>,
}

/// What `probe` checks, and how many at once.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Ids or URLs.
    pub endpoints: Vec<String>,
    /// Every endpoint (of --pool if given).
    #[arg(long)]
    pub all: bool,
    /// Only this pool.
    #[arg(long)]
    pub pool: Option<String>,
    /// JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Parallel probes.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
}
