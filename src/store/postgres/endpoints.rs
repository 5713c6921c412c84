//! The endpoint set on PostgreSQL: adding (config sync, sources, `add`, `import`),
//! editing, removing, and pruning old events. Each is one transaction that takes the
//! fleet's next change number, so every daemon hears of it (docs/fleet.md, "Propagation").

use std::collections::HashSet;
use std::time::SystemTime;

use tokio_postgres::Transaction;

use super::read::{endpoint_row, ENDPOINT_COLS};
use super::statements::{lock_and_number, CHANNEL, EVENTS, NOTIFY, TOMBSTONES};
use super::tx_error::TxError;
use super::Postgres;
use crate::endpoint::{EndpointId, ProxyUrl};
use crate::event_kind::EventKind;
use crate::store::{EndpointRow, NewEndpoint, OnExisting, StoreError, ToInsert};

/// Rows per `INSERT` of an import (one statement of arrays each).
const ROWS_PER_INSERT: usize = 2048;

/// Tombstones are kept this long; a daemon that missed more reloads everything.
const TOMBSTONE_KEEP_SECS: i64 = 3600;

/// One above the largest id ever used: events outlive their endpoint, and a new endpoint
/// must never inherit a removed one's history.
const NEXT_ID: &str = "SELECT GREATEST(COALESCE((SELECT MAX(id) FROM endpoints), 0), \
     COALESCE((SELECT MAX(endpoint) FROM events), 0)) + 1";

const IDENTITY: &str = "SELECT id FROM endpoints WHERE pool = $1 AND scheme = $2 AND host = $3 \
     AND port = $4 AND \"user\" = $5";

const INSERT: &str = "INSERT INTO endpoints (id, pool, scheme, host, port, \"user\", password, \
       label, source, state, tags, streak, state_changed_at, created_at, rev) \
     SELECT i, p, sc, h, po, u, pw, l, so, st, tg, 0, now(), now(), $11 \
     FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], \
       $7::text[], $8::text[], $9::text[], $10::text[], $12::text[]) \
       AS v(i, p, sc, h, po, u, pw, l, so, st, tg)";

/// The `added` events of a batch: (endpoint, state, detail) each.
const ADDED: &str = "INSERT INTO events (endpoint, kind, to_state, detail) \
     SELECT e, 'added', s, d FROM UNNEST($1::bigint[], $2::text[], $3::text[]) \
     WITH ORDINALITY AS v(e, s, d, o) ORDER BY o";

async fn notify(tx: &Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    tx.execute(NOTIFY, &[&CHANNEL]).await.map(|_| ())
}

async fn lock(tx: &Transaction<'_>) -> Result<i64, tokio_postgres::Error> {
    lock_and_number(tx).await
}

/// The columns of `INSERT` for a batch of new endpoints starting at id `first`.
struct Batch {
    ids: Vec<i64>,
    pools: Vec<String>,
    schemes: Vec<String>,
    hosts: Vec<String>,
    ports: Vec<i32>,
    users: Vec<String>,
    passwords: Vec<Option<String>>,
    labels: Vec<Option<String>>,
    sources: Vec<Option<String>>,
    states: Vec<String>,
    tags: Vec<Option<String>>,
}

impl Batch {
    fn new<T: std::borrow::Borrow<NewEndpoint>>(first: i64, rows: &[T]) -> Batch {
        let mut b = Batch {
            ids: Vec::with_capacity(rows.len()),
            pools: Vec::with_capacity(rows.len()),
            schemes: Vec::with_capacity(rows.len()),
            hosts: Vec::with_capacity(rows.len()),
            ports: Vec::with_capacity(rows.len()),
            users: Vec::with_capacity(rows.len()),
            passwords: Vec::with_capacity(rows.len()),
            labels: Vec::with_capacity(rows.len()),
            sources: Vec::with_capacity(rows.len()),
            states: Vec::with_capacity(rows.len()),
            tags: Vec::with_capacity(rows.len()),
        };
        for (i, e) in rows.iter().enumerate() {
            let e = e.borrow();
            b.ids.push(first + i as i64);
            b.pools.push(e.pool.clone());
            b.schemes.push(e.url.scheme.as_str().to_string());
            b.hosts.push(e.url.host.clone());
            b.ports.push(i32::from(e.url.port));
            b.users.push(e.url.user_key().to_string());
            b.passwords.push(e.url.password.clone());
            b.labels.push(super::text(&e.label));
            b.sources.push(super::text(&e.source));
            b.states.push(e.state.as_str().to_string());
            b.tags.push(e.tags.to_column());
        }
        b
    }

    async fn insert(&self, tx: &Transaction<'_>, seq: i64) -> Result<(), tokio_postgres::Error> {
        tx.execute(
            INSERT,
            &[
                &self.ids,
                &self.pools,
                &self.schemes,
                &self.hosts,
                &self.ports,
                &self.users,
                &self.passwords,
                &self.labels,
                &self.sources,
                &self.states,
                &seq,
                &self.tags,
            ],
        )
        .await?;
        tx.execute(ADDED, &[&self.ids, &self.states, &self.sources])
            .await?;
        Ok(())
    }
}

/// A failed statement in a transaction that is still usable after a rollback to its
/// savepoint: the unique index found a clash.
fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
}

/// The ids of `eps` when every one is stored as given already (nothing to write).
async fn unchanged(
    c: &tokio_postgres::Client,
    eps: &[NewEndpoint],
) -> Result<Option<Vec<(EndpointId, bool)>>, tokio_postgres::Error> {
    let mut out = Vec::with_capacity(eps.len());
    for e in eps {
        let u = &e.url;
        let port = i32::from(u.port);
        let found = c
            .query_opt(
                "SELECT id, password, label, tags FROM endpoints WHERE pool = $1 AND scheme = $2 \
                 AND host = $3 AND port = $4 AND \"user\" = $5",
                &[&e.pool, &u.scheme.as_str(), &u.host, &port, &u.user_key()],
            )
            .await?;
        let Some(row) = found else { return Ok(None) };
        let label: Option<String> = row.get(2);
        let tags: Option<String> = row.get(3);
        let label_new = super::text(&e.label.clone().or(label.clone()));
        let tags_new = e.tags.to_column().or(tags.clone());
        if row.get::<_, Option<String>>(1) != u.password || label != label_new || tags != tags_new {
            return Ok(None);
        }
        out.push((row.get(0), false));
    }
    Ok(Some(out))
}

impl Postgres {
    /// Insert the endpoints that do not exist yet; existing ones get their password and
    /// label refreshed. Returns (id, newly added) per input.
    pub fn ensure_endpoints(
        &mut self,
        eps: &[NewEndpoint],
    ) -> Result<Vec<(EndpointId, bool)>, StoreError> {
        if eps.is_empty() {
            return Ok(Vec::new());
        }
        self.block(async {
            let mut c = self.client().await?;
            let r: Result<_, tokio_postgres::Error> = async {
                // A daemon's start syncs its config: when nothing is new, it need not wait
                // for the tables (`lock`).
                if let Some(same) = unchanged(&c, eps).await? {
                    return Ok(same);
                }
                let tx = c.transaction().await?;
                let seq = lock(&tx).await?;
                let mut next: i64 = tx.query_one(NEXT_ID, &[]).await?.get(0);
                let mut out = Vec::with_capacity(eps.len());
                let mut changed = false;
                for e in eps {
                    let u = &e.url;
                    let port = i32::from(u.port);
                    let found = tx
                        .query_opt(
                            "SELECT id, password, label, tags FROM endpoints WHERE pool = $1 AND scheme = $2 \
                             AND host = $3 AND port = $4 AND \"user\" = $5",
                            &[&e.pool, &u.scheme.as_str(), &u.host, &port, &u.user_key()],
                        )
                        .await?;
                    match found {
                        Some(row) => {
                            let id: i64 = row.get(0);
                            let pw: Option<String> = row.get(1);
                            let label: Option<String> = row.get(2);
                            let tags: Option<String> = row.get(3);
                            let label_new = super::text(&e.label.clone().or(label.clone()));
                            // Tags given (config, a source) replace the stored ones; none
                            // given keep them, as a label does.
                            let tags_new = e.tags.to_column().or(tags.clone());
                            if pw != u.password || label != label_new || tags != tags_new {
                                tx.execute(
                                    "UPDATE endpoints SET password = $2, label = $3, tags = $5, rev = $4 WHERE id = $1",
                                    &[&id, &u.password, &label_new, &seq, &tags_new],
                                )
                                .await?;
                                changed = true;
                            }
                            out.push((id, false));
                        }
                        None => {
                            Batch::new(next, std::slice::from_ref(e))
                                .insert(&tx, seq)
                                .await?;
                            out.push((next, true));
                            next += 1;
                            changed = true;
                        }
                    }
                }
                if changed {
                    notify(&tx).await?;
                }
                tx.commit().await?;
                Ok(out)
            }
            .await;
            r.map_err(|e| self.err(e))
        })
    }

    /// Insert endpoints as an iterator yields them, all or nothing; ids are consecutive
    /// and handed to `added` in order.
    pub fn add_endpoints_from<E, T>(
        &mut self,
        eps: impl Iterator<Item = Result<T, E>>,
        on_existing: OnExisting,
        mut added: impl FnMut(EndpointId),
    ) -> Result<u64, E>
    where
        E: From<StoreError>,
        T: ToInsert,
    {
        let this = self.clone();
        self.block(async move {
            let mut c = this.client().await.map_err(E::from)?;
            let pg = |e: tokio_postgres::Error| E::from(this.err(e));
            let mut tx = c.transaction().await.map_err(pg)?;
            let seq = lock(&tx).await.map_err(pg)?;
            let first: i64 = tx.query_one(NEXT_ID, &[]).await.map_err(pg)?.get(0);
            let mut next = first;
            let mut rows: Vec<T> = Vec::with_capacity(ROWS_PER_INSERT);
            let mut eps = eps.peekable();
            let mut any = false;
            let mut skipped = 0u64;
            // `--skip-existing`: identities seen in this batch, so a repeat is skipped too.
            let mut seen = HashSet::new();
            while eps.peek().is_some() {
                rows.clear();
                while rows.len() < ROWS_PER_INSERT {
                    let Some(r) = eps.next() else { break };
                    let r = r?;
                    if on_existing == OnExisting::Skip
                        && exists(&tx, r.borrow(), &mut seen).await.map_err(pg)?
                    {
                        skipped += 1;
                        continue;
                    }
                    rows.push(r);
                }
                if rows.is_empty() {
                    continue;
                }
                if next.checked_add(rows.len() as i64).is_none() {
                    return Err(E::from(StoreError::Corrupt(format!(
                        "endpoint ids are exhausted (next would be {next} + {})",
                        rows.len()
                    ))));
                }
                let batch = Batch::new(next, &rows);
                let sp = tx.savepoint("rows").await.map_err(pg)?;
                match batch.insert(&sp, seq).await {
                    Ok(()) => sp.commit().await.map_err(pg)?,
                    Err(e) if is_unique_violation(&e) => {
                        sp.rollback().await.map_err(pg)?;
                        return Err(E::from(
                            duplicate(&tx, first, &rows)
                                .await
                                .unwrap_or_else(|e| this.err(e)),
                        ));
                    }
                    Err(e) => return Err(pg(e)),
                }
                for i in 0..rows.len() {
                    added(next + i as i64);
                }
                next += rows.len() as i64;
                any = true;
            }
            if any {
                notify(&tx).await.map_err(pg)?;
            }
            tx.commit().await.map_err(pg)?;
            Ok(skipped)
        })
    }

    /// Replace an endpoint's URL and/or label, keeping its id, state and history.
    pub fn edit_endpoint(
        &mut self,
        id: EndpointId,
        url: Option<&ProxyUrl>,
        label: Option<Option<String>>,
        tags: &std::collections::BTreeMap<String, String>,
    ) -> Result<EndpointRow, StoreError> {
        self.block(async {
            let mut c = self.client().await?;
            let r = async {
                let tx = c.transaction().await?;
                let seq = lock(&tx).await?;
                let sql = format!("SELECT {ENDPOINT_COLS} FROM endpoints WHERE id = $1 FOR UPDATE");
                let Some(row) = tx.query_opt(&sql, &[&id]).await? else {
                    return Err(StoreError::NotFound(format!("with id {id}")).into());
                };
                let old = endpoint_row(&row)?;
                let new_url = url.cloned().unwrap_or_else(|| old.url.clone());
                let new_label = super::text(&label.unwrap_or_else(|| old.label.clone()));
                let new_tags = old.tags.edited(tags).map_err(StoreError::from)?;
                let port = i32::from(new_url.port);
                if let Some(other) = holder(&tx, &old.pool, &new_url, id).await? {
                    return Err(StoreError::Duplicate {
                        url: new_url.to_redacted_string(),
                        pool: old.pool.clone(),
                        id: other,
                        line: None,
                    }
                    .into());
                }
                tx.execute(
                    "UPDATE endpoints SET scheme = $2, host = $3, port = $4, \"user\" = $5, \
                     password = $6, label = $7, rev = $8, tags = $9 WHERE id = $1",
                    &[
                        &id,
                        &new_url.scheme.as_str(),
                        &new_url.host,
                        &port,
                        &new_url.user_key(),
                        &new_url.password,
                        &new_label,
                        &seq,
                        &new_tags.to_column(),
                    ],
                )
                .await?;
                let detail = crate::store::rows::edit_detail(
                    &old,
                    &new_url,
                    new_label.as_deref(),
                    &new_tags,
                );
                tx.execute(
                    "INSERT INTO events (endpoint, kind, detail) VALUES ($1, $2, $3)",
                    &[&id, &EventKind::Edited.as_str(), &detail],
                )
                .await?;
                notify(&tx).await?;
                tx.commit().await?;
                Ok::<_, TxError>(EndpointRow {
                    url: new_url,
                    label: new_label,
                    tags: new_tags,
                    rev: seq,
                    ..old
                })
            }
            .await;
            r.map_err(|e| e.into_store(self))
        })
    }

    /// Delete endpoints, with a `removed` event each; all or nothing.
    pub fn remove(&mut self, ids: &[EndpointId]) -> Result<(), StoreError> {
        let mut distinct: Vec<i64> = Vec::with_capacity(ids.len());
        let mut seen = HashSet::new();
        for &id in ids {
            if seen.insert(id) {
                distinct.push(id);
            }
        }
        self.block(async {
            let mut c = self.client().await?;
            let r = async {
                let tx = c.transaction().await?;
                lock(&tx).await?;
                let rows = tx
                    .query(
                        "DELETE FROM endpoints WHERE id = ANY($1::bigint[]) RETURNING id",
                        &[&distinct],
                    )
                    .await?;
                let gone: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                if let Some(missing) = distinct.iter().find(|id| !gone.contains(id)) {
                    tx.rollback().await?;
                    return Err(StoreError::NotFound(format!("with id {missing}")).into());
                }
                let n = distinct.len();
                let none: Vec<Option<String>> = vec![None; n];
                let endpoints: Vec<Option<i64>> = distinct.iter().map(|&i| Some(i)).collect();
                let kinds = vec![EventKind::Removed.as_str().to_string(); n];
                tx.execute(
                    EVENTS,
                    &[
                        &endpoints,
                        &kinds,
                        &none,
                        &none,
                        &none,
                        &none,
                        &none,
                        &none,
                        &none,
                        &vec![None::<i32>; n],
                        &none,
                        // Notified below, with the tombstones.
                        &false,
                        &CHANNEL,
                    ],
                )
                .await?;
                tx.execute(TOMBSTONES, &[&distinct, &none]).await?;
                notify(&tx).await?;
                tx.commit().await?;
                Ok::<_, TxError>(())
            }
            .await;
            r.map_err(|e| e.into_store(self))
        })
    }

    /// Delete up to `batch` of the oldest events before `before` (the newest event of the
    /// highest removed id stays, or that id would be handed out again), and tombstones
    /// older than an hour.
    pub fn prune_events(&mut self, before: SystemTime, batch: usize) -> Result<usize, StoreError> {
        self.block(async {
            let c = self.client().await?;
            let r: Result<usize, tokio_postgres::Error> = async {
                let n = c
                    .execute(
                        "DELETE FROM events WHERE id IN (SELECT id FROM ( \
                           SELECT id, at FROM events WHERE id IS DISTINCT FROM ( \
                             SELECT MAX(e.id) FROM events e \
                             WHERE e.endpoint = (SELECT MAX(endpoint) FROM events) \
                               AND NOT EXISTS (SELECT 1 FROM endpoints n WHERE n.id = e.endpoint)) \
                           ORDER BY id LIMIT $2) x WHERE at < $1)",
                        &[&before, &(batch as i64)],
                    )
                    .await?;
                // A change goes with its tombstones, and not while a transaction older than
                // it is still open anywhere: a follower's read may not have seen it (it waits
                // on that transaction), and "pruned past what I have read" would then send
                // every follower into a reload on every read for as long as it stays open.
                // One statement, so that no read sees a change gone before the mark that
                // says so. Tombstones with no change of their own (written before changes
                // were recorded) go after the hour too: no read can list them.
                c.execute(
                    "WITH d AS (DELETE FROM fleet_changes \
                       WHERE at < now() - $1::bigint * interval '1 second' \
                         AND xid < pg_snapshot_xmin(pg_current_snapshot()) \
                       RETURNING seq, xid), \
                     r AS (DELETE FROM fleet_removals WHERE rev IN (SELECT seq FROM d)), \
                     o AS (DELETE FROM fleet_removals t \
                       WHERE t.at < now() - $1::bigint * interval '1 second' \
                         AND NOT EXISTS (SELECT 1 FROM fleet_changes c WHERE c.seq = t.rev)) \
                     UPDATE fleet_sequence \
                     SET removed_through = GREATEST(removed_through, \
                       (SELECT MAX(xid::text::bigint) FROM d)) \
                     WHERE id = 1 AND EXISTS (SELECT 1 FROM d)",
                    &[&TOMBSTONE_KEEP_SECS],
                )
                .await?;
                Ok(n as usize)
            }
            .await;
            r.map_err(|e| self.err(e))
        })
    }
}

/// Name the first row of a failed insert that clashes: with a stored endpoint, or with an
/// earlier row of this import.
async fn duplicate<T: ToInsert>(
    tx: &Transaction<'_>,
    first: i64,
    rows: &[T],
) -> Result<StoreError, tokio_postgres::Error> {
    let mut seen = HashSet::new();
    for t in rows {
        let line = t.line();
        let e: &NewEndpoint = t.borrow();
        let u = &e.url;
        let port = i32::from(u.port);
        let stored = tx
            .query_opt(
                IDENTITY,
                &[&e.pool, &u.scheme.as_str(), &u.host, &port, &u.user_key()],
            )
            .await?;
        match stored.map(|r| r.get::<_, i64>(0)) {
            Some(id) if id >= first => {
                return Ok(StoreError::DuplicateInBatch {
                    url: u.to_redacted_string(),
                    pool: e.pool.clone(),
                    line,
                })
            }
            Some(id) => {
                return Ok(StoreError::Duplicate {
                    url: u.to_redacted_string(),
                    pool: e.pool.clone(),
                    id,
                    line,
                })
            }
            None => {}
        }
        if !seen.insert((
            e.pool.clone(),
            u.scheme,
            u.host.clone(),
            u.port,
            u.user_key().to_string(),
        )) {
            return Ok(StoreError::DuplicateInBatch {
                url: u.to_redacted_string(),
                pool: e.pool.clone(),
                line,
            });
        }
    }
    Ok(StoreError::Corrupt(
        "the database refused an endpoint as a duplicate but none is".into(),
    ))
}

/// The other endpoint of `pool` that already has `url`'s identity, if any (an edit of
/// `id` to it would make two).
async fn holder(
    tx: &tokio_postgres::Transaction<'_>,
    pool: &str,
    url: &ProxyUrl,
    id: EndpointId,
) -> Result<Option<EndpointId>, tokio_postgres::Error> {
    let row = tx
        .query_opt(
            &format!("{IDENTITY} AND id <> $6"),
            &[
                &pool,
                &url.scheme.as_str(),
                &url.host,
                &i32::from(url.port),
                &url.user_key(),
                &id,
            ],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// The identity of an endpoint: what `--skip-existing` compares.
type Identity = (String, crate::endpoint::Scheme, String, u16, String);

/// Whether `e` is stored already, or came earlier in this import (`seen`, which it joins).
async fn exists(
    tx: &tokio_postgres::Transaction<'_>,
    e: &NewEndpoint,
    seen: &mut HashSet<Identity>,
) -> Result<bool, tokio_postgres::Error> {
    let u = &e.url;
    let stored = tx
        .query_opt(
            IDENTITY,
            &[
                &e.pool,
                &u.scheme.as_str(),
                &u.host,
                &i32::from(u.port),
                &u.user_key(),
            ],
        )
        .await?;
    let key = (
        e.pool.clone(),
        u.scheme,
        u.host.clone(),
        u.port,
        u.user_key().to_string(),
    );
    Ok(stored.is_some() || !seen.insert(key))
}
