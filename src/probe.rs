//! Probes: one full transaction through a proxy to the pool's destination.
//! (Placeholder API until the prober lands.)

use std::time::Duration;

use crate::config::ProbeConfig;
use crate::endpoint::ProxyUrl;
use crate::health::{Failure, Phase};

/// Result of one probe.
#[derive(Debug, Clone)]
pub struct ProbeResult {
    /// Passed.
    pub ok: bool,
    /// Why not.
    pub failure: Option<Failure>,
    /// Status seen.
    pub status: Option<u16>,
    /// Time per phase.
    pub phases: Vec<(Phase, Duration)>,
    /// Total.
    pub total: Duration,
}

/// Config errors.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Bad config.
    #[error("{0}")]
    Config(String),
}

/// Runs probes.
#[derive(Clone)]
pub struct Prober {}

impl Prober {
    /// Build.
    pub fn new(_cfg: &ProbeConfig) -> Result<Prober, ProbeError> {
        Ok(Prober {})
    }
    /// Probe.
    pub async fn probe(&self, _proxy: &ProxyUrl) -> ProbeResult {
        unimplemented!()
    }
}
