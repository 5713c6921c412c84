//! Gauges read at scrape time from a callback, so the hot path never keeps them.

use std::fmt;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::labels::{state_idx, N_STATES};
use crate::health::State;

/// Per-pool gauge values, taken at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolGauges {
    /// Pool name (from the config).
    pub pool: String,
    /// Endpoints by state, in `State::ALL` order.
    pub endpoints: [u64; N_STATES],
    /// (endpoint, destination) pairs that are not available.
    pub destination_bans: u64,
    /// Targets that are down.
    pub targets_down: u64,
    /// (subnet, host) pairs under suspicion (docs/exit.md).
    pub suspect_subnets: u64,
}

/// What the gauges show at one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GaugeSnapshot {
    /// One entry per configured pool.
    pub pools: Vec<PoolGauges>,
}

impl GaugeSnapshot {
    /// Aggregate per-endpoint states (`(pool index into names, state)`) into per-pool
    /// counts, for a caller that does not keep counts itself. Entries with an index out of
    /// range are ignored.
    pub fn count_states(
        names: &[String],
        states: impl IntoIterator<Item = (usize, State)>,
    ) -> Self {
        let mut pools: Vec<PoolGauges> = names
            .iter()
            .map(|n| PoolGauges {
                pool: n.clone(),
                ..PoolGauges::default()
            })
            .collect();
        for (p, s) in states {
            if let Some(g) = pools.get_mut(p) {
                g.endpoints[state_idx(s)] += 1;
            }
        }
        GaugeSnapshot { pools }
    }
}

/// The scrape-time callback. It runs on the scraping task: it must be quick and must not
/// hold a lock the lease path needs for longer than a copy of counts.
pub type GaugeSource = Box<dyn Fn() -> GaugeSnapshot + Send + Sync>;

#[derive(Clone, Default)]
pub(super) struct Gauges {
    pub(super) source: Arc<OnceLock<GaugeSource>>,
}

impl fmt::Debug for Gauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gauges")
            .field("set", &self.source.get().is_some())
            .finish()
    }
}

impl Collector for Gauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(source) = self.source.get() else {
            return Ok(());
        };
        // One snapshot feeds both families, so they agree with each other.
        let snap = source();
        {
            let mut m = encoder.encode_descriptor(
                "endpoints",
                "Endpoints by health state",
                None,
                MetricType::Gauge,
            )?;
            for p in &snap.pools {
                for (s, n) in State::ALL.iter().zip(p.endpoints) {
                    let labels = [("pool", p.pool.as_str()), ("state", s.as_str())];
                    m.encode_family(&labels)?.encode_gauge(&n)?;
                }
            }
        }
        let mut m = encoder.encode_descriptor(
            "destination_bans",
            "(endpoint, destination) pairs that are cooling, waiting for a trial or disabled",
            None,
            MetricType::Gauge,
        )?;
        for p in &snap.pools {
            m.encode_family(&[("pool", p.pool.as_str())])?
                .encode_gauge(&p.destination_bans)?;
        }
        let mut m = encoder.encode_descriptor(
            "targets_down",
            "Targets (host:port) that every endpoint tried failed to reach: down, with their own cooldown",
            None,
            MetricType::Gauge,
        )?;
        for p in &snap.pools {
            m.encode_family(&[("pool", p.pool.as_str())])?
                .encode_gauge(&p.targets_down)?;
        }
        let mut m = encoder.encode_descriptor(
            "suspect_subnets",
            "(subnet, host) pairs where a site banned subnet_after addresses of the subnet: leases prefer other subnets",
            None,
            MetricType::Gauge,
        )?;
        for p in &snap.pools {
            m.encode_family(&[("pool", p.pool.as_str())])?
                .encode_gauge(&p.suspect_subnets)?;
        }
        Ok(())
    }
}
