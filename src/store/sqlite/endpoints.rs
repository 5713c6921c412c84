//! SQLite's endpoints table: rows as read, config sync, lookups, removal; the stored form
//! of a state and a cooldown, which pairs share.

use std::time::{Duration, SystemTime};

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use super::events::insert_event;
use super::{text, Sqlite};
use crate::endpoint::{EndpointId, ProxyUrl, Scheme};
use crate::event_kind::EventKind;
use crate::health::{restored_remaining, Phase, Reason, State};
use crate::store::{
    fmt_time, parse_col, parse_time, EndpointRow, NewEndpoint, NewEvent, StoreError,
};
use crate::tags::Tags;

/// Insert an endpoint with an id never used before. Events outlive their endpoint (no
/// foreign key), so a plain `INTEGER PRIMARY KEY` would hand the id of a removed endpoint
/// (the highest one) to the next insert, and that endpoint would inherit the removed
/// one's event history. A removed endpoint leaves a row in `removed_endpoints`, so the
/// largest id ever used is the larger of the two tables' maximums.
pub(super) const INSERT_ENDPOINT: &str =
    "INSERT INTO endpoints (id, pool, scheme, host, port, user, password, label, \
     source, state, tags, streak, state_changed_at, created_at) VALUES (\
     (SELECT MAX(m) + 1 FROM (SELECT COALESCE(MAX(id), 0) AS m FROM endpoints \
      UNION ALL SELECT COALESCE(MAX(id), 0) FROM removed_endpoints)), \
     ?1,?2,?3,?4,?5,?6,?7,?8,?9,?11,0,?10,?10)";

pub(super) const ENDPOINT_COLS: &str =
    "id, pool, scheme, host, port, user, password, label, source, state, \
     reason, phase, detail, streak, reason_streak, cooldown_ms, cooldown_until, \
     state_changed_at, created_at, tags, exit_ip, exit_seen_at";

impl Sqlite {
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
}

/// Insert one endpoint (with `ins`, prepared from `INSERT_ENDPOINT`) and its `added` event.
pub(super) fn insert_new(
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

pub(super) fn remove_rows(tx: &Connection, ids: &[EndpointId]) -> Result<(), StoreError> {
    let mut seen = std::collections::HashSet::new();
    for &id in ids.iter().filter(|id| seen.insert(**id)) {
        // The `removed` event joins the endpoint's chain while its row holds the head; the
        // head then moves to `removed_endpoints`, which also keeps the id from coming back.
        insert_event(
            tx,
            &NewEvent {
                endpoint: Some(id),
                ..NewEvent::new(EventKind::Removed)
            },
        )?;
        let n = tx.execute(
            "INSERT INTO removed_endpoints (id, last_event) \
             SELECT id, last_event FROM endpoints WHERE id=?1",
            [id],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound(format!("with id {id}")));
        }
        tx.execute("DELETE FROM endpoints WHERE id=?1", [id])?;
    }
    Ok(())
}

/// The `state`, `reason` and `phase` columns at `at..at + 3`, as endpoints and pairs both
/// keep them; `corrupt` names the row a value this version does not know is in.
pub(super) fn read_names(
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

pub(super) fn read_cooldown(r: &Row<'_>, at: usize, state: State) -> rusqlite::Result<Cooldown> {
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

pub(super) fn read_endpoint(r: &Row<'_>) -> rusqlite::Result<Result<EndpointRow, StoreError>> {
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
            exit_ip: crate::store::rows::read_exit_ip(r.get(20)?)
                .map_err(|_| corrupt("exit_ip"))?,
            exit_seen_at: r.get(21)?,
        })
    };
    Ok(build())
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
        use crate::store::{ResolveError, Store};
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
}
