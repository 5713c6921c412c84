//! The one log-line budget of every state change — an endpoint's, a pair's, a target's
//! going down or up (docs/observability.md, "Log volume"): up to `LINES_PER_SECOND` lines
//! a second one by one, the rest of the second summed by reason in one line. Shared (a
//! clone is the same budget), so that no kind of change, however many a client causes,
//! writes past it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;
use tracing::info;

use super::burst::{Burst, Summary, LINES_PER_SECOND};

#[derive(Debug, Clone)]
pub(super) struct Budget(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    burst: Mutex<Burst>,
    /// Some change is held for a summary: without one, the lease path's `flush` and
    /// `due` take no lock.
    held: AtomicBool,
}

impl Default for Budget {
    fn default() -> Self {
        Budget(Arc::new(Shared {
            burst: Mutex::new(Burst::new(LINES_PER_SECOND)),
            held: AtomicBool::new(false),
        }))
    }
}

impl Budget {
    fn burst(&self) -> std::sync::MutexGuard<'_, Burst> {
        // A panic while counting lines leaves counts, nothing to repair.
        self.0.burst.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One state change at `now` for `reason`: whether it gets its own line (the summary
    /// of the second before, if one is due, is written first).
    pub(super) fn admit(&self, now: Instant, reason: &'static str) -> bool {
        let mut b = self.burst();
        let a = b.note(now, reason);
        self.0.held.store(b.due().is_some(), Ordering::Relaxed);
        drop(b);
        log_summary(a.summary);
        a.show
    }

    /// Write the held summary once its second is over.
    pub(super) fn flush(&self, now: Instant) {
        if !self.0.held.load(Ordering::Relaxed) {
            return;
        }
        let mut b = self.burst();
        let s = b.flush(now);
        self.0.held.store(b.due().is_some(), Ordering::Relaxed);
        drop(b);
        log_summary(s);
    }

    /// When a held summary is due (the timer wakes for it).
    pub(super) fn due(&self) -> Option<Instant> {
        if !self.0.held.load(Ordering::Relaxed) {
            return None;
        }
        self.burst().due()
    }
}

/// The state changes a busy second held back, as one line.
fn log_summary(s: Option<Summary>) {
    if let Some(s) = s {
        info!(
            changes = s.changes,
            by_reason = %s.reasons(),
            "state changes summarised (beyond {LINES_PER_SECOND} lines a second)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Two clones are one budget: what one spends, the other cannot.
    #[tokio::test(start_paused = true)]
    async fn clones_share_one_budget() {
        let a = Budget::default();
        let b = a.clone();
        let now = Instant::now();
        let shown = (0..LINES_PER_SECOND * 2)
            .filter(|i| {
                if i % 2 == 0 {
                    a.admit(now, "x")
                } else {
                    b.admit(now, "y")
                }
            })
            .count();
        assert_eq!(shown as u32, LINES_PER_SECOND);
        assert_eq!(a.due(), Some(now + Duration::from_secs(1)));
        assert_eq!(b.due(), a.due());
        // Flushed when its second is over: nothing held, nothing due.
        b.flush(now + Duration::from_secs(1));
        assert_eq!(a.due(), None);
        assert!(a.admit(now + Duration::from_secs(1), "x"), "a new second");
    }
}
