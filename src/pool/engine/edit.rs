//! `edit`: a new URL or label for an endpoint, keeping its id, state and history.

use tracing::info;

use super::{Engine, EngineError};
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::store::EndpointRow;

impl Engine {
    /// Replace an endpoint's URL and/or label (`Some(None)` clears it). The row commits
    /// first; leases granted from then on hand out the new URL.
    pub async fn edit(
        &self,
        id: EndpointId,
        url: Option<ProxyUrl>,
        label: Option<Option<String>>,
    ) -> Result<EndpointRow, EngineError> {
        let row = self
            .writer
            .call(move |s| s.edit_endpoint(id, url.as_ref(), label))
            .await??;
        self.lock().update_url(id, row.url.clone());
        info!(endpoint = id, url = %row.url.to_redacted_string(), "endpoint edited");
        Ok(row)
    }
}
