//! Storage: the one seam between the pools and a database. `Store` is SQLite (one daemon,
//! the default) or PostgreSQL (several daemons serving one pool, docs/fleet.md); each
//! backend is one file under `store/` and the only code that writes its SQL. The rows it
//! reads and the writes it applies (`rows`, `pairs`) are plain data, the same for both.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::config::Durability;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::State;

pub mod daemons;
mod fleet_link;
mod group_commit;
mod location;
pub(crate) mod lock;
pub mod pairs;
pub mod postgres;
mod rows;
pub mod sqlite;

pub use fleet_link::{Changes, Feed, FleetLink};
pub use group_commit::GroupCommit;
pub use location::Location;
pub use postgres::{PgTarget, Postgres};
pub use rows::{
    Applied, Claim, ClaimOn, ClaimResult, EndpointRow, Epoch, EventRow, HealthRecord, NewEndpoint,
    NewEvent, Numbered, OnExisting, RowClaim, RowNow, SourceRow, StoredHealth, ToInsert, Unclaim,
    Write,
};
pub use sqlite::Sqlite;

pub use crate::wall_time::{fmt_time, parse_time};

/// `line N: ` before an import error, when the line is known.
fn at_line(line: Option<usize>) -> String {
    line.map(|n| format!("line {n}: ")).unwrap_or_default()
}

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL answered with an error (the statement failed; the server is reachable).
    #[error("database error: {}", pg_message(.0))]
    Postgres(#[source] tokio_postgres::Error),
    /// PostgreSQL cannot be reached or its connection broke: nothing was committed.
    #[error("store unavailable: {target}: {why}")]
    Unavailable {
        /// The database, without its password.
        target: String,
        /// What failed (never a password).
        why: String,
    },
    /// A PostgreSQL URL or its TLS settings are unusable.
    #[error("{0}")]
    Config(String),
    /// A trial's report came after its claim lapsed and the slot was claimed again: it
    /// changed nothing.
    #[error("stale claim: the trial of {what} lapsed and was claimed again; this result was not applied")]
    StaleClaim {
        /// Whose trial (`endpoint 7`, `endpoint 7 for example.com`).
        what: String,
        /// The rows as they are, for memory to follow.
        fresh: Vec<RowNow>,
    },
    /// Applying migrations failed.
    #[error("cannot migrate database {path}: {message}")]
    Migration {
        /// Database file, or the PostgreSQL target without its password.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The database file has other names: each would get its own lock and its own WAL.
    #[error("database {path} has {links} hard links: SQLite keeps a separate journal per name and two daemons could serve it at once; use a single name (a symlink is fine)")]
    HardLinked {
        /// Database file.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// The database file was deleted or replaced while open.
    #[error("database {path} was deleted or replaced while in use; refusing to write (restart the daemon)")]
    FileGone {
        /// Database file.
        path: PathBuf,
    },
    /// The database folder could not be created.
    #[error("cannot create database folder {path}: {source}")]
    CreateDir {
        /// Folder.
        path: PathBuf,
        /// OS error.
        source: std::io::Error,
    },
    /// An endpoint with the same identity exists.
    #[error("{}endpoint {url} already exists in pool {pool:?} (id {id})", at_line(*line))]
    Duplicate {
        /// Redacted URL.
        url: String,
        pool: String,
        /// Existing id.
        id: EndpointId,
        /// The import file's line that named it.
        line: Option<usize>,
    },
    /// The same endpoint appears twice in one batch.
    #[error("{}endpoint {url} is listed twice for pool {pool:?}", at_line(*line))]
    DuplicateInBatch {
        /// Redacted URL.
        url: String,
        pool: String,
        /// The import file's line that named it again.
        line: Option<usize>,
    },
    /// No endpoint matched.
    #[error("no endpoint {0}")]
    NotFound(String),
    /// A URL matched endpoints in several pools.
    #[error("{url} matches endpoints in several pools ({ids}); use the id or --pool")]
    Ambiguous {
        /// Redacted URL.
        url: String,
        /// Matching ids.
        ids: String,
    },
    /// A row holds a value this version does not understand.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// An edit's tags cannot be taken.
    #[error(transparent)]
    Tags(#[from] crate::tags::TagError),
}

/// What PostgreSQL said: its own message (tokio-postgres shows only "db error").
pub(crate) fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

impl StoreError {
    /// The request named something wrong (a duplicate, a missing endpoint): the caller's
    /// mistake, to be answered as bad input. Everything else is a failure of the database.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            StoreError::Duplicate { .. }
                | StoreError::DuplicateInBatch { .. }
                | StoreError::NotFound(_)
                | StoreError::Ambiguous { .. }
                | StoreError::Tags(_)
        )
    }

    /// The database could not be reached: the same request may go through once it is back.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

/// Why an operator's `ID|URL` did not name one endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Neither an id nor a valid URL.
    #[error("{0}")]
    BadUrl(crate::endpoint::EndpointError),
    /// Nothing matched.
    #[error("no endpoint {0}")]
    NotFound(String),
    /// Store failure or ambiguity.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ResolveError {
    /// See [`StoreError::is_input`].
    pub fn is_input(&self) -> bool {
        match self {
            ResolveError::BadUrl(_) | ResolveError::NotFound(_) => true,
            ResolveError::Store(e) => e.is_input(),
        }
    }
}

/// Which events `events` prints.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventFilter {
    /// Only this endpoint.
    pub endpoint: Option<EndpointId>,
    /// Only these kinds (any of them); empty = every kind.
    pub kinds: Vec<String>,
    /// Only events at or after this time.
    pub since: Option<SystemTime>,
}

/// Where `proxypool events --follow` stands (`Store::follow_events`).
#[derive(Debug, Clone, Default)]
pub struct EventCursor {
    after: i64,
    fleet: Option<postgres::FollowAt>,
}

impl EventCursor {
    /// Follow after event `after` (what was printed before).
    pub fn after(after: i64) -> EventCursor {
        EventCursor { after, fleet: None }
    }
}

/// An optional text column holding a name (`reason`, `phase`): None stays None.
pub(crate) fn parse_col<T: std::str::FromStr>(v: Option<&str>) -> Result<Option<T>, T::Err> {
    v.map(str::parse).transpose()
}

/// How a store is opened.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// SQLite's `synchronous` setting.
    pub durability: Durability,
    /// PostgreSQL: how long a trial's claim holds without renewal.
    pub claim_hold: std::time::Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            durability: Durability::default(),
            claim_hold: postgres::DEFAULT_CLAIM_HOLD,
        }
    }
}

/// The store: one of the backends, with the same operations.
pub enum Store {
    /// One daemon, one file.
    Sqlite(Sqlite),
    /// A fleet of daemons, one database.
    Postgres(Postgres),
}

/// Run the same call on whichever backend this is.
macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            Store::Sqlite($s) => $e,
            Store::Postgres($s) => $e,
        }
    };
}

impl From<Sqlite> for Store {
    fn from(s: Sqlite) -> Store {
        Store::Sqlite(s)
    }
}

impl From<Postgres> for Store {
    fn from(s: Postgres) -> Store {
        Store::Postgres(s)
    }
}

impl Store {
    /// Open (creating and migrating) the SQLite database at `path` with default durability.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Sqlite::open(path)?.into())
    }

    /// Open (creating and migrating) the SQLite database at `path`.
    pub fn open_with(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        Ok(Sqlite::open_with(path, durability)?.into())
    }

    /// Open the store at `at`, bringing its schema up to date.
    pub fn open_at(at: &Location, opts: OpenOptions) -> Result<Store, StoreError> {
        match at {
            Location::File(p) => Store::open_with(p, opts.durability),
            Location::Postgres(t) => Ok(Postgres::open(t, opts.claim_hold)?.into()),
        }
    }

    /// Whether several daemons share this store (PostgreSQL): claims are confirmed in it
    /// and changes are followed (docs/fleet.md).
    pub fn shared(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// This store for the one thread that will use it (the store thread): PostgreSQL's
    /// connections are then driven by that thread (`Postgres::driven_by_caller`).
    pub fn for_one_thread(self) -> Result<Store, StoreError> {
        Ok(match self {
            Store::Postgres(p) => Store::Postgres(p.driven_by_caller()?),
            s => s,
        })
    }

    /// What a daemon of a fleet asks of the database beyond reads and writes, when this
    /// store holds a fleet (PostgreSQL).
    pub fn fleet(&self) -> Option<FleetLink> {
        match self {
            Store::Postgres(p) => Some(FleetLink::new(p.clone())),
            Store::Sqlite(_) => None,
        }
    }

    /// The database, for messages: a path, or hosts and database without the password.
    pub fn describe(&self) -> String {
        match self {
            Store::Sqlite(s) => s.path().display().to_string(),
            Store::Postgres(p) => p.target().describe(),
        }
    }

    /// Whether the database is still the one opened (SQLite: the file was not deleted or
    /// replaced; PostgreSQL: always).
    pub fn check_file(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => s.check_file(),
            Store::Postgres(_) => Ok(()),
        }
    }

    /// The schema version (number of applied migrations).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        each!(self, s => s.schema_version())
    }

    /// The schema versions (before, after) when opening this store migrated an older
    /// database: every command does, a read-only one as well (it could not read the old
    /// schema), and says so (docs/reference.md, "Storage"). SQLite only: PostgreSQL's
    /// migration logs what it applied.
    pub fn migrated(&self) -> Option<(i64, i64)> {
        match self {
            Store::Sqlite(s) => s.migrated(),
            Store::Postgres(_) => None,
        }
    }

    /// Insert the endpoints that do not exist yet (config sync, sources); existing ones
    /// get their password and label refreshed. Returns (id, newly added) per input.
    pub fn ensure_endpoints(
        &mut self,
        eps: &[NewEndpoint],
    ) -> Result<Vec<(EndpointId, bool)>, StoreError> {
        each!(self, s => s.ensure_endpoints(eps))
    }

    /// One endpoint by id.
    pub fn get(&self, id: EndpointId) -> Result<Option<EndpointRow>, StoreError> {
        each!(self, s => s.get(id))
    }

    /// Endpoints with this URL's identity, in any pool (or in `pool`).
    pub fn find(&self, url: &ProxyUrl, pool: Option<&str>) -> Result<Vec<EndpointRow>, StoreError> {
        each!(self, s => s.find(url, pool))
    }

    /// Resolve an operator's `ID|URL` argument to one endpoint, of `pool` when given: the
    /// same URL may be in several pools, and an id of another pool is not the one meant.
    pub fn resolve(&self, arg: &str, pool: Option<&str>) -> Result<EndpointRow, ResolveError> {
        let in_pool = pool.map(|p| format!(" in pool {p:?}")).unwrap_or_default();
        if let Ok(id) = arg.trim().parse::<EndpointId>() {
            return self
                .get(id)?
                .filter(|r| pool.is_none_or(|p| r.pool == p))
                .ok_or_else(|| ResolveError::NotFound(format!("with id {id}{in_pool}")));
        }
        let url = ProxyUrl::parse(arg).map_err(ResolveError::BadUrl)?;
        let mut found = self.find(&url, pool)?;
        match found.len() {
            0 => Err(ResolveError::NotFound(format!(
                "{}{in_pool}",
                url.to_redacted_string()
            ))),
            1 => Ok(found.remove(0)),
            _ => Err(ResolveError::Store(StoreError::Ambiguous {
                url: url.to_redacted_string(),
                ids: found
                    .iter()
                    .map(|r| r.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })),
        }
    }

    /// Endpoints filtered by pool and state, by id.
    pub fn list(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> Result<Vec<EndpointRow>, StoreError> {
        each!(self, s => s.list(pool, state))
    }

    /// Delete endpoints (and only here), writing a `removed` event each; all or nothing.
    pub fn remove(&mut self, ids: &[EndpointId]) -> Result<(), StoreError> {
        each!(self, s => s.remove(ids))
    }

    /// Apply a batch of writes in one transaction, all or nothing.
    pub fn write(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        let groups = [writes.to_vec()];
        match self.write_groups(&groups)?.pop() {
            Some(r) => r.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Group commit: apply several independent batches in one transaction, each batch
    /// atomic on its own, so one bad batch fails alone. Each batch's result says what its
    /// claims got and which rows its guarded writes found changed elsewhere.
    pub fn write_groups(
        &mut self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let mut gc = self.begin_groups()?;
        for g in groups {
            gc.add(g);
        }
        gc.commit(groups)
    }

    /// Events in order, optionally for one endpoint, with id > `after`.
    pub fn events(
        &self,
        endpoint: Option<EndpointId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        each!(self, s => s.events(endpoint, after, limit))
    }

    /// The most recent events of an endpoint, newest first.
    pub fn recent_events(
        &self,
        endpoint: Option<EndpointId>,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        each!(self, s => s.recent_events(endpoint, limit))
    }

    /// The last sniff of each source.
    pub fn sources(&self, pool: Option<&str>) -> Result<Vec<SourceRow>, StoreError> {
        each!(self, s => s.sources(pool))
    }

    /// Replace an endpoint's URL and/or label, keeping its id, state and history, with an
    /// `edited` event (passwords redacted). `label: Some(None)` clears the label.
    pub fn edit_endpoint(
        &mut self,
        id: EndpointId,
        url: Option<&ProxyUrl>,
        label: Option<Option<String>>,
        tags: &std::collections::BTreeMap<String, String>,
    ) -> Result<EndpointRow, StoreError> {
        each!(self, s => s.edit_endpoint(id, url, label, tags))
    }

    /// Events matching `f` with id > `after`, oldest first.
    pub fn events_matching(
        &self,
        f: &EventFilter,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        each!(self, s => s.events_matching(f, after, limit))
    }

    /// The events matching `f` committed since the last call (`proxypool events
    /// --follow`), oldest first; `true` when more are waiting. On SQLite one writer commits
    /// ids in order; on PostgreSQL several do not, and the cursor follows transactions.
    pub fn follow_events(
        &self,
        f: &EventFilter,
        at: &mut EventCursor,
        limit: usize,
    ) -> Result<(Vec<EventRow>, bool), StoreError> {
        match self {
            Store::Sqlite(s) => {
                let batch = s.events_matching(f, at.after, limit)?;
                if let Some(e) = batch.last() {
                    at.after = e.id;
                }
                let more = batch.len() == limit;
                Ok((batch, more))
            }
            Store::Postgres(s) => {
                let after = at.after;
                let fleet = at
                    .fleet
                    .get_or_insert_with(|| postgres::FollowAt::after(after));
                s.follow_events(f, fleet, limit)
            }
        }
    }

    /// The last `n` events matching `f`, oldest first.
    pub fn last_events_matching(
        &self,
        f: &EventFilter,
        n: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        each!(self, s => s.last_events_matching(f, n))
    }

    /// Delete up to `batch` of the oldest events that happened before `before`; returns
    /// how many went. Endpoint rows are never touched.
    pub fn prune_events(&mut self, before: SystemTime, batch: usize) -> Result<usize, StoreError> {
        each!(self, s => s.prune_events(before, batch))
    }

    /// `state_changed` times since `since`, with the endpoint's pool, newest first; at
    /// most `cap` rows are read.
    pub fn transition_times(
        &self,
        since: SystemTime,
        cap: usize,
    ) -> Result<Vec<(String, SystemTime)>, StoreError> {
        each!(self, s => s.transition_times(since, cap))
    }

    /// Up to `limit` endpoints of a pool for the status page, those that need attention
    /// (not available) first, then by id.
    pub fn page_rows(&self, pool: &str, limit: usize) -> Result<Vec<EndpointRow>, StoreError> {
        each!(self, s => s.page_rows(pool, limit))
    }

    /// Insert endpoints, all or nothing; returns their ids in order.
    pub fn add_endpoints(&mut self, eps: &[NewEndpoint]) -> Result<Vec<EndpointId>, StoreError> {
        let mut ids = Vec::with_capacity(eps.len());
        self.add_endpoints_from(
            eps.iter().map(Ok::<_, StoreError>),
            OnExisting::Refuse,
            |id| ids.push(id),
        )?;
        Ok(ids)
    }

    /// Insert endpoints as an iterator yields them, all or nothing (one transaction; the
    /// first error rolls everything back). Nothing is held per endpoint but its id, handed
    /// to `added` in order (ids are consecutive), so an import of millions streams. With
    /// `OnExisting::Skip` endpoints already stored (or listed earlier) are passed over;
    /// returns how many.
    pub fn add_endpoints_from<E, T>(
        &mut self,
        eps: impl Iterator<Item = Result<T, E>>,
        on_existing: OnExisting,
        added: impl FnMut(EndpointId),
    ) -> Result<u64, E>
    where
        E: From<StoreError>,
        T: ToInsert,
    {
        each!(self, s => s.add_endpoints_from(eps, on_existing, added))
    }

    /// Up to `limit` endpoints with ids in `from..=to`, by id.
    pub fn rows_between(
        &self,
        from: EndpointId,
        to: EndpointId,
        limit: usize,
    ) -> Result<Vec<EndpointRow>, StoreError> {
        each!(self, s => s.rows_between(from, to, limit))
    }

    /// Apply pair writes in one transaction, all or nothing.
    pub fn write_pairs(&mut self, writes: &[pairs::PairWrite]) -> Result<(), StoreError> {
        let w: Vec<Write> = writes.iter().cloned().map(Write::Pair).collect();
        self.write(&w)
    }

    /// Every stored pair (to restore on start), in (endpoint, destination) order.
    pub fn pairs(&self) -> Result<Vec<pairs::PairRow>, StoreError> {
        each!(self, s => s.pairs())
    }

    /// The pairs of one endpoint (`show ID`).
    pub fn pairs_of(&self, endpoint: EndpointId) -> Result<Vec<pairs::PairRow>, StoreError> {
        each!(self, s => s.pairs_of(endpoint))
    }

    /// The stored rows of these (endpoint, destination) pairs, those that have one (the
    /// status page's "banned on": what each ban's detail says).
    pub fn pairs_at(
        &self,
        keys: &[(EndpointId, String)],
    ) -> Result<Vec<pairs::PairRow>, StoreError> {
        each!(self, s => s.pairs_at(keys))
    }

    /// The pairs of one destination (`list --destination D`).
    pub fn pairs_for(&self, destination: &str) -> Result<Vec<pairs::PairRow>, StoreError> {
        each!(self, s => s.pairs_for(destination))
    }

    /// Fail the next `n` commits as a full disk would (SQLite; engine tests).
    #[cfg(test)]
    pub(crate) fn fail_next_commits(&mut self, n: u32) {
        if let Store::Sqlite(s) = self {
            s.fail_next_commits(n);
        }
    }

    /// Commits still to fail.
    #[cfg(test)]
    pub(crate) fn failing_commits(&self) -> u32 {
        match self {
            Store::Sqlite(s) => s.failing_commits(),
            Store::Postgres(_) => 0,
        }
    }
}
