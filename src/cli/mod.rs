//! The operator CLI. `args` defines the command line, `logging` sets up stderr, `context`
//! resolves paths and reaches the daemon (through `client`) or the store, one file per
//! command (or small group), `table` renders.

#[macro_use]
pub mod output;

mod add;
mod args;
mod ca;
mod check;
mod client;
mod context;
mod edit;
mod error;
mod events;
mod inspect;
mod lease;
mod lines;
pub mod logging;
mod migrate;
mod operator;
mod pairs;
mod probe;
mod remote;
mod report;
mod secrets;
mod serve;
mod shell;
mod status;
mod table;

pub use args::{
    CaAction, Cli, Command, ConfigAction, EventsArgs, Global, LeaseArgs, ListArgs, ProbeArgs,
    ReportArgs, ShellArg,
};
pub use context::Context;
pub use error::CliError;

use add::{add, import};
use context::{call, Named};
use edit::edit;
use error::{daemon_error, unexpected};
use events::events;
use inspect::{list, show, sources};
use lease::lease;
use operator::{disable, enable, remove};
use probe::probe;
use report::{release, report};
use serve::serve;
use status::status;
use table::table;

use crate::health::State;

/// Run one command. The operator comforts first: neither reads the config, so they work
/// on a machine with a broken one. Every other command gets the resolved context and is
/// run by its file (docs/reference.md, "Command line", groups them the same way).
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let ctx = match &cli.command {
        Command::Completions { shell } => return shell::completions(*shell),
        Command::Man { out_dir } => return shell::man(out_dir.as_deref()),
        Command::Config {
            action: ConfigAction::Check,
        } => return check::config_check(&cli.global),
        _ => Context::resolve(&cli.global)?,
    };
    match cli.command {
        // Endpoints.
        Command::Add {
            urls,
            pool,
            label,
            tags,
        } => add(&ctx, &urls, &pool, &label, &parse_tags(&tags)?).await,
        Command::Import {
            file,
            pool,
            label,
            scheme,
            skip_existing,
            tags,
        } => {
            let opts = add::ImportOptions {
                pool,
                label,
                scheme,
                on_existing: if skip_existing {
                    crate::store::OnExisting::Skip
                } else {
                    crate::store::OnExisting::Refuse
                },
                tags: parse_tags(&tags)?,
            };
            import(&ctx, &file, &opts).await
        }
        Command::List(a) => list(&ctx, a).await,
        Command::Show {
            endpoint,
            pool,
            json,
            events,
        } => show(&ctx, endpoint, pool, json, events).await,
        Command::Edit {
            endpoint,
            pool,
            url,
            label,
            tags,
        } => edit(&ctx, &endpoint, pool, url, label, &tags).await,
        Command::Disable {
            endpoints,
            pool,
            reason,
        } => disable(&ctx, &Named::new(&endpoints, &pool), reason).await,
        cmd @ Command::Enable { .. } => enable(&ctx, cmd).await,
        Command::Remove { endpoints, pool } => remove(&ctx, &Named::new(&endpoints, &pool)).await,
        Command::Probe(a) => probe(&ctx, a).await,
        // Daemon and scrapers.
        Command::Serve {
            listen_tcp,
            gateway,
            http,
        } => serve(&ctx, listen_tcp, gateway, http).await,
        Command::Migrate { from, to } => migrate::migrate(&ctx, from, to),
        Command::Lease(a) => lease(&ctx, a).await,
        Command::Report(a) => report(&ctx, a).await,
        Command::Release { lease } => release(&ctx, lease).await,
        Command::Status { pool, json } => status(&ctx, pool, json).await,
        Command::Events(a) => events(&ctx, a).await,
        Command::Sources { pool, json } => sources(&ctx, pool, json).await,
        Command::Ca { action } => ca::ca(&ctx, action),
        // Answered above.
        Command::Completions { .. } | Command::Man { .. } | Command::Config { .. } => Ok(()),
    }
}

/// `--tag K=V` arguments, checked (a bad one is a usage error naming it).
pub(super) fn parse_tags(args: &[String]) -> Result<crate::tags::Tags, CliError> {
    crate::tags::Tags::parse_args(args).map_err(|e| CliError::usage(format!("--tag: {e}")))
}

pub(super) fn parse_state(s: Option<&str>) -> Result<Option<State>, CliError> {
    s.map(|s| s.parse::<State>())
        .transpose()
        .map_err(|e| CliError::usage(format!("--state: {e}")))
}
