//! The arithmetic of choosing (docs/selection.md, "Strategies", "Slow start"): the
//! `fastest` score, the pool's median latency kept without a scan, and the slow-start
//! weight. Pure: the caller passes times in.

use std::time::Duration;

/// Latency buckets per decade: the median is known within about 12 %.
const PER_DECADE: f64 = 10.0;
/// Buckets from 0.1 ms (`FLOOR_MS`) to 10^6 ms, plus one below and one above.
const BUCKETS: usize = 72;
const FLOOR_MS: f64 = 0.1;
/// The weight of an endpoint that just became available.
pub(super) const WARM_FLOOR: f64 = 0.1;

/// How many endpoints of a pool have each latency estimate, in logarithmic buckets: the
/// pool median in O(1) whatever the pool's size, updated as estimates move.
#[derive(Debug, Clone)]
pub(super) struct Latencies {
    counts: [u32; BUCKETS],
    total: u32,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            counts: [0; BUCKETS],
            total: 0,
        }
    }
}

fn bucket(ms: f64) -> usize {
    if ms.is_nan() || ms < FLOOR_MS {
        return 0;
    }
    let b = ((ms / FLOOR_MS).log10() * PER_DECADE).floor() as usize + 1;
    b.min(BUCKETS - 1)
}

/// The middle of a bucket (geometric).
fn middle(b: usize) -> f64 {
    if b == 0 {
        return FLOOR_MS;
    }
    FLOOR_MS * 10f64.powf((b as f64 - 0.5) / PER_DECADE)
}

impl Latencies {
    /// An endpoint's estimate went from `old` to `new` (either absent).
    pub(super) fn moved(&mut self, old: Option<f64>, new: Option<f64>) {
        if let Some(o) = old {
            let c = &mut self.counts[bucket(o)];
            if *c > 0 {
                *c -= 1;
                self.total -= 1;
            }
        }
        if let Some(n) = new {
            self.counts[bucket(n)] += 1;
            self.total += 1;
        }
    }

    /// The median estimate of the measured endpoints, or `None` before the first.
    pub(super) fn median(&self) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let half = self.total.div_ceil(2);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= half {
                return Some(middle(b));
            }
        }
        None
    }
}

/// `fastest`'s score (lower is better): the latency estimate, the pool median for an
/// endpoint not measured yet, times one plus the recent failure rate. Nothing measured
/// anywhere: every endpoint scores alike (1 × (1 + rate)).
pub(super) fn score(latency: Option<f64>, failure_rate: f64, median: Option<f64>) -> f64 {
    let l = latency.or(median).unwrap_or(1.0);
    l * (1.0 + failure_rate.clamp(0.0, 1.0))
}

/// Slow start: the weight of an endpoint available for `age` of `over`, rising linearly
/// from `WARM_FLOOR` to 1.
pub(super) fn warm_weight(age: Duration, over: Duration) -> f64 {
    if over.is_zero() || age >= over {
        return 1.0;
    }
    WARM_FLOOR + (1.0 - WARM_FLOOR) * age.as_secs_f64() / over.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores() {
        // (latency, failure rate, pool median, score)
        let cases = [
            (Some(100.0), 0.0, Some(300.0), 100.0),
            (Some(100.0), 0.5, Some(300.0), 150.0),
            (Some(100.0), 1.0, None, 200.0),
            // Not measured: the median, so it is neither favoured nor shunned.
            (None, 0.0, Some(300.0), 300.0),
            (None, 0.2, None, 1.2),
            (Some(50.0), 7.0, None, 100.0),
        ];
        for (lat, rate, median, want) in cases {
            let got = score(lat, rate, median);
            assert!(
                (got - want).abs() < 1e-9,
                "{lat:?} {rate} {median:?}: {got}"
            );
        }
    }

    #[test]
    fn warm_weights() {
        let s = |x| Duration::from_secs(x);
        let cases = [
            (s(0), s(30), 0.1),
            (s(15), s(30), 0.55),
            (s(30), s(30), 1.0),
            (s(300), s(30), 1.0),
            (s(0), s(0), 1.0),
        ];
        for (age, over, want) in cases {
            let got = warm_weight(age, over);
            assert!((got - want).abs() < 1e-9, "{age:?}/{over:?}: {got}");
        }
    }

    #[test]
    fn the_median_follows_estimates_within_a_bucket() {
        let mut l = Latencies::default();
        assert_eq!(l.median(), None);
        for ms in [10.0, 20.0, 300.0] {
            l.moved(None, Some(ms));
        }
        let m = l.median().unwrap();
        assert!((m / 20.0 - 1.0).abs() < 0.13, "{m}");
        // 10 ms became 500 ms: the middle is now 300.
        l.moved(Some(10.0), Some(500.0));
        let m = l.median().unwrap();
        assert!((m / 300.0 - 1.0).abs() < 0.13, "{m}");
        l.moved(Some(20.0), None);
        l.moved(Some(300.0), None);
        l.moved(Some(500.0), None);
        assert_eq!(l.median(), None);
        // Out of range values land in the end buckets.
        l.moved(None, Some(0.0));
        l.moved(None, Some(1e12));
        assert_eq!(l.total, 2);
        for (ms, b) in [(0.05, 0), (0.1, 1), (1.0, 11), (1e9, BUCKETS - 1)] {
            assert_eq!(bucket(ms), b, "{ms}");
        }
    }
}
