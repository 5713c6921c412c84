//! `status`: counts by state per pool, from this database's daemon (over its socket) or
//! the `--connect` one, else from the database; on PostgreSQL, the daemons of the fleet
//! and the leases they hold (docs/fleet.md, "The fleet as one").

use super::client::Client;
use super::table::table;
use super::{call, unexpected, CliError, Context};
use crate::protocol::{DaemonRow, Payload, PoolStatus, Request, StatusMessage};

/// What `status` read, and where.
struct Read {
    pools: Vec<PoolStatus>,
    /// A fleet's daemons (PostgreSQL), live ones first.
    daemons: Option<Vec<DaemonRow>>,
    /// The line that names where it was read.
    line: String,
}

pub(super) async fn status(
    ctx: &Context,
    pool: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    let read = status_of(ctx, pool).await?;
    if json {
        // Through a `Value`, so the keys print sorted as they always have.
        let v = serde_json::to_value(&read.pools).unwrap_or_default();
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    outln!("{}", read.line);
    print_pools(&read.pools);
    if let Some(d) = read.daemons.as_deref().filter(|d| !d.is_empty()) {
        print_daemons(d);
    }
    Ok(())
}

fn print_pools(pools: &[PoolStatus]) {
    let mut t = table([
        "POOL",
        "MODE",
        "AVAILABLE",
        "COOLING",
        "PROBE_ALLOWED",
        "DISABLED",
        "LEASES",
        "NEXT DEADLINE",
        "TARGETS DOWN",
    ]);
    for p in pools {
        t.add_row([
            p.pool.clone(),
            p.mode.clone(),
            p.available.to_string(),
            p.cooling.to_string(),
            p.probe_allowed.to_string(),
            p.disabled.to_string(),
            p.leases.to_string(),
            p.next_deadline_ms
                .map(|ms| format!("in {}", super::table::fmt_ms(ms)))
                .unwrap_or_else(|| "-".into()),
            p.targets_down.to_string(),
        ]);
    }
    outln!("{t}");
    // What is down is the sites', not the proxies': say which, so nobody goes looking for
    // a broken proxy.
    for p in pools {
        if let Some(pc) = &p.pace {
            outln!(
                "\npool {}: pacing holds {} host(s), {} pair(s); {} host(s) dropped, {} lease(s) answered paced",
                p.pool, pc.hosts, pc.pairs, pc.hosts_dropped, pc.paced
            );
        }
        if let Some(x) = &p.exit {
            outln!(
                "\npool {}: exit addresses: {} known for {} endpoint(s); {} endpoint(s) share {} address(es); {} address ban(s)",
                p.pool, x.addresses, x.known, x.shared_endpoints, x.shared_addresses, x.address_bans
            );
            for s in &x.suspect_subnets {
                outln!(
                    "pool {}: subnet {} suspect for {} ({} addresses banned): leases prefer other subnets",
                    p.pool,
                    s.subnet,
                    crate::redact::printable(&s.host),
                    s.addresses
                );
            }
        }
    }
    for p in pools.iter().filter(|p| !p.down_targets.is_empty()) {
        outln!(
            "\npool {}: targets down (no endpoint blamed for them)",
            p.pool
        );
        for d in &p.down_targets {
            outln!(
                "  {}  next trial in {}, down {}, {} failed trial(s), {}",
                d.target,
                super::table::fmt_ms(d.retry_after_ms),
                super::table::fmt_ms(d.down_for_ms),
                d.streak,
                d.reason.map(|r| r.as_str()).unwrap_or("-"),
            );
        }
    }
}

fn print_daemons(daemons: &[DaemonRow]) {
    let mut t = table([
        "DAEMON",
        "HOST",
        "PID",
        "VERSION",
        "LISTENERS",
        "LEASES",
        "HEARTBEAT",
    ]);
    for d in daemons {
        t.add_row([
            d.id.chars().take(8).collect(),
            d.host.clone(),
            d.pid.to_string(),
            d.version.clone(),
            d.addresses.join(", "),
            d.leases.to_string(),
            match d.live {
                true => format!("{} ago", super::table::fmt_ms(d.heartbeat_ms_ago)),
                false => format!("gone ({} ago)", super::table::fmt_ms(d.heartbeat_ms_ago)),
            },
        ]);
    }
    outln!("\n{t}");
}

/// "N daemons serve it" (live ones), or None when none does.
fn serving(daemons: &[DaemonRow]) -> Option<String> {
    match daemons.iter().filter(|d| d.live).count() {
        0 => None,
        1 => Some("1 daemon serves it".into()),
        n => Some(format!("{n} daemons serve it")),
    }
}

/// A fleet's leases are every live daemon's: each pool's count is their sum (as of their
/// last heartbeats, at most a few seconds old).
fn fleet_leases(pools: &mut [PoolStatus], daemons: &[DaemonRow]) {
    for p in pools {
        p.leases = daemons
            .iter()
            .filter(|d| d.live)
            .filter_map(|d| d.pool_leases.get(&p.pool))
            .map(|&n| n as usize)
            .sum();
    }
}

/// The pools' counts, and a line naming where they were read: from the `--connect`
/// daemon, this database's daemon, or (none running) the database itself.
async fn status_of(ctx: &Context, pool: Option<String>) -> Result<Read, CliError> {
    if ctx.remote.is_none() {
        ctx.check_db_exists()?;
    }
    let db = ctx.at.describe();
    let req = Request::Status(StatusMessage { pool: pool.clone() });
    if let Some(mut c) = ctx.daemon().await? {
        return match call(&mut c, &req).await? {
            Payload::Status {
                pools,
                database,
                daemons,
                store,
            } => {
                let database = database.unwrap_or(db);
                let line = format!("database {database} · daemon {}", c.address());
                Ok(fleet_read(pools, daemons, store, c.address(), line))
            }
            _ => Err(unexpected("status")),
        };
    }
    if ctx.shared() {
        // A fleet: this host's daemon (on its socket) answers from memory, also while the
        // database is away; else the database itself.
        if let Some(read) = local_daemon(ctx, &req, &db).await {
            return Ok(read);
        }
        let store = ctx.store_to_read()?;
        // SQLite holds no fleet: its one daemon answers on its socket.
        let daemons = match store.fleet() {
            Some(fleet) => fleet.daemons()?,
            None => Vec::new(),
        };
        let mut pools = ctx.engine()?.status(pool.as_deref())?;
        fleet_leases(&mut pools, &daemons);
        let line = match serving(&daemons) {
            Some(n) => format!("database {db} · {n} (none on this host's socket)"),
            None => format!("database {db} · no daemon serves it: counts read from the database"),
        };
        return Ok(Read {
            pools,
            daemons: Some(daemons),
            line,
        });
    }
    let pools = ctx.engine()?.status(pool.as_deref())?;
    let mut line = format!("database {db} · no daemon serves it: counts read from the database");
    // A daemon on the configured socket serving another database is how a new shell ends
    // up reading the wrong one: say so.
    if let Some(other) = socket_database(ctx).await.filter(|o| *o != db) {
        line.push_str(&format!(
            "\nnote: the daemon on {} serves another database, {other} (check --db, PROXYPOOL_DB and the config's [store] path)",
            ctx.socket.display()
        ));
    }
    Ok(Read {
        pools,
        daemons: None,
        line,
    })
}

/// A daemon's answer in a fleet: the fleet's leases, the daemons, and whether the
/// database was reachable. The answering daemon (found by its socket `at`) counts with the
/// leases it holds now, the others as of their last heartbeat.
fn fleet_read(
    mut pools: Vec<PoolStatus>,
    mut daemons: Option<Vec<DaemonRow>>,
    store: Option<String>,
    at: &str,
    mut line: String,
) -> Read {
    if let Some(d) = daemons.as_deref_mut().filter(|d| !d.is_empty()) {
        let socket = format!("socket {at}");
        if let Some(me) = d.iter_mut().find(|r| r.addresses.contains(&socket)) {
            me.pool_leases = pools
                .iter()
                .map(|p| (p.pool.clone(), p.leases as u64))
                .collect();
            me.leases = me.pool_leases.values().sum();
        }
        fleet_leases(&mut pools, d);
        if let Some(n) = serving(d) {
            line.push_str(&format!(" · {n}"));
        }
    }
    if store.as_deref() == Some("unavailable") {
        line.push_str(
            "\nnote: the database is unavailable: this is the daemon's memory, the daemons as last read",
        );
    }
    Read {
        pools,
        daemons,
        line,
    }
}

/// The answer of this host's daemon (on the configured socket) when it serves database
/// `db`.
async fn local_daemon(ctx: &Context, req: &Request, db: &str) -> Option<Read> {
    let mut c = Client::connect(&ctx.socket).await.ok()??;
    match call(&mut c, req).await.ok()? {
        Payload::Status {
            pools,
            database: Some(database),
            daemons,
            store,
        } if database == db => {
            let line = format!("database {database} · daemon {}", c.address());
            Some(fleet_read(pools, daemons, store, c.address(), line))
        }
        _ => None,
    }
}

/// The database the daemon on the configured socket names, if one answers there.
async fn socket_database(ctx: &Context) -> Option<String> {
    let mut c = Client::connect(&ctx.socket).await.ok()??;
    match call(&mut c, &Request::Status(StatusMessage { pool: None })).await {
        Ok(Payload::Status {
            database: Some(other),
            ..
        }) => Some(other),
        _ => None,
    }
}
