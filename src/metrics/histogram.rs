//! A lock-free classic histogram for the `prometheus-client` registry: the crate's own
//! `Histogram` takes a mutex on every observation, which the lease path must not.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A histogram with fixed buckets whose `observe` is a few relaxed atomic adds.
#[derive(Clone)]
pub struct AtomicHistogram {
    inner: Arc<HistInner>,
}

struct HistInner {
    bounds: &'static [f64],
    /// One per bound, plus the `+Inf` bucket; not cumulative.
    counts: Box<[AtomicU64]>,
    /// f64 bits.
    sum: AtomicU64,
}

impl AtomicHistogram {
    /// Buckets with these upper bounds (ascending), plus `+Inf`.
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        AtomicHistogram {
            inner: Arc::new(HistInner {
                bounds,
                counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                sum: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    /// Record one value (in the metric's base unit).
    pub fn observe(&self, v: f64) {
        let i = self.inner.bounds.partition_point(|b| *b < v);
        self.inner.counts[i].fetch_add(1, Ordering::Relaxed);
        let mut cur = self.inner.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(cur) + v).to_bits();
            match self.inner.sum.compare_exchange_weak(
                cur,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
    }

    /// Record a duration in seconds.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.inner
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

impl fmt::Debug for AtomicHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicHistogram")
            .field("count", &self.count())
            .finish()
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let i = &self.inner;
        let buckets: Vec<(f64, u64)> = i
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(i.counts.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        // The count is the sum of the buckets read, so a scrape racing an observation
        // still sees `+Inf` == `_count`.
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = f64::from_bits(i.sum.load(Ordering::Relaxed));
        encoder
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
