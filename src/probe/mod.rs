//! Probes. `prober` makes one full transaction through an endpoint and classifies how it
//! failed, `report` is one probe's outcome as printed and sent over the socket, `run`
//! probes endpoints and records the results (the CLI, the socket's `probe`, the daemon's
//! prober loops).

pub mod exit;
mod prober;
pub(crate) mod run;

pub use prober::{Fetched, ProbeError, ProbeResult, Prober};
