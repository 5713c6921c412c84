//! The operator CLI. `args` defines the command line, `context` resolves paths and reaches
//! the daemon or the store, one file per command (or small group), `table` renders.

mod add;
mod args;
mod context;
mod error;
mod events;
mod operator;
mod probe;
mod serve;
mod table;

pub use args::{Cli, Command, Global};
pub use context::Context;
pub use error::CliError;

use add::{add, import, parse_urls};
use context::call;
use error::{daemon_error, unexpected};
use events::events;
use operator::{operator, remove};
use probe::probe;
use serve::serve;
use table::{print_show, print_table, s, table};

use serde_json::json;

use crate::client::Client;
use crate::health::{Input, State};
use crate::protocol::{Body, Dur, Request};

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
                    Request::Disable {
                        endpoint: r,
                        reason: reason.clone(),
                    },
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
                    Request::Enable {
                        endpoint: r,
                        now: Some(now),
                    },
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
            let req = Request::Lease {
                pool: Some(pool),
                ttl: Some(Dur(ttl)),
                wait: Some(Dur(wait)),
                session,
            };
            let resp = c.request(&req).await?;
            if json {
                // Through a `Value`, so the keys print sorted as they always have.
                let v = serde_json::to_value(&resp).unwrap_or_default();
                resp.into_result().map_err(daemon_error)?;
                println!("{v}");
                return Ok(());
            }
            match resp.into_result().map_err(daemon_error)? {
                Body::Lease(g) => println!("{}", g.proxy),
                _ => return Err(unexpected("lease")),
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
                Some(mut c) => match call(&mut c, &Request::Status { pool }).await? {
                    Body::Status { pools } => pools,
                    _ => return Err(unexpected("status")),
                },
                None => ctx.engine()?.status(pool.as_deref())?,
            };
            if json {
                // Through a `Value`, so the keys print sorted as they always have.
                let v = serde_json::to_value(&pools).unwrap_or_default();
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
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
                for p in &pools {
                    t.add_row([
                        p.pool.clone(),
                        p.mode.clone(),
                        p.available.to_string(),
                        p.cooling.to_string(),
                        p.probe_allowed.to_string(),
                        p.disabled.to_string(),
                        p.leases.to_string(),
                    ]);
                }
                println!("{t}");
            }
            Ok(())
        }
    }
}

fn parse_state(s: Option<&str>) -> Result<Option<State>, CliError> {
    s.map(|s| s.parse::<State>())
        .transpose()
        .map_err(|e| CliError::usage(format!("--state: {e}")))
}
