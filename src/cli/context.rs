//! Resolved config, database and socket paths, and the way to the daemon or the store.

use std::path::PathBuf;
use std::sync::Arc;

use super::client::Client;
use super::remote::Remote;
use super::{daemon_error, CliError, Global};
use crate::config::{self, Config, DEFAULT_POOL};
use crate::endpoint::EndpointId;
use crate::pool::engine::{sync_config_endpoints, Engine};
use crate::protocol::{EndpointRef, Payload, Request};
use crate::store::lock::{self, Owner};
use crate::store::{Location, OpenOptions, Store};

/// The endpoints an operator named (`ID|URL` arguments), of one pool when `--pool` is
/// given: the same URL may be in several pools, and an id of another pool is refused.
#[derive(Debug, Clone, Copy)]
pub(super) struct Named<'a> {
    pub args: &'a [String],
    pub pool: Option<&'a str>,
}

impl<'a> Named<'a> {
    pub fn new(args: &'a [String], pool: &'a Option<String>) -> Named<'a> {
        Named {
            args,
            pool: pool.as_deref(),
        }
    }
}

/// Resolved paths and config for a command.
pub struct Context {
    /// Validated config.
    pub config: Arc<Config>,
    /// Database path (SQLite; for PostgreSQL the default path, never opened).
    pub db: PathBuf,
    /// Where the pool's state lives: that file, or a PostgreSQL database.
    pub at: Location,
    /// Socket path.
    pub socket: PathBuf,
    /// `--connect`: a daemon's TCP listener, instead of this host's daemon or database.
    pub remote: Option<Remote>,
    /// The database's shared lock while this command writes without a daemon.
    pub(super) held: std::sync::Mutex<Option<lock::Held>>,
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
        // `--db`/PROXYPOOL_DB (a path or a postgresql:// URL), else `[store] url`, else
        // `[store] path`, else the default file.
        let named = match (&g.db, &config.store_url, &config.store_path) {
            (Some(v), _, _) => Some((v.clone(), "--db (or PROXYPOOL_DB)")),
            (None, Some(url), _) => Some((PathBuf::from(url), "[store] url")),
            (None, None, Some(p)) => Some((p.clone(), "[store] path")),
            (None, None, None) => None,
        };
        let at = match &named {
            Some((v, from)) => {
                Location::parse(v).map_err(|e| CliError::usage(format!("{from}: {e}")))?
            }
            None => Location::File(config::default_db_path()),
        };
        let db = match &at {
            Location::File(p) => p.clone(),
            Location::Postgres(_) => config::default_db_path(),
        };
        let socket = g
            .socket
            .clone()
            .or_else(|| config.socket.clone())
            .unwrap_or_else(|| config::default_socket_path(&db));
        let remote = g
            .connect
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(Remote::parse)
            .transpose()
            .map_err(CliError::usage)?;
        Ok(Context {
            config: Arc::new(config),
            db,
            at,
            socket,
            remote,
            held: std::sync::Mutex::new(None),
        })
    }

    /// Whether the pool lives in PostgreSQL (shared by a fleet; no lock file, no daemon
    /// in between: operator commands act on the database, docs/fleet.md).
    pub fn shared(&self) -> bool {
        matches!(self.at, Location::Postgres(_))
    }

    fn open_options(&self) -> OpenOptions {
        let d = OpenOptions::default();
        OpenOptions {
            durability: self.config.durability,
            claim_hold: self.config.claim_hold.unwrap_or(d.claim_hold),
        }
    }

    /// Open the store, bringing its schema up to date.
    pub(super) fn open_store(&self) -> Result<Store, CliError> {
        if self.shared() {
            return Ok(Store::open_at(&self.at, self.open_options())?);
        }
        if std::fs::symlink_metadata(&self.db).is_err() {
            // A daemon still holding the lock of a deleted database: creating a new empty
            // one here would hide that every endpoint and event is gone.
            if let Ok(Owner::Daemon(_)) = lock::owner(&self.db) {
                return Err(CliError::failed(format!(
                    "database {} does not exist but a daemon holds its lock ({}); it was deleted while the daemon ran: stop the daemon and restore the file",
                    self.db.display(),
                    lock::lock_path(&self.db).display()
                )));
            }
        }
        let store = Store::open_with(&self.db, self.config.durability)?;
        if let Some((before, after)) = store.migrated() {
            // Never silent: the file changed, and an older proxypool cannot open it now.
            eprintln!(
                "proxypool: upgraded the database {} from schema version {before} to {after} (older proxypool versions cannot open it any more)",
                self.db.display()
            );
        }
        Ok(store)
    }

    /// The endpoints an operator named, as the daemon's ops take them: resolved here
    /// (ids) when the database is this host's, else as typed, for the remote daemon.
    pub(super) fn endpoint_refs(&self, named: &Named) -> Result<Vec<EndpointRef>, CliError> {
        let targets = named.args;
        if self.remote.is_some() {
            let mut refs: Vec<EndpointRef> = Vec::with_capacity(targets.len());
            for t in targets {
                let r = match t.parse::<EndpointId>() {
                    Ok(id) => EndpointRef::Id(id),
                    Err(_) => EndpointRef::Url(t.clone()),
                };
                if !refs.contains(&r) {
                    refs.push(r);
                }
            }
            return Ok(refs);
        }
        Ok(self
            .resolve_ids(named)?
            .into_iter()
            .map(EndpointRef::Id)
            .collect())
    }

    /// An error when `--connect` is given: for a command that reads this host's database.
    pub(super) fn local(&self, what: &str) -> Result<(), CliError> {
        match &self.remote {
            Some(r) => Err(super::remote::local_only(what, r)),
            None => Ok(()),
        }
    }

    /// Resolve every `ID|URL` argument before anything changes, so that one bad argument
    /// changes nothing; an endpoint named twice counts once. With `pool`, only that pool's
    /// endpoints are meant (a URL may be in several pools).
    pub(super) fn resolve_ids(&self, named: &Named) -> Result<Vec<EndpointId>, CliError> {
        let (targets, pool) = (named.args, named.pool);
        let store = self.open_store()?;
        let mut ids: Vec<EndpointId> = Vec::with_capacity(targets.len());
        for t in targets {
            let id = store.resolve(t, pool)?.id;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    pub(super) fn store(&self) -> Result<Store, CliError> {
        let mut s = self.open_store()?;
        if self.shared() {
            // Every daemon follows what is committed, config endpoints included.
            sync_config_endpoints(&mut s, &self.config)?;
            return Ok(s);
        }
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
    /// ends, so that a daemon starting meanwhile cannot miss its writes. With `--connect`,
    /// always that daemon (or an error): never a database of this host.
    pub(super) async fn daemon(&self) -> Result<Option<Client>, CliError> {
        if let Some(r) = &self.remote {
            return r.connect().await.map(Some);
        }
        if self.shared() {
            // The database is the meeting point: act on it, every daemon follows.
            return Ok(None);
        }
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

    /// The daemon as [`Context::daemon`] finds it, for commands that need one and touch
    /// no database themselves (`lease`, `report`, `release`): where no lock file exists no
    /// daemon serves this database, and looking must not leave one (or its folder) behind.
    pub(super) async fn running_daemon(&self) -> Result<Option<Client>, CliError> {
        if self.remote.is_none() && !self.shared() && !lock::lock_path(&self.db).exists() {
            return Ok(None);
        }
        self.daemon().await
    }

    pub(super) fn engine(&self) -> Result<Arc<Engine>, CliError> {
        // A command acts once and ends: it does not follow the fleet.
        let opts = crate::pool::engine::EngineOptions {
            follow: false,
            ..Default::default()
        };
        Ok(Engine::open_with(
            self.store()?,
            self.config.pools.values().cloned(),
            opts,
        )?)
    }

    /// The store for a command that only reads (`list`, `show`, `status`, `events`,
    /// `sources`). A database that does not exist is an error here, not a new empty one:
    /// a mistyped `--db` would otherwise look like an empty pool and leave files (and
    /// folders) behind. With `[[endpoint]]`s in the config it is created and synced as by
    /// any command, since they are what it would list.
    pub(super) fn store_to_read(&self) -> Result<Store, CliError> {
        self.check_db_exists()?;
        self.store()
    }

    /// Whether the database file exists (without creating it).
    pub(super) fn db_exists(&self) -> bool {
        self.shared() || std::fs::symlink_metadata(&self.db).is_ok()
    }

    /// For a command that only reads: an error naming the path when the database does not
    /// exist (see `store_to_read`). Checked before looking for a daemon, whose lock file
    /// would otherwise be created next to the missing database.
    pub(super) fn check_db_exists(&self) -> Result<(), CliError> {
        // A lock file without its database: a daemon may hold it (the database deleted
        // under it), which `open_store` explains better than "no database".
        let lock_file = std::fs::symlink_metadata(lock::lock_path(&self.db)).is_ok();
        if !self.config.endpoints.is_empty() || self.db_exists() || lock_file {
            return Ok(());
        }
        Err(CliError::usage(format!(
            "no database at {}: nothing has been added there yet (add endpoints with `proxypool add` or `proxypool import`, or check --db, PROXYPOOL_DB and the config's [store] path)",
            self.at.describe()
        )))
    }

    /// A pool this host's config (or the built-in `default`) knows; over `--connect` the
    /// remote daemon decides.
    pub(super) fn check_pool(&self, pool: &str) -> Result<(), CliError> {
        if self.remote.is_some() || pool == DEFAULT_POOL || self.config.pools.contains_key(pool) {
            Ok(())
        } else {
            Err(CliError::usage(format!(
                "unknown pool {pool:?}: declare it in the config with [[pool]] name = {pool:?}"
            )))
        }
    }
}

/// Run a parsed command line.
/// Send one request to the daemon; an error answer becomes the CLI's error.
pub(super) async fn call(c: &mut Client, req: &Request) -> Result<Payload, CliError> {
    c.request(req).await?.into_result().map_err(daemon_error)
}
