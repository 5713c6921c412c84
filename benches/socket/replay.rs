//! The replay servers: a connection's lines answered with recorded answers, in turn,
//! without parsing anything. For lease+release each answer goes back at once (the floor of
//! that pair). For lease + failure report ("the same rows, answered") the report's answer
//! goes back once a commit holding that report's rows is durable: one thread commits,
//! opening a transaction when the first report comes and writing each report's share of a
//! traced daemon commit as it comes (as the daemon's store thread does), and committing
//! when `group` reports are in, or after 5 ms without one. It knows how many callers will
//! come, which the daemon cannot. It hands reports across threads as the daemon does; a
//! server committing on its own runtime thread might do better and was not tried.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
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

/// Starts "the same rows, answered" on a socket under `dir`: `group` reports a commit (a
/// divisor of the pairs of `commit`'s kind), on a database of `n` endpoints of its own.
/// `lease_reply` and `report_reply` are the daemon's answers, sent back verbatim.
pub fn start_answered(
    dir: &Path,
    name: &str,
    n: usize,
    commit: &Commit,
    group: usize,
    lease_reply: &'static str,
    report_reply: &'static str,
) -> PathBuf {
    let bare = Bare::open(dir, &format!("{name}.db"), n);
    assert_eq!(
        commit.pairs % group,
        0,
        "a group of {group} must divide a traced commit's {} pairs",
        commit.pairs
    );
    let shares = commit.shares();
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("floor-store".into())
        .spawn(move || commit_thread(bare, shares, group, rx))
        .unwrap();
    start(dir, name, lease_reply, report_reply, Some(tx))
}

/// Starts a replay server on `NAME.sock` under `dir`, on a runtime thread of its own;
/// with `commits`, each second answer waits for its commit.
pub fn start(
    dir: &Path,
    name: &str,
    lease_reply: &'static str,
    then_reply: &'static str,
    commits: Option<Commits>,
) -> PathBuf {
    let path = dir.join(format!("{name}.sock"));
    let p = path.clone();
    super::support::on_own_runtime(move |ready| async move {
        let l = UnixListener::bind(&p).unwrap();
        ready.send(()).unwrap();
        serve(l, lease_reply, then_reply, commits).await;
    });
    path
}

fn commit_thread(
    bare: Bare,
    shares: Vec<Vec<Step>>,
    group: usize,
    rx: mpsc::Receiver<oneshot::Sender<()>>,
) {
    let mut at = 0;
    let next = |at: &mut usize| {
        let s = &shares[*at % shares.len()];
        *at += 1;
        s
    };
    while let Ok(first) = rx.recv() {
        bare.begin();
        bare.write(next(&mut at));
        let mut acks = vec![first];
        while acks.len() < group {
            let Ok(ack) = rx.recv_timeout(STRAGGLER) else {
                break;
            };
            bare.write(next(&mut at));
            acks.push(ack);
        }
        bare.commit_open();
        for a in acks {
            let _ = a.send(());
        }
        // A short commit (the end of a run) must not shift the next ones off the traced
        // commits' bounds, or each would write two traced commits' endpoints.
        at = at.next_multiple_of(group);
    }
}

async fn serve(
    l: UnixListener,
    lease_reply: &'static str,
    then_reply: &'static str,
    commits: Option<Commits>,
) {
    loop {
        let Ok((s, _)) = l.accept().await else { return };
        let commits = commits.clone();
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
                    if let Some(commits) = &commits {
                        let (ack, done) = oneshot::channel();
                        if commits.send(ack).is_err() || done.await.is_err() {
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
