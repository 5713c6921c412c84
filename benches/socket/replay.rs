//! The replay servers: a connection's lines answered with recorded answers, in turn,
//! without parsing anything. For lease+release each answer goes back at once (the floor of
//! that pair). For lease + failure report ("the same rows, answered") the report's answer
//! goes back once a commit holding that report's rows is durable: one thread commits,
//! opening a transaction when the first report comes and writing each report's share of a
//! traced daemon commit as it comes (as the daemon's store thread does), and committing
//! when `group` reports are in, or after 5 ms without one. It knows how many callers will
//! come, which the daemon cannot. Either it hands reports to a commit thread, as the
//! daemon does, or ("inline") its runtime thread writes and commits them itself: no
//! thread hand-off, the runtime blocked while the disk flushes (every caller is waiting
//! for that commit anyway).

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::same_rows::{Bare, Commit, Step};

/// The longest a commit waits for the rest of its group: a longer gap (the end of a run,
/// whose callers stopped) commits the reports already in.
const STRAGGLER: Duration = Duration::from_millis(5);

/// Reports waiting for their commit: each sends the commit thread its answer's trigger.
type Commits = mpsc::Sender<oneshot::Sender<()>>;

/// Who commits a report's rows before its answer goes back.
#[derive(Clone)]
pub enum Committer {
    Thread(Commits),
    Inline(Arc<Mutex<Group>>),
}

/// The open commit of the answered floor: the reports in it, and where the traced shares
/// go on.
pub struct Group {
    bare: Bare,
    shares: Vec<Vec<Step>>,
    at: usize,
    size: usize,
    acks: Vec<oneshot::Sender<()>>,
}

impl Group {
    fn new(bare: Bare, commit: &Commit, size: usize) -> Group {
        assert_eq!(
            commit.pairs % size,
            0,
            "a group of {size} must divide a traced commit's {} pairs",
            commit.pairs
        );
        Group {
            bare,
            shares: commit.shares(),
            at: 0,
            size,
            acks: Vec::new(),
        }
    }

    /// Writes the next share for a report answered by `ack`; commits once the group is in.
    fn add(&mut self, ack: oneshot::Sender<()>) {
        if self.acks.is_empty() {
            self.bare.begin();
        }
        self.bare.write(&self.shares[self.at % self.shares.len()]);
        self.at += 1;
        self.acks.push(ack);
        if self.acks.len() == self.size {
            self.commit();
        }
    }

    /// Commits the reports in (if any) and answers them.
    fn commit(&mut self) {
        if self.acks.is_empty() {
            return;
        }
        self.bare.commit_open();
        for a in self.acks.drain(..) {
            let _ = a.send(());
        }
        // A short commit (the end of a run) must not shift the next ones off the traced
        // commits' bounds, or each would write two traced commits' endpoints.
        self.at = self.at.next_multiple_of(self.size);
    }
}

/// Starts "the same rows, answered" on a socket under `dir`: `group` reports a commit (a
/// divisor of the pairs of `commit`'s kind), on a database of `n` endpoints of its own,
/// committed on a thread of its own or, `inline`, on the server's runtime thread.
/// `lease_reply` and `report_reply` are the daemon's answers, sent back verbatim.
#[allow(clippy::too_many_arguments)]
pub fn start_answered(
    dir: &Path,
    name: &str,
    n: usize,
    commit: &Commit,
    group: usize,
    inline: bool,
    lease_reply: &'static str,
    report_reply: &'static str,
) -> PathBuf {
    let group = Group::new(Bare::open(dir, &format!("{name}.db"), n), commit, group);
    let committer = if inline {
        Committer::Inline(Arc::new(Mutex::new(group)))
    } else {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("floor-store".into())
            .spawn(move || commit_thread(group, rx))
            .unwrap();
        Committer::Thread(tx)
    };
    start(dir, name, lease_reply, report_reply, Some(committer))
}

/// Starts a replay server on `NAME.sock` under `dir`, on a runtime thread of its own;
/// with a `committer`, each second answer waits for its commit.
pub fn start(
    dir: &Path,
    name: &str,
    lease_reply: &'static str,
    then_reply: &'static str,
    committer: Option<Committer>,
) -> PathBuf {
    let path = dir.join(format!("{name}.sock"));
    let p = path.clone();
    super::support::on_own_runtime(move |ready| async move {
        let l = UnixListener::bind(&p).unwrap();
        ready.send(()).unwrap();
        serve(l, lease_reply, then_reply, committer).await;
    });
    path
}

fn commit_thread(mut group: Group, rx: mpsc::Receiver<oneshot::Sender<()>>) {
    while let Ok(first) = rx.recv() {
        group.add(first);
        while !group.acks.is_empty() {
            match rx.recv_timeout(STRAGGLER) {
                Ok(ack) => group.add(ack),
                Err(_) => group.commit(),
            }
        }
    }
}

/// Waits until a report's rows are durable; false if they never will be.
async fn committed(committer: &Committer) -> bool {
    let (ack, mut done) = oneshot::channel();
    match committer {
        Committer::Thread(tx) => tx.send(ack).is_ok() && done.await.is_ok(),
        Committer::Inline(group) => {
            group.lock().unwrap().add(ack);
            if tokio::time::timeout(STRAGGLER, &mut done).await.is_ok() {
                return true;
            }
            // Nobody else came: commit what is in (perhaps already done by another).
            group.lock().unwrap().commit();
            done.await.is_ok()
        }
    }
}

async fn serve(
    l: UnixListener,
    lease_reply: &'static str,
    then_reply: &'static str,
    committer: Option<Committer>,
) {
    loop {
        let Ok((s, _)) = l.accept().await else { return };
        let committer = committer.clone();
        tokio::spawn(async move {
            let (r, mut w) = s.into_split();
            let mut r = BufReader::new(r);
            let mut line = String::new();
            for turn in 0usize.. {
                line.clear();
                match r.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let reply = if turn % 2 == 0 {
                    lease_reply
                } else {
                    if let Some(c) = &committer {
                        if !committed(c).await {
                            return;
                        }
                    }
                    then_reply
                };
                if w.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}
