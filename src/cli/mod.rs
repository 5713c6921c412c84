//! The operator CLI. `args` defines the command line, `context` resolves paths and reaches
//! the daemon or the store, one file per command (or small group), `table` renders.

mod add;
mod args;
mod context;
mod edit;
mod error;
mod events;
mod inspect;
mod lease;
mod operator;
mod pairs;
mod probe;
mod report;
mod serve;
mod shell;
mod table;

pub use args::{Cli, Command, Global, OutcomeArg, ShellArg};
pub use context::Context;
pub use error::CliError;

use add::{add, import, parse_urls};
use context::call;
use edit::edit;
use error::{daemon_error, unexpected};
use events::events;
use inspect::{list, show, sources, status};
use lease::lease;
use operator::{operator, remove};
use probe::probe;
use report::{release, report, ReportArgs};
use serve::serve;
use table::table;

use crate::health::{Input, State};
use crate::protocol::{DisableMessage, EnableMessage, Request};

pub async fn run(cli: Cli) -> Result<(), CliError> {
    // Neither reads the config: they work on a machine with a broken one.
    match &cli.command {
        Command::Completions { shell } => return shell::completions(*shell),
        Command::Man { out_dir } => return shell::man(out_dir.as_deref()),
        _ => {}
    }
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
            show_secrets: _,
            destination: Some(d),
        } => pairs::list_for(&ctx, pool, state, &d, json).await,
        Command::List {
            pool,
            state,
            json,
            show_secrets,
            destination: None,
        } => list(&ctx, pool, state, json, show_secrets).await,
        Command::Show {
            endpoint,
            json,
            events,
        } => show(&ctx, endpoint, json, events).await,
        Command::Disable { endpoints, reason } => {
            operator(&ctx, &endpoints, |r| {
                (
                    Request::Disable(DisableMessage {
                        endpoint: r,
                        reason: reason.clone(),
                    }),
                    Input::Disable {
                        detail: reason.clone(),
                    },
                )
            })
            .await
        }
        Command::Enable {
            endpoints,
            destination: Some(d),
            ..
        } => pairs::enable_pair(&ctx, &endpoints, &d).await,
        Command::Enable {
            endpoints,
            now,
            destination: None,
        } => {
            operator(&ctx, &endpoints, |r| {
                (
                    Request::Enable(EnableMessage {
                        endpoint: r,
                        now: Some(now),
                        destination: None,
                    }),
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
        Command::Serve {
            listen_tcp,
            gateway,
            http,
        } => serve(&ctx, listen_tcp, gateway, http).await,
        Command::Lease {
            pool,
            ttl,
            wait,
            session,
            destination,
            schemes,
            json,
        } => {
            let want = lease::Want {
                session,
                destination,
                schemes: (!schemes.is_empty()).then_some(schemes),
            };
            lease(&ctx, pool, ttl, wait, want, json).await
        }
        Command::Events {
            endpoint,
            follow,
            json,
            limit,
            kind,
            since,
        } => {
            let a = events::EventsArgs {
                endpoint,
                follow,
                json,
                limit,
                kinds: kind,
                since,
            };
            events(&ctx, a).await
        }
        Command::Sources { pool, json } => sources(&ctx, pool, json).await,
        Command::Edit {
            endpoint,
            url,
            label,
        } => edit(&ctx, &endpoint, url, label).await,
        Command::Report {
            lease,
            outcome,
            reason,
            phase,
            status,
            retry_after,
            detail,
            destination,
            duration_ms,
        } => {
            let args = ReportArgs {
                outcome,
                reason,
                phase,
                status,
                retry_after,
                detail,
                destination,
                duration_ms,
            };
            report(&ctx, lease, args).await
        }
        Command::Release { lease } => release(&ctx, lease).await,
        Command::Completions { .. } | Command::Man { .. } => Ok(()),
        Command::Status { pool, json } => status(&ctx, pool, json).await,
    }
}

pub(super) fn parse_state(s: Option<&str>) -> Result<Option<State>, CliError> {
    s.map(|s| s.parse::<State>())
        .transpose()
        .map_err(|e| CliError::usage(format!("--state: {e}")))
}
