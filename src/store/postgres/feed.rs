//! Following the fleet: what other daemons (and CLI commands) changed.
//!
//! Every writing transaction notifies `proxypool_changes` after commit; the feed listens on
//! a connection of its own and, woken by a notification or by its poll interval (so a lost
//! notification only delays), reads what changed (docs/fleet.md, "Propagation"); while the
//! fleet writes a stream it does not listen and reads every `STREAM_GAP` (`Feed::next`).
//!
//! Change numbers are taken before commit, so they commit in any order: "every number past
//! the last one seen" would miss a transaction that took its number first and committed
//! last. The feed goes by transaction ids instead. A read's snapshot has an `xmin`: every
//! transaction with a smaller id had ended when it was taken, so whatever commits later
//! was made by a transaction with an id of at least that. Each read therefore takes the
//! changes (`fleet_changes`) of transactions with ids from the previous read's `xmin` on,
//! less those it already applied, and the rows, pairs and removals those changes wrote
//! (`rev`). A daemon that was away longer than changes are kept reloads everything.

use std::collections::HashMap;
use std::task::Poll;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::feed_read::{read, Changes, Next, Position, Slicing};
use super::read::{endpoint_row, pair_row, ENDPOINT_COLS, PAIR_COLS};
use super::statements::CHANNEL;
use super::Postgres;
use crate::endpoint::EndpointId;
use crate::store::{ClaimOn, Epoch, RowNow, StoreError};

/// Reads woken by notifications are at least this far apart: each costs every daemon a
/// few statements, and under a stream of commits one read covers many of them.
const GAP: Duration = Duration::from_millis(10);

/// The gap after a read that found at least `STREAM` changes: the fleet is writing a
/// stream, and each read costs the database and every daemon about as much as a group
/// commit does, so reads that cover more leave more of both to the commits. After a quiet
/// spell a change is read at once.
const STREAM_GAP: Duration = Duration::from_millis(25);
const STREAM: usize = 4;

/// The listening session: wake-ups out, and whether to listen in.
struct Listener {
    rx: mpsc::UnboundedReceiver<()>,
    ctl: mpsc::UnboundedSender<bool>,
    /// What the session was last asked: to listen, or not (in a stream).
    on: bool,
}

impl Listener {
    fn want(&mut self, on: bool) {
        if self.on != on {
            // A closed session is seen at the next wait.
            let _ = self.ctl.send(on);
            self.on = on;
        }
    }
}

/// What woke the listening session's task.
enum Woke {
    /// Its `LISTEN` (true) or `UNLISTEN` (false) finished, and whether it worked.
    Done(bool, bool),
    /// The feed asks to listen or not; `None`: the feed is gone.
    Ctl(Option<bool>),
    Notified,
    /// Another message from the server.
    Other,
    /// The connection ended.
    Ended,
}

/// A reader of the fleet's changes; see the module documentation.
pub struct Feed {
    pg: Postgres,
    at: Position,
    slicing: Option<Slicing>,
    listener: Option<Listener>,
    last_read: std::time::Instant,
    /// How far apart the next reads are: woken by notifications (`GAP`), or on a timer in
    /// a stream (`STREAM_GAP`).
    gap: Duration,
}

impl Feed {
    /// Follow from `xmin` (`Postgres::feed_start`, read before the state it applies to was
    /// loaded).
    pub fn new(pg: Postgres, xmin: i64) -> Feed {
        Feed {
            pg,
            at: Position {
                xmin,
                seen: HashMap::new(),
            },
            slicing: None,
            listener: None,
            last_read: std::time::Instant::now(),
            gap: GAP,
        }
    }

    /// Connect the listening session if it is not up: its own connection (not pooled),
    /// driven by a task that turns each notification into a wake-up and sends `LISTEN` or
    /// `UNLISTEN` as the feed asks (`Listener::want`).
    fn listen(&mut self) -> Result<(), StoreError> {
        if self.listener.is_some() {
            return Ok(());
        }
        let pg = self.pg.clone();
        let (rx, ctl) = self.pg.block(async {
            let tls = pg.target().connector()?;
            let (client, mut conn) = pg
                .target()
                .config()
                .connect(tls)
                .await
                .map_err(|e| pg.err(e))?;
            let (tx, rx) = mpsc::unbounded_channel();
            let (ctl, mut ctl_rx) = mpsc::unbounded_channel::<bool>();
            tokio::spawn(async move {
                // The client lives in here (dropping it would close the connection);
                // LISTEN and UNLISTEN go through it as the feed asks.
                let (listen, unlisten) =
                    (format!("LISTEN {CHANNEL}"), format!("UNLISTEN {CHANNEL}"));
                let sql = |on: bool| {
                    if on {
                        listen.as_str()
                    } else {
                        unlisten.as_str()
                    }
                };
                let mut cmd: Option<(bool, BoxFuture<'_, Result<(), tokio_postgres::Error>>)> =
                    Some((true, Box::pin(client.batch_execute(sql(true)))));
                loop {
                    let woke = std::future::poll_fn(|cx| {
                        if let Some((on, f)) = cmd.as_mut() {
                            if let Poll::Ready(r) = f.as_mut().poll(cx) {
                                let on = *on;
                                cmd = None;
                                return Poll::Ready(Woke::Done(on, r.is_ok()));
                            }
                        } else if let Poll::Ready(c) = ctl_rx.poll_recv(cx) {
                            return Poll::Ready(Woke::Ctl(c));
                        }
                        conn.poll_message(cx).map(|m| match m {
                            Some(Ok(AsyncMessage::Notification(_))) => Woke::Notified,
                            Some(Ok(_)) => Woke::Other,
                            Some(Err(_)) | None => Woke::Ended,
                        })
                    })
                    .await;
                    let wake = match woke {
                        // Listening: whatever happened before it is read once.
                        Woke::Done(true, true) => true,
                        Woke::Done(false, true) => false,
                        Woke::Ctl(Some(on)) => {
                            cmd = Some((on, Box::pin(client.batch_execute(sql(on)))));
                            false
                        }
                        Woke::Notified => true,
                        Woke::Other => false,
                        // Refused, the feed gone, or the connection ended: the receiver
                        // sees the channel close.
                        Woke::Done(_, false) | Woke::Ctl(None) | Woke::Ended => return,
                    };
                    if wake && tx.send(()).is_err() {
                        return;
                    }
                }
            });
            Ok::<_, StoreError>((rx, ctl))
        })?;
        self.listener = Some(Listener { rx, ctl, on: true });
        Ok(())
    }

    /// Wait up to `wait` for a notification (not at all while a large change is being
    /// read), then read what changed. In a stream (`STREAM_GAP`) the session does not
    /// listen and the read comes `STREAM_GAP` after the last: every notification wakes
    /// each daemon's listening session on the server, and in a stream a read is due before
    /// the next one would help (BENCHMARKS.md, "PostgreSQL fleet"). After a read that found
    /// fewer, it listens again, and reads once more when it does.
    pub fn next(&mut self, wait: Duration) -> Result<Changes, StoreError> {
        let listening = self.listen();
        if self.slicing.is_none() {
            if let (Ok(()), Some(l)) = (&listening, self.listener.as_mut()) {
                let (last, gap) = (self.last_read, self.gap);
                let stream = gap == STREAM_GAP;
                l.want(!stream);
                let closed = self.pg.block(async {
                    if stream {
                        tokio::time::sleep(gap.saturating_sub(last.elapsed()).min(wait)).await;
                        return drained(&mut l.rx);
                    }
                    match tokio::time::timeout(wait, l.rx.recv()).await {
                        Ok(Some(())) => {
                            // Under a stream of commits, one read for all that arrive
                            // within `gap` of the last one.
                            let since = last.elapsed();
                            if since < gap {
                                tokio::time::sleep(gap - since).await;
                            }
                            drained(&mut l.rx)
                        }
                        Ok(None) => true,
                        Err(_) => false,
                    }
                });
                if closed {
                    self.listener = None;
                }
            } else if self.gap == STREAM_GAP {
                // No listening session, in a stream: the same pace as with one.
                std::thread::sleep(
                    STREAM_GAP
                        .saturating_sub(self.last_read.elapsed())
                        .min(wait),
                );
            } else {
                // Not listening (the database is away): poll at the same pace.
                std::thread::sleep(wait);
            }
        }
        self.last_read = std::time::Instant::now();
        let changes = self.read()?;
        self.gap = match changes.seqs.len() >= STREAM {
            true => STREAM_GAP,
            false => GAP,
        };
        // Listening failed but reading worked: try again next time, the poll covers it.
        drop(listening);
        Ok(changes)
    }

    fn read(&mut self) -> Result<Changes, StoreError> {
        let pg = self.pg.clone();
        let (at, slicing) = (&self.at, &self.slicing);
        let (out, next) = pg.block(async {
            let mut c = pg.client().await?;
            read(&mut c, at, slicing.as_ref())
                .await
                .map_err(|e| e.into_store(&pg))
        })?;
        match next {
            Next::Slice(s) => self.slicing = Some(s),
            Next::Done(p) => {
                self.slicing = None;
                self.at = p;
            }
        }
        Ok(out)
    }

    /// Keep this daemon's claims from lapsing while their trials run: each (slot, epoch)
    /// holds for `hold` more, by the database's clock. Returns how many were still current.
    pub fn renew(&self, claims: &[(ClaimOn, Epoch, Duration)]) -> Result<u64, StoreError> {
        if claims.is_empty() {
            return Ok(0);
        }
        let (mut ids, mut epochs, mut holds) = (Vec::new(), Vec::new(), Vec::new());
        let (mut pids, mut pdests, mut pepochs, mut pholds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (on, epoch, hold) in claims {
            let ms = hold.as_millis().clamp(1, i64::MAX as u128) as i64;
            match on {
                ClaimOn::Endpoint(id) => {
                    ids.push(*id);
                    epochs.push(*epoch);
                    holds.push(ms);
                }
                ClaimOn::Pair(id, d) => {
                    pids.push(*id);
                    pdests.push(d.clone());
                    pepochs.push(*epoch);
                    pholds.push(ms);
                }
            }
        }
        let pg = &self.pg;
        pg.block(async {
            let c = pg.client().await?;
            let r: Result<u64, tokio_postgres::Error> = async {
                let a = c
                    .execute(
                        "UPDATE endpoints e SET claim_until = now() + v.ms * interval '1 millisecond' \
                         FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[]) AS v(id, ep, ms) \
                         WHERE e.id = v.id AND e.claim_epoch = v.ep AND e.claim_until IS NOT NULL",
                        &[&ids, &epochs, &holds],
                    )
                    .await?;
                let b = c
                    .execute(
                        "UPDATE destination_pairs p SET claim_until = now() + v.ms * interval '1 millisecond' \
                         FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::bigint[]) AS v(id, d, ep, ms) \
                         WHERE p.endpoint = v.id AND p.destination = v.d AND p.claim_epoch = v.ep \
                           AND p.claim_until IS NOT NULL",
                        &[&pids, &pdests, &pepochs, &pholds],
                    )
                    .await?;
                Ok(a + b)
            }
            .await;
            r.map_err(|e| pg.err(e))
        })
    }

    /// The rows of these endpoints as they are now (None: removed), for memory to follow
    /// after writes it could not commit.
    pub fn endpoints(&self, ids: &[EndpointId]) -> Result<Vec<RowNow>, StoreError> {
        let pg = &self.pg;
        let sql = format!("SELECT {ENDPOINT_COLS} FROM endpoints WHERE id = ANY($1::bigint[])");
        let rows = pg.rows(&sql, &[&ids])?;
        let mut found = Vec::with_capacity(rows.len());
        for r in &rows {
            found.push(endpoint_row(r)?);
        }
        Ok(ids
            .iter()
            .map(|&id| {
                let row = found.iter().find(|r| r.id == id).cloned().map(Box::new);
                RowNow::Endpoint(id, row)
            })
            .collect())
    }

    /// The rows of these pairs as they are now (None: no row, the pair is available).
    pub fn pairs(&self, keys: &[(EndpointId, String)]) -> Result<Vec<RowNow>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, dests): (Vec<i64>, Vec<String>) = keys.iter().cloned().unzip();
        let sql = format!(
            "SELECT {PAIR_COLS} FROM destination_pairs p JOIN endpoints e ON e.id = p.endpoint \
             WHERE (p.endpoint, p.destination) IN (SELECT * FROM UNNEST($1::bigint[], $2::text[]))"
        );
        let rows = self.pg.rows(&sql, &[&ids, &dests])?;
        let mut found = Vec::with_capacity(rows.len());
        for r in &rows {
            found.push(pair_row(r)?);
        }
        Ok(keys
            .iter()
            .map(|(id, d)| {
                let row = found
                    .iter()
                    .find(|p| p.record.endpoint == *id && &p.record.destination == d)
                    .cloned()
                    .map(Box::new);
                RowNow::Pair(*id, d.clone(), row)
            })
            .collect())
    }
}

/// Take every wake-up waiting; whether the session has ended.
fn drained(rx: &mut mpsc::UnboundedReceiver<()>) -> bool {
    loop {
        match rx.try_recv() {
            Ok(()) => {}
            Err(mpsc::error::TryRecvError::Empty) => return false,
            Err(mpsc::error::TryRecvError::Disconnected) => return true,
        }
    }
}
