//! Read-only commands that work on the store: `list`, `show`, `sources`, `status`.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::client::Client;
use super::table::{print_show, print_table, s, table};
use super::{call, parse_state, unexpected, CliError, Context, ListArgs};
use crate::endpoint::EndpointId;
use crate::health::State;
use crate::protocol::{EndpointsMessage, Payload, Request, StatusMessage};
use crate::stats::EndpointStats;
use crate::tags::Tags;

/// `list`: the endpoints, or (with a destination) where each stands for it.
pub(super) async fn list(ctx: &Context, a: ListArgs) -> Result<(), CliError> {
    let ListArgs {
        pool,
        state,
        json,
        show_secrets,
        destination,
        tags,
    } = a;
    let tags = super::parse_tags(&tags)?;
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
) -> Result<(Client, Vec<crate::protocol::EndpointView>), CliError> {
    let Some(mut c) = ctx.daemon().await? else {
        return Err(unexpected("endpoints"));
    };
    match call(&mut c, &Request::Endpoints(ask)).await? {
        Payload::Endpoints { endpoints, .. } => Ok((c, endpoints)),
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
        Payload::Endpoints { endpoints, .. } => Ok(endpoints
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
