//! What an operator (or a source) changes while the engine runs: endpoints added, synced,
//! removed, an endpoint's URL, label or tags (`edit`, keeping its id, state and history),
//! and the pool configs (`reconfigure`, on SIGHUP).

use std::collections::BTreeMap;

use tokio::time::Instant;
use tracing::info;

use super::{Engine, EngineError, LOAD_SLICE};
use crate::config::PoolConfig;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::pool::ReconfigureError;
use crate::store::{EndpointRow, NewEndpoint, OnExisting, StoreError, ToInsert, Write};

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
        self.writable()?;
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
    /// Add endpoints (all or nothing) to the store and the pools.
    pub async fn add(&self, eps: Vec<NewEndpoint>) -> Result<Vec<EndpointId>, EngineError> {
        self.writable()?;
        let ids = self.writer.call(move |s| s.add_endpoints(&eps)).await??;
        self.load_added(&ids).await;
        Ok(ids)
    }

    /// Add endpoints as `eps` yields them, all or nothing: an import of millions. The
    /// iterator runs on the store thread inside the one transaction (nothing per endpoint
    /// is held but its id); the first error, its own or the store's, rolls everything back.
    /// With `OnExisting::Skip`, endpoints already stored are passed over and counted.
    pub async fn add_from<E, T>(
        &self,
        eps: impl Iterator<Item = Result<T, E>> + Send + 'static,
        on_existing: OnExisting,
    ) -> Result<(Vec<EndpointId>, u64), E>
    where
        E: From<StoreError> + From<EngineError> + Send + 'static,
        T: ToInsert + Send + 'static,
    {
        self.writable()?;
        let (ids, skipped) = self
            .writer
            .call(move |s| {
                let mut ids = Vec::new();
                s.add_endpoints_from(eps, on_existing, |id| ids.push(id))
                    .map(|skipped| (ids, skipped))
            })
            .await??;
        self.load_added(&ids).await;
        Ok((ids, skipped))
    }

    /// Load committed rows into the pools: read back from the store and inserted under
    /// the pool lock in slices, each slice its own call on the store thread and its own
    /// hold of the lock, so neither reports nor leases wait behind a million-row import.
    /// Ids of one batch are consecutive; a row edited meanwhile is read as edited, and
    /// one removed meanwhile stays out (see `Pools::insert_row`).
    ///
    /// The rows are committed: the add has happened whatever this read does, so it never
    /// fails the add. A slice that cannot be read is tried again with a growing pause;
    /// after that the rest stays out of the pools until the next start, said in the log.
    async fn load_added(&self, ids: &[EndpointId]) {
        let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
            return;
        };
        let mut from = first;
        while from <= last {
            let mut pause = std::time::Duration::from_millis(50);
            let rows = loop {
                let read = self
                    .writer
                    .call(move |s| s.rows_between(from, last, LOAD_SLICE))
                    .await;
                // A stopped store thread will not come back: no point trying again.
                let again =
                    matches!(read, Ok(Err(_))) && pause <= std::time::Duration::from_secs(2);
                match read.and_then(|r| r.map_err(EngineError::from)) {
                    Ok(rows) => break rows,
                    Err(e) if again => {
                        tracing::warn!(from, last, error = %e, "reading added endpoints back failed; trying again");
                    }
                    Err(e) => {
                        tracing::error!(from, last, error = %e,
                            "added endpoints are stored but could not be loaded; they are leasable after a restart");
                        return;
                    }
                }
                tokio::time::sleep(pause).await;
                pause *= 2;
            };
            let Some(end) = rows.last().map(|r| r.id) else {
                break;
            };
            {
                let mut p = self.lock();
                let now = Instant::now();
                p.rows_joining(|p| {
                    for r in &rows {
                        p.insert_row(r, now);
                    }
                });
            }
            // Dropped outside the lock.
            drop(rows);
            // A lease waiting on an empty pool need not wait for the last slice.
            self.notify_waiters();
            from = end + 1;
            if from <= last {
                tokio::task::yield_now().await;
            }
        }
        self.rescheduled.notify_one();
    }

    /// Insert missing endpoints (config sync, sources); returns (id, added).
    pub async fn ensure(
        &self,
        eps: Vec<NewEndpoint>,
    ) -> Result<Vec<(EndpointId, bool)>, EngineError> {
        self.writable()?;
        let (res, rows) = self
            .writer
            .call(move |s| -> Result<_, StoreError> {
                let res = s.ensure_endpoints(&eps)?;
                let mut rows = Vec::new();
                for (id, _) in &res {
                    rows.extend(s.get(*id)?);
                }
                Ok((res, rows))
            })
            .await??;
        {
            let mut p = self.lock();
            let now = Instant::now();
            p.rows_joining(|p| {
                for (r, (_, added)) in rows.iter().zip(&res) {
                    if *added || p.health(r.id).is_none() {
                        p.insert_row(r, now);
                    } else {
                        p.update_url(r.id, r.url.clone());
                    }
                }
            });
        }
        self.notify_waiters();
        Ok(res)
    }

    /// Delete endpoints (all or nothing). Memory and the queued delete change under one
    /// lock, so no transition of a removed endpoint can be queued after its delete.
    pub async fn remove(&self, ids: Vec<EndpointId>) -> Result<(), EngineError> {
        self.writable()?;
        self.with(|p, _, _| {
            for id in &ids {
                p.remove_for_good(*id);
            }
            ((), vec![Write::Remove(ids.clone())])
        })
        .await
    }
}
