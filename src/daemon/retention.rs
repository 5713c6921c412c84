//! `[store] events_retention`: the daemon deletes events older than the retention, in
//! small batches through the store thread, so that a report queued behind a batch waits
//! for one short delete, never for the whole backlog. Endpoint rows are never deleted.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::pool::engine::{Engine, EngineError};

/// How pruning runs; `Default` is what the daemon uses.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Events older than this go; zero keeps every event.
    pub keep: Duration,
    /// Rows deleted per commit.
    pub batch: usize,
    /// Pause between two batches of one sweep (lets queued writes through).
    pub pause: Duration,
    /// Time between sweeps.
    pub every: Duration,
    /// Wall clock (tests move it).
    pub clock: fn() -> SystemTime,
}

impl Retention {
    pub fn new(keep: Duration) -> Self {
        Retention {
            keep,
            batch: 1000,
            pause: Duration::from_millis(50),
            every: Duration::from_secs(600),
            clock: SystemTime::now,
        }
    }
}

/// Delete every event older than `cutoff`, batch by batch; returns how many went.
pub async fn prune_before(
    engine: &Engine,
    cutoff: SystemTime,
    r: &Retention,
    shutdown: &CancellationToken,
) -> Result<usize, EngineError> {
    let mut total = 0;
    loop {
        let n = engine.prune_events(cutoff, r.batch).await?;
        total += n;
        if n < r.batch || shutdown.is_cancelled() {
            return Ok(total);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(total),
            _ = tokio::time::sleep(r.pause) => {}
        }
    }
}

/// Sweep at start and then every `r.every`, until `shutdown`. With a retention of zero a
/// sweep deletes no event, but still prunes what the store keeps beside them (a fleet's
/// change log, kept an hour).
pub async fn run(engine: Arc<Engine>, r: Retention, shutdown: CancellationToken) {
    if r.keep.is_zero() {
        debug!("events_retention is 0s: events are kept forever");
    }
    loop {
        let cutoff = match r.keep.is_zero() {
            true => SystemTime::UNIX_EPOCH,
            false => (r.clock)()
                .checked_sub(r.keep)
                .unwrap_or(SystemTime::UNIX_EPOCH),
        };
        match prune_before(&engine, cutoff, &r, &shutdown).await {
            Ok(0) => {}
            Ok(n) => {
                info!(deleted = n, retention = %humantime::format_duration(r.keep), "pruned old events")
            }
            Err(e) => warn!(error = %e, "could not prune old events"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(r.every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;
    use crate::event_kind::EventKind;
    use crate::store::{NewEndpoint, NewEvent, Store, Write};

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn month_later() -> SystemTime {
        SystemTime::now() + 31 * DAY
    }

    /// A real temporary database with one endpoint and `n` more events.
    async fn engine_with_events(n: usize) -> (tempfile::TempDir, Arc<Engine>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).unwrap();
        let engine = Engine::open(store, [PoolConfig::builtin("default")]).unwrap();
        engine
            .add(vec![NewEndpoint {
                url: "http://10.0.0.1:8080".parse().unwrap(),
                pool: "default".into(),
                label: None,
                source: None,
                state: crate::health::State::Available,
                tags: Default::default(),
            }])
            .await
            .unwrap();
        let writes = (0..n)
            .map(|_| Write::Event(NewEvent::new(EventKind::SniffRefresh)))
            .collect();
        engine.record(writes).await.unwrap();
        (dir, engine)
    }

    async fn event_count(engine: &Engine) -> usize {
        engine.events(None, 0, usize::MAX >> 1).await.unwrap().len()
    }

    #[tokio::test]
    async fn prunes_in_batches_and_keeps_endpoints() {
        let (_dir, engine) = engine_with_events(2500).await;
        let total = event_count(&engine).await;
        assert!(total > 2500, "{total}");
        let r = Retention {
            batch: 1000,
            ..Retention::new(30 * DAY)
        };
        let stop = CancellationToken::new();
        // A cutoff before every event deletes nothing.
        let past = SystemTime::now() - DAY;
        assert_eq!(prune_before(&engine, past, &r, &stop).await.unwrap(), 0);
        assert_eq!(event_count(&engine).await, total);
        // A cutoff after them deletes them all but the newest (ids go on from it), 1000
        // per commit.
        let n = prune_before(&engine, month_later(), &r, &stop)
            .await
            .unwrap();
        assert_eq!(n, total - 1);
        assert_eq!(event_count(&engine).await, 1);
        assert_eq!(engine.rows(None, None).await.unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_daemon_task_prunes_what_the_clock_says_is_old() {
        let (_dir, engine) = engine_with_events(1500).await;
        let stop = CancellationToken::new();
        let r = Retention {
            batch: 500,
            clock: month_later,
            ..Retention::new(30 * DAY)
        };
        let task = tokio::spawn(run(engine.clone(), r, stop.clone()));
        let mut left = usize::MAX;
        for _ in 0..200 {
            tokio::time::sleep(r.pause).await;
            left = event_count(&engine).await;
            if left == 1 {
                break;
            }
        }
        // All but the newest.
        assert_eq!(left, 1);
        assert_eq!(engine.rows(None, None).await.unwrap().len(), 1);
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn zero_keeps_every_event() {
        let (_dir, engine) = engine_with_events(10).await;
        let before = event_count(&engine).await;
        let r = Retention {
            clock: month_later,
            ..Retention::new(Duration::ZERO)
        };
        // Sweeps (for what the store keeps beside events), deleting none of them.
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(engine.clone(), r, stop.clone()));
        tokio::time::sleep(3 * Retention::new(Duration::ZERO).every).await;
        stop.cancel();
        task.await.unwrap();
        assert_eq!(event_count(&engine).await, before);
    }
}
