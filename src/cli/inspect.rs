//! Read-only commands that work on the store: `list`, `show`, `sources`, `status`.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::client::Client;
use super::table::{print_show, print_table, s, table};
use super::{call, parse_state, unexpected, CliError, Context};
use crate::endpoint::EndpointId;
use crate::health::State;
use crate::protocol::{EndpointsMessage, Payload, Request, StatusMessage};
use crate::stats::EndpointStats;
use crate::tags::Tags;

/// `list`: the endpoints, or (with a destination) where each stands for it.
pub(super) async fn list(
    ctx: &Context,
    pool: Option<String>,
    state: Option<String>,
    json: bool,
    show_secrets: bool,
    destination: Option<String>,
    tags: Tags,
) -> Result<(), CliError> {
    if let Some(d) = destination {
        if ctx.remote.is_some() {
            let d = super::pairs::destination(&d)?;
            let state = parse_state(state.as_deref())?;
            return list_for_remote(ctx, pool, state, &tags, &d, json).await;
        }
        return super::pairs::list_for(ctx, pool, state, &tags, &d, json).await;
    }
    let state = parse_state(state.as_deref())?;
    if ctx.remote.is_some() {
        if show_secrets {
            ctx.local("list --show-secrets")?;
        }
        return list_remote(ctx, pool, state, tags, json).await;
    }
    let store = ctx.store_to_read()?;
    let mut rows = store.list(pool.as_deref(), state)?;
    if let Some(p) = pool.as_deref() {
        // Like `status`: a pool is known from the config or from a stored endpoint.
        let known = ctx.check_pool(p).is_ok()
            || !rows.is_empty()
            || (state.is_some() && !store.list(Some(p), None)?.is_empty());
        if !known {
            ctx.check_pool(p)?;
        }
    }
    rows.retain(|r| r.tags.contains_all(&tags));
    // Per-endpoint statistics live in the daemon's memory: ask it when one runs. Rows of
    // a pool mean the daemon holds that pool; without rows there is nothing to ask (and a
    // pool unknown to the daemon would be an error there).
    let daemon = if rows.is_empty() {
        None
    } else {
        ctx.daemon().await?
    };
    let (stats, from) = match daemon {
        Some(mut c) => (
            endpoint_stats(&mut c, pool, None).await?,
            Some(c.address().to_string()),
        ),
        None => (HashMap::new(), None),
    };
    let views: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut v = r.view(show_secrets);
            v.stats = stats.get(&r.id).copied();
            v
        })
        .collect();
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&views).unwrap_or_default()
        );
    } else {
        print_table(&views, &read_from(&ctx.at.describe(), from.as_deref()));
    }
    Ok(())
}

/// `list` over `--connect`: the daemon's `endpoints` answer (passwords redacted).
async fn list_remote(
    ctx: &Context,
    pool: Option<String>,
    state: Option<State>,
    tags: Tags,
    json: bool,
) -> Result<(), CliError> {
    let ask = EndpointsMessage {
        pool,
        state: state.map(|s| s.as_str().to_string()),
        endpoint: None,
        tags: (!tags.is_empty()).then_some(tags),
        destination: None,
    };
    let (mut c, views) = daemon_endpoints(ctx, ask).await?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&views).unwrap_or_default()
        );
        return Ok(());
    }
    let database = daemon_database(&mut c).await?;
    print_table(&views, &read_from(&database, Some(c.address())));
    Ok(())
}

/// `list --destination D` over `--connect`: the daemon's `endpoints` answer for D. The
/// daemon answers each endpoint's state for D; a pair's reason and status are in the
/// database, which only a command on the daemon's host reads.
async fn list_for_remote(
    ctx: &Context,
    pool: Option<String>,
    state: Option<State>,
    tags: &Tags,
    d: &str,
    json_out: bool,
) -> Result<(), CliError> {
    let ask = EndpointsMessage {
        pool,
        state: None,
        endpoint: None,
        tags: (!tags.is_empty()).then(|| tags.clone()),
        destination: Some(d.to_string()),
    };
    let (_, mut views) = daemon_endpoints(ctx, ask).await?;
    // `--state` is the endpoint's own state, as on the daemon's host.
    views.retain(|v| state.is_none_or(|s| v.state == s));
    if json_out {
        let v: Vec<Value> = views
            .iter()
            .map(|view| {
                let mut v = serde_json::to_value(view).unwrap_or_default();
                v["destination"] = json!(d);
                v
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    let head = format!("FOR {d}");
    let mut t = table(["ID", "POOL", "URL", "STATE", &head, "SLOWED"]);
    for v in &views {
        t.add_row([
            v.id.to_string(),
            v.pool.clone(),
            v.url.clone(),
            v.state.to_string(),
            v.destination_state.unwrap_or(v.state).to_string(),
            v.slowed
                .as_ref()
                .map_or("-".into(), super::pairs::slowed_text),
        ]);
    }
    outln!("{t}");
    Ok(())
}

/// The `--connect` daemon's `endpoints` answer, and the connection it came on.
async fn daemon_endpoints(
    ctx: &Context,
    ask: EndpointsMessage,
) -> Result<(Client, Vec<crate::store::EndpointView>), CliError> {
    let Some(mut c) = ctx.daemon().await? else {
        return Err(unexpected("endpoints"));
    };
    match call(&mut c, &Request::Endpoints(ask)).await? {
        Payload::Endpoints { endpoints } => Ok((c, endpoints)),
        _ => Err(unexpected("endpoints")),
    }
}

/// Where a command read: `database PATH, daemon ADDRESS` (or `no daemon`).
fn read_from(database: &str, daemon: Option<&str>) -> String {
    match daemon {
        Some(d) => format!("database {database}, daemon {d}"),
        None => format!("database {database}, no daemon"),
    }
}

/// The database a daemon names in its `status` answer.
async fn daemon_database(c: &mut Client) -> Result<String, CliError> {
    match call(c, &Request::Status(StatusMessage { pool: None })).await? {
        Payload::Status { database, .. } => Ok(database.unwrap_or_else(|| "(not named)".into())),
        _ => Err(unexpected("status")),
    }
}

pub(super) async fn show(
    ctx: &Context,
    endpoint: String,
    pool: Option<String>,
    json: bool,
    events: usize,
) -> Result<(), CliError> {
    ctx.local("show")?;
    let store = ctx.store_to_read()?;
    let row = store.resolve(&endpoint, pool.as_deref())?;
    let evs = store.recent_events(Some(row.id), events)?;
    let stats = daemon_stats(ctx, None, Some(row.id)).await?.remove(&row.id);
    let pairs = store.pairs_of(row.id)?;
    if json {
        let mut view = row.view(false);
        view.stats = stats;
        let mut v = serde_json::to_value(view).unwrap_or_default();
        v["pairs"] = pairs.iter().map(super::pairs::pair_json).collect();
        v["events"] = serde_json::to_value(&evs).unwrap_or_default();
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print_show(&row, &evs, stats.as_ref());
        super::pairs::print_pairs(&pairs);
    }
    Ok(())
}

/// Per-endpoint statistics live in the daemon's memory: ask it when one runs; without
/// one there are none.
async fn daemon_stats(
    ctx: &Context,
    pool: Option<String>,
    endpoint: Option<EndpointId>,
) -> Result<HashMap<EndpointId, EndpointStats>, CliError> {
    match ctx.daemon().await? {
        Some(mut c) => endpoint_stats(&mut c, pool, endpoint).await,
        None => Ok(HashMap::new()),
    }
}

async fn endpoint_stats(
    c: &mut Client,
    pool: Option<String>,
    endpoint: Option<EndpointId>,
) -> Result<HashMap<EndpointId, EndpointStats>, CliError> {
    let req = Request::Endpoints(EndpointsMessage {
        pool,
        state: None,
        endpoint,
        tags: None,
        destination: None,
    });
    match call(c, &req).await? {
        Payload::Endpoints { endpoints } => Ok(endpoints
            .into_iter()
            .filter_map(|v| Some((v.id, v.stats?)))
            .collect()),
        _ => Err(unexpected("endpoints")),
    }
}

pub(super) async fn sources(
    ctx: &Context,
    pool: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    ctx.local("sources")?;
    let has_sources = ctx.config.pools.values().any(|p| !p.sources.is_empty());
    let rows = if has_sources && !ctx.db_exists() {
        // Nothing stored yet: the configured sources are listed, none sniffed.
        Vec::new()
    } else {
        ctx.store_to_read()?.sources(pool.as_deref())?
    };
    let mut out = Vec::new();
    for p in ctx.config.pools.values() {
        if pool.as_ref().is_some_and(|x| x != &p.name) {
            continue;
        }
        for s in &p.sources {
            let name = s.name();
            let last = rows.iter().find(|r| r.pool == p.name && r.name == name);
            out.push(json!({
                "pool": p.name, "source": crate::redact::redact_text(&name, &[]),
                "preferred": s.preferred,
                "refresh": humantime::format_duration(s.refresh).to_string(),
                "last_at": last.and_then(|l| l.last_at.clone()),
                "last_ok": last.and_then(|l| l.last_ok),
                "last_count": last.and_then(|l| l.last_count),
                "last_detail": last.and_then(|l| l.last_detail.clone()),
            }));
        }
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
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
        outln!("{t}");
    }
    Ok(())
}

pub(super) async fn status(
    ctx: &Context,
    pool: Option<String>,
    json: bool,
) -> Result<(), CliError> {
    let (pools, read) = status_of(ctx, pool).await?;
    if json {
        // Through a `Value`, so the keys print sorted as they always have.
        let v = serde_json::to_value(&pools).unwrap_or_default();
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        outln!("{read}");
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
        for p in &pools {
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
        // What is down is the sites', not the proxies': say which, so nobody goes
        // looking for a broken proxy.
        for p in &pools {
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
    Ok(())
}

/// The pools' counts, and a line naming where they were read: from the `--connect`
/// daemon, this database's daemon, or (none running) the database itself.
async fn status_of(
    ctx: &Context,
    pool: Option<String>,
) -> Result<(Vec<crate::pool::PoolStatus>, String), CliError> {
    if ctx.remote.is_none() {
        ctx.check_db_exists()?;
    }
    let db = ctx.at.describe();
    let req = Request::Status(StatusMessage { pool: pool.clone() });
    if let Some(mut c) = ctx.daemon().await? {
        return match call(&mut c, &req).await? {
            Payload::Status { pools, database } => {
                let database = database.unwrap_or(db);
                Ok((
                    pools,
                    format!("database {database} · daemon {}", c.address()),
                ))
            }
            _ => Err(unexpected("status")),
        };
    }
    let pools = ctx.engine()?.status(pool.as_deref())?;
    let mut read = format!("database {db} · no daemon serves it: counts read from the database");
    // A daemon on the configured socket serving another database is how a new shell ends
    // up reading the wrong one: say so.
    if let Ok(Some(mut c)) = Client::connect(&ctx.socket).await {
        if let Ok(Payload::Status {
            database: Some(other),
            ..
        }) = call(&mut c, &Request::Status(StatusMessage { pool: None })).await
        {
            if other != db {
                read.push_str(&format!(
                    "\nnote: the daemon on {} serves another database, {other} (check --db, PROXYPOOL_DB and the config's [store] path)",
                    ctx.socket.display()
                ));
            }
        }
    }
    Ok((pools, read))
}
