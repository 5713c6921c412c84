//! The running pool: `Pools` behind a mutex, with a group-committing store writer.
//!
//! Writes are queued while the pool lock is held, so the event log keeps the order in
//! which things happened; callers are answered only after their writes committed.

mod changes;
mod fleet;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{error, warn};

use super::{PoolError, Pools};
use crate::config::PoolConfig;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::store::{Applied, ClaimOn, ClaimResult, ResolveError, Store, StoreError, Write};

mod declared;
mod exits;
mod leasing;
mod probing;
mod reads;
mod registry;
mod reporting;
mod track;
pub use declared::{initial_state, sync_config_endpoints};
pub use reads::EngineOptions;
mod writer;
pub use writer::{CommitCounts, Committed, Writer};

/// Errors of engine operations.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A pool-level refusal (maps to a protocol error code).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The store failed or refused; the operation was not acknowledged. Shared, because
    /// one failed group commit answers every caller in the group.
    #[error("store: {0}")]
    Store(#[source] Arc<StoreError>),
    /// An operator's `ID|URL` did not name one endpoint.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("store thread stopped")]
    Stopped,
    /// The caller of a waiting lease went away: nothing was granted (or what was granted
    /// is given back), since its answer could never be delivered.
    #[error("the client went away while its lease waited")]
    CallerGone,
}

impl EngineError {
    /// The store could not be reached (a fleet's PostgreSQL away, docs/fleet.md).
    pub fn is_store_unavailable(&self) -> bool {
        matches!(self, EngineError::Store(e) if e.is_unavailable())
    }
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        EngineError::Store(Arc::new(e))
    }
}

/// Rows loaded into the pools per hold of the pool lock.
const LOAD_SLICE: usize = 4096;

/// Stored rows read per query when the engine starts.
const START_SLICE: usize = 16_384;

/// Whether deadline `now` comes before `was` (None: no deadline).
fn earlier(now: Option<Instant>, was: Option<Instant>) -> bool {
    match (now, was) {
        (Some(n), Some(w)) => n < w,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Tries of one lease request when its trial's claim goes to another daemon each time.
const CLAIM_TRIES: usize = 8;

/// What an op's committed writes did besides being durable, as far as its caller cares
/// (docs/fleet.md): leases withdrawn because their trial went to another daemon, claims
/// lost, rows found changed elsewhere (memory follows them now).
#[derive(Debug, Default)]
struct Aftermath {
    withdrawn: Vec<String>,
    lost: Vec<ClaimOn>,
    changed_elsewhere: Vec<EndpointId>,
}

/// One endpoint as the pools hold it right now.
#[derive(Debug, Clone)]
pub struct EndpointNow {
    pub url: ProxyUrl,
    pub pool: String,
    pub health: Health,
}

/// Shared, running pool state.
pub struct Engine {
    pools: Mutex<Pools>,
    writer: Writer,
    /// Something may have become leasable (wakes `wait`ing leases).
    freed: Notify,
    /// Deadlines changed (wakes the timer).
    rescheduled: Notify,
    /// The registry the pools and the writer record into (also when recording is off:
    /// `/metrics` then shows the gauges only).
    metrics: Arc<Metrics>,
    /// A store several daemons share (PostgreSQL): what following them takes.
    fleet: Option<fleet::Fleet>,
    /// The store, for messages: a path, or hosts and database without the password.
    store_name: String,
}

impl Engine {
    /// Load every stored endpoint into memory and start the store thread.
    pub fn open(
        store: Store,
        pools: impl IntoIterator<Item = PoolConfig>,
    ) -> Result<Arc<Engine>, EngineError> {
        Engine::open_with(store, pools, EngineOptions::default())
    }

    /// [`Engine::open`] with options.
    pub fn open_with(
        store: Store,
        pools: impl IntoIterator<Item = PoolConfig>,
        opts: EngineOptions,
    ) -> Result<Arc<Engine>, EngineError> {
        let mut p = Pools::new(pools);
        // Following starts at the change before the rows are read: whatever commits while
        // they load is applied again, never missed.
        let link = store.fleet();
        let follow_from = link.as_ref().map(|l| l.feed_start()).transpose()?;
        let now = Instant::now();
        // In slices: a million stored rows never sit in memory next to the pools built
        // from them (the peak, and the resident size left behind, would nearly double).
        let mut from = EndpointId::MIN;
        loop {
            let rows = store.rows_between(from, EndpointId::MAX, START_SLICE)?;
            let Some(last) = rows.last().map(|r| r.id) else {
                break;
            };
            for r in &rows {
                p.insert_row(r, now);
            }
            match last.checked_add(1) {
                Some(next) => from = next,
                None => break,
            }
        }
        for r in &store.pairs()? {
            p.restore_pair(r, now);
        }
        if link.is_some() {
            p.join_fleet();
        }
        p.log_restored(now);
        let metrics = Arc::new(Metrics::new());
        let commits = opts.record_metrics.then(|| metrics.store_commit());
        if opts.record_metrics {
            // After the rows: pools that exist only because a stored row names them get
            // their series too, still in pool-index order.
            p.attach_metrics(metrics.clone());
        }
        let feed = match (&link, follow_from) {
            (Some(l), Some(from)) if opts.follow => Some(l.feed(from)?),
            _ => None,
        };
        let poke = feed.as_ref().map(|f| f.poke());
        let fleet = link.map(|l| fleet::Fleet::new(l, poke));
        let store_name = store.describe();
        let engine = Arc::new(Engine {
            pools: Mutex::new(p),
            writer: Writer::spawn_timed(store.for_one_thread()?, commits),
            freed: Notify::new(),
            rescheduled: Notify::new(),
            metrics,
            fleet,
            store_name,
        });
        reads::set_gauge_source(&engine);
        if let Some(feed) = feed {
            engine.spawn_follower(feed);
        }
        Ok(engine)
    }

    fn lock(&self) -> MutexGuard<'_, Pools> {
        // A panic while holding the lock leaves consistent-enough state for a pool
        // manager; refusing every later request would be worse.
        self.pools.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wake everyone waiting for an endpoint to become leasable or probeable.
    fn notify_waiters(&self) {
        self.freed.notify_waiters();
    }

    /// Run `f` and then wake waiters: for operations that may free or change endpoints.
    async fn with_notify<T>(
        &self,
        f: impl FnOnce(&mut Pools, Instant, SystemTime) -> (T, Vec<Write>),
    ) -> Result<T, EngineError> {
        let r = self.with(f).await;
        if r.is_ok() {
            self.notify_waiters();
        }
        r
    }

    /// Run `f` on the pools and queue its writes under the lock, then wait for the commit.
    async fn with<T>(
        &self,
        f: impl FnOnce(&mut Pools, Instant, SystemTime) -> (T, Vec<Write>),
    ) -> Result<T, EngineError> {
        Ok(self.run(f).await?.0)
    }

    /// [`Engine::with`], also saying what the commit did besides being durable.
    async fn run<T>(
        &self,
        f: impl FnOnce(&mut Pools, Instant, SystemTime) -> (T, Vec<Write>),
    ) -> Result<(T, Aftermath), EngineError> {
        self.run_as(Commit::Durable, f).await
    }

    /// [`Engine::run`], waiting for the commit as `commit` says.
    async fn run_as<T>(
        &self,
        commit: Commit,
        f: impl FnOnce(&mut Pools, Instant, SystemTime) -> (T, Vec<Write>),
    ) -> Result<(T, Aftermath), EngineError> {
        let rx;
        let out;
        let mut keys = Vec::new();
        // One daemon's claims are its own: writes nobody is answered for need no commit
        // to be waited for. A fleet's claims are won in the store, so they wait.
        let ride = commit != Commit::Durable && self.fleet.is_none();
        let watched = {
            let mut p = self.lock();
            let before = p.next_due();
            let (o, writes) = f(&mut p, Instant::now(), SystemTime::now());
            // Only a deadline that came earlier wakes the timer: one that moved later (a
            // release of the oldest lease, nearly every release) is found when the timer
            // wakes at the old one, instead of costing a wake-up per request.
            if earlier(p.next_due(), before) {
                self.rescheduled.notify_one();
            }
            if let Some(fl) = &self.fleet {
                keys = track::keys(&writes);
                fl.begin(&keys);
            }
            out = o;
            if writes.is_empty() {
                // Nothing to persist (most leases and releases): no round trip to the store.
                return Ok((out, Aftermath::default()));
            }
            if let Some(e) = self.away() {
                // The store is away (docs/fleet.md, "Faults"): nothing is sent to it. What
                // the op did in memory (a lease ended, a failure's cooldown) holds here
                // until the store is back, when these endpoints are read again.
                self.writer.lost(&writes, Arc::new(e));
                if let Some(fl) = &self.fleet {
                    fl.end(&keys, None, &[], &[]);
                }
                return match commit {
                    Commit::Durable => Err(self.unavailable().into()),
                    Commit::Ride | Commit::RideWatched => Ok((out, Aftermath::default())),
                };
            }
            if ride {
                for c in Applied::one_daemon(&writes).claims {
                    if let ClaimResult::Won { on, epoch } = c {
                        p.claim_won(&on, epoch);
                    }
                }
                // Queued in order under the lock: a report that follows commits with these
                // or after them. A failed commit refuses every later write until memory
                // is re-synced (`Writer`), so nothing builds on what was lost.
                rx = self.writer.ride(writes);
                commit == Commit::RideWatched
            } else {
                rx = self.writer.queue(writes);
                false
            }
        };
        if ride {
            if !watched {
                return Ok((out, Aftermath::default()));
            }
            // A waiting lease need not wait for this commit either.
            self.notify_waiters();
            return match rx.await {
                Ok(Ok(_)) => Ok((out, Aftermath::default())),
                Ok(Err(e)) => Err(self.failed(e, None)),
                Err(_) => Err(EngineError::Stopped),
            };
        }
        let committed = rx.await;
        let held = self.ended_in_fleet(&keys, &committed);
        match committed {
            Ok(Ok(applied)) => Ok((out, self.settle(applied, held))),
            Ok(Err(e)) => Err(self.failed(e, held)),
            Err(_) => Err(EngineError::Stopped),
        }
    }

    /// After a commit: claims the store confirmed or gave to another daemon, rows found
    /// changed elsewhere (`held`: the pool lock, if the caller holds it).
    fn settle(&self, applied: Applied, held: Option<MutexGuard<'_, Pools>>) -> Aftermath {
        let mut done = Aftermath::default();
        if applied.claims.is_empty() && applied.fresh.is_empty() {
            return done;
        }
        let now = Instant::now();
        let mut p = held.unwrap_or_else(|| self.lock());
        for c in &applied.claims {
            match c {
                ClaimResult::Won { on, epoch } => p.claim_won(on, *epoch),
                ClaimResult::Lost { on, .. } => {
                    done.withdrawn.extend(p.claim_lost(on, now));
                    done.lost.push(on.clone());
                }
            }
        }
        self.follow_fresh(&mut p, &applied.fresh, track::Read::InOurCommit, now);
        done.changed_elsewhere = applied
            .fresh
            .iter()
            .map(|f| match f {
                crate::store::RowNow::Endpoint(id, _) | crate::store::RowNow::Pair(id, _, _) => *id,
            })
            .collect();
        drop(p);
        self.rescheduled.notify_one();
        self.notify_waiters();
        done
    }

    /// A commit that failed: memory goes back to what the store holds, and the caller
    /// hears why (a stale claim changed nothing; an unreachable store is retried by
    /// whoever asked; `held`: the pool lock, if the caller holds it).
    fn failed(
        &self,
        e: std::sync::Arc<StoreError>,
        held: Option<MutexGuard<'_, Pools>>,
    ) -> EngineError {
        if let StoreError::StaleClaim { what, fresh } = &*e {
            let mut p = held.unwrap_or_else(|| self.lock());
            self.follow_fresh(&mut p, fresh, track::Read::InOurCommit, Instant::now());
            drop(p);
            self.resync();
            return PoolError::StaleClaim(what.clone()).into();
        }
        drop(held);
        if e.is_unavailable() {
            self.store_down(&e);
        }
        self.resync();
        EngineError::Store(e)
    }

    /// After a failed commit: put the endpoints whose writes were lost back to their stored
    /// rows and pairs. The pool lock is held until they are back, so no operation builds on memory
    /// the store never saw; a deadline transition that was lost comes due again at once.
    /// In a fleet the leases stay (they are this daemon's, and nobody else's to end).
    /// Returns whether memory is back in line (else writes stay refused).
    fn resync(&self) -> bool {
        let mut p = self.lock();
        // Blocking under the lock is deliberate and rare (a failing disk).
        let Some(resynced) = self.writer.resynced() else {
            return false;
        };
        let ok = match resynced {
            Ok(rows) => {
                let now = Instant::now();
                // A fleet's pairs held in memory, to drop those the store has no row of.
                let held = match (&self.fleet, rows.is_empty()) {
                    (Some(_), false) => p.pair_keys(),
                    _ => Vec::new(),
                };
                for (id, row, pairs) in &rows {
                    match (&self.fleet, row) {
                        (Some(_), Some(r)) => {
                            p.refresh_row(r, now);
                            for pr in pairs {
                                p.refresh_pair(pr, now);
                            }
                            let stored = |d: &str| pairs.iter().any(|s| s.record.destination == d);
                            for (_, d) in held.iter().filter(|(e, d)| e == id && !stored(d)) {
                                p.forget_pair(*id, d);
                            }
                        }
                        (Some(_), None) => {
                            p.remove_for_good(*id);
                        }
                        (None, _) => p.restore_row(*id, row.as_ref(), pairs, now),
                    }
                }
                if !rows.is_empty() {
                    warn!(
                        endpoints = rows.len(),
                        "re-synced endpoints from the store after a failed commit"
                    );
                }
                true
            }
            Err(e) => {
                error!(error = %e, "cannot re-read endpoints after a failed commit; writes stay refused");
                false
            }
        };
        drop(p);
        self.rescheduled.notify_one();
        self.notify_waiters();
        ok
    }

    /// Expire leases and end cooldowns on time, whether or not anyone calls.
    pub async fn run_timer(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let due = self.lock().next_due();
            let sleep = async {
                match due {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                _ = self.rescheduled.notified() => continue,
                _ = sleep => {}
            }
            let advanced = self
                .run_as(Commit::RideWatched, |p, now, _| ((), p.advance(now)))
                .await;
            match advanced {
                Ok(_) => self.notify_waiters(),
                Err(e) => {
                    warn!(error = %e, "could not persist deadline transitions; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// The store thread (tests reach the store through it).
    #[cfg(test)]
    pub(crate) fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Whether the database file is still the one opened.
    pub async fn check_store_file(&self) -> Result<(), EngineError> {
        Ok(self.writer.call(|s| s.check_file()).await??)
    }

    /// How full the store's commits have been so far (the benchmarks print it).
    pub fn commit_sizes(&self) -> CommitCounts {
        self.writer.commit_sizes()
    }

    /// Wait until every queued write is committed.
    pub async fn flush(&self) -> Result<(), EngineError> {
        self.writer.call(|_| ()).await
    }
}

/// What a caller of [`Engine::run_as`] waits for before it goes on (docs/leases.md,
/// "Durability").
#[derive(Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// Its writes are durable: a report, an operator's action, anything acknowledged.
    Durable,
    /// Nothing: the writes are nobody's acknowledgment (a trial's claim; after a restart
    /// the attempt is admitted again) and ride in the next commit.
    Ride,
    /// The commit its writes ride in, to hear of a failure (the timer retries); waiters
    /// are woken once the writes are queued.
    RideWatched,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_deadline_that_came_earlier_wakes_the_timer() {
        let t = Instant::now();
        let later = t + Duration::from_secs(1);
        for (now, was, wake) in [
            (Some(t), Some(later), true),
            (Some(t), None, true),
            (Some(later), Some(t), false),
            (Some(t), Some(t), false),
            (None, Some(t), false),
            (None, None, false),
        ] {
            assert_eq!(earlier(now, was), wake, "{now:?} after {was:?}");
        }
    }
}
