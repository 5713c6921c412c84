//! The running pool: `Pools` behind a mutex, with a group-committing store writer.
//!
//! Writes are queued while the pool lock is held, so the event log keeps the order in
//! which things happened; callers are answered only after their writes committed.

mod changes;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use super::destinations::PairHealth;
use super::{Grant, Outcome, PoolError, PoolStatus, Pools, ProbeRole, ReportOn, Reported, Want};
use crate::config::{Config, PoolConfig};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::health::{Health, Input, State, Step};
use crate::metrics::Metrics;
use crate::store::{
    EndpointRow, EventRow, NewEndpoint, OnExisting, ResolveError, SourceRow, Store, StoreError,
    ToInsert, Write,
};

mod reads;
pub use reads::EngineOptions;
mod writer;
pub use writer::{Committed, Writer};

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

async fn committed(rx: oneshot::Receiver<Committed>) -> Result<(), EngineError> {
    match rx.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(EngineError::Store(e)),
        Err(_) => Err(EngineError::Stopped),
    }
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
        let (now, wall) = (Instant::now(), SystemTime::now());
        // In slices: a million stored rows never sit in memory next to the pools built
        // from them (the peak, and the resident size left behind, would nearly double).
        let mut from = EndpointId::MIN;
        loop {
            let rows = store.rows_between(from, EndpointId::MAX, START_SLICE)?;
            let Some(last) = rows.last().map(|r| r.id) else {
                break;
            };
            for r in &rows {
                p.insert_row(r, now, wall);
            }
            match last.checked_add(1) {
                Some(next) => from = next,
                None => break,
            }
        }
        for r in &store.pairs()? {
            p.restore_pair(r, now, wall);
        }
        p.log_restored(now);
        let metrics = Arc::new(Metrics::new());
        let commits = opts.record_metrics.then(|| metrics.store_commit());
        if opts.record_metrics {
            // After the rows: pools that exist only because a stored row names them get
            // their series too, still in pool-index order.
            p.attach_metrics(metrics.clone());
        }
        let engine = Arc::new(Engine {
            pools: Mutex::new(p),
            writer: Writer::spawn_timed(store, commits),
            freed: Notify::new(),
            rescheduled: Notify::new(),
            metrics,
        });
        reads::set_gauge_source(&engine);
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
        let rx;
        let out;
        {
            let mut p = self.lock();
            let before = p.next_due();
            let (o, writes) = f(&mut p, Instant::now(), SystemTime::now());
            // Only a deadline that came earlier wakes the timer: one that moved later (a
            // release of the oldest lease, nearly every release) is found when the timer
            // wakes at the old one, instead of costing a wake-up per request.
            if earlier(p.next_due(), before) {
                self.rescheduled.notify_one();
            }
            // Nothing to persist (most leases and releases): no round trip to the store.
            rx = (!writes.is_empty()).then(|| self.writer.queue(writes));
            out = o;
        }
        if let Some(rx) = rx {
            if let Err(e) = committed(rx).await {
                if matches!(e, EngineError::Store(_)) {
                    self.resync();
                }
                return Err(e);
            }
        }
        Ok(out)
    }

    /// After a failed commit: put the endpoints whose writes were lost back to their stored
    /// rows and pairs. The pool lock is held until they are back, so no operation builds on memory
    /// the store never saw; a deadline transition that was lost comes due again at once.
    fn resync(&self) {
        let mut p = self.lock();
        // Blocking under the lock is deliberate and rare (a failing disk).
        let Some(resynced) = self.writer.resynced() else {
            return;
        };
        match resynced {
            Ok(rows) => {
                let (now, wall) = (Instant::now(), SystemTime::now());
                for (id, row, pairs) in &rows {
                    p.restore_row(*id, row.as_ref(), pairs, now, wall);
                }
                if !rows.is_empty() {
                    warn!(
                        endpoints = rows.len(),
                        "re-synced endpoints from the store after a failed commit"
                    );
                }
            }
            Err(e) => {
                error!(error = %e, "cannot re-read endpoints after a failed commit; writes stay refused")
            }
        }
        drop(p);
        self.rescheduled.notify_one();
        self.notify_waiters();
    }

    /// Lease an endpoint, waiting up to `wait` for one to become available.
    pub async fn lease(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
    ) -> Result<Grant, EngineError> {
        self.lease_with(pool, ttl, session, wait, &Want::default())
            .await
    }

    /// Lease an endpoint that fits `want` (destination, schemes, tags), waiting up to
    /// `wait` (docs/selection.md): a paced lease waits at least the pool's `[pool.pace]
    /// wait`. A pool with a `fallback` that has nothing (empty or exhausted at once, or
    /// paced past its wait) is served from that pool instead: one hop, the grant names the
    /// pool.
    pub async fn lease_with(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
        want: &Want,
    ) -> Result<Grant, EngineError> {
        self.lease_waiting(pool, ttl, session, wait, want, None)
            .await
            .map(|(g, _)| g)
    }

    /// [`Engine::lease_with`] for a caller that may go away while it waits: once `gone`
    /// is cancelled the wait ends with [`EngineError::CallerGone`] and nothing is granted;
    /// a grant from the wait that races it is given back at once. A lease whose answer
    /// cannot be delivered is never left behind (nobody could release it). One granted
    /// without waiting is answered whatever `gone` says: a client that only shut down its
    /// sending side still reads it.
    pub async fn lease_while_there(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
        want: &Want,
        gone: &CancellationToken,
    ) -> Result<Grant, EngineError> {
        let (g, waited) = self
            .lease_waiting(pool, ttl, session, wait, want, Some(gone))
            .await?;
        if waited && gone.is_cancelled() {
            self.release(&g.lease).await?;
            return Err(EngineError::CallerGone);
        }
        Ok(g)
    }

    /// The pool's lease, then its fallback's when it has nothing (one hop).
    async fn lease_waiting(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
        want: &Want,
        gone: Option<&CancellationToken>,
    ) -> Result<(Grant, bool), EngineError> {
        let fallback = self.lock().fallback(pool);
        let first = self
            .lease_in(pool, ttl, session, wait, want, gone, fallback.is_some())
            .await;
        let Some(next) = fallback else {
            return first;
        };
        let e = match first {
            Err(EngineError::Pool(
                e @ (PoolError::Exhausted { .. }
                | PoolError::Empty { .. }
                | PoolError::Paced { .. }),
            )) => e,
            r => return r,
        };
        match self
            .lease_in(&next, ttl, session, wait, want, gone, false)
            .await
        {
            // The fallback has nothing either: the first pool's answer says more (its
            // pacing's time to come back, its cooldowns).
            Err(EngineError::Pool(
                PoolError::Exhausted { .. } | PoolError::Empty { .. } | PoolError::Paced { .. },
            )) => Err(e.into()),
            r => r,
        }
    }

    /// One pool's lease, waiting as `lease_with` says; `eager`: an exhausted pool answers
    /// at once (a fallback is there to serve). Returns whether it waited.
    #[allow(clippy::too_many_arguments)]
    async fn lease_in(
        &self,
        pool: &str,
        ttl: Duration,
        session: Option<&str>,
        wait: Duration,
        want: &Want,
        gone: Option<&CancellationToken>,
        eager: bool,
    ) -> Result<(Grant, bool), EngineError> {
        let started = Instant::now();
        // Each attempt says whether it is the request's last (and until when the request
        // may wait): only that one is counted, and the loop below gives up on the same
        // decision.
        let attempt = || {
            self.with(|p, now, wall| {
                let (r, w) = p.lease_with(pool, ttl, session, want, now, wall);
                let limit = match &r {
                    Err(PoolError::Paced { wait: paced, .. }) => wait.max(*paced),
                    Err(PoolError::Exhausted { .. }) if eager => Duration::ZERO,
                    _ => wait,
                };
                let give_up = started
                    .checked_add(limit)
                    .unwrap_or_else(|| started + crate::limits::MAX_DURATION);
                let last = limit.is_zero() || now >= give_up;
                p.observe_lease(pool, &r, now - started, last);
                ((r, last, give_up), w)
            })
        };
        // The common case answers at once, without registering as a waiter.
        match attempt().await? {
            (Err(PoolError::Exhausted { .. } | PoolError::Paced { .. }), false, _) => {}
            (r, _, _) => return Ok((r?, false)),
        }
        let gone = async {
            match gone {
                Some(g) => g.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(gone);
        loop {
            // Registered before the attempt, so a release in between is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match attempt().await? {
                (Ok(g), _, _) => return Ok((g, true)),
                (
                    Err(
                        PoolError::Exhausted { retry_after, .. }
                        | PoolError::Paced { retry_after, .. },
                    ),
                    false,
                    give_up,
                ) => {
                    // Woken by a release (an endpoint or a pair's in_flight freed), or at
                    // the soonest time something is ready again.
                    let mut until = give_up;
                    if let Some(d) = retry_after {
                        until = until.min(Instant::now() + d);
                    }
                    tokio::select! {
                        _ = &mut freed => {}
                        _ = tokio::time::sleep_until(until) => {}
                        _ = &mut gone => return Err(EngineError::CallerGone),
                    }
                }
                (Err(e), _, _) => return Err(e.into()),
            }
        }
    }

    /// Release a lease.
    pub async fn release(&self, lease: &str) -> Result<(), EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.release(lease, now, wall))
            .await?;
        Ok(r?)
    }

    /// Report a lease's outcome; returns the endpoint's state.
    pub async fn report(&self, lease: &str, outcome: Outcome) -> Result<State, EngineError> {
        let r = self.report_on(lease, outcome, &ReportOn::default()).await?;
        Ok(r.state)
    }

    /// Report a lease's outcome with what the report says besides it (where the use went;
    /// its duration). Returns the endpoint's state and whom a failure counted against.
    pub async fn report_on(
        &self,
        lease: &str,
        outcome: Outcome,
        on: &ReportOn,
    ) -> Result<Reported, EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.report_with(lease, outcome, on, now, wall))
            .await?;
        Ok(r?)
    }

    /// A tunnel opened through the lease's endpoint to its target: the endpoint and the
    /// target's reachability are proven, a ban inside is not (docs/blame.md). The lease
    /// goes on.
    pub async fn reached(&self, lease: &str) -> Result<State, EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.reached(lease, now, wall))
            .await?;
        Ok(r?)
    }

    /// When `target` of `pool` is down (docs/blame.md): the time until its trial.
    pub fn target_down(&self, pool: &str, target: &str) -> Option<Duration> {
        self.lock().target_down(pool, target, Instant::now())
    }

    /// Report on the endpoint bound to a sticky session; a failure unbinds it.
    pub async fn report_session(
        &self,
        pool: &str,
        session: &str,
        outcome: Outcome,
        on: &ReportOn,
    ) -> Result<Reported, EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.report_session(pool, session, outcome, on, now, wall))
            .await?;
        Ok(r?)
    }

    /// Clear one (endpoint, destination) pair; returns the pair's state (`available`).
    pub async fn enable_pair(
        &self,
        id: EndpointId,
        destination: &str,
    ) -> Result<State, EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.enable_pair(id, destination, now, wall))
            .await?;
        Ok(r?)
    }

    /// The endpoint's non-available pairs.
    pub fn pairs_of(&self, id: EndpointId) -> Vec<PairHealth> {
        self.lock().pairs_of(id)
    }

    /// The destinations of a pool with the most banned pairs, at most `n`.
    pub fn most_banned(&self, pool: &str, n: usize) -> Vec<(String, usize)> {
        self.lock().most_banned(pool, n)
    }

    /// Each endpoint's state for a normalised destination (`None`: not held).
    pub fn states_for(&self, ids: &[EndpointId], destination: &str) -> Vec<Option<State>> {
        let p = self.lock();
        ids.iter().map(|&id| p.state_for(id, destination)).collect()
    }

    /// Active pair bans of a pool.
    pub fn pair_bans(&self, pool: &str) -> usize {
        self.lock().pair_bans(pool)
    }

    /// Apply an operator or source input to an endpoint.
    pub async fn input(
        &self,
        id: EndpointId,
        input: Input,
        kind: Option<EventKind>,
        detail: Option<String>,
    ) -> Result<(Step, State), EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.input(id, input, kind, detail, now, wall))
            .await?;
        Ok(r?)
    }

    /// Claim the next recovery attempt of a pool (prober).
    pub async fn claim_next(
        &self,
        pool: &str,
    ) -> Result<Option<(EndpointId, ProxyUrl)>, EngineError> {
        self.with(|p, now, wall| p.claim_next(pool, now, wall))
            .await
    }

    /// Persist writes that are not transitions (pool-level events), in order.
    pub async fn record(&self, writes: Vec<Write>) -> Result<(), EngineError> {
        self.with(|_, _, _| ((), writes)).await
    }

    /// Admit a probe of `id`: refused, with the time until its trial, while the pool's
    /// probe target is down; the one probe admitted then is the target's trial.
    pub fn probe_admit(&self, id: EndpointId) -> Result<(), Duration> {
        self.lock().probe_admit(id, Instant::now())
    }

    /// When the pool's probe target is down: the time until its trial.
    pub fn probe_target_down(&self, pool: &str) -> Option<Duration> {
        self.lock().probe_target_down(pool, Instant::now())
    }

    /// A probe admitted by `probe_admit` did not run: give back the probe target's trial
    /// if it was that.
    pub fn probe_cancel(&self, id: EndpointId) {
        let mut p = self.lock();
        if let Some(pool) = p.pool_index_of(id) {
            p.end_probe_trial(pool, id, Instant::now());
        }
    }

    /// Try to take one endpoint's single recovery attempt.
    pub async fn try_claim(&self, id: EndpointId) -> Result<bool, EngineError> {
        self.with(|p, now, wall| p.try_claim(id, now, wall)).await
    }

    /// Resolves on the next change that may make an endpoint leasable or probeable.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    /// Record a probe result.
    pub async fn probe_result(
        &self,
        id: EndpointId,
        outcome: Outcome,
        trial: bool,
        detail: Option<String>,
    ) -> Result<State, EngineError> {
        let role = if trial {
            ProbeRole::Trial
        } else {
            ProbeRole::Check
        };
        self.probe_result_as(id, outcome, role, detail).await
    }

    /// Record a probe result, by who ran it.
    pub async fn probe_result_as(
        &self,
        id: EndpointId,
        outcome: Outcome,
        role: ProbeRole,
        detail: Option<String>,
    ) -> Result<State, EngineError> {
        let r = self
            .with_notify(|p, now, wall| p.probe_result_as(id, outcome, role, detail, now, wall))
            .await?;
        Ok(r?)
    }

    /// Hand a claimed probe attempt back without an outcome.
    pub async fn abandon(&self, id: EndpointId, why: &str) -> Result<(), EngineError> {
        self.input(
            id,
            Input::Abandon,
            Some(EventKind::TrialAbandoned),
            Some(why.to_string()),
        )
        .await
        .map(|_| ())
    }

    /// Add endpoints (all or nothing) to the store and the pools.
    pub async fn add(&self, eps: Vec<NewEndpoint>) -> Result<Vec<EndpointId>, EngineError> {
        let ids = self.writer.call(move |s| s.add_endpoints(&eps)).await??;
        self.load_added(&ids).await;
        Ok(ids)
    }

    /// Add endpoints as `eps` yields them, all or nothing: an import of millions. The
    /// iterator runs on the store thread inside the one transaction (nothing per endpoint
    /// is held but its id); the first error, its own or the store's, rolls everything back.
    /// With `OnExisting::Skip`, endpoints already stored are passed over and counted.
    pub async fn add_from<E, T>(
        &self,
        eps: impl Iterator<Item = Result<T, E>> + Send + 'static,
        on_existing: OnExisting,
    ) -> Result<(Vec<EndpointId>, u64), E>
    where
        E: From<StoreError> + From<EngineError> + Send + 'static,
        T: ToInsert + Send + 'static,
    {
        let (ids, skipped) = self
            .writer
            .call(move |s| {
                let mut ids = Vec::new();
                s.add_endpoints_from(eps, on_existing, |id| ids.push(id))
                    .map(|skipped| (ids, skipped))
            })
            .await??;
        self.load_added(&ids).await;
        Ok((ids, skipped))
    }

    /// Load committed rows into the pools: read back from the store and inserted under
    /// the pool lock in slices, each slice its own call on the store thread and its own
    /// hold of the lock, so neither reports nor leases wait behind a million-row import.
    /// Ids of one batch are consecutive; a row edited meanwhile is read as edited, and
    /// one removed meanwhile stays out (see `Pools::insert_row`).
    ///
    /// The rows are committed: the add has happened whatever this read does, so it never
    /// fails the add. A slice that cannot be read is tried again with a growing pause;
    /// after that the rest stays out of the pools until the next start, said in the log.
    async fn load_added(&self, ids: &[EndpointId]) {
        let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
            return;
        };
        let mut from = first;
        while from <= last {
            let mut pause = std::time::Duration::from_millis(50);
            let rows = loop {
                let read = self
                    .writer
                    .call(move |s| s.rows_between(from, last, LOAD_SLICE))
                    .await;
                // A stopped store thread will not come back: no point trying again.
                let again =
                    matches!(read, Ok(Err(_))) && pause <= std::time::Duration::from_secs(2);
                match read.and_then(|r| r.map_err(EngineError::from)) {
                    Ok(rows) => break rows,
                    Err(e) if again => {
                        tracing::warn!(from, last, error = %e, "reading added endpoints back failed; trying again");
                    }
                    Err(e) => {
                        tracing::error!(from, last, error = %e,
                            "added endpoints are stored but could not be loaded; they are leasable after a restart");
                        return;
                    }
                }
                tokio::time::sleep(pause).await;
                pause *= 2;
            };
            let Some(end) = rows.last().map(|r| r.id) else {
                break;
            };
            {
                let mut p = self.lock();
                let (now, wall) = (Instant::now(), SystemTime::now());
                for r in &rows {
                    p.insert_row(r, now, wall);
                }
            }
            // Dropped outside the lock.
            drop(rows);
            // A lease waiting on an empty pool need not wait for the last slice.
            self.notify_waiters();
            from = end + 1;
            if from <= last {
                tokio::task::yield_now().await;
            }
        }
        self.rescheduled.notify_one();
    }

    /// Insert missing endpoints (config sync, sources); returns (id, added).
    pub async fn ensure(
        &self,
        eps: Vec<NewEndpoint>,
    ) -> Result<Vec<(EndpointId, bool)>, EngineError> {
        let (res, rows) = self
            .writer
            .call(move |s| -> Result<_, StoreError> {
                let res = s.ensure_endpoints(&eps)?;
                let mut rows = Vec::new();
                for (id, _) in &res {
                    rows.extend(s.get(*id)?);
                }
                Ok((res, rows))
            })
            .await??;
        {
            let mut p = self.lock();
            let (now, wall) = (Instant::now(), SystemTime::now());
            for (r, (_, added)) in rows.iter().zip(&res) {
                if *added || p.health(r.id).is_none() {
                    p.insert_row(r, now, wall);
                } else {
                    p.update_url(r.id, r.url.clone());
                }
            }
        }
        self.notify_waiters();
        Ok(res)
    }

    /// Delete endpoints (all or nothing). Memory and the queued delete change under one
    /// lock, so no transition of a removed endpoint can be queued after its delete.
    pub async fn remove(&self, ids: Vec<EndpointId>) -> Result<(), EngineError> {
        self.with(|p, _, _| {
            for id in &ids {
                p.remove_for_good(*id);
            }
            ((), vec![Write::Remove(ids.clone())])
        })
        .await
    }

    /// Counts by state.
    pub fn status(&self, pool: Option<&str>) -> Result<Vec<PoolStatus>, EngineError> {
        Ok(self.lock().status(pool, Instant::now())?)
    }

    /// The endpoint's URL, pool and health, read together.
    pub fn endpoint(&self, id: EndpointId) -> Option<EndpointNow> {
        let p = self.lock();
        Some(EndpointNow {
            url: p.url(id)?.clone(),
            pool: p.pool_of(id)?.to_string(),
            health: p.health(id)?.clone(),
        })
    }

    pub fn health(&self, id: EndpointId) -> Option<Health> {
        self.lock().health(id).cloned()
    }

    pub fn url(&self, id: EndpointId) -> Option<ProxyUrl> {
        self.lock().url(id).cloned()
    }

    pub fn pool_of(&self, id: EndpointId) -> Option<String> {
        self.lock().pool_of(id).map(str::to_string)
    }

    /// Whether the pool is configured (known to the engine).
    pub fn has_pool(&self, pool: &str) -> bool {
        self.lock().pool_config(pool).is_some()
    }

    /// Every endpoint id, of one pool or all.
    pub fn ids(&self, pool: Option<&str>) -> Vec<EndpointId> {
        self.lock().ids(pool)
    }

    /// Ids of the pool's available endpoints (periodic checks).
    pub fn available_ids(&self, pool: &str) -> Vec<EndpointId> {
        self.lock().available_ids(pool)
    }

    /// Nothing in the pool can be leased now.
    pub fn exhausted(&self, pool: &str) -> bool {
        self.lock().exhausted(pool)
    }

    /// Endpoints held in memory.
    pub fn endpoint_count(&self) -> usize {
        self.lock().len()
    }

    /// Stored endpoint rows, in id order (runs after the writes queued before it).
    pub async fn rows(
        &self,
        pool: Option<String>,
        state: Option<State>,
    ) -> Result<Vec<EndpointRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.list(pool.as_deref(), state))
            .await??)
    }

    /// One stored endpoint row.
    pub async fn row(&self, id: EndpointId) -> Result<Option<EndpointRow>, EngineError> {
        Ok(self.writer.call(move |s| s.get(id)).await??)
    }

    /// The stored endpoint an operator's `ID|URL` names (of `pool`, when given).
    pub async fn resolve(
        &self,
        arg: String,
        pool: Option<String>,
    ) -> Result<EndpointId, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.resolve(&arg, pool.as_deref()).map(|r| r.id))
            .await??)
    }

    /// Stored events after event id `after`, oldest first.
    pub async fn events(
        &self,
        endpoint: Option<EndpointId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.events(endpoint, after, limit))
            .await??)
    }

    /// Each source's last sniff result.
    pub async fn sources(&self, pool: Option<String>) -> Result<Vec<SourceRow>, EngineError> {
        Ok(self
            .writer
            .call(move |s| s.sources(pool.as_deref()))
            .await??)
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
            match self.with(|p, now, wall| ((), p.advance(now, wall))).await {
                Ok(()) => self.notify_waiters(),
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

    /// Wait until every queued write is committed.
    pub async fn flush(&self) -> Result<(), EngineError> {
        self.writer.call(|_| ()).await
    }
}

/// Make the endpoints declared in the config exist in the store (never removes any).
pub fn sync_config_endpoints(store: &mut Store, cfg: &Config) -> Result<usize, StoreError> {
    let eps: Vec<NewEndpoint> = cfg
        .endpoints
        .iter()
        .map(|d| NewEndpoint {
            url: d.url.clone(),
            pool: d.pool.clone(),
            label: d.label.clone(),
            source: Some("config".into()),
            state: initial_state(cfg.pool(&d.pool)),
            tags: d.tags.clone(),
        })
        .collect();
    Ok(store
        .ensure_endpoints(&eps)?
        .iter()
        .filter(|(_, added)| *added)
        .count())
}

/// The state a new endpoint starts in, by pool mode (docs/reference.md, "Pools and modes").
pub fn initial_state(pool: Option<&PoolConfig>) -> State {
    match pool.map(|p| p.mode.prober_recovers()) {
        Some(true) => State::ProbeAllowed,
        _ => State::Available,
    }
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
