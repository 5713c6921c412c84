//! The engine in a fleet (docs/fleet.md): following what other daemons and CLI commands
//! commit, keeping this daemon's claims from lapsing, and going on from memory while the
//! database is away.
//!
//! A follower thread reads the change feed (woken by the database's notification, or by
//! its poll when one is lost) and applies each row to the pools. A row this daemon is
//! writing right now waits: applying it would undo what memory already holds and the
//! write has not told yet (`Track`); it is read again once the write is answered. A row
//! read as of a change older than this daemon's own last write of it is its echo, or news
//! that the write has overtaken, and is not applied.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::oneshot::error::RecvError;
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::track::{not_written, Key, Read, Track};
use super::{Engine, EngineError};
use crate::endpoint::EndpointId;
use crate::store::{Changes, Feed, FleetLink, RowNow, StoreError};

/// How long the follower waits for a notification before it looks anyway.
const POLL: Duration = Duration::from_millis(250);

/// Reconnecting backs off from this to `BACKOFF_MAX`.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What the engine keeps for its fleet.
pub(super) struct Fleet {
    pub(super) link: FleetLink,
    track: Mutex<Track>,
    up: AtomicBool,
    /// This daemon in the fleet's registry.
    pub(super) registry: super::registry::Registry,
    /// Wakes the follower (`Feed::poke`; none when this engine does not follow).
    poke: Option<Arc<tokio::sync::Notify>>,
}

impl Fleet {
    pub(super) fn new(link: FleetLink, poke: Option<Arc<tokio::sync::Notify>>) -> Fleet {
        Fleet {
            link,
            track: Mutex::new(Track::default()),
            up: AtomicBool::new(true),
            registry: super::registry::Registry::new(),
            poke,
        }
    }

    fn track(&self) -> std::sync::MutexGuard<'_, Track> {
        self.track.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes of `keys` are on their way to the store.
    pub(super) fn begin(&self, keys: &[Key]) {
        self.track().begin(keys);
    }

    /// They were answered; committed as change `seq` when it is given. The rows in
    /// `unseen` carry a change memory has not read: read them again.
    pub(super) fn end(&self, keys: &[Key], seq: Option<i64>, not_written: &[Key], unseen: &[Key]) {
        let mut t = self.track();
        let waited = t.end(keys, seq, not_written);
        t.read_again(unseen);
        drop(t);
        if waited || !unseen.is_empty() {
            self.wake();
        }
    }

    /// Rows are to be read again: read them at the follower's next read (10 ms after its
    /// last at the soonest, at its pace in a stream), not at the next notification or
    /// poll.
    fn wake(&self) {
        if let Some(p) = &self.poke {
            p.notify_one();
        }
    }
}

impl Engine {
    /// A fleet's database as `status` says it: `up` or `unavailable` (None on SQLite).
    pub fn store_state(&self) -> Option<&'static str> {
        self.fleet.as_ref()?;
        Some(if self.store_up() { "up" } else { "unavailable" })
    }

    /// Whether the store answers (always, for SQLite).
    pub fn store_up(&self) -> bool {
        self.fleet
            .as_ref()
            .is_none_or(|f| f.up.load(Ordering::Relaxed))
    }

    /// Refuse, before anything changes, an op that must write while the store is away
    /// (docs/fleet.md, "Faults").
    pub(super) fn writable(&self) -> Result<(), EngineError> {
        match self.away() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Why writes are not sent now: the store is away (None: they are).
    pub(super) fn away(&self) -> Option<StoreError> {
        let f = self.fleet.as_ref()?;
        (!f.up.load(Ordering::Relaxed)).then(|| self.unavailable())
    }

    /// The store is away, as its callers hear it.
    pub(super) fn unavailable(&self) -> StoreError {
        StoreError::Unavailable {
            target: self
                .fleet
                .as_ref()
                .map(|f| f.link.describe())
                .unwrap_or_else(|| self.store_name.clone()),
            why: "not reachable; reconnecting".into(),
        }
    }

    /// The store could not be reached: leases go on from memory, nothing persisted comes
    /// due, writes are refused until it is back.
    pub(super) fn store_down(&self, e: &StoreError) {
        let Some(f) = &self.fleet else {
            return;
        };
        if f.up.swap(false, Ordering::Relaxed) {
            error!(error = %e, "store unavailable: leases go on from memory, writes are refused until it is back");
        }
        self.metrics.set_store_up(false);
        self.lock().set_frozen(true);
    }

    /// The store answers again: put memory back in line with what could not be written,
    /// then let deadlines and trials run again.
    fn store_back(&self) -> bool {
        let Some(f) = &self.fleet else {
            return true;
        };
        if f.up.load(Ordering::Relaxed) {
            return true;
        }
        if !self.resync() {
            return false;
        }
        f.up.store(true, Ordering::Relaxed);
        self.metrics.set_store_up(true);
        self.lock().set_frozen(false);
        info!(database = %f.link.describe(), "store reachable again");
        self.rescheduled.notify_one();
        self.notify_waiters();
        true
    }

    /// A write of `keys` was answered (`committed`): the follower may apply them again.
    /// If the commit found rows changed elsewhere, or wrote rows over changes memory may
    /// not have read, the pool lock is taken first and handed back, so that they are
    /// applied (or marked to be read again) under the same hold as the write's end and
    /// the follower cannot apply another row of them in between.
    pub(super) fn ended_in_fleet(
        &self,
        keys: &[Key],
        committed: &Result<super::Committed, RecvError>,
    ) -> Option<MutexGuard<'_, super::Pools>> {
        let f = self.fleet.as_ref().filter(|_| !keys.is_empty())?;
        let (seq, not_written, news) = match committed {
            Ok(Ok(a)) => {
                let news = !a.claims.is_empty() || !a.fresh.is_empty() || !a.before.is_empty();
                (Some(a.seq), not_written(a), news)
            }
            Ok(Err(e)) => (
                None,
                Vec::new(),
                matches!(**e, StoreError::StaleClaim { .. }),
            ),
            Err(_) => (None, Vec::new(), false),
        };
        let mut held = news.then(|| self.lock());
        let unseen: Vec<Key> = match (committed, held.as_mut()) {
            (Ok(Ok(a)), Some(p)) => a
                .before
                .iter()
                .filter(|&&(id, before)| !p.wrote_over(id, before, a.seq))
                .map(|&(id, _)| Key::Endpoint(id))
                .collect(),
            _ => Vec::new(),
        };
        f.end(keys, seq, &not_written, &unseen);
        held
    }

    /// Rows as the store holds them now, read right after a write of ours found them
    /// changed: memory follows, unless another write of ours to them is on its way.
    pub(super) fn follow_fresh(
        &self,
        p: &mut super::Pools,
        fresh: &[RowNow],
        read: Read,
        now: Instant,
    ) {
        let Some(f) = &self.fleet else {
            return;
        };
        let mut t = f.track();
        for fr in fresh {
            match fr {
                RowNow::Endpoint(id, row) => {
                    if !t.may_apply(&Key::Endpoint(*id), read) {
                        continue;
                    }
                    match row {
                        Some(r) => p.refresh_row(r, now),
                        None => {
                            p.remove_for_good(*id);
                        }
                    }
                }
                RowNow::Pair(id, d, row) => {
                    if !t.may_apply(&Key::Pair(*id, d.clone()), read) {
                        continue;
                    }
                    match row {
                        Some(r) => p.refresh_pair(r, now),
                        None => p.forget_pair(*id, d),
                    }
                }
            }
        }
    }

    /// Apply what the feed read.
    fn follow(&self, ch: &Changes) {
        let Some(f) = &self.fleet else {
            return;
        };
        let now = Instant::now();
        let mut p = self.lock();
        let mut t = f.track();
        if ch.reload {
            let keep: HashSet<EndpointId> = ch.endpoints.iter().map(|r| r.id).collect();
            for id in p.ids(None) {
                if !keep.contains(&id) {
                    p.remove_for_good(id);
                }
            }
            let pairs: HashSet<(EndpointId, &str)> = ch
                .pairs
                .iter()
                .map(|r| (r.record.endpoint, r.record.destination.as_str()))
                .collect();
            for (id, d) in p.pair_keys() {
                if !pairs.contains(&(id, d.as_str())) {
                    p.forget_pair(id, &d);
                }
            }
        }
        p.rows_joining(|p| {
            for r in &ch.endpoints {
                if t.may_apply(&Key::Endpoint(r.id), Read::Feed(r.rev)) {
                    p.refresh_row(r, now);
                }
            }
        });
        for r in &ch.pairs {
            let k = Key::Pair(r.record.endpoint, r.record.destination.clone());
            if t.may_apply(&k, Read::Feed(r.rev)) {
                p.refresh_pair(r, now);
            }
        }
        for (rev, id, d) in &ch.removed {
            match d {
                // Ids are never reused: a removal always wins.
                None => {
                    p.remove_for_good(*id);
                }
                Some(d) => {
                    let k = Key::Pair(*id, d.clone());
                    if t.may_apply(&k, Read::Feed(*rev)) {
                        p.forget_pair(*id, d);
                    }
                }
            }
        }
        t.listed(&ch.seqs);
        drop(t);
        drop(p);
        if !ch.endpoints.is_empty() || !ch.pairs.is_empty() || !ch.removed.is_empty() {
            self.rescheduled.notify_one();
            self.notify_waiters();
        }
    }

    /// Rows that waited for a write of ours: read them again.
    fn deferred(&self, feed: &Feed) -> Result<(), StoreError> {
        let Some(f) = &self.fleet else {
            return Ok(());
        };
        let keys = f.track().take_deferred();
        if keys.is_empty() {
            return Ok(());
        }
        let ids: Vec<EndpointId> = keys
            .iter()
            .filter_map(|k| match k {
                Key::Endpoint(id) => Some(*id),
                Key::Pair(..) => None,
            })
            .collect();
        let pairs: Vec<(EndpointId, String)> = keys
            .iter()
            .filter_map(|k| match k {
                Key::Pair(id, d) => Some((*id, d.clone())),
                Key::Endpoint(_) => None,
            })
            .collect();
        let fresh = feed.rows_now(&ids, &pairs)?;
        let mut p = self.lock();
        self.follow_fresh(&mut p, &fresh, Read::Again, Instant::now());
        let again = f.track().reread();
        drop(p);
        if again {
            f.wake();
        }
        self.rescheduled.notify_one();
        self.notify_waiters();
        Ok(())
    }

    /// Keep this daemon's claims from lapsing: each holds `claim_hold` more, or until its
    /// lease ends if that is sooner.
    fn renew(&self, feed: &Feed) -> Result<(), StoreError> {
        let Some(f) = &self.fleet else {
            return Ok(());
        };
        let hold = f.link.claim_hold();
        let claims: Vec<_> = self
            .lock()
            .claims_held(Instant::now())
            .into_iter()
            .map(|(on, epoch, left)| (on, epoch, left.min(hold)))
            .collect();
        feed.renew(&claims).map(|_| ())
    }

    /// Follow the fleet on a thread of its own until the engine is dropped.
    pub(super) fn spawn_follower(self: &Arc<Self>, mut feed: Feed) {
        let weak: Weak<Engine> = Arc::downgrade(self);
        let every = self
            .fleet
            .as_ref()
            .map_or(Duration::from_secs(5), |f| f.link.claim_hold() / 3);
        let spawned = std::thread::Builder::new()
            .name("proxypool-follow".into())
            .spawn(move || {
                let mut backoff = BACKOFF_MIN;
                let mut renewed = std::time::Instant::now();
                let mut more = false;
                loop {
                    if weak.strong_count() == 0 {
                        return;
                    }
                    let read = feed.next(if more { Duration::ZERO } else { POLL });
                    let Some(engine) = weak.upgrade() else {
                        return;
                    };
                    let step = read.and_then(|ch| {
                        more = ch.more;
                        if !engine.store_back() {
                            return Err(StoreError::Unavailable {
                                target: feed_target(&engine),
                                why: "writes that failed could not be read back yet".into(),
                            });
                        }
                        engine.follow(&ch);
                        engine.deferred(&feed)?;
                        if renewed.elapsed() >= every {
                            engine.renew(&feed)?;
                            renewed = std::time::Instant::now();
                        }
                        engine.beat_if_due()
                    });
                    match step {
                        Ok(()) => backoff = BACKOFF_MIN,
                        Err(e) => {
                            engine.store_down(&e);
                            drop(engine);
                            more = false;
                            std::thread::sleep(backoff);
                            backoff = (backoff * 2).min(BACKOFF_MAX);
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            warn!(error = %e, "cannot start following the fleet; changes of other daemons arrive only at restart");
        }
    }
}

fn feed_target(engine: &Engine) -> String {
    engine
        .fleet
        .as_ref()
        .map(|f| f.link.describe())
        .unwrap_or_default()
}
