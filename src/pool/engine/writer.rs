//! The store thread: one `Store` on its own OS thread, folding the writes of concurrent
//! callers into one commit, and running reads in order with them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::{debug, error};

use super::EngineError;
use crate::endpoint::EndpointId;
use crate::metrics::AtomicHistogram;
use crate::store::pairs::PairRow;
use crate::store::{Applied, EndpointRow, Store, StoreError, Write};

/// What a queued write batch resolves to once the store thread ran it: what its claims
/// got and which rows it found changed elsewhere (docs/fleet.md), or why it failed.
pub type Committed = Result<Applied, Arc<StoreError>>;

type Call = Box<dyn FnOnce(&mut Store) + Send>;

/// The stored row and pairs of each endpoint whose writes failed, to put memory back in
/// line.
pub(super) type Resynced = Result<Vec<RowAndPairs>, Arc<StoreError>>;

/// An endpoint's row as stored (none: gone) and its pairs.
pub(super) type RowAndPairs = (EndpointId, Option<EndpointRow>, Vec<PairRow>);

enum Job {
    Writes(Queued),
    Call(Call),
    Resync(mpsc::Sender<Resynced>),
    /// Writes never sent (the store is away): their endpoints are read again before any
    /// later write is taken, as after a failed commit.
    Lost(BTreeSet<EndpointId>, Arc<StoreError>),
}

/// One caller's writes, atomic together.
struct Queued {
    writes: Vec<Write>,
    ack: oneshot::Sender<Committed>,
    /// Someone is answered only once these are durable (a report, an operator's action):
    /// the batch commits for them without delay. Writes that nobody waits on (a trial's
    /// claim, a cooldown's end) ride in the next commit instead.
    urgent: bool,
}

fn endpoints_of(w: &Write, out: &mut BTreeSet<EndpointId>) {
    match w {
        Write::Transition(rec, _) => {
            out.insert(rec.id);
        }
        Write::Event(ev) => out.extend(ev.endpoint),
        Write::Remove(ids) => out.extend(ids.iter().copied()),
        Write::Exit { id, .. } => {
            out.insert(*id);
        }
        Write::SourceResult { .. } => {}
        // A pair is resynced with its endpoint: the endpoint's row and all its pairs.
        Write::Pair(pw) => out.extend(pw.endpoint()),
        Write::EventStatus(ev, _) => out.extend(ev.endpoint),
        Write::Claim(c) => {
            out.insert(c.on.endpoint());
        }
        Write::Unclaim(u) => {
            out.insert(u.on.endpoint());
        }
    }
}

/// The next job, and whether the thread had to wait for it; None once every handle is gone.
fn next_job(rx: &mpsc::Receiver<Job>) -> Option<(Job, bool)> {
    match rx.try_recv() {
        Ok(job) => Some((job, false)),
        Err(mpsc::TryRecvError::Empty) => rx.recv().ok().map(|job| (job, true)),
        Err(mpsc::TryRecvError::Disconnected) => None,
    }
}

/// The previous commit: how many callers it answered (the likely next writers) and how
/// long it took.
#[derive(Default)]
struct Pace {
    answered: usize,
    took: Duration,
}

/// Writes to commit together, and the job that ended the batch if it was not a write.
struct Batch {
    groups: Vec<Vec<Write>>,
    acks: Vec<oneshot::Sender<Committed>>,
    /// Groups someone is answered for (urgent).
    callers: usize,
    /// Writes in all groups.
    writes: usize,
    after: Option<Job>,
}

impl Batch {
    /// `first` and every write queued behind it; then, while fewer callers are in the
    /// batch than the previous commit answered plus those that were already waiting, wait
    /// for the rest, at most as long as the previous commit took (and `cap`: `MAX_GATHER`
    /// in the store thread). A batch of writes nobody waits on waits up to `cap` for a
    /// caller to commit with (or for a read, which commits them first).
    ///
    /// The wait is what makes concurrent callers share commits: a caller's next write
    /// arrives one client round trip after its answer, when the next commit has already
    /// started with the writes that queued during the last one. Without it, callers that
    /// write on every request split into two halves that commit alternately (measured:
    /// 4.1 groups per commit with 8 such callers; docs/leases.md, "Durability").
    ///
    /// Each group taken is handed to `add` at once (the open commit applies it), so the
    /// wait for the callers still to come overlaps the work of those already here.
    fn gather(
        rx: &mpsc::Receiver<Job>,
        first: Job,
        waited: bool,
        pace: &Pace,
        cap: Duration,
        add: &mut dyn FnMut(&[Write]),
    ) -> Batch {
        let mut b = Batch {
            groups: Vec::new(),
            acks: Vec::new(),
            callers: 0,
            writes: 0,
            after: None,
        };
        let mut next = Some(first);
        while let Some(job) = next.take() {
            if !b.take(job, add) {
                return b;
            }
            if b.writes < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        // Callers answered by the last commit come back; those queued already are here.
        let present = if waited { 0 } else { b.callers };
        // Writes that ride wait for one caller at least.
        let expected = (pace.answered + present).max(1);
        let started = Instant::now();
        while b.callers < expected && b.writes < MAX_BATCH {
            let until = started
                + if b.callers == 0 {
                    cap
                } else {
                    pace.took.min(cap)
                };
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                break;
            };
            match rx.recv_timeout(left) {
                Ok(job) => {
                    if !b.take(job, add) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        b
    }

    /// Add a write job (false: it was another job, which ends the batch).
    fn take(&mut self, job: Job, add: &mut dyn FnMut(&[Write])) -> bool {
        match job {
            Job::Writes(q) => {
                add(&q.writes);
                self.writes += q.writes.len();
                self.callers += usize::from(q.urgent);
                self.groups.push(q.writes);
                self.acks.push(q.ack);
                true
            }
            other => {
                self.after = Some(other);
                false
            }
        }
    }
}

/// A batch committed: its groups, their results (or what failed them all) and the time
/// the store spent on it, waits for callers left out.
struct Finished {
    batch: Batch,
    results: Result<Vec<Result<Applied, StoreError>>, Arc<StoreError>>,
    took: Duration,
}

/// Gather a batch from its first write and commit it. The commit opens at once and each
/// group is applied as it is taken, so the callers already here are written while the
/// thread waits for the others (`Batch::gather`); a poisoned store refuses them all.
fn commit_batch(
    store: &mut Store,
    rx: &mpsc::Receiver<Job>,
    first: Job,
    waited: bool,
    pace: &Pace,
    cap: Duration,
    poisoned: &Option<Arc<StoreError>>,
) -> Finished {
    if let Some(e) = poisoned {
        let batch = Batch::gather(rx, first, waited, pace, cap, &mut |_| {});
        return Finished {
            batch,
            results: Err(e.clone()),
            took: Duration::ZERO,
        };
    }
    let mut open = store.begin_groups();
    let mut busy = Duration::ZERO;
    let batch = Batch::gather(rx, first, waited, pace, cap, &mut |g| {
        if let Ok(gc) = &mut open {
            let t = Instant::now();
            gc.add(g);
            busy += t.elapsed();
        }
    });
    let started = Instant::now();
    let results = open.and_then(|gc| gc.commit(&batch.groups)).map_err(|e| {
        error!(error = %e, "store commit failed");
        Arc::new(e)
    });
    Finished {
        batch,
        results,
        took: busy + started.elapsed(),
    }
}

/// How full the commits were: commits by the callers they answered, and the writes and
/// groups they carried (the benchmarks print them; docs/leases.md, "Durability").
#[derive(Default)]
pub struct CommitSizes {
    /// Commits by callers answered: 0, 1, …, 16, and more than 16 in the last.
    by_callers: [AtomicU64; 18],
    writes: AtomicU64,
    groups: AtomicU64,
}

/// [`CommitSizes`] as read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitCounts {
    /// Commits by callers answered: index `i` for `i` callers, the last for more than 16.
    pub by_callers: Vec<u64>,
    pub commits: u64,
    pub writes: u64,
    pub groups: u64,
}

impl CommitSizes {
    fn note(&self, callers: usize, groups: usize, writes: usize) {
        let i = callers.min(self.by_callers.len() - 1);
        self.by_callers[i].fetch_add(1, Ordering::Relaxed);
        self.groups.fetch_add(groups as u64, Ordering::Relaxed);
        self.writes.fetch_add(writes as u64, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn read(&self) -> CommitCounts {
        let by_callers: Vec<u64> = self
            .by_callers
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        CommitCounts {
            commits: by_callers.iter().sum(),
            by_callers,
            writes: self.writes.load(Ordering::Relaxed),
            groups: self.groups.load(Ordering::Relaxed),
        }
    }
}

/// Handle to the store thread. Batches writes of concurrent callers into one commit.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
    sizes: Arc<CommitSizes>,
}

/// Most writes folded into one commit.
const MAX_BATCH: usize = 4096;

/// Longest a batch waits for callers to come back (see `Batch::gather`).
const MAX_GATHER: Duration = Duration::from_millis(2);

impl Writer {
    /// Move `store` to its own thread.
    pub fn spawn(store: Store) -> Writer {
        Writer::spawn_timed(store, None)
    }

    /// [`Writer::spawn`], observing each group commit's duration into `commits`.
    pub fn spawn_timed(mut store: Store, commits: Option<AtomicHistogram>) -> Writer {
        let (tx, rx) = mpsc::channel::<Job>();
        let sizes = Arc::new(CommitSizes::default());
        let counted = sizes.clone();
        std::thread::Builder::new()
            .name("proxypool-store".into())
            .spawn(move || {
                // After a failed commit memory is ahead of the store: every later write is
                // refused too (it may build on the lost one) until the engine re-synced the
                // endpoints named here. So nothing lands with a `from` the log never saw.
                let mut poisoned: Option<Arc<StoreError>> = None;
                let mut dirty = BTreeSet::new();
                let mut pace = Pace::default();
                while let Some((first, waited)) = next_job(&rx) {
                    let after = match first {
                        Job::Writes(_) => {
                            let done = commit_batch(
                                &mut store, &rx, first, waited, &pace, MAX_GATHER, &poisoned,
                            );
                            let Finished {
                                batch: b,
                                results,
                                took,
                            } = done;
                            pace = Pace {
                                answered: b.callers,
                                took,
                            };
                            if let Some(h) = &commits {
                                h.observe_duration(took);
                            }
                            counted.note(b.callers, b.groups.len(), b.writes);
                            let results: Vec<Committed> = match results {
                                Ok(rs) => rs.into_iter().map(|r| r.map_err(Arc::new)).collect(),
                                Err(e) => vec![Err(e); b.groups.len()],
                            };
                            for ((ack, r), g) in b.acks.into_iter().zip(results).zip(&b.groups) {
                                if let Err(e) = &r {
                                    g.iter().for_each(|w| endpoints_of(w, &mut dirty));
                                    poisoned.get_or_insert_with(|| e.clone());
                                }
                                let _ = ack.send(r);
                            }
                            b.after
                        }
                        other => Some(other),
                    };
                    // Calls run after the writes queued before them, keeping order.
                    match after {
                        Some(Job::Call(c)) => c(&mut store),
                        Some(Job::Lost(ids, e)) => {
                            dirty.extend(ids);
                            poisoned.get_or_insert(e);
                        }
                        Some(Job::Resync(reply)) => {
                            let rows = rows_of(&store, &dirty).map_err(Arc::new);
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
        Writer { tx, sizes }
    }

    /// Queue writes a caller is answered for once they are durable; the receiver resolves
    /// once they are committed. The commit starts without delay.
    pub fn queue(&self, writes: Vec<Write>) -> oneshot::Receiver<Committed> {
        self.send(writes, true)
    }

    /// Queue writes nobody is answered for: they ride in the next commit a caller's
    /// writes start, in order with everything queued (or after `MAX_GATHER` without one).
    /// The receiver resolves once they are committed; it may be dropped.
    pub fn ride(&self, writes: Vec<Write>) -> oneshot::Receiver<Committed> {
        self.send(writes, false)
    }

    fn send(&self, writes: Vec<Write>, urgent: bool) -> oneshot::Receiver<Committed> {
        let (ack, rx) = oneshot::channel();
        if writes.is_empty() {
            let _ = ack.send(Ok(Applied::default()));
        } else if self
            .tx
            .send(Job::Writes(Queued {
                writes,
                ack,
                urgent,
            }))
            .is_err()
        {
            // The receiver sees a closed channel and reports it.
        }
        rx
    }

    /// Writes that were never sent, since the store is away: memory holds what they would
    /// have recorded, and is put back in line with the store by the next resync, before
    /// any later write is taken (`failed`: why).
    pub(super) fn lost(&self, writes: &[Write], failed: Arc<StoreError>) {
        let mut ids = BTreeSet::new();
        writes.iter().for_each(|w| endpoints_of(w, &mut ids));
        let _ = self.tx.send(Job::Lost(ids, failed));
    }

    /// How full the commits have been so far.
    pub fn commit_sizes(&self) -> CommitCounts {
        self.sizes.read()
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

/// The rows of the endpoints a failed commit named, and their pairs, as the store holds
/// them now (none for an endpoint gone).
fn rows_of(store: &Store, dirty: &BTreeSet<EndpointId>) -> Result<Vec<RowAndPairs>, StoreError> {
    dirty
        .iter()
        .map(|&id| {
            let row = store.get(id)?;
            let pairs = match row {
                Some(_) => store.pairs_of(id)?,
                None => Vec::new(),
            };
            Ok((id, row, pairs))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(tx: &mpsc::Sender<Job>, urgent: bool) {
        let (ack, _) = oneshot::channel();
        let writes = vec![Write::Remove(vec![1])];
        tx.send(Job::Writes(Queued {
            writes,
            ack,
            urgent,
        }))
        .unwrap();
    }

    fn write(tx: &mpsc::Sender<Job>) {
        send(tx, true);
    }

    fn ride(tx: &mpsc::Sender<Job>) {
        send(tx, false);
    }

    #[test]
    fn a_batch_takes_the_queued_writes_up_to_a_call_which_runs_after_them() {
        let (tx, rx) = mpsc::channel();
        for _ in 0..3 {
            write(&tx);
        }
        tx.send(Job::Call(Box::new(|_| {}))).unwrap();
        write(&tx);
        let (first, waited) = next_job(&rx).unwrap();
        // Each group is handed on (applied) as it is taken.
        let mut added = Vec::new();
        let b = Batch::gather(&rx, first, waited, &Pace::default(), MAX_GATHER, &mut |g| {
            added.push(g.len())
        });
        assert_eq!((b.groups.len(), b.acks.len()), (3, 3));
        assert_eq!(added, [1, 1, 1]);
        assert!(matches!(b.after, Some(Job::Call(_))));
        // The write behind the call is the next batch's.
        assert!(matches!(rx.try_recv(), Ok(Job::Writes(..))));
    }

    #[test]
    fn a_batch_waits_no_longer_than_the_previous_commit_took() {
        let (tx, rx) = mpsc::channel();
        write(&tx);
        // Five callers answered last time, none back yet: with a commit that took no
        // time there is nothing to wait for.
        let pace = Pace {
            answered: 5,
            took: Duration::ZERO,
        };
        let (first, waited) = next_job(&rx).unwrap();
        let b = gather(&rx, first, waited, &pace, MAX_GATHER);
        assert_eq!(b.groups.len(), 1);
        assert!(b.after.is_none());
    }

    #[test]
    fn a_batch_gathers_the_writes_sent_while_it_waits() {
        let (tx, rx) = mpsc::channel();
        write(&tx);
        // Two callers answered by the last commit, one write waiting: three expected.
        let pace = Pace {
            answered: 2,
            took: Duration::from_secs(60),
        };
        let (first, waited) = next_job(&rx).unwrap();
        // The two come back while the batch waits; it takes them and stops waiting once
        // the three are in (the cap is far away: the test would take a minute otherwise).
        let sender = std::thread::spawn(move || {
            // After the batch took what was queued (it counts those as present).
            std::thread::sleep(Duration::from_millis(200));
            write(&tx);
            write(&tx);
            tx
        });
        let started = Instant::now();
        let b = gather(&rx, first, waited, &pace, Duration::from_secs(60));
        assert_eq!(b.groups.len(), 3);
        assert!(started.elapsed() < Duration::from_secs(30));
        let tx = sender.join().unwrap();
        // A fourth write is the next batch's.
        write(&tx);
        assert!(matches!(rx.try_recv(), Ok(Job::Writes(..))));
    }

    #[test]
    fn writes_that_ride_wait_for_a_caller_and_commit_with_it() {
        let (tx, rx) = mpsc::channel();
        ride(&tx);
        let (first, waited) = next_job(&rx).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            write(&tx);
            tx
        });
        let started = Instant::now();
        let b = gather(
            &rx,
            first,
            waited,
            &Pace::default(),
            Duration::from_secs(60),
        );
        assert_eq!((b.groups.len(), b.callers, b.writes), (2, 1, 2));
        assert!(started.elapsed() < Duration::from_secs(30));
        drop(sender.join().unwrap());
    }

    #[test]
    fn writes_that_ride_commit_alone_once_the_cap_passed() {
        let (tx, rx) = mpsc::channel();
        ride(&tx);
        ride(&tx);
        let (first, waited) = next_job(&rx).unwrap();
        let started = Instant::now();
        let cap = Duration::from_millis(50);
        let b = gather(&rx, first, waited, &Pace::default(), cap);
        assert!(started.elapsed() >= cap);
        assert_eq!((b.groups.len(), b.callers), (2, 0));
        assert!(b.after.is_none());
        drop(tx);
    }

    #[test]
    fn a_read_behind_writes_that_ride_commits_them_at_once() {
        let (tx, rx) = mpsc::channel();
        ride(&tx);
        tx.send(Job::Call(Box::new(|_| {}))).unwrap();
        let (first, waited) = next_job(&rx).unwrap();
        let started = Instant::now();
        let b = gather(
            &rx,
            first,
            waited,
            &Pace::default(),
            Duration::from_secs(60),
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!((b.groups.len(), b.callers), (1, 0));
        assert!(matches!(b.after, Some(Job::Call(_))));
    }

    /// A batch gathered with nothing applied as it comes.
    fn gather(
        rx: &mpsc::Receiver<Job>,
        first: Job,
        waited: bool,
        pace: &Pace,
        cap: Duration,
    ) -> Batch {
        Batch::gather(rx, first, waited, pace, cap, &mut |_| {})
    }

    fn send_writes(tx: &mpsc::Sender<Job>, writes: Vec<Write>) -> oneshot::Receiver<Committed> {
        let (ack, rx) = oneshot::channel();
        let q = Queued {
            writes,
            ack,
            urgent: true,
        };
        tx.send(Job::Writes(q)).unwrap();
        rx
    }

    fn operator_event(detail: &str) -> Vec<Write> {
        vec![Write::Event(crate::store::NewEvent {
            detail: Some(detail.into()),
            ..crate::store::NewEvent::new(crate::event_kind::EventKind::Operator)
        })]
    }

    /// The commit opens with the first write and applies it before the wait for the
    /// second; both land in the one commit, in order. A poisoned store writes nothing.
    #[test]
    fn groups_taken_while_a_batch_waits_commit_with_the_first_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("p.db")).unwrap();
        let (tx, rx) = mpsc::channel();
        send_writes(&tx, operator_event("first"));
        let pace = Pace {
            answered: 1,
            took: Duration::from_secs(60),
        };
        let (first, waited) = next_job(&rx).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            send_writes(&tx, operator_event("late"));
            tx
        });
        let done = commit_batch(
            &mut store,
            &rx,
            first,
            waited,
            &pace,
            Duration::from_secs(60),
            &None,
        );
        let tx = sender.join().unwrap();
        assert_eq!((done.batch.groups.len(), done.batch.callers), (2, 2));
        let results = done.results.unwrap();
        assert!(results.len() == 2 && results.iter().all(Result::is_ok));
        let details = |store: &Store| -> Vec<Option<String>> {
            let events = store.events(None, 0, 10).unwrap();
            events.into_iter().map(|e| e.detail).collect()
        };
        let want = [Some("first".to_string()), Some("late".to_string())];
        assert_eq!(details(&store), want);

        send_writes(&tx, operator_event("refused"));
        let (first, waited) = next_job(&rx).unwrap();
        let poison = Some(Arc::new(StoreError::Sqlite(rusqlite::Error::InvalidQuery)));
        let done = commit_batch(
            &mut store,
            &rx,
            first,
            waited,
            &Pace::default(),
            MAX_GATHER,
            &poison,
        );
        assert!(done.results.is_err());
        assert_eq!(details(&store), want);
    }

    #[test]
    fn commit_sizes_count_commits_by_callers() {
        let sizes = CommitSizes::default();
        sizes.note(0, 2, 3);
        sizes.note(8, 16, 24);
        sizes.note(40, 40, 40);
        let c = sizes.read();
        assert_eq!((c.commits, c.groups, c.writes), (3, 58, 67));
        assert_eq!(
            (c.by_callers[0], c.by_callers[8], c.by_callers[17]),
            (1, 1, 1)
        );
    }
}
