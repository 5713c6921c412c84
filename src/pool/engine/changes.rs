//! What an operator changes while the engine runs: an endpoint's URL, label or tags
//! (`edit`, keeping its id, state and history), and the pool configs (`reconfigure`, on
//! SIGHUP).

use std::collections::BTreeMap;

use tracing::info;

use super::{Engine, EngineError};
use crate::config::PoolConfig;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::pool::ReconfigureError;
use crate::store::EndpointRow;

impl Engine {
    /// Replace an endpoint's URL and/or label (`Some(None)` clears it), set or remove
    /// tags (an empty value removes its key). The row commits first; leases granted from
    /// then on hand out the new URL and select by the new tags.
    pub async fn edit(
        &self,
        id: EndpointId,
        url: Option<ProxyUrl>,
        label: Option<Option<String>>,
        tags: BTreeMap<String, String>,
    ) -> Result<EndpointRow, EngineError> {
        let row = self
            .writer
            .call(move |s| s.edit_endpoint(id, url.as_ref(), label, &tags))
            .await??;
        {
            let mut p = self.lock();
            p.update_url(id, row.url.clone());
            p.update_tags(id, &row.tags);
        }
        // New tags may make the endpoint what a waiting lease asks for.
        self.notify_waiters();
        info!(endpoint = id, url = %row.url.to_redacted_string(), "endpoint edited");
        Ok(row)
    }

    /// Apply new pool configs, all or nothing; returns the names of new pools; see
    /// `Pools::reconfigure`. A mode change is seen by the next lease (trials) and the
    /// prober loops the daemon restarts.
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
