//! Following the fleet: what other daemons (and CLI commands) changed, in commit order.
//!
//! Every writing transaction notifies `proxypool_changes` after commit; the feed listens on
//! a connection of its own and, woken by a notification or by its poll interval (so a lost
//! notification only delays), reads the rows whose change number is past the last one it
//! saw, and the removals (docs/fleet.md, "Propagation"). A daemon that was away longer
//! than the removals are kept reloads everything.

use std::time::Duration;

use std::future::Future;

use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::read::{endpoint_row, pair_row, ENDPOINT_COLS, PAIR_COLS};
use super::write::CHANNEL;
use super::Postgres;
use crate::endpoint::EndpointId;
use crate::store::pairs::PairRow;
use crate::store::{ClaimOn, EndpointRow, Epoch, Fresh, StoreError};

/// Endpoint rows read per call: an import of millions arrives in slices.
const SLICE: i64 = 20_000;

/// What changed since the last call.
#[derive(Debug, Default)]
pub struct Changes {
    /// The change number everything up to which is now included.
    pub seq: i64,
    /// Removals and recoveries were pruned past the last change seen: `endpoints` and
    /// `pairs` are everything, and whatever is not in them is gone.
    pub reload: bool,
    /// Endpoint rows written since, with their current content.
    pub endpoints: Vec<EndpointRow>,
    /// Pair rows written since.
    pub pairs: Vec<PairRow>,
    /// Endpoints removed (`None`) and pairs deleted (`Some(destination)`), with the change
    /// that did it.
    pub removed: Vec<(i64, EndpointId, Option<String>)>,
    /// More is waiting (a large change arrives in slices): call again at once.
    pub more: bool,
}

struct Listener {
    rx: mpsc::UnboundedReceiver<()>,
}

/// A reader of the change sequence; see the module documentation.
pub struct Feed {
    pg: Postgres,
    last: i64,
    /// While a large change is read in slices: (the change it reads up to, the last
    /// endpoint (rev, id) read).
    slicing: Option<(i64, (i64, EndpointId))>,
    listener: Option<Listener>,
}

impl Feed {
    /// Follow from change `from` (read before the state it applies to was loaded).
    pub fn new(pg: Postgres, from: i64) -> Feed {
        Feed {
            pg,
            last: from,
            slicing: None,
            listener: None,
        }
    }

    /// The last change included.
    pub fn position(&self) -> i64 {
        self.last
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
                let closed = self.pg.block(async {
                    match tokio::time::timeout(wait, l.rx.recv()).await {
                        Ok(Some(())) => {
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
        let changes = self.read()?;
        // Listening failed but reading worked: try again next time, the poll covers it.
        drop(listening);
        Ok(changes)
    }

    fn read(&mut self) -> Result<Changes, StoreError> {
        /// What one read found, and where the next slice of a long catch-up starts.
        type Slice = (Changes, Option<(i64, i64)>);
        let pg = self.pg.clone();
        let (last, slicing) = (self.last, self.slicing);
        let (out, cursor) = pg.block(async {
            let mut c = pg.client().await?;
            let r: Result<Result<Slice, StoreError>, tokio_postgres::Error> = async {
                let tx = c
                    .build_transaction()
                    .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .await?;
                let head = tx
                    .query_one(
                        "SELECT change_seq, removed_through FROM fleet_sequence WHERE id = 1",
                        &[],
                    )
                    .await?;
                let (now_seq, pruned): (i64, i64) = (head.get(0), head.get(1));
                let (upto, after) = slicing.unwrap_or((now_seq, (last, EndpointId::MAX)));
                let mut out = Changes {
                    seq: upto,
                    ..Changes::default()
                };
                if upto <= last {
                    out.seq = last;
                    return Ok(Ok((out, None)));
                }
                out.reload = pruned > last && slicing.is_none();
                let (from, after, limit) = if out.reload {
                    (0, (0, 0), i64::MAX)
                } else {
                    (last, after, SLICE)
                };
                let sql = format!(
                    "SELECT {ENDPOINT_COLS} FROM endpoints WHERE (rev, id) > ($1, $2) \
                         AND rev > $3 AND rev <= $4 ORDER BY rev, id LIMIT $5"
                );
                let rows = tx
                    .query(&sql, &[&after.0, &after.1, &from, &upto, &limit])
                    .await?;
                for r in &rows {
                    match endpoint_row(r) {
                        Ok(row) => out.endpoints.push(row),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                if rows.len() as i64 == limit {
                    let cursor = out.endpoints.last().map(|r| (r.rev, r.id));
                    out.more = true;
                    return Ok(Ok((out, cursor)));
                }
                let pairs = format!(
                    "SELECT {PAIR_COLS} FROM destination_pairs p \
                         JOIN endpoints e ON e.id = p.endpoint \
                         WHERE p.rev > $1 AND p.rev <= $2 ORDER BY p.rev"
                );
                for r in &tx.query(&pairs, &[&from, &upto]).await? {
                    match pair_row(r) {
                        Ok(row) => out.pairs.push(row),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                if !out.reload {
                    let removed = tx
                        .query(
                            "SELECT rev, endpoint, destination FROM fleet_removals \
                                 WHERE rev > $1 AND rev <= $2 ORDER BY rev",
                            &[&from, &upto],
                        )
                        .await?;
                    for r in &removed {
                        out.removed.push((r.get(0), r.get(1), r.get(2)));
                    }
                }
                tx.commit().await?;
                Ok(Ok((out, None)))
            }
            .await;
            r.map_err(|e| pg.err(e))?
        })?;
        match cursor {
            Some(c) => self.slicing = Some((out.seq, c)),
            None => {
                self.slicing = None;
                self.last = self.last.max(out.seq);
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
    pub fn endpoints(&self, ids: &[EndpointId]) -> Result<Vec<Fresh>, StoreError> {
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
                Fresh::Endpoint(id, row)
            })
            .collect())
    }

    /// The rows of these pairs as they are now (None: no row, the pair is available).
    pub fn pairs(&self, keys: &[(EndpointId, String)]) -> Result<Vec<Fresh>, StoreError> {
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
                Fresh::Pair(*id, d.clone(), row)
            })
            .collect())
    }
}
