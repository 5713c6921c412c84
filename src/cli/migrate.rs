//! `migrate`: create or upgrade the schema of the configured store, or move a SQLite pool
//! whole into PostgreSQL (docs/fleet.md, "Moving from SQLite").

use std::path::PathBuf;

use super::{CliError, Context};
use crate::store::lock::{self, Owner};
use crate::store::postgres::copy_from_sqlite;
use crate::store::{Location, Postgres, Sqlite};

pub(super) fn migrate(
    ctx: &Context,
    from: Option<PathBuf>,
    to: Option<String>,
) -> Result<(), CliError> {
    let (Some(from), Some(to)) = (from, to) else {
        // Several daemons (or commands) at once are safe: the migration holds an advisory
        // lock on PostgreSQL, the file's write lock on SQLite.
        let store = ctx.open_store()?;
        outln!(
            "schema of {} at version {}",
            store.describe(),
            store.schema_version()?
        );
        return Ok(());
    };
    let target = match Location::parse(std::path::Path::new(&to))
        .map_err(|e| CliError::usage(format!("--to: {e}")))?
    {
        Location::Postgres(t) => t,
        Location::File(_) => {
            return Err(CliError::usage(
                "--to must be a postgres:// or postgresql:// URL",
            ))
        }
    };
    // The file to move: never a connection string (shown, or created by name).
    match Location::parse(&from).map_err(|e| CliError::usage(format!("--from: {e}")))? {
        Location::File(_) => {}
        Location::Postgres(_) => {
            return Err(CliError::usage(
                "--from must be a SQLite file: a pool moves from SQLite into PostgreSQL, not between PostgreSQL databases",
            ))
        }
    }
    if std::fs::symlink_metadata(&from).is_err() {
        return Err(CliError::usage(format!(
            "--from: no database at {}",
            from.display()
        )));
    }
    // A daemon serving the file would go on changing it after the copy.
    if let Ok(Owner::Daemon(_)) = lock::owner(&from) {
        return Err(CliError::failed(format!(
            "a daemon serves {}: stop it before moving its pool",
            from.display()
        )));
    }
    let lite = Sqlite::open(&from)?;
    let pg = Postgres::open(&target, crate::store::postgres::DEFAULT_CLAIM_HOLD)?;
    let c = copy_from_sqlite(&lite, &pg)?;
    outln!(
        "moved {} endpoints, {} pairs, {} events and {} sources from {} to {}",
        c.endpoints,
        c.pairs,
        c.events,
        c.sources,
        from.display(),
        target.describe()
    );
    Ok(())
}
