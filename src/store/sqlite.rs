//! SQLite: one daemon's store (the default). WAL, `busy_timeout`, the schema from the
//! `up.sql` of each numbered folder in `migrations/`.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use include_dir::{include_dir, Dir};
use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};
use rusqlite_migration::Migrations;

use super::{
    fmt_time, parse_col, parse_time, Applied, ClaimResult, EndpointRow, EventRow, NewEndpoint,
    NewEvent, SourceRow, StoreError, Write,
};
use crate::config::Durability;
use crate::endpoint::{EndpointId, ProxyUrl, Scheme};
use crate::event_kind::EventKind;
use crate::health::blame::Blame;
use crate::health::{restored_remaining, Phase, Reason, State};
use crate::tags::Tags;

mod edit_endpoint;
mod history;
mod insert;
pub(super) mod pairs;

pub(super) static MIGRATIONS_DIR: Dir = include_dir!("$CARGO_MANIFEST_DIR/migrations");
pub(super) static MIGRATIONS: LazyLock<Migrations<'static>> =
    LazyLock::new(|| Migrations::from_directory(&MIGRATIONS_DIR).expect("migrations/ is valid"));

/// The SQLite store.
pub struct Sqlite {
    conn: Connection,
    path: PathBuf,
    /// (device, inode) of the file opened: the name must keep meaning this file.
    file: Option<(u64, u64)>,
    /// The schema versions (before, after) when opening migrated an existing database.
    migrated: Option<(i64, i64)>,
    /// Commits still to fail, as a full disk would (engine tests).
    #[cfg(test)]
    fail_commits: u32,
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Insert an endpoint with an id never used before. Events outlive their endpoint (no
/// foreign key), so a plain `INTEGER PRIMARY KEY` would hand the id of a removed endpoint
/// (the highest one) to the next insert, and that endpoint would inherit the removed
/// one's event history. Every endpoint has an `added` event, so the largest id ever used
/// is the larger of the live maximum and the maximum in `events`.
const INSERT_ENDPOINT: &str =
    "INSERT INTO endpoints (id, pool, scheme, host, port, user, password, label, \
     source, state, tags, streak, state_changed_at, created_at) VALUES (\
     (SELECT MAX(m) + 1 FROM (SELECT COALESCE(MAX(id), 0) AS m FROM endpoints \
      UNION ALL SELECT COALESCE(MAX(endpoint), 0) FROM events)), \
     ?1,?2,?3,?4,?5,?6,?7,?8,?9,?11,0,?10,?10)";

const ENDPOINT_COLS: &str = "id, pool, scheme, host, port, user, password, label, source, state, \
     reason, phase, detail, streak, reason_streak, cooldown_ms, cooldown_until, \
     state_changed_at, created_at, tags";

impl Sqlite {
    /// Open (creating and migrating) the database at `path` with default durability.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        Sqlite::open_with(path, Durability::default())
    }

    /// Open (creating and migrating) the database at `path`.
    pub fn open_with(path: &Path, durability: Durability) -> Result<Sqlite, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The database holds proxy passwords: a folder we create is ours alone.
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| StoreError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        check_single_link(path)?;
        // Two processes opening a new database at once must not both run the migrations.
        let _migrating = super::lock::migration(path).map_err(|e| StoreError::Migration {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut conn = Connection::open(path)?;
        // Another process (CLI vs daemon) may hold the write lock briefly.
        conn.busy_timeout(Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(
            None,
            "synchronous",
            match durability {
                Durability::Normal => "NORMAL",
                Durability::Full => "FULL",
            },
        )?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let before: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        MIGRATIONS
            .to_latest(&mut conn)
            .map_err(|e| StoreError::Migration {
                path: path.to_path_buf(),
                // The first line says what failed; the rest would be the SQL text.
                message: e.to_string().lines().next().unwrap_or_default().to_string(),
            })?;
        restrict(path);
        let after: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        // A new database (version 0) is created, not migrated.
        let migrated = (before > 0 && after != before).then_some((before, after));
        Ok(Sqlite {
            migrated,
            conn,
            file: file_id(path),
            path: path.to_path_buf(),
            #[cfg(test)]
            fail_commits: 0,
        })
    }

    /// Whether the database's name still refers to the file opened (not deleted, not
    /// replaced). One `stat`, cheap enough before every commit.
    pub fn check_file(&self) -> Result<(), StoreError> {
        if self.file.is_some() && file_id(&self.path) != self.file {
            return Err(StoreError::FileGone {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema versions (before, after) when opening migrated an older database.
    pub fn migrated(&self) -> Option<(i64, i64)> {
        self.migrated
    }

    /// The schema version (number of applied migrations).
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Insert the endpoints that do not exist yet (config sync, sources); existing ones
    /// get their password and label refreshed. Returns (id, newly added) per input.
    pub fn ensure_endpoints(
        &mut self,
        eps: &[NewEndpoint],
    ) -> Result<Vec<(EndpointId, bool)>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut out = Vec::with_capacity(eps.len());
        {
            let mut find = tx.prepare_cached(
                "SELECT id, password, label, tags FROM endpoints WHERE pool=?1 AND scheme=?2 AND host=?3 AND port=?4 AND user=?5",
            )?;
            let mut upd = tx.prepare_cached(
                "UPDATE endpoints SET password=?2, label=?3, tags=?4 WHERE id=?1",
            )?;
            let mut ins = tx.prepare_cached(INSERT_ENDPOINT)?;
            let now = fmt_time(SystemTime::now());
            for e in eps {
                let u = &e.url;
                type Found = (i64, Option<String>, Option<String>, Option<String>);
                let existing: Option<Found> = find
                    .query_row(
                        params![e.pool, u.scheme.as_str(), u.host, u.port, u.user_key()],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                    )
                    .optional()?;
                match existing {
                    Some((id, pw, label, tags)) => {
                        let label = e.label.clone().or(label);
                        // Tags given (config, a source) replace the stored ones; none given
                        // keep them, as a label does.
                        let new_tags = e.tags.to_column().or(tags.clone());
                        if pw != u.password || label != e.label || new_tags != tags {
                            upd.execute(params![id, u.password, text(&label), new_tags])?;
                        }
                        out.push((id, false));
                    }
                    None => out.push((insert_new(&tx, &mut ins, e, &now)?, true)),
                }
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// One endpoint by id.
    pub fn get(&self, id: EndpointId) -> Result<Option<EndpointRow>, StoreError> {
        let sql = format!("SELECT {ENDPOINT_COLS} FROM endpoints WHERE id=?1");
        let mut st = self.conn.prepare_cached(&sql)?;
        let row = st.query_row([id], read_endpoint).optional()?;
        row.transpose()
    }

    /// Endpoints with this URL's identity, in any pool (or in `pool`).
    pub fn find(&self, url: &ProxyUrl, pool: Option<&str>) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE scheme=?1 AND host=?2 AND port=?3 AND user=?4 \
             AND (?5 IS NULL OR pool=?5) ORDER BY id"
        );
        let mut st = self.conn.prepare_cached(&sql)?;
        let rows = st.query_map(
            params![
                url.scheme.as_str(),
                url.host,
                url.port,
                url.user_key(),
                pool
            ],
            read_endpoint,
        )?;
        rows.map(|r| r?).collect()
    }

    /// Endpoints filtered by pool and state, by id.
    pub fn list(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> Result<Vec<EndpointRow>, StoreError> {
        let sql = format!(
            "SELECT {ENDPOINT_COLS} FROM endpoints WHERE (?1 IS NULL OR pool=?1) AND (?2 IS NULL OR state=?2) ORDER BY id"
        );
        let mut st = self.conn.prepare_cached(&sql)?;
        let rows = st.query_map(params![pool, state.map(State::as_str)], read_endpoint)?;
        rows.map(|r| r?).collect()
    }

    /// Delete endpoints (and only here), writing a `removed` event each; all or nothing.
    pub fn remove(&mut self, ids: &[EndpointId]) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        remove_rows(&tx, ids)?;
        tx.commit()?;
        Ok(())
    }

    /// Apply a batch of writes in one transaction.
    pub fn write(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for w in writes {
            apply_write(&tx, w)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Group commit: apply several independent batches in one transaction, each batch
    /// atomic on its own (a savepoint), so one bad batch fails alone.
    pub fn write_groups(
        &mut self,
        groups: &[Vec<Write>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        // Committing into a deleted file would acknowledge writes that nobody can read.
        self.check_file()?;
        #[cfg(test)]
        if self.fail_commits > 0 {
            self.fail_commits -= 1;
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some("database or disk is full (injected)".into()),
            )));
        }
        let mut tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            let sp = tx.savepoint()?;
            match g.iter().try_for_each(|w| apply_write(&sp, w)) {
                Ok(()) => {
                    sp.commit()?;
                    out.push(Ok(one_daemon(g)));
                }
                Err(e) => {
                    drop(sp);
                    out.push(Err(e));
                }
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Fail the next `n` commits as a full disk would.
    #[cfg(test)]
    pub(crate) fn fail_next_commits(&mut self, n: u32) {
        self.fail_commits = n;
    }

    /// Commits still to fail.
    #[cfg(test)]
    pub(crate) fn failing_commits(&self) -> u32 {
        self.fail_commits
    }

    /// Events in order, optionally for one endpoint, with id > `after`.
    pub fn events(
        &self,
        endpoint: Option<EndpointId>,
        after: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT {EVENT_COLS} FROM events \
                 WHERE id > ?1 AND (?2 IS NULL OR endpoint=?2) ORDER BY id LIMIT ?3"
        ))?;
        let rows = st.query_map(params![after, endpoint, limit as i64], read_event)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The most recent events of an endpoint, newest first.
    pub fn recent_events(
        &self,
        endpoint: Option<EndpointId>,
        limit: usize,
    ) -> Result<Vec<EventRow>, StoreError> {
        let mut st = self.conn.prepare_cached(&format!(
            "SELECT {EVENT_COLS} FROM events \
                 WHERE (?1 IS NULL OR endpoint=?1) ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = st.query_map(params![endpoint, limit as i64], read_event)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The last sniff of each source.
    pub fn sources(&self, pool: Option<&str>) -> Result<Vec<SourceRow>, StoreError> {
        let mut st = self.conn.prepare_cached(
            "SELECT pool, name, last_at, last_ok, last_detail, last_count FROM sources \
             WHERE (?1 IS NULL OR pool=?1) ORDER BY pool, name",
        )?;
        let rows = st.query_map(params![pool], |r| {
            Ok(SourceRow {
                pool: r.get(0)?,
                name: r.get(1)?,
                last_at: r.get(2)?,
                last_ok: r.get::<_, Option<i64>>(3)?.map(|v| v != 0),
                last_detail: r.get(4)?,
                last_count: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Make the database files readable by their owner only: they hold proxy passwords.
/// Refuse a database file with more than one hard link. A missing file is fine (it is
/// about to be created); `stat` follows symlinks, so a symlink to a single-link file is too.
fn check_single_link(db: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(db) {
        Ok(m) if m.is_file() && m.nlink() > 1 => Err(StoreError::HardLinked {
            path: db.to_path_buf(),
            links: m.nlink(),
        }),
        _ => Ok(()),
    }
}

fn restrict(db: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        if let Ok(m) = std::fs::metadata(&p) {
            if m.permissions().mode() & 0o077 != 0 {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600));
            }
        }
    }
}

fn apply_write(tx: &Connection, w: &Write) -> Result<(), StoreError> {
    match w {
        Write::Transition(h, ev) => {
            let mut st = tx.prepare_cached(
                "UPDATE endpoints SET state=?2, reason=?3, phase=?4, detail=?5, streak=?6, reason_streak=?7, \
                 cooldown_ms=?8, cooldown_until=?9, state_changed_at=?10 WHERE id=?1",
            )?;
            let n = st.execute(params![
                h.id,
                h.state.as_str(),
                h.reason.map(Reason::as_str),
                h.phase.map(Phase::as_str),
                text(&h.detail),
                h.streak,
                h.reason_streak,
                h.cooldown_ms.map(|v| v as i64),
                deadline_of(h.cooldown_left).map(fmt_time),
                fmt_time(SystemTime::now()),
            ])?;
            if n == 0 {
                return Err(StoreError::NotFound(format!("with id {}", h.id)));
            }
            insert_event(tx, ev)
        }
        Write::Event(ev) => insert_event(tx, ev),
        Write::Remove(ids) => remove_rows(tx, ids),
        Write::Pair(w) => pairs::apply(tx, w),
        Write::EventStatus(ev, status) => insert_event_on(tx, ev.endpoint, None, *status, ev),
        // One daemon: a claim in memory is the claim; only its event is stored.
        Write::Claim(c) => pairs::apply(tx, &crate::store::pairs::PairWrite::Claim(c.clone())),
        Write::Unclaim(u) => pairs::apply(tx, &crate::store::pairs::PairWrite::Unclaim(u.clone())),
        Write::SourceResult {
            pool,
            name,
            ok,
            detail,
            count,
        } => {
            tx.prepare_cached(
                "INSERT INTO sources (pool, name, last_at, last_ok, last_detail, last_count) VALUES (?1,?2,?3,?4,?5,?6) \
                 ON CONFLICT(pool, name) DO UPDATE SET last_at=excluded.last_at, last_ok=excluded.last_ok, \
                 last_detail=excluded.last_detail, last_count=excluded.last_count",
            )?
            .execute(params![
                pool,
                name,
                fmt_time(SystemTime::now()),
                *ok as i64,
                text(detail),
                count.map(|c| c as i64)
            ])?;
            Ok(())
        }
    }
}

/// Insert one endpoint (with `ins`, prepared from `INSERT_ENDPOINT`) and its `added` event.
fn insert_new(
    tx: &Connection,
    ins: &mut rusqlite::CachedStatement<'_>,
    e: &NewEndpoint,
    now: &str,
) -> Result<EndpointId, StoreError> {
    let u = &e.url;
    ins.execute(params![
        e.pool,
        u.scheme.as_str(),
        u.host,
        u.port,
        u.user_key(),
        u.password,
        text(&e.label),
        text(&e.source),
        e.state.as_str(),
        now,
        e.tags.to_column()
    ])?;
    let id = tx.last_insert_rowid();
    insert_event(
        tx,
        &NewEvent {
            endpoint: Some(id),
            to: Some(e.state),
            detail: e.source.clone(),
            ..NewEvent::new(EventKind::Added)
        },
    )?;
    Ok(id)
}

fn remove_rows(tx: &Connection, ids: &[EndpointId]) -> Result<(), StoreError> {
    let mut seen = std::collections::HashSet::new();
    for &id in ids.iter().filter(|id| seen.insert(**id)) {
        let n = tx.execute("DELETE FROM endpoints WHERE id=?1", [id])?;
        if n == 0 {
            return Err(StoreError::NotFound(format!("with id {id}")));
        }
        insert_event(
            tx,
            &NewEvent {
                endpoint: Some(id),
                ..NewEvent::new(EventKind::Removed)
            },
        )?;
    }
    Ok(())
}

fn insert_event(tx: &Connection, ev: &NewEvent) -> Result<(), StoreError> {
    insert_event_on(tx, ev.endpoint, None, None, ev)
}

/// Append `ev` as about `endpoint` (a pair write names its pair's endpoint), with the
/// pair's `destination` and the report's HTTP `status` (docs/destinations.md, "Events").
fn insert_event_on(
    tx: &Connection,
    endpoint: Option<EndpointId>,
    destination: Option<&str>,
    status: Option<u16>,
    ev: &NewEvent,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO events (at, endpoint, kind, from_state, to_state, reason, phase, detail, lease, \
         destination, status, blame) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
    )?
    .execute(params![
        fmt_time(SystemTime::now()),
        endpoint,
        ev.kind.as_str(),
        ev.from.map(State::as_str),
        ev.to.map(State::as_str),
        ev.reason.map(Reason::as_str),
        ev.phase.map(Phase::as_str),
        text(&ev.detail),
        text(&ev.lease),
        destination.map(crate::redact::printable),
        status,
        ev.blame.map(Blame::as_str),
    ])?;
    Ok(())
}

/// The `state`, `reason` and `phase` columns at `at..at + 3`, as endpoints and pairs both
/// keep them; `corrupt` names the row a value this version does not know is in.
fn read_names(
    r: &Row<'_>,
    at: usize,
    corrupt: impl Fn(&str) -> StoreError,
) -> Result<(State, Option<Reason>, Option<Phase>), StoreError> {
    let state: String = r.get(at)?;
    let reason: Option<String> = r.get(at + 1)?;
    let phase: Option<String> = r.get(at + 2)?;
    Ok((
        state.parse().map_err(|_| corrupt("state"))?,
        parse_col(reason.as_deref()).map_err(|_| corrupt("reason"))?,
        parse_col(phase.as_deref()).map_err(|_| corrupt("phase"))?,
    ))
}

/// The `cooldown_ms` and `cooldown_until` columns at `at` and `at + 1`, and what is left of
/// a cooling row's cooldown now: `clamp(cooldown_until − now, 0, cooldown_ms)` by this
/// machine's clock (docs/reference.md, "Storage"). A negative length reads as 0 and a time
/// that does not parse as none.
pub(super) type Cooldown = (Option<u64>, Option<SystemTime>, Option<Duration>);

fn read_cooldown(r: &Row<'_>, at: usize, state: State) -> rusqlite::Result<Cooldown> {
    let ms: Option<i64> = r.get(at)?;
    let until: Option<String> = r.get(at + 1)?;
    let ms = ms.map(|v| v.max(0) as u64);
    let until = until.as_deref().and_then(parse_time);
    let left = (state == State::Cooling).then(|| {
        let len = Duration::from_millis(ms.unwrap_or(0));
        until
            .map(|u| restored_remaining(u, SystemTime::now(), len))
            .unwrap_or(Duration::ZERO)
    });
    Ok((ms, until, left))
}

/// The wall-clock deadline stored for a cooldown with `left` to go.
pub(super) fn deadline_of(left: Option<Duration>) -> Option<SystemTime> {
    left.map(|d| SystemTime::now() + d)
}

/// What one daemon's commit of `g` did besides being durable: its claims are won (memory
/// is the only claimant), and nothing was changed elsewhere.
fn one_daemon(g: &[Write]) -> Applied {
    let claims = g
        .iter()
        .filter_map(|w| match w {
            Write::Claim(c) | Write::Pair(crate::store::pairs::PairWrite::Claim(c)) => {
                Some(ClaimResult::Won {
                    on: c.on.clone(),
                    epoch: 0,
                })
            }
            _ => None,
        })
        .collect();
    Applied {
        claims,
        fresh: Vec::new(),
        seq: 0,
    }
}

/// The columns `read_event` reads, in its order.
pub(crate) const EVENT_COLS: &str =
    "id, at, kind, endpoint, from_state, to_state, reason, phase, detail, lease, destination, status, blame";

fn read_event(r: &Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        id: r.get(0)?,
        at: r.get(1)?,
        kind: r.get(2)?,
        endpoint: r.get(3)?,
        from: r.get(4)?,
        to: r.get(5)?,
        reason: r.get(6)?,
        phase: r.get(7)?,
        detail: r.get(8)?,
        lease: r.get(9)?,
        destination: r.get(10)?,
        status: r.get(11)?,
        blame: r.get(12)?,
    })
}

fn read_endpoint(r: &Row<'_>) -> rusqlite::Result<Result<EndpointRow, StoreError>> {
    let id: i64 = r.get(0)?;
    let scheme: String = r.get(2)?;
    let user: String = r.get(5)?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("endpoint {id}: {what}"));
    let build = || -> Result<EndpointRow, StoreError> {
        let scheme: Scheme = scheme.parse().map_err(|_| corrupt("scheme"))?;
        let (state, reason, phase) = read_names(r, 9, corrupt)?;
        let (cooldown_ms, cooldown_until, cooldown_left) = read_cooldown(r, 15, state)?;
        Ok(EndpointRow {
            id,
            url: ProxyUrl {
                scheme,
                host: r.get(3)?,
                port: r.get(4)?,
                user: (!user.is_empty()).then(|| user.clone()),
                password: r.get(6)?,
            },
            pool: r.get(1)?,
            label: r.get(7)?,
            source: r.get(8)?,
            state,
            reason,
            phase,
            detail: r.get(12)?,
            streak: r.get(13)?,
            reason_streak: r.get(14)?,
            cooldown_ms,
            cooldown_until,
            cooldown_left,
            claim: None,
            rev: 0,
            state_changed_at: r.get(17)?,
            created_at: r.get(18)?,
            tags: Tags::from_column(r.get::<_, Option<String>>(19)?.as_deref())
                .map_err(|e| corrupt(&e.to_string()))?,
        })
    };
    Ok(build())
}

/// A free-text column as stored: control characters (a client's CR/LF, ESC, NUL) written
/// as escapes (`redact::printable`), so no stored text can forge a line or drive a
/// terminal wherever it is printed later.
pub(crate) fn text(v: &Option<String>) -> Option<std::borrow::Cow<'_, str>> {
    crate::redact::printable_opt(v.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_ep(url: &str, pool: &str) -> NewEndpoint {
        NewEndpoint {
            url: ProxyUrl::parse(url).unwrap(),
            pool: pool.into(),
            label: None,
            source: Some("cli".into()),
            state: State::Available,
            tags: Tags::default(),
        }
    }

    #[test]
    fn identity_includes_user_and_pool() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sqlite::open(&dir.path().join("t.db")).unwrap();
        let ids = s
            .add_endpoints(&[
                new_ep("socks5://a:x@h:1", "default"),
                new_ep("socks5://b:x@h:1", "default"),
                new_ep("socks5://h:1", "default"),
                new_ep("socks5://a:x@h:1", "other"),
            ])
            .unwrap();
        assert_eq!(ids.len(), 4);
        // Same identity with another password is a duplicate; the batch changes nothing.
        let err = s
            .add_endpoints(&[
                new_ep("http://h:2", "default"),
                new_ep("socks5://a:y@h:1", "default"),
            ])
            .unwrap_err();
        assert!(matches!(err, StoreError::Duplicate { .. }), "{err}");
        assert!(!err.to_string().contains(":y@"));
        assert_eq!(s.list(None, None).unwrap().len(), 4);
        // Resolving is the seam's, over this backend's `get` and `find`.
        use super::super::{ResolveError, Store};
        let s = Store::Sqlite(s);
        assert!(matches!(
            s.resolve("socks5://a@h:1", None).unwrap_err(),
            ResolveError::Store(StoreError::Ambiguous { .. })
        ));
        // A pool makes it one; an id of another pool is not found in it.
        assert_eq!(
            s.resolve("socks5://a@h:1", Some("other")).unwrap().id,
            ids[3]
        );
        assert_eq!(
            s.resolve("socks5://a@h:1", Some("default")).unwrap().id,
            ids[0]
        );
        let id = ids[3].to_string();
        assert_eq!(s.resolve(&id, None).unwrap().id, ids[3]);
        let err = s.resolve(&id, Some("default")).unwrap_err();
        assert!(matches!(err, ResolveError::NotFound(_)), "{err}");
        assert!(err.to_string().contains("in pool \"default\""), "{err}");
        let err = s.resolve("socks5://a@h:1", Some("nope")).unwrap_err();
        assert!(err.to_string().contains("in pool \"nope\""), "{err}");
    }

    #[test]
    fn ids_are_never_reused_after_remove() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sqlite::open(&dir.path().join("t.db")).unwrap();
        let a = s.add_endpoints(&[new_ep("http://a:1", "default")]).unwrap()[0];
        s.remove(&[a]).unwrap();
        let b = s.add_endpoints(&[new_ep("http://b:1", "default")]).unwrap()[0];
        assert!(b > a, "id {a} reused as {b}");
        let c = s
            .ensure_endpoints(&[new_ep("http://c:1", "default")])
            .unwrap()[0]
            .0;
        assert!(c > b);
        // The new endpoint has only its own history.
        let evs = s.recent_events(Some(b), 10).unwrap();
        assert_eq!(evs.len(), 1, "{evs:?}");
        assert_eq!(evs[0].kind, "added");
    }

    #[test]
    fn times_round_trip() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_790_000_000_123);
        assert_eq!(parse_time(&fmt_time(t)), Some(t));
    }

    #[test]
    fn concurrent_first_opens_migrate_once_and_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join(format!("sub/new{round}.db"));
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let db = db.clone();
                    std::thread::spawn(move || Sqlite::open(&db).map(|_| ()))
                })
                .collect();
            for h in handles {
                h.join().unwrap().unwrap();
            }
            let mode = std::fs::metadata(&db).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "database readable by others: {mode:o}");
            let dmode = std::fs::metadata(db.parent().unwrap())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(dmode & 0o077, 0, "folder open to others: {dmode:o}");
        }
    }
}
