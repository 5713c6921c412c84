//! Adding endpoints in bulk (`add`, `import`): many rows per statement, all or nothing.
//!
//! A million-line import spent most of its time in per-row statement overhead: a
//! duplicate lookup, an `INSERT` whose id subquery built a temporary table each time, and a
//! second `INSERT` for the `added` event. Here ids are taken once per transaction, rows go
//! in `ROWS_PER_INSERT` at a time, and the unique index itself detects duplicates (the
//! lookup that names the culprit runs only when an insert fails).

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::SystemTime;

use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use super::endpoints::{read_endpoint, ENDPOINT_COLS};
use super::Sqlite;
use crate::endpoint::EndpointId;
use crate::event_kind::EventKind;
#[cfg(test)]
use crate::store::Numbered;
use crate::store::{fmt_time, EndpointRow, NewEndpoint, StoreError};
use crate::store::{OnExisting, ToInsert};

/// Rows per multi-row `INSERT`: 128 rows × 12 parameters stays far below SQLite's limit of
/// 32,766 parameters, and larger statements gained nothing measurable.
const ROWS_PER_INSERT: usize = 128;

/// Page cache (KiB) while a batch is inserted. The default 2 MiB overflows after a few
/// thousand rows and SQLite then writes pages to the WAL mid-transaction, some of them again
/// and again; the old size is put back afterwards.
const BULK_CACHE_KIB: i64 = 64 * 1024;

/// The next endpoint id: one above the largest ever used, live or removed
/// (`removed_endpoints`); ids are never reused, or a new endpoint would inherit a removed
/// one's history.
pub(super) const NEXT_ID: &str =
    "SELECT MAX(m) + 1 FROM (SELECT COALESCE(MAX(id), 0) AS m FROM endpoints \
     UNION ALL SELECT COALESCE(MAX(id), 0) FROM removed_endpoints)";

/// The statements for a full batch, built once (formatting them took 6% of an import).
static FULL_ENDPOINTS: LazyLock<String> = LazyLock::new(|| endpoints_sql(ROWS_PER_INSERT));
static FULL_EVENTS: LazyLock<String> = LazyLock::new(|| events_sql(ROWS_PER_INSERT));

const IDENTITY: &str =
    "SELECT id FROM endpoints WHERE pool=?1 AND scheme=?2 AND host=?3 AND port=?4 AND user=?5";

impl Sqlite {
    /// Insert endpoints, all or nothing; returns their ids in order.
    pub fn add_endpoints(&mut self, eps: &[NewEndpoint]) -> Result<Vec<EndpointId>, StoreError> {
        let mut ids = Vec::with_capacity(eps.len());
        let rows = eps.iter().map(Ok::<_, StoreError>);
        self.add_endpoints_from(rows, OnExisting::Refuse, |id| ids.push(id))?;
        Ok(ids)
    }

    /// Insert endpoints as an iterator yields them, all or nothing (one transaction; the
    /// first error rolls everything back). Nothing is held per endpoint but its id, handed
    /// to `added` in order (ids are consecutive), so an import of millions streams. With
    /// `OnExisting::Skip` an endpoint already there is passed over; returns how many were.
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
        // Committing into a deleted file would acknowledge rows that nobody can read.
        self.check_file()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(StoreError::from)?;
        let cache: i64 = tx
            .pragma_query_value(None, "cache_size", |r| r.get(0))
            .map_err(StoreError::from)?;
        tx.pragma_update(None, "cache_size", -BULK_CACHE_KIB)
            .map_err(StoreError::from)?;
        let r = insert_all(&tx, eps, on_existing, &mut added);
        let r = r.and_then(|skipped| {
            tx.commit()
                .map(|()| skipped)
                .map_err(|e| StoreError::from(e).into())
        });
        // After the commit or the rollback (dropping `tx`): back to the usual cache.
        let _ = self.conn.pragma_update(None, "cache_size", cache);
        r
    }

    /// Up to `limit` endpoints with ids in `from..=to`, by id: a batch just added, read back
    /// in slices so the store thread answers other callers in between.
    pub fn rows_between(
        &self,
        from: EndpointId,
        to: EndpointId,
        limit: usize,
    ) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE id>=?1 AND id<=?2 ORDER BY id LIMIT ?3"
        );
        let mut st = self.conn.prepare_cached(&sql)?;
        let rows = st.query_map(params![from, to, limit as i64], read_endpoint)?;
        rows.map(|r| r?).collect()
    }
}

fn insert_all<E, T>(
    tx: &Transaction<'_>,
    eps: impl Iterator<Item = Result<T, E>>,
    on_existing: OnExisting,
    added: &mut impl FnMut(EndpointId),
) -> Result<u64, E>
where
    E: From<StoreError>,
    T: ToInsert,
{
    let next: EndpointId = tx
        .query_row(NEXT_ID, [], |r| r.get(0))
        .map_err(StoreError::from)?;
    let next_event: i64 = tx
        .query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM events", [], |r| {
            r.get(0)
        })
        .map_err(StoreError::from)?;
    let mut b = Batch {
        first: next,
        next,
        next_event,
        // One time for the whole batch, as `created_at` always was.
        now: fmt_time(SystemTime::now()),
    };
    // Full batches reuse two statements held for the whole call: taking them from the
    // statement cache each time cleared 1,280 bindings per batch.
    let mut full = None;
    let mut rows: Vec<T> = Vec::with_capacity(ROWS_PER_INSERT);
    let mut skipped = 0;
    for e in eps {
        let e = e?;
        // Rows of earlier statements are in the table already (this transaction's); the
        // ones waiting for the next statement are in `rows`.
        if on_existing == OnExisting::Skip && exists(tx, e.borrow(), &rows)? {
            skipped += 1;
            continue;
        }
        rows.push(e);
        if rows.len() == ROWS_PER_INSERT {
            if full.is_none() {
                full = Some((
                    tx.prepare(&FULL_ENDPOINTS).map_err(StoreError::from)?,
                    tx.prepare(&FULL_EVENTS).map_err(StoreError::from)?,
                ));
            }
            if let Some((ins, ev)) = &mut full {
                b.insert(tx, ins, ev, &rows, added)?;
            }
            rows.clear();
        }
    }
    if !rows.is_empty() {
        let n = rows.len();
        let mut ins = tx
            .prepare_cached(&endpoints_sql(n))
            .map_err(StoreError::from)?;
        let mut ev = tx
            .prepare_cached(&events_sql(n))
            .map_err(StoreError::from)?;
        b.insert(tx, &mut ins, &mut ev, &rows, added)?;
    }
    Ok(skipped)
}

/// Whether `e` is stored already, or among the `pending` rows.
fn exists<T: ToInsert>(
    tx: &Transaction<'_>,
    e: &NewEndpoint,
    pending: &[T],
) -> Result<bool, StoreError> {
    let u = &e.url;
    let key = |e: &NewEndpoint| {
        let u = &e.url;
        (
            e.pool.clone(),
            u.scheme,
            u.host.clone(),
            u.port,
            u.user_key().to_string(),
        )
    };
    let mine = key(e);
    if pending.iter().any(|p| key(p.borrow()) == mine) {
        return Ok(true);
    }
    let mut find = tx.prepare_cached(IDENTITY)?;
    let stored: Option<EndpointId> = find
        .query_row(
            params![e.pool, u.scheme.as_str(), u.host, u.port, u.user_key()],
            |r| r.get(0),
        )
        .optional()?;
    Ok(stored.is_some())
}

struct Batch {
    /// The first id of this transaction: a clash with an id at or after it is a line
    /// listed twice.
    first: EndpointId,
    next: EndpointId,
    /// The id the next `added` event gets: given explicitly, so each new endpoint's row is
    /// written with its newest event (`last_event`, the head of its chain) already.
    next_event: i64,
    now: String,
}

impl Batch {
    /// Insert `rows` and their `added` events with `ins` and `ev`, prepared for
    /// `rows.len()` rows.
    fn insert<T: ToInsert>(
        &mut self,
        tx: &Transaction<'_>,
        ins: &mut rusqlite::Statement<'_>,
        ev: &mut rusqlite::Statement<'_>,
        rows: &[T],
        added: &mut impl FnMut(EndpointId),
    ) -> Result<(), StoreError> {
        let n = rows.len();
        // Ids are i64 and only grow; a hand-edited maximum near the end must not wrap.
        if self.next.checked_add(n as i64).is_none() {
            return Err(StoreError::Corrupt(format!(
                "endpoint ids are exhausted (next would be {} + {n})",
                self.next
            )));
        }
        ins.raw_bind_parameter(1, &self.now)?;
        for (i, e) in rows.iter().enumerate() {
            let (e, at) = (e.borrow(), 2 + i * PER_ROW);
            let u = &e.url;
            ins.raw_bind_parameter(at, self.next + i as i64)?;
            ins.raw_bind_parameter(at + 1, &e.pool)?;
            ins.raw_bind_parameter(at + 2, u.scheme.as_str())?;
            ins.raw_bind_parameter(at + 3, &u.host)?;
            ins.raw_bind_parameter(at + 4, u.port)?;
            ins.raw_bind_parameter(at + 5, u.user_key())?;
            ins.raw_bind_parameter(at + 6, &u.password)?;
            ins.raw_bind_parameter(at + 7, super::text(&e.label))?;
            ins.raw_bind_parameter(at + 8, super::text(&e.source))?;
            ins.raw_bind_parameter(at + 9, e.state.as_str())?;
            ins.raw_bind_parameter(at + 10, e.tags.to_column())?;
            ins.raw_bind_parameter(at + 11, self.next_event + i as i64)?;
        }
        match ins.raw_execute() {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(self.duplicate(tx, rows, e)),
            Err(e) => return Err(e.into()),
        }
        ev.raw_bind_parameter(1, &self.now)?;
        ev.raw_bind_parameter(2, EventKind::Added.as_str())?;
        for (i, e) in rows.iter().enumerate() {
            let (e, at) = (e.borrow(), 3 + i * 4);
            ev.raw_bind_parameter(at, self.next_event + i as i64)?;
            ev.raw_bind_parameter(at + 1, self.next + i as i64)?;
            ev.raw_bind_parameter(at + 2, e.state.as_str())?;
            // The `added` event's detail says who added it, as before.
            ev.raw_bind_parameter(at + 3, super::text(&e.source))?;
        }
        ev.raw_execute()?;
        for i in 0..n {
            added(self.next + i as i64);
        }
        self.next += n as i64;
        self.next_event += n as i64;
        Ok(())
    }

    /// Name the first row of a failed insert that clashes: with a stored endpoint, with an
    /// earlier row of this transaction, or with an earlier row of `rows` (the failed
    /// statement itself was undone, so those are not in the table).
    fn duplicate<T: ToInsert>(
        &self,
        tx: &Transaction<'_>,
        rows: &[T],
        cause: rusqlite::Error,
    ) -> StoreError {
        let mut seen = HashSet::new();
        let mut find = match tx.prepare_cached(IDENTITY) {
            Ok(f) => f,
            Err(e) => return e.into(),
        };
        for row in rows {
            let (e, line) = (row.borrow(), row.line());
            let u = &e.url;
            let key = params![e.pool, u.scheme.as_str(), u.host, u.port, u.user_key()];
            let stored: Option<EndpointId> = match find.query_row(key, |r| r.get(0)).optional() {
                Ok(s) => s,
                Err(e) => return e.into(),
            };
            let twice =
                |url: String, pool: String| StoreError::DuplicateInBatch { url, pool, line };
            match stored {
                Some(id) if id >= self.first => {
                    return twice(u.to_redacted_string(), e.pool.clone())
                }
                Some(id) => {
                    return StoreError::Duplicate {
                        url: u.to_redacted_string(),
                        pool: e.pool.clone(),
                        id,
                        line,
                    }
                }
                None => {}
            }
            if !seen.insert((&e.pool, u.scheme, &u.host, u.port, u.user_key())) {
                return twice(u.to_redacted_string(), e.pool.clone());
            }
        }
        cause.into()
    }
}

fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _)
        if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
}

/// Parameters of one row in `endpoints_sql`.
const PER_ROW: usize = 12;

/// `INSERT` of `n` endpoints: ?1 is the time, then `PER_ROW` parameters per row.
fn endpoints_sql(n: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO endpoints (id, pool, scheme, host, port, user, password, label, \
         source, state, tags, last_event, streak, state_changed_at, created_at) VALUES ",
    );
    for i in 0..n {
        let p = 2 + i * PER_ROW;
        if i > 0 {
            sql.push(',');
        }
        sql.push('(');
        for k in 0..PER_ROW {
            sql.push_str(&format!("?{},", p + k));
        }
        sql.push_str("0,?1,?1)");
    }
    sql
}

/// `INSERT` of the `added` events of `n` endpoints: ?1 the time, ?2 the kind, then
/// (id, endpoint, state, detail) per row.
fn events_sql(n: usize) -> String {
    let mut sql =
        String::from("INSERT INTO events (id, at, endpoint, kind, to_state, detail) VALUES ");
    for i in 0..n {
        let p = 3 + i * 4;
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(&format!("(?{},?1,?{},?2,?{},?{})", p, p + 1, p + 2, p + 3));
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::ProxyUrl;
    use crate::health::State;

    fn ep(url: &str) -> NewEndpoint {
        NewEndpoint {
            url: ProxyUrl::parse(url).unwrap(),
            pool: "default".into(),
            label: None,
            source: Some("cli".into()),
            state: State::Available,
            tags: Default::default(),
        }
    }

    fn store() -> (tempfile::TempDir, Sqlite) {
        let dir = tempfile::tempdir().unwrap();
        let s = Sqlite::open(&dir.path().join("t.db")).unwrap();
        (dir, s)
    }

    fn count(s: &Sqlite, table: &str) -> i64 {
        s.conn
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn statements_number_their_parameters_in_order() {
        assert_eq!(
            events_sql(2),
            "INSERT INTO events (id, at, endpoint, kind, to_state, detail) VALUES (?3,?1,?4,?2,?5,?6),(?7,?1,?8,?2,?9,?10)"
        );
        let sql = endpoints_sql(2);
        assert!(sql.ends_with("(?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,0,?1,?1),(?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,0,?1,?1)"), "{sql}");
    }

    #[test]
    fn many_batches_get_consecutive_ids_rows_and_events() {
        let (_d, mut s) = store();
        let eps: Vec<_> = (0..300)
            .map(|i| {
                ep(&format!(
                    "socks5://u{i}:pw{i}@10.0.{}.{}:1080",
                    i / 200,
                    i % 200
                ))
            })
            .collect();
        let ids = s.add_endpoints(&eps).unwrap();
        assert_eq!(ids, (1..=300).collect::<Vec<_>>());
        let rows = s.rows_between(100, 300, 1000).unwrap();
        assert_eq!(rows.len(), 201);
        assert_eq!(rows[0].id, 100);
        assert_eq!(rows[0].url, eps[99].url);
        assert_eq!(rows[0].url.password.as_deref(), Some("pw99"));
        assert_eq!(s.rows_between(1, 300, 7).unwrap().len(), 7);
        let added: i64 = s
            .conn
            .query_row(
                "SELECT COUNT(DISTINCT endpoint) FROM events WHERE kind='added' AND detail='cli' AND to_state='available'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(added, 300);
    }

    #[test]
    fn a_clash_anywhere_names_the_line_and_changes_nothing() {
        // (rows, expected message part) : a clash with a stored row, with an earlier
        // batch of the same call, and within one statement's rows.
        let (_d, mut s) = store();
        s.add_endpoints(&[ep("http://stored:1")]).unwrap();
        let before = (count(&s, "endpoints"), count(&s, "events"));
        let many = |extra: &str, at: usize| {
            let mut v: Vec<_> = (0..300)
                .map(|i| ep(&format!("http://u:pw@h{i}:80")))
                .collect();
            v.insert(at, ep(extra));
            v
        };
        let cases = [
            (many("http://stored:1", 250), "already exists", Some(1)),
            (many("http://u:pw@h3:80", 250), "listed twice", None),
            (many("http://u:pw@h3:80", 5), "listed twice", None),
            (many("http://u:pw@h299:80", 299), "listed twice", None),
        ];
        for (eps, want, id) in cases {
            let err = s.add_endpoints(&eps).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(want), "{msg}");
            assert!(!msg.contains("pw"), "no password in {msg}");
            if let Some(id) = id {
                assert!(
                    matches!(err, StoreError::Duplicate { id: i, .. } if i == id),
                    "{err:?}"
                );
            }
            assert_eq!((count(&s, "endpoints"), count(&s, "events")), before);
        }
        // Ids stay consecutive after a rollback.
        assert_eq!(s.add_endpoints(&[ep("http://next:1")]).unwrap(), vec![2]);
    }

    #[test]
    fn an_error_from_the_source_rolls_back_earlier_batches() {
        let (_d, mut s) = store();
        let eps = (0..1000).map(|i| {
            if i == 999 {
                Err(StoreError::NotFound("line 1000".into()))
            } else {
                Ok(ep(&format!("http://h{i}:80")))
            }
        });
        let mut seen = 0;
        let err = s
            .add_endpoints_from(eps, OnExisting::Refuse, |_| seen += 1)
            .unwrap_err();
        assert!(err.to_string().contains("line 1000"), "{err}");
        assert!(seen > 0, "earlier batches were inserted before the error");
        assert_eq!((count(&s, "endpoints"), count(&s, "events")), (0, 0));
        // The page cache is back to its usual size.
        let cache: i64 = s
            .conn
            .pragma_query_value(None, "cache_size", |r| r.get(0))
            .unwrap();
        assert_ne!(cache, -BULK_CACHE_KIB);
    }

    #[test]
    fn a_removed_endpoint_id_is_not_reused_after_its_events_are_pruned() {
        let (_d, mut s) = store();
        let ids = s
            .add_endpoints(&[
                ep("http://10.9.0.1:1"),
                ep("http://10.9.0.2:1"),
                ep("http://10.9.0.3:1"),
            ])
            .unwrap();
        assert_eq!(ids, [1, 2, 3]);
        s.remove(&[2, 3]).unwrap();
        // Every event is older than the cutoff.
        let future = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        while s.prune_events(future, 1000).unwrap() > 0 {}
        // The newest event stays (endpoint 3's `removed`): ids must keep growing.
        assert_eq!(count(&s, "events"), 1);
        // Only the largest removed id is still needed.
        let removed: Vec<i64> = s
            .conn
            .prepare("SELECT id FROM removed_endpoints")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(removed, [3]);
        let ids = s.add_endpoints(&[ep("http://10.9.0.4:1")]).unwrap();
        assert_eq!(ids, [4], "id 3 belonged to a removed endpoint");
    }

    fn numbered(line: usize, url: &str) -> Result<Numbered, StoreError> {
        Ok(Numbered {
            line,
            endpoint: ep(url),
        })
    }

    #[test]
    fn skip_existing_adds_only_new_endpoints_across_batches() {
        let (_d, mut s) = store();
        let first: Vec<_> = (0..200).map(|i| ep(&format!("http://h{i}:80"))).collect();
        s.add_endpoints(&first).unwrap();
        // The updated list: the old 200, 100 new ones, and a new one listed twice (once in
        // the same statement, once a statement later).
        let lines: Vec<String> = (0..300)
            .map(|i| format!("http://h{i}:80"))
            .chain([
                "http://u:pw@twice:1".into(),
                "http://u:other@twice:1".into(),
            ])
            .chain((0..130).map(|i| format!("http://h{}:80", 300 + i)))
            .chain(["http://u:pw@twice:1".into()])
            .collect();
        let rows = lines.iter().enumerate().map(|(i, u)| numbered(i + 1, u));
        let mut ids = Vec::new();
        let skipped = s
            .add_endpoints_from(rows, OnExisting::Skip, |id| ids.push(id))
            .unwrap();
        assert_eq!((ids.len(), skipped), (100 + 1 + 130, 200 + 2));
        // Consecutive, after the ones already there.
        assert_eq!(ids, (201..=431).collect::<Vec<_>>());
        assert_eq!((count(&s, "endpoints"), count(&s, "events")), (431, 431));
        // The same list again adds nothing.
        let rows = lines.iter().enumerate().map(|(i, u)| numbered(i + 1, u));
        let skipped = s
            .add_endpoints_from(rows, OnExisting::Skip, |_| panic!("nothing is new"))
            .unwrap();
        assert_eq!(skipped, lines.len() as u64);
    }

    #[test]
    fn a_refused_import_names_the_line() {
        let (_d, mut s) = store();
        s.add_endpoints(&[ep("http://u:pw@old:1")]).unwrap();
        let cases = [
            (
                vec!["http://a:1", "http://u:x@old:1"],
                "line 2: endpoint http://u:***@old:1 already exists",
            ),
            (
                vec!["http://a:1", "http://b:1", "http://a:1"],
                "line 3: endpoint http://a:1 is listed twice",
            ),
        ];
        for (lines, want) in cases {
            let rows = lines.iter().enumerate().map(|(i, u)| numbered(i + 1, u));
            let e = s
                .add_endpoints_from(rows, OnExisting::Refuse, |_| {})
                .unwrap_err();
            assert!(e.to_string().starts_with(want), "{e}");
            assert_eq!(count(&s, "endpoints"), 1, "all or nothing");
        }
    }
}
