//! Following the fleet: what other daemons (and CLI commands) changed.
//!
//! Every writing transaction notifies `proxypool_changes` after commit; the feed listens on
//! a connection of its own and, woken by a notification or by its poll interval (so a lost
//! notification only delays), reads what changed (docs/fleet.md, "Propagation").
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
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::read::{endpoint_row, pair_row, ENDPOINT_COLS, PAIR_COLS};
use super::statements::CHANNEL;
use super::tx_error::TxError;
use super::Postgres;
use crate::endpoint::EndpointId;
use crate::store::pairs::PairRow;
use crate::store::{ClaimOn, EndpointRow, Epoch, RowNow, StoreError};

/// Endpoint rows read per call: an import of millions arrives in slices.
const SLICE: i64 = 20_000;

/// Reads woken by notifications are at least this far apart: each costs every daemon a
/// few statements, and under a stream of commits one read covers many of them.
const GAP: Duration = Duration::from_millis(10);

/// What changed since the last call.
#[derive(Debug, Default)]
pub struct Changes {
    /// The changes whose rows this read applies (each change number once, ever).
    pub seqs: Vec<i64>,
    /// Removals and recoveries were pruned past the last read: `endpoints` and `pairs` are
    /// everything, and whatever is not in them is gone.
    pub reload: bool,
    /// Endpoint rows written by those changes, with their current content.
    pub endpoints: Vec<EndpointRow>,
    /// Pair rows written by them.
    pub pairs: Vec<PairRow>,
    /// Endpoints removed (`None`) and pairs deleted and not written again since
    /// (`Some(destination)`), with the change that did it.
    pub removed: Vec<(i64, EndpointId, Option<String>)>,
    /// More is waiting (a large change arrives in slices): call again at once.
    pub more: bool,
}

struct Listener {
    rx: mpsc::UnboundedReceiver<()>,
}

/// A large change read in slices: the changes it reads, the last endpoint (rev, id) read,
/// and where the feed stands once it is done.
struct Slicing {
    seqs: Vec<i64>,
    after: (i64, EndpointId),
    done: Position,
}

/// Where the feed stands: the `xmin` of its last read, and the changes it applied whose
/// transaction ids are at least that (they are listed again by the next read).
#[derive(Debug, Clone, Default)]
struct Position {
    xmin: i64,
    seen: HashMap<i64, i64>,
}

/// A reader of the fleet's changes; see the module documentation.
pub struct Feed {
    pg: Postgres,
    at: Position,
    slicing: Option<Slicing>,
    listener: Option<Listener>,
    last_read: std::time::Instant,
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
        }
    }

    /// Connect the listening session if it is not up: its own connection (not pooled),
    /// driven by a task that turns each notification into a wake-up.
    fn listen(&mut self) -> Result<(), StoreError> {
        if self.listener.is_some() {
            return Ok(());
        }
        let pg = self.pg.clone();
        let rx = self.pg.block(async {
            let tls = pg.target().connector()?;
            let (client, mut conn) = pg
                .target()
                .config()
                .connect(tls)
                .await
                .map_err(|e| pg.err(e))?;
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(async move {
                // The client lives in here: dropping it would close the connection.
                let _client_guard = &client;
                let sql = format!("LISTEN {CHANNEL}");
                let listened = client.batch_execute(&sql);
                let mut listened = std::pin::pin!(listened);
                let mut listening = false;
                loop {
                    let msg = std::future::poll_fn(|cx| {
                        if !listening {
                            if let std::task::Poll::Ready(r) = listened.as_mut().poll(cx) {
                                listening = true;
                                if r.is_err() {
                                    return std::task::Poll::Ready(None);
                                }
                                // Whatever happened before LISTEN: read it once.
                                let _ = tx.send(());
                            }
                        }
                        conn.poll_message(cx)
                    })
                    .await;
                    match msg {
                        Some(Ok(AsyncMessage::Notification(_))) => {
                            if tx.send(()).is_err() {
                                return;
                            }
                        }
                        Some(Ok(_)) => {}
                        // The connection ended: the receiver sees the channel close.
                        Some(Err(_)) | None => return,
                    }
                }
            });
            Ok::<_, StoreError>(rx)
        })?;
        self.listener = Some(Listener { rx });
        Ok(())
    }

    /// Wait up to `wait` for a notification (not at all while a large change is being
    /// read), then read what changed.
    pub fn next(&mut self, wait: Duration) -> Result<Changes, StoreError> {
        let listening = self.listen();
        if self.slicing.is_none() {
            if let (Ok(()), Some(l)) = (&listening, self.listener.as_mut()) {
                let last = self.last_read;
                let closed = self.pg.block(async {
                    match tokio::time::timeout(wait, l.rx.recv()).await {
                        Ok(Some(())) => {
                            // Under a stream of commits, one read for all that arrive
                            // within `GAP` of the last one.
                            let since = last.elapsed();
                            if since < GAP {
                                tokio::time::sleep(GAP - since).await;
                            }
                            while l.rx.try_recv().is_ok() {}
                            false
                        }
                        Ok(None) => true,
                        Err(_) => false,
                    }
                });
                if closed {
                    self.listener = None;
                }
            } else {
                // Not listening (the database is away): poll at the same pace.
                std::thread::sleep(wait);
            }
        }
        self.last_read = std::time::Instant::now();
        let changes = self.read()?;
        // Listening failed but reading worked: try again next time, the poll covers it.
        drop(listening);
        Ok(changes)
    }

    fn read(&mut self) -> Result<Changes, StoreError> {
        let pg = self.pg.clone();
        let (at, slicing) = (&self.at, &self.slicing);
        let (out, next) = pg.block(async {
            let mut c = pg.client().await?;
            let r = async {
                let tx = c
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let out = read_in(&tx, at, slicing.as_ref()).await?;
                tx.commit().await?;
                Ok::<_, TxError>(out)
            }
            .await;
            r.map_err(|e| e.into_store(&pg))
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

/// Where a read leaves the feed.
enum Next {
    Slice(Slicing),
    Done(Position),
}

/// The changes to apply now (not applied yet, from transactions with ids from `at.xmin`
/// on), where the feed stands after them, and whether changes it never read were pruned.
async fn listed(
    tx: &tokio_postgres::Transaction<'_>,
    at: &Position,
) -> Result<(Vec<i64>, Position, bool), tokio_postgres::Error> {
    let head = tx
        .query_one(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, removed_through \
             FROM fleet_sequence WHERE id = 1",
            &[],
        )
        .await?;
    let (xmin, pruned): (i64, i64) = (head.get(0), head.get(1));
    let listed = tx
        .query(
            "SELECT seq, xid::text::bigint FROM fleet_changes \
             WHERE xid >= $1::bigint::text::xid8",
            &[&at.xmin],
        )
        .await?;
    let mut done = Position {
        xmin,
        seen: HashMap::new(),
    };
    let mut seqs = Vec::new();
    for r in &listed {
        let (seq, xid): (i64, i64) = (r.get(0), r.get(1));
        if !at.seen.contains_key(&seq) {
            seqs.push(seq);
        }
        if xid >= xmin {
            done.seen.insert(seq, xid);
        }
    }
    seqs.sort_unstable();
    Ok((seqs, done, pruned >= at.xmin))
}

/// The removals those changes made that still hold. A pair deleted and written again since
/// (by a change that took its number earlier and committed later) is there: its row says
/// so, not the tombstone.
async fn removals(
    tx: &tokio_postgres::Transaction<'_>,
    seqs: &[i64],
) -> Result<Vec<(i64, EndpointId, Option<String>)>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT r.rev, r.endpoint, r.destination FROM fleet_removals r \
             WHERE r.rev = ANY($1::bigint[]) AND (r.destination IS NULL OR NOT EXISTS ( \
               SELECT 1 FROM destination_pairs p \
               WHERE p.endpoint = r.endpoint AND p.destination = r.destination)) \
             ORDER BY r.rev",
            &[&seqs],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// One read in the snapshot of `tx`; see the module documentation.
async fn read_in(
    tx: &tokio_postgres::Transaction<'_>,
    at: &Position,
    slicing: Option<&Slicing>,
) -> Result<(Changes, Next), TxError> {
    let (seqs, after, done, reload) = match slicing {
        Some(s) => (s.seqs.clone(), s.after, s.done.clone(), false),
        None => {
            let (seqs, done, reload) = listed(tx, at).await?;
            (seqs, (i64::MIN, EndpointId::MIN), done, reload)
        }
    };
    let mut out = Changes {
        reload,
        ..Changes::default()
    };
    if seqs.is_empty() && !reload {
        return Ok((out, Next::Done(done)));
    }
    let rows = if reload {
        let sql = format!("SELECT {ENDPOINT_COLS} FROM endpoints ORDER BY id");
        tx.query(&sql, &[]).await?
    } else {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE rev = ANY($1::bigint[]) \
             AND (rev, id) > ($2, $3) ORDER BY rev, id LIMIT $4"
        );
        tx.query(&sql, &[&seqs, &after.0, &after.1, &SLICE]).await?
    };
    for r in &rows {
        out.endpoints.push(endpoint_row(r)?);
    }
    if !reload && rows.len() as i64 == SLICE {
        let last = out.endpoints.last().map_or(after, |r| (r.rev, r.id));
        out.more = true;
        return Ok((
            out,
            Next::Slice(Slicing {
                seqs,
                after: last,
                done,
            }),
        ));
    }
    let filter = if reload {
        ""
    } else {
        "WHERE p.rev = ANY($1::bigint[])"
    };
    let pairs = format!(
        "SELECT {PAIR_COLS} FROM destination_pairs p JOIN endpoints e ON e.id = p.endpoint \
         {filter} ORDER BY p.rev"
    );
    let pair_rows = if reload {
        tx.query(&pairs, &[]).await?
    } else {
        tx.query(&pairs, &[&seqs]).await?
    };
    for r in &pair_rows {
        out.pairs.push(pair_row(r)?);
    }
    if !reload {
        out.removed = removals(tx, &seqs).await?;
    }
    out.seqs = seqs;
    Ok((out, Next::Done(done)))
}
