//! New pool configs for the running engine (SIGHUP).

use super::Engine;
use crate::config::PoolConfig;
use crate::pool::ReconfigureError;

impl Engine {
    /// Apply new pool configs, all or nothing; returns the names of new
    /// pools; see `Pools::reconfigure`. A mode
    /// change is seen by the next lease (trials) and the prober loops the daemon restarts.
    pub fn reconfigure(
        &self,
        pools: Vec<PoolConfig>,
        dropped: &[String],
    ) -> Result<Vec<String>, ReconfigureError> {
        let added = self.lock().reconfigure(pools, dropped)?;
        // New caps or modes may make something leasable now.
        self.notify_waiters();
        self.rescheduled.notify_one();
        Ok(added)
    }
}
