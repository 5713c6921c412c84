//! The store thread: one `Store` on its own OS thread, folding the writes of concurrent
//! callers into one commit, and running reads in order with them.

use std::collections::BTreeSet;
use std::sync::{mpsc, Arc};

use tokio::sync::oneshot;
use tracing::{debug, error};

use super::EngineError;
use crate::endpoint::EndpointId;
use crate::metrics::AtomicHistogram;
use crate::store::pairs::PairRow;
use crate::store::{EndpointRow, Store, StoreError, Write};

/// What a queued write batch resolves to once the store thread ran it.
pub type Committed = Result<(), Arc<StoreError>>;

type Call = Box<dyn FnOnce(&mut Store) + Send>;

/// The stored row and pairs of each endpoint whose writes failed, to put memory back in
/// line.
pub(super) type Resynced =
    Result<Vec<(EndpointId, Option<EndpointRow>, Vec<PairRow>)>, Arc<StoreError>>;

enum Job {
    Writes(Vec<Write>, oneshot::Sender<Committed>),
    Call(Call),
    Resync(mpsc::Sender<Resynced>),
}

fn endpoints_of(w: &Write, out: &mut BTreeSet<EndpointId>) {
    match w {
        Write::Transition(rec, _) => {
            out.insert(rec.id);
        }
        Write::Event(ev) => out.extend(ev.endpoint),
        Write::Remove(ids) => out.extend(ids.iter().copied()),
        Write::SourceResult { .. } => {}
        // A pair is resynced with its endpoint: the endpoint's row and all its pairs.
        Write::Pair(pw) => out.extend(pw.endpoint()),
        Write::EventStatus(ev, _) => out.extend(ev.endpoint),
    }
}

/// Handle to the store thread. Batches writes of concurrent callers into one commit.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
}

/// Most writes folded into one commit.
const MAX_BATCH: usize = 4096;

impl Writer {
    /// Move `store` to its own thread.
    pub fn spawn(store: Store) -> Writer {
        Writer::spawn_timed(store, None)
    }

    /// [`Writer::spawn`], observing each group commit's duration into `commits`.
    pub fn spawn_timed(mut store: Store, commits: Option<AtomicHistogram>) -> Writer {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("proxypool-store".into())
            .spawn(move || {
                // After a failed commit memory is ahead of the store: every later write is
                // refused too (it may build on the lost one) until the engine re-synced the
                // endpoints named here. So nothing lands with a `from` the log never saw.
                let mut poisoned: Option<Arc<StoreError>> = None;
                let mut dirty = BTreeSet::new();
                while let Ok(first) = rx.recv() {
                    let mut groups = Vec::new();
                    let mut acks = Vec::new();
                    let mut after = None;
                    let mut n = 0;
                    let mut next = Some(first);
                    while let Some(job) = next.take() {
                        match job {
                            Job::Writes(w, ack) => {
                                n += w.len();
                                groups.push(w);
                                acks.push(ack);
                            }
                            other => {
                                after = Some(other);
                                break;
                            }
                        }
                        if n < MAX_BATCH {
                            next = rx.try_recv().ok();
                        }
                    }
                    if !groups.is_empty() {
                        let started = std::time::Instant::now();
                        let results = match &poisoned {
                            Some(e) => Err(e.clone()),
                            None => store.write_groups(&groups).map_err(|e| {
                                error!(error = %e, "store commit failed");
                                Arc::new(e)
                            }),
                        };
                        if let Some(h) = &commits {
                            h.observe_duration(started.elapsed());
                        }
                        let results: Vec<Committed> = match results {
                            Ok(rs) => rs.into_iter().map(|r| r.map_err(Arc::new)).collect(),
                            Err(e) => vec![Err(e); groups.len()],
                        };
                        for ((ack, r), g) in acks.into_iter().zip(results).zip(&groups) {
                            if let Err(e) = &r {
                                g.iter().for_each(|w| endpoints_of(w, &mut dirty));
                                poisoned.get_or_insert_with(|| e.clone());
                            }
                            let _ = ack.send(r);
                        }
                    }
                    // Calls run after the writes queued before them, keeping order.
                    match after {
                        Some(Job::Call(c)) => c(&mut store),
                        Some(Job::Resync(reply)) => {
                            let rows: Result<Vec<_>, StoreError> = dirty
                                .iter()
                                .map(|&id| {
                                    let row = store.get(id)?;
                                    let pairs = match row {
                                        Some(_) => store.pairs_of(id)?,
                                        None => Vec::new(),
                                    };
                                    Ok((id, row, pairs))
                                })
                                .collect();
                            let rows = rows.map_err(Arc::new);
                            if rows.is_ok() {
                                poisoned = None;
                                dirty.clear();
                            }
                            let _ = reply.send(rows);
                        }
                        _ => {}
                    }
                }
                debug!("store thread stopped");
            })
            .expect("spawn store thread");
        Writer { tx }
    }

    /// Queue writes; the receiver resolves once they are committed.
    pub fn queue(&self, writes: Vec<Write>) -> oneshot::Receiver<Committed> {
        let (ack, rx) = oneshot::channel();
        if writes.is_empty() {
            let _ = ack.send(Ok(()));
        } else if self.tx.send(Job::Writes(writes, ack)).is_err() {
            // The receiver sees a closed channel and reports it.
        }
        rx
    }

    /// Run `f` on the store thread, in order with queued writes.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Job::Call(Box::new(move |s| {
                let _ = tx.send(f(s));
            })))
            .map_err(|_| EngineError::Stopped)?;
        rx.await.map_err(|_| EngineError::Stopped)
    }

    /// The stored rows of the endpoints whose writes failed since the last call, read on
    /// the store thread; blocks the caller. None once the store thread is gone.
    pub(super) fn resynced(&self) -> Option<Resynced> {
        let (tx, rx) = mpsc::channel();
        self.tx.send(Job::Resync(tx)).ok()?;
        rx.recv().ok()
    }
}
