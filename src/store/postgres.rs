//! PostgreSQL: one database that a fleet of daemons serves at once (docs/fleet.md).
//!
//! The store's calls are synchronous, like SQLite's, so the engine's store thread and the
//! CLI use either backend the same way. Underneath, tokio-postgres runs on a runtime of
//! its own (one thread): its connections' I/O is driven there, and a call waits for its
//! future on the calling thread, so it works from the store thread, from a CLI command and
//! from inside another runtime alike.
//!
//! Every transaction that writes takes a change number from a sequence and records it with
//! its transaction id (`statements`); writers do not queue on a shared row, so numbers
//! commit in any order, and a daemon follows the others by transaction ids (`feed`).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::Row;

use super::pairs::PairRow;
use super::{EndpointRow, EventFilter, EventRow, SourceRow, StoreError};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::State;

mod commit_call;
mod copy;
mod daemons;
mod endpoints;
mod event_cols;
pub mod feed;
mod feed_read;
mod follow;
mod guard;
mod jobs;
mod listener;
mod outcome;
mod read;
mod schema;
mod statements;
mod target;
mod tx_error;
mod unseen;
pub mod url;
mod write;

pub use copy::{copy_from_sqlite, Copied};
pub use feed::Feed;
pub use feed_read::Changes;
pub use follow::FollowAt;
pub use schema::migrations;
pub use target::{is_url, PgTarget};

use read::{endpoint_row, event_row, pair_row, ENDPOINT_COLS, EVENT_COLS, PAIR_COLS};

/// Connections one process keeps at most in its shared pool: loading at start, trial
/// claims, a CLI command's work. The store thread has its own (`CALLER_POOL_SIZE`), and so
/// does the change feed (`FEED_POOL_SIZE`, its `LISTEN` one more).
const POOL_SIZE: usize = 4;

/// Connections of the store thread's store (`driven_by_caller`): it uses one at a time.
const CALLER_POOL_SIZE: usize = 2;

/// Connections of the change feed's store (`for_feed`): its reads, and the renewal of
/// this daemon's claims, one after another.
const FEED_POOL_SIZE: usize = 1;

/// Who drives a store's connections (`Postgres::driven_by_caller`).
#[derive(Clone, Copy)]
enum Driver {
    /// A runtime thread of the store's own: any thread may call.
    OwnThread,
    /// The thread that waits on them, with this many connections.
    Caller(usize),
}

/// Let a runtime driven by its caller read what reached its sockets while nobody was
/// waiting (an end of connection), and run the tasks that wakes, before a call: the
/// first yield polls the sockets without blocking, the second runs the woken tasks.
async fn settle() {
    tokio::task::yield_now().await;
    tokio::task::yield_now().await;
}

/// How long a call waits for a free connection or a new one before the store counts as
/// unavailable.
const WAIT: Duration = Duration::from_secs(10);

struct Inner {
    rt: OwnRuntime,
    pool: Pool,
    target: PgTarget,
    /// How long a claim holds without renewal (`[store] claim_hold`).
    claim_hold: Duration,
    /// Whether the server lets a group commit be made durable apart from it
    /// (`write::Split`), found out on the first group commit.
    split: write::SplitState,
    /// Whether the server runs the group commit's function (`commit_call`): refused for
    /// good after the first call the server would not run.
    call_refused: std::sync::atomic::AtomicBool,
}

/// How long a claim holds without renewal unless `[store] claim_hold` says otherwise.
pub const DEFAULT_CLAIM_HOLD: Duration = Duration::from_secs(15);

/// A store's own runtime. Dropping a runtime blocks, which panics inside another runtime
/// (a CLI command, `serve`, a test), on every path: a store that could not be opened
/// (a bad `sslrootcert`) drops it as surely as one closed. Its thread winds down on its
/// own.
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl OwnRuntime {
    fn get(&self) -> &tokio::runtime::Runtime {
        self.0
            .as_ref()
            .expect("a store's runtime lives as long as the store")
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A read-only transaction in one snapshot (repeatable read): the feed's and the event
/// follower's reads, whose `xmin` says where they stand.
async fn snapshot(
    c: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, tokio_postgres::Error> {
    c.build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
}

/// A PostgreSQL store. Cheap to clone: clones share the connections.
#[derive(Clone)]
pub struct Postgres {
    inner: Arc<Inner>,
}

/// Run `f` to completion on this thread. Only the runtime's resources (sockets, timers) need
/// its context, entered by the caller; the futures themselves are polled here.
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A free-text column as stored: control characters written as escapes, as SQLite's
/// (`redact::printable`).
pub(super) fn text(v: &Option<String>) -> Option<String> {
    crate::redact::printable_opt(v.as_deref()).map(std::borrow::Cow::into_owned)
}

/// Whether the server asked for a password that the connection settings do not hold
/// (tokio-postgres says so as an invalid configuration, with no SQLSTATE).
fn is_missing_password(e: &tokio_postgres::Error) -> bool {
    e.code().is_none()
        && e.to_string().starts_with("invalid configuration")
        && std::error::Error::source(e).is_some_and(|s| s.to_string().contains("password"))
}

/// Whether a PostgreSQL error means "not reachable now" (the connection broke, the server
/// is shutting down or starting, a failover left us on a read-only standby) rather than a
/// statement the server refused.
fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        None => true,
        Some(code) => {
            let c = code.code();
            // Connection exceptions, shutdown or startup in progress, a read-only standby
            // (a failover not followed yet), too many connections.
            c.starts_with("08") || c.starts_with("57P") || c == "25006" || c == "53300"
        }
    }
}

impl Postgres {
    /// Connect to `target` and bring its schema up to date (several daemons at once are
    /// safe: the migration holds an advisory lock).
    pub fn open(target: &PgTarget, claim_hold: Duration) -> Result<Postgres, StoreError> {
        let pg = Postgres::connect(target, claim_hold)?;
        pg.migrate()?;
        Ok(pg)
    }

    /// Connect without touching the schema.
    pub fn connect(target: &PgTarget, claim_hold: Duration) -> Result<Postgres, StoreError> {
        Postgres::connect_on(target, claim_hold, Driver::OwnThread)
    }

    /// The same database on connections of their own, driven by the one thread that
    /// uses them (the store thread) while it waits for them: each round trip of its
    /// commits then wakes no other thread. With a runtime thread in between, a commit's
    /// two round trips cost four hand-offs between threads, which on two cores came to
    /// about a tenth of the persisted transitions (BENCHMARKS.md). Other threads keep
    /// using `self`: a second thread waiting on these connections would only wait for
    /// the first one's turn.
    pub fn driven_by_caller(&self) -> Result<Postgres, StoreError> {
        Postgres::connect_on(
            &self.inner.target,
            self.inner.claim_hold,
            Driver::Caller(CALLER_POOL_SIZE),
        )
    }

    /// The same database for the change feed: driven by the follower's thread as it waits
    /// (`driven_by_caller`), which under a stream of commits reads every few milliseconds.
    pub fn for_feed(&self) -> Result<Postgres, StoreError> {
        Postgres::connect_on(
            &self.inner.target,
            self.inner.claim_hold,
            Driver::Caller(FEED_POOL_SIZE),
        )
    }

    fn connect_on(
        target: &PgTarget,
        claim_hold: Duration,
        driver: Driver,
    ) -> Result<Postgres, StoreError> {
        let tls = target.connector()?;
        let rt = match driver {
            Driver::OwnThread => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("proxypool-pg")
                .enable_all()
                .build(),
            Driver::Caller(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
        }
        .map(|rt| OwnRuntime(Some(rt)))
        .map_err(|e| StoreError::Config(format!("cannot start the PostgreSQL runtime: {e}")))?;
        let mgr = Manager::from_config(
            target.config().clone(),
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = {
            let _g = rt.get().enter();
            Pool::builder(mgr)
                .max_size(match driver {
                    Driver::OwnThread => POOL_SIZE,
                    Driver::Caller(n) => n,
                })
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(WAIT))
                .create_timeout(Some(WAIT))
                .recycle_timeout(Some(WAIT))
                .build()
                .map_err(|e| StoreError::Config(format!("connection pool: {e}")))?
        };
        Ok(Postgres {
            inner: Arc::new(Inner {
                rt,
                pool,
                target: target.clone(),
                claim_hold,
                split: write::SplitState::default(),
                call_refused: Default::default(),
            }),
        })
    }

    /// How long a claim holds without renewal.
    pub fn claim_hold(&self) -> Duration {
        self.inner.claim_hold
    }

    /// The database this store is connected to.
    pub fn target(&self) -> &PgTarget {
        &self.inner.target
    }

    /// Run an async body on this store's runtime and wait for it here.
    pub(super) fn block<T>(&self, f: impl Future<Output = T>) -> T {
        let rt = self.inner.rt.get();
        if rt.handle().runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
            // `driven_by_caller`: this thread runs the connections' tasks as it waits.
            // Between calls nothing reads their sockets, so a connection the server
            // closed meanwhile is not known closed yet: let them see that first.
            return rt.block_on(async {
                settle().await;
                f.await
            });
        }
        let _g = rt.enter();
        block_on(f)
    }

    /// A pooled connection.
    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.inner.pool.get().await.map_err(|e| {
            use deadpool_postgres::PoolError as P;
            let why = match e {
                P::Backend(b) => {
                    // A refused login or a missing database: no retry will help.
                    if let Some(db) = b.as_db_error() {
                        let c = db.code().code();
                        if c.starts_with("28") || c == "3D000" {
                            return StoreError::Config(format!(
                                "cannot use the database {}: {}",
                                self.inner.target.describe(),
                                db.message()
                            ));
                        }
                    }
                    return self.err(b);
                }
                P::Timeout(_) => "timed out connecting".to_string(),
                other => other.to_string(),
            };
            StoreError::Unavailable {
                target: self.inner.target.describe(),
                why,
            }
        })
    }

    /// A PostgreSQL error as a store error: unavailable when the connection is the
    /// problem.
    pub(super) fn err(&self, e: tokio_postgres::Error) -> StoreError {
        if is_missing_password(&e) {
            // The server asks for a password and none was given: a configuration error
            // (no retry will bring one), not the store being away.
            return StoreError::Config(format!(
                "cannot log in to the database {}: it asks for a password and none is given \
                 (put it in the URL, PGPASSWORD, or the password file: PGPASSFILE, else ~/.pgpass)",
                self.inner.target.describe()
            ));
        }
        if is_connection_error(&e) {
            let why = match e.as_db_error() {
                Some(db) => db.message().to_string(),
                None => {
                    let mut s = e.to_string();
                    let mut src = std::error::Error::source(&e);
                    while let Some(inner) = src {
                        s.push_str(": ");
                        s.push_str(&inner.to_string());
                        src = inner.source();
                    }
                    s
                }
            };
            StoreError::Unavailable {
                target: self.inner.target.describe(),
                why,
            }
        } else {
            StoreError::Postgres(e)
        }
    }

    /// Rows of a read-only query.
    fn rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.block(async {
            let c = self.client().await?;
            let st = c.prepare_cached(sql).await.map_err(|e| self.err(e))?;
            c.query(&st, params).await.map_err(|e| self.err(e))
        })
    }

    /// The schema version (number of applied migrations).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.block(async {
            let c = self.client().await?;
            schema::version(&c).await.map_err(|e| self.err(e))
        })
    }

    /// Create or upgrade the schema.
    pub fn migrate(&self) -> Result<i64, StoreError> {
        self.block(async {
            let mut c = self.client().await?;
            schema::migrate(&mut c, &self.inner.target)
                .await
                .map_err(|e| match e {
                    schema::MigrateError::Pg(e) => self.err(e),
                    schema::MigrateError::Store(s) => s,
                })
        })
    }

    /// Where a feed starts (`Feed::new`): read before the state it follows is loaded, it
    /// misses nothing committed after.
    pub fn feed_start(&self) -> Result<i64, StoreError> {
        let rows = self.rows(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
            &[],
        )?;
        Ok(rows.first().map_or(0, |r| r.get(0)))
    }

    /// One endpoint by id.
    pub fn get(&self, id: EndpointId) -> Result<Option<EndpointRow>, StoreError> {
        let sql = format!("SELECT {ENDPOINT_COLS} FROM endpoints WHERE id = $1");
        self.rows(&sql, &[&id])?
            .iter()
            .map(endpoint_row)
            .next()
            .transpose()
    }

    /// Endpoints with this URL's identity, in any pool (or in `pool`).
    pub fn find(&self, url: &ProxyUrl, pool: Option<&str>) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE scheme = $1 AND host = $2 AND port = $3 \
             AND \"user\" = $4 AND ($5::text IS NULL OR pool = $5) ORDER BY id"
        );
        let port = i32::from(url.port);
        self.rows(
            &sql,
            &[
                &url.scheme.as_str(),
                &url.host,
                &port,
                &url.user_key(),
                &pool,
            ],
        )?
        .iter()
        .map(endpoint_row)
        .collect()
    }

    /// Endpoints filtered by pool and state, by id.
    pub fn list(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE ($1::text IS NULL OR pool = $1) \
             AND ($2::text IS NULL OR state = $2) ORDER BY id"
        );
        self.rows(&sql, &[&pool, &state.map(State::as_str)])?
            .iter()
            .map(endpoint_row)
            .collect()
    }

    /// Up to `limit` endpoints with ids in `from..=to`, by id.
    pub fn rows_between(
        &self,
        from: EndpointId,
        to: EndpointId,
        limit: usize,
    ) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3"
        );
        self.rows(&sql, &[&from, &to, &(limit as i64)])?
            .iter()
            .map(endpoint_row)
            .collect()
    }

    /// Up to `limit` endpoints of a pool for the status page, not available first.
    pub fn page_rows(&self, pool: &str, limit: usize) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE pool = $1 \
             ORDER BY state = 'available', id LIMIT $2"
        );
        self.rows(&sql, &[&pool, &(limit as i64)])?
            .iter()
            .map(endpoint_row)
            .collect()
    }

    /// Events in order, optionally for one endpoint, with id > `after`.
    pub fn events(
        &self,
        endpoint: Option<EndpointId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLS} FROM events WHERE id > $1 AND ($2::bigint IS NULL OR endpoint = $2) \
             ORDER BY id LIMIT $3"
        );
        let rows = self.rows(
            &sql,
            &[&after, &endpoint, &(limit.min(i64::MAX as usize) as i64)],
        )?;
        Ok(rows.iter().map(event_row).collect())
    }

    /// The most recent events of an endpoint, newest first.
    pub fn recent_events(
        &self,
        endpoint: Option<EndpointId>,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLS} FROM events WHERE ($1::bigint IS NULL OR endpoint = $1) \
             ORDER BY id DESC LIMIT $2"
        );
        let rows = self.rows(&sql, &[&endpoint, &(limit as i64)])?;
        Ok(rows.iter().map(event_row).collect())
    }

    /// Events matching `f` with id > `after`, oldest first.
    pub fn events_matching(
        &self,
        f: &EventFilter,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLS} FROM events WHERE id > $1 AND ($2::bigint IS NULL OR endpoint = $2) \
             AND (cardinality($3::text[]) = 0 OR kind = ANY($3)) \
             AND ($4::timestamptz IS NULL OR at >= $4) ORDER BY id LIMIT $5"
        );
        let rows = self.rows(
            &sql,
            &[&after, &f.endpoint, &f.kinds, &f.since, &(limit as i64)],
        )?;
        Ok(rows.iter().map(event_row).collect())
    }

    /// The last `n` events matching `f`, oldest first.
    pub fn last_events_matching(
        &self,
        f: &EventFilter,
        n: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLS} FROM events WHERE ($1::bigint IS NULL OR endpoint = $1) \
             AND (cardinality($2::text[]) = 0 OR kind = ANY($2)) \
             AND ($3::timestamptz IS NULL OR at >= $3) ORDER BY id DESC LIMIT $4"
        );
        let rows = self.rows(&sql, &[&f.endpoint, &f.kinds, &f.since, &(n as i64)])?;
        let mut v: Vec<EventRow> = rows.iter().map(event_row).collect();
        v.reverse();
        Ok(v)
    }

    /// `state_changed` times since `since`, with the endpoint's pool, newest first.
    pub fn transition_times(
        &self,
        since: SystemTime,
        cap: usize,
    ) -> Result<Vec<(String, SystemTime)>, StoreError> {
        let rows = self.rows(
            "SELECT n.pool, e.at FROM (SELECT at, kind, endpoint FROM events ORDER BY id DESC LIMIT $2) e \
             JOIN endpoints n ON n.id = e.endpoint WHERE e.kind = 'state_changed' AND e.at >= $1 \
             ORDER BY e.at DESC",
            &[&since, &(cap as i64)],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The last sniff of each source.
    pub fn sources(&self, pool: Option<&str>) -> Result<Vec<SourceRow>, StoreError> {
        let rows = self.rows(
            "SELECT pool, name, last_at, last_ok, last_detail, last_count FROM sources \
             WHERE ($1::text IS NULL OR pool = $1) ORDER BY pool, name",
            &[&pool],
        )?;
        Ok(rows
            .iter()
            .map(|r| SourceRow {
                pool: r.get(0),
                name: r.get(1),
                last_at: r.get::<_, Option<SystemTime>>(2).map(super::fmt_time),
                last_ok: r.get(3),
                last_detail: r.get(4),
                last_count: r.get(5),
            })
            .collect())
    }

    /// Every stored pair, in (endpoint, destination) order.
    pub fn pairs(&self) -> Result<Vec<PairRow>, StoreError> {
        self.query_pairs("", &[])
    }

    /// The pairs of one endpoint.
    pub fn pairs_of(&self, endpoint: EndpointId) -> Result<Vec<PairRow>, StoreError> {
        self.query_pairs("WHERE p.endpoint = $1", &[&endpoint])
    }

    /// The stored rows of these pairs (those that have one), in one round trip.
    pub fn pairs_at(&self, keys: &[(EndpointId, String)]) -> Result<Vec<PairRow>, StoreError> {
        let (ids, dests): (Vec<EndpointId>, Vec<String>) = keys.iter().cloned().unzip();
        self.query_pairs(
            "WHERE (p.endpoint, p.destination) IN \
             (SELECT * FROM UNNEST($1::BIGINT[], $2::TEXT[]))",
            &[&ids, &dests],
        )
    }

    /// The pairs of one destination.
    pub fn pairs_for(&self, destination: &str) -> Result<Vec<PairRow>, StoreError> {
        self.query_pairs("WHERE p.destination = $1", &[&destination])
    }

    fn query_pairs(
        &self,
        filter: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<PairRow>, StoreError> {
        let sql = format!(
            "SELECT {PAIR_COLS} FROM destination_pairs p JOIN endpoints e ON e.id = p.endpoint \
             {filter} ORDER BY p.endpoint, p.destination"
        );
        self.rows(&sql, params)?.iter().map(pair_row).collect()
    }
}
