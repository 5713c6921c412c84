//! Probes. `prober` makes one full transaction through an endpoint and classifies how it
//! failed, `run` probes endpoints and records the results (the CLI, the socket's `probe`,
//! the daemon's prober loops) as the protocol's `ProbeReport`s.

pub mod exit;
mod prober;
pub(crate) mod run;

pub use prober::{Fetched, ProbeError, ProbeResult, Prober};
