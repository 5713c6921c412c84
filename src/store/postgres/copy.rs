//! `proxypool migrate --from PATH.db --to postgresql://…`: a SQLite pool moved whole into
//! an empty PostgreSQL schema — endpoints with their ids, states and cooldowns, pairs,
//! events with their ids and times, sources — in one transaction: all or nothing.

use std::time::SystemTime;

use tokio_postgres::types::ToSql;

use super::event_cols::EventCols;
use super::statements::{lock_and_number, CHANNEL, NOTIFY};
use super::tx_error::TxError;
use super::Postgres;
use crate::store::{parse_time, Sqlite, StoreError};

/// Rows sent per statement.
const CHUNK: usize = 5000;

/// What a move copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub endpoints: usize,
    pub pairs: usize,
    pub events: usize,
    pub sources: usize,
}

fn time(s: &str) -> Result<SystemTime, StoreError> {
    parse_time(s).ok_or_else(|| StoreError::Corrupt(format!("time {s:?} does not parse")))
}

type Tx<'a> = tokio_postgres::Transaction<'a>;

/// Copy everything `from` holds into `to`, whose schema must be empty of rows.
pub fn copy_from_sqlite(from: &Sqlite, to: &Postgres) -> Result<Copied, StoreError> {
    let endpoints = from.list(None, None)?;
    let pairs = from.pairs()?;
    let sources = from.sources(None)?;
    to.block(async {
        let mut c = to.client().await?;
        let copied = async {
            let tx = c.transaction().await?;
            let seq = lock_and_number(&tx).await?;
            ensure_empty(&tx, to).await?;
            let copied = Copied {
                endpoints: copy_endpoints(&tx, &endpoints, seq).await?,
                pairs: copy_pairs(&tx, &pairs, seq).await?,
                events: copy_events(&tx, from).await?,
                sources: copy_sources(&tx, &sources).await?,
            };
            tx.execute(NOTIFY, &[&CHANNEL]).await?;
            tx.commit().await?;
            Ok::<_, TxError>(copied)
        }
        .await;
        copied.map_err(|e| e.into_store(to))
    })
}

/// A move needs an empty schema: refused, with nothing copied, when it holds any row.
async fn ensure_empty(tx: &Tx<'_>, to: &Postgres) -> Result<(), TxError> {
    let used: i64 = tx
        .query_one(
            "SELECT (SELECT count(*) FROM endpoints) + (SELECT count(*) FROM events) \
             + (SELECT count(*) FROM destination_pairs) + (SELECT count(*) FROM sources)",
            &[],
        )
        .await?
        .get(0);
    if used > 0 {
        return Err(TxError::Store(StoreError::Migration {
            path: to.target().describe().into(),
            message: "the PostgreSQL schema already holds endpoints or events; \
                      a move needs an empty one (nothing was copied)"
                .into(),
        }));
    }
    Ok(())
}

/// The endpoints with their ids, states, cooldowns and exit addresses.
async fn copy_endpoints(
    tx: &Tx<'_>,
    endpoints: &[crate::store::EndpointRow],
    seq: i64,
) -> Result<usize, TxError> {
    for chunk in endpoints.chunks(CHUNK) {
        let mut cols = EndpointCols::default();
        for r in chunk {
            cols.push(r)?;
        }
        tx.execute(
            "INSERT INTO endpoints (id, pool, scheme, host, port, \"user\", password, label, \
               source, state, reason, phase, detail, streak, reason_streak, cooldown_ms, \
               cooldown_until, state_changed_at, created_at, tags, rev) \
             SELECT *, $19 FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], \
               $5::int[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
               $11::text[], $12::text[], $13::text[], $14::int[], $15::int[], $16::bigint[], \
               $17::timestamptz[], $18::timestamptz[], $20::timestamptz[], $21::text[])",
            &[
                &cols.id,
                &cols.pool,
                &cols.scheme,
                &cols.host,
                &cols.port,
                &cols.user,
                &cols.password,
                &cols.label,
                &cols.source,
                &cols.state,
                &cols.reason,
                &cols.phase,
                &cols.detail,
                &cols.streak,
                &cols.reason_streak,
                &cols.cooldown_ms,
                &cols.cooldown_until,
                &cols.state_changed_at,
                &seq,
                &cols.created_at,
                &cols.tags,
            ],
        )
        .await?;
        copy_exits(tx, chunk).await?;
    }
    Ok(endpoints.len())
}

/// The (endpoint, destination) pairs with their states and cooldowns.
async fn copy_pairs(
    tx: &Tx<'_>,
    pairs: &[crate::store::pairs::PairRow],
    seq: i64,
) -> Result<usize, TxError> {
    for chunk in pairs.chunks(CHUNK) {
        let mut cols = PairCols::default();
        for p in chunk {
            cols.push(p)?;
        }
        tx.execute(
            "INSERT INTO destination_pairs (endpoint, destination, state, reason, phase, \
               status, detail, streak, reason_streak, cooldown_ms, cooldown_until, \
               state_changed_at, rev) \
             SELECT *, $13 FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], \
               $5::text[], $6::int[], $7::text[], $8::int[], $9::int[], $10::bigint[], \
               $11::timestamptz[], $12::timestamptz[])",
            &[
                &cols.ids,
                &cols.dests,
                &cols.states,
                &cols.reasons,
                &cols.phases,
                &cols.statuses,
                &cols.details,
                &cols.streaks,
                &cols.rstreaks,
                &cols.ms,
                &cols.untils,
                &cols.changed,
                &seq,
            ],
        )
        .await?;
    }
    Ok(pairs.len())
}

/// The events with their ids and times, a chunk at a time; new events continue after them.
async fn copy_events(tx: &Tx<'_>, from: &Sqlite) -> Result<usize, TxError> {
    let (mut after, mut copied) = (0, 0);
    loop {
        let evs = from.events(None, after, CHUNK)?;
        let Some(last) = evs.last().map(|e| e.id) else {
            break;
        };
        let mut cols = EventCols::default();
        let (mut ids, mut ats) = (Vec::new(), Vec::new());
        for e in &evs {
            ats.push(time(&e.at)?);
            ids.push(e.id);
            cols.push_stored(e);
        }
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&ids, &ats];
        params.extend(cols.params());
        tx.execute(
            "INSERT INTO events (id, at, endpoint, kind, from_state, to_state, reason, phase, \
               detail, lease, destination, status, blame) \
             SELECT * FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bigint[], $4::text[], \
               $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], \
               $11::text[], $12::int[], $13::text[])",
            &params,
        )
        .await?;
        copied += evs.len();
        after = last;
    }
    tx.execute(
        "SELECT setval(pg_get_serial_sequence('events', 'id'), \
           GREATEST((SELECT COALESCE(MAX(id), 0) FROM events), 1), \
           (SELECT COUNT(*) > 0 FROM events))",
        &[],
    )
    .await?;
    Ok(copied)
}

/// The sources with what their last refresh found.
async fn copy_sources(tx: &Tx<'_>, sources: &[crate::store::SourceRow]) -> Result<usize, TxError> {
    for s in sources {
        let at = s.last_at.as_deref().map(time).transpose()?;
        tx.execute(
            "INSERT INTO sources (pool, name, last_at, last_ok, last_detail, last_count) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &s.pool,
                &s.name,
                &at,
                &s.last_ok,
                &s.last_detail,
                &s.last_count,
            ],
        )
        .await?;
    }
    Ok(sources.len())
}

/// The columns of a chunk of pairs, one array each.
#[derive(Default)]
struct PairCols {
    ids: Vec<i64>,
    dests: Vec<String>,
    states: Vec<String>,
    reasons: Vec<Option<String>>,
    phases: Vec<Option<String>>,
    statuses: Vec<Option<i32>>,
    details: Vec<Option<String>>,
    streaks: Vec<i32>,
    rstreaks: Vec<i32>,
    ms: Vec<Option<i64>>,
    untils: Vec<Option<SystemTime>>,
    changed: Vec<SystemTime>,
}

impl PairCols {
    fn push(&mut self, p: &crate::store::pairs::PairRow) -> Result<(), StoreError> {
        let r = &p.record;
        self.changed.push(time(&p.state_changed_at)?);
        self.ids.push(r.endpoint);
        self.dests.push(r.destination.clone());
        self.states.push(r.health.state.as_str().to_string());
        self.reasons
            .push(r.health.reason.map(|x| x.as_str().to_string()));
        self.phases
            .push(r.health.phase.map(|x| x.as_str().to_string()));
        self.statuses.push(r.status.map(i32::from));
        self.details.push(r.health.detail.clone());
        self.streaks.push(r.health.streak as i32);
        self.rstreaks.push(r.health.reason_streak as i32);
        self.ms.push(r.health.cooldown_ms.map(|v| v as i64));
        self.untils.push(p.cooldown_until);
        Ok(())
    }
}

#[derive(Default)]
struct EndpointCols {
    id: Vec<i64>,
    pool: Vec<String>,
    scheme: Vec<String>,
    host: Vec<String>,
    port: Vec<i32>,
    user: Vec<String>,
    password: Vec<Option<String>>,
    label: Vec<Option<String>>,
    tags: Vec<Option<String>>,
    source: Vec<Option<String>>,
    state: Vec<String>,
    reason: Vec<Option<String>>,
    phase: Vec<Option<String>>,
    detail: Vec<Option<String>>,
    streak: Vec<i32>,
    reason_streak: Vec<i32>,
    cooldown_ms: Vec<Option<i64>>,
    cooldown_until: Vec<Option<SystemTime>>,
    state_changed_at: Vec<SystemTime>,
    created_at: Vec<SystemTime>,
}

/// The exit addresses of `chunk` (docs/exit.md), set on the rows just copied.
async fn copy_exits(
    tx: &tokio_postgres::Transaction<'_>,
    chunk: &[crate::store::EndpointRow],
) -> Result<(), tokio_postgres::Error> {
    let known = chunk.iter().filter(|r| r.exit_ip.is_some());
    let ids: Vec<i64> = known.clone().map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let ips: Vec<String> = known
        .clone()
        .filter_map(|r| r.exit_ip)
        .map(|ip| ip.to_string())
        .collect();
    let seen: Vec<Option<SystemTime>> = known
        .map(|r| r.exit_seen_at.as_deref().and_then(crate::store::parse_time))
        .collect();
    tx.execute(
        "UPDATE endpoints e SET exit_ip = v.ip, exit_seen_at = v.seen \
         FROM UNNEST($1::bigint[], $2::text[], $3::timestamptz[]) AS v(id, ip, seen) \
         WHERE e.id = v.id",
        &[&ids, &ips, &seen],
    )
    .await?;
    Ok(())
}

impl EndpointCols {
    fn push(&mut self, r: &crate::store::EndpointRow) -> Result<(), StoreError> {
        self.id.push(r.id);
        self.pool.push(r.pool.clone());
        self.scheme.push(r.url.scheme.as_str().to_string());
        self.host.push(r.url.host.clone());
        self.port.push(i32::from(r.url.port));
        self.user.push(r.url.user_key().to_string());
        self.password.push(r.url.password.clone());
        self.label.push(r.label.clone());
        self.tags.push(r.tags.to_column());
        self.source.push(r.source.clone());
        self.state.push(r.state.as_str().to_string());
        self.reason.push(r.reason.map(|x| x.as_str().to_string()));
        self.phase.push(r.phase.map(|x| x.as_str().to_string()));
        self.detail.push(r.detail.clone());
        self.streak.push(r.streak as i32);
        self.reason_streak.push(r.reason_streak as i32);
        self.cooldown_ms.push(r.cooldown_ms.map(|v| v as i64));
        self.cooldown_until.push(r.cooldown_until);
        self.state_changed_at.push(time(&r.state_changed_at)?);
        self.created_at.push(time(&r.created_at)?);
        Ok(())
    }
}
