//! Log-line budget for state changes: up to `limit` lines per second are written one by
//! one; beyond that, the rest of the second is held as counts by reason and written as
//! one summary line when the second is over (docs/observability.md, "Log volume").
//! Pure: the caller passes the time and writes the lines.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// The length of one budget window.
pub const WINDOW: Duration = Duration::from_secs(1);

/// State-change lines written one by one per second; the rest of the second is summed.
pub const LINES_PER_SECOND: u32 = 20;

/// What a second held back: how many changes, by reason (`-` for none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    pub changes: u32,
    pub by_reason: BTreeMap<&'static str, u32>,
}

impl Summary {
    /// `reason:count` pairs, most frequent first (ties by name), for the log line.
    pub fn reasons(&self) -> String {
        let mut v: Vec<(&&str, &u32)> = self.by_reason.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(r, n)| format!("{r}:{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Whether a state change gets its own line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admit {
    /// The summary of the previous window, to be written first.
    pub summary: Option<Summary>,
    /// Write this change's own line.
    pub show: bool,
}

#[derive(Debug)]
pub struct Burst {
    limit: u32,
    start: Option<Instant>,
    shown: u32,
    held: Summary,
}

impl Burst {
    pub fn new(limit: u32) -> Burst {
        Burst {
            limit,
            start: None,
            shown: 0,
            held: Summary::default(),
        }
    }

    /// One state change at `now` for `reason`.
    pub fn note(&mut self, now: Instant, reason: &'static str) -> Admit {
        let summary = self.flush(now);
        if self.start.is_none() {
            self.start = Some(now);
            self.shown = 0;
        }
        if self.shown < self.limit {
            self.shown += 1;
            return Admit {
                summary,
                show: true,
            };
        }
        self.held.changes += 1;
        *self.held.by_reason.entry(reason).or_default() += 1;
        Admit {
            summary,
            show: false,
        }
    }

    /// The held summary once its window is over (and a new window may start).
    pub fn flush(&mut self, now: Instant) -> Option<Summary> {
        let start = self.start?;
        if now < start + WINDOW {
            return None;
        }
        self.start = None;
        self.shown = 0;
        let held = std::mem::take(&mut self.held);
        (held.changes > 0).then_some(held)
    }

    /// When a held summary is due (the timer wakes for it).
    pub fn due(&self) -> Option<Instant> {
        let start = self.start?;
        (self.held.changes > 0).then_some(start + WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (milliseconds after the start, reason) → (summary written before it, own line).
    #[test]
    fn lines_beyond_the_budget_are_summed_per_second() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut b = Burst::new(2);
        let sum = |pairs: &[(&'static str, u32)]| Summary {
            changes: pairs.iter().map(|p| p.1).sum(),
            by_reason: pairs.iter().copied().collect(),
        };
        let table: Vec<(u64, &'static str, Option<Summary>, bool)> = vec![
            (0, "timeout", None, true),
            (10, "timeout", None, true),
            (20, "timeout", None, false),
            (30, "connect_refused", None, false),
            (999, "timeout", None, false),
            // A new second: the held three come out first, then lines again.
            (
                1000,
                "dead",
                Some(sum(&[("timeout", 2), ("connect_refused", 1)])),
                true,
            ),
            (1001, "dead", None, true),
            // Nothing held in a quiet second: no summary.
            (5000, "timeout", None, true),
        ];
        for (ms, reason, summary, show) in table {
            assert_eq!(
                b.note(at(ms), reason),
                Admit { summary, show },
                "at {ms} ms"
            );
        }
        assert_eq!(b.due(), None, "nothing held");
    }

    #[test]
    fn a_held_summary_is_due_at_the_end_of_its_second_and_flushed_once() {
        let t0 = Instant::now();
        let mut b = Burst::new(1);
        b.note(t0, "-");
        assert_eq!(b.due(), None);
        b.note(t0 + Duration::from_millis(5), "timeout");
        b.note(t0 + Duration::from_millis(6), "timeout");
        assert_eq!(b.due(), Some(t0 + WINDOW));
        assert_eq!(b.flush(t0 + Duration::from_millis(999)), None, "not yet");
        let s = b.flush(t0 + WINDOW).expect("due");
        assert_eq!((s.changes, s.reasons()), (2, "timeout:2".to_string()));
        assert_eq!(b.flush(t0 + WINDOW * 3), None, "once");
        assert_eq!(b.due(), None);
    }

    #[test]
    fn reasons_are_listed_most_frequent_first() {
        let s = Summary {
            changes: 6,
            by_reason: [("a", 1), ("dead", 3), ("b", 2)].into_iter().collect(),
        };
        assert_eq!(s.reasons(), "dead:3 b:2 a:1");
    }
}
