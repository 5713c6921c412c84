//! Probes: one full transaction through a proxy to the pool's destination.
