//! The SQL of a group commit, and the change number every writing transaction takes.
//!
//! A transaction's change number is `nextval('fleet_change_seq')`, recorded in
//! `fleet_changes` with the transaction's id (`NEXT`, its first statement); the statements
//! after it read it back as `currval(...)` on the same session, so the whole batch goes out
//! at once without waiting for the number. Every guarded write sets `rev` to it only where
//! the row's `rev` is smaller: a row's `rev` then grows in commit order even though the
//! numbers of concurrent transactions commit in any order (a row that a transaction with a
//! larger number already changed is a conflict, as a changed state is). A guarded write of
//! an endpoint also keeps the `rev` it found as `prev_rev`, and returns it: a daemon whose
//! memory has not seen that change reads the row again (its write may have waited for
//! another writer's change of columns it does not write, and carries that change now).

use std::sync::LazyLock;

use futures_util::future::join_all;
use tokio_postgres::Statement;

use super::read::{ENDPOINT_COLS, PAIR_COLS};

/// The channel every daemon listens on; the payload is the change number.
pub(crate) const CHANNEL: &str = "proxypool_changes";

/// Take this transaction's change number and record it with the transaction's id.
pub(super) const NEXT: &str =
    "INSERT INTO fleet_changes (seq) VALUES (nextval('fleet_change_seq')) RETURNING seq";

/// Operator commands (adding, syncing, editing, removing endpoints; the move from SQLite)
/// lock the tables they change first, so the number they take next is larger than any
/// `rev` already committed, and no writer with a smaller number is half-way through.
pub(super) const LOCK_TABLES: &str =
    "LOCK TABLE endpoints, destination_pairs IN SHARE ROW EXCLUSIVE MODE";

/// Event ids come from a sequence when a row is inserted, so without more they would
/// commit in any order across the daemons of a fleet, and a reader asking for the events
/// "after the last id I saw" could skip one that committed after a larger id. Every
/// transaction takes this lock just before it inserts events and keeps it to its end: ids
/// are then taken, and committed, one transaction after another. It is the last lock a
/// group commit takes (its rows are locked before), and operator commands take it right
/// after their table lock, so no two transactions wait for each other through it.
pub(super) const EVENTS_LOCK: &str = "SELECT pg_advisory_xact_lock(7378984100003398005)";

/// Lock the tables as `LOCK_TABLES` says and events as `EVENTS_LOCK` does, then take the
/// change number.
pub(super) async fn lock_and_number(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<i64, tokio_postgres::Error> {
    tx.batch_execute(&format!("{LOCK_TABLES}; {EVENTS_LOCK}"))
        .await?;
    Ok(tx.query_one(NEXT, &[]).await?.get(0))
}

/// A transaction of its own after a group commit that was committed without waiting for
/// its WAL flush: it writes one WAL record (a logical decoding message, which any role may
/// write and no table keeps) under a transaction id, so its own commit waits for the flush
/// (and for synchronous standbys, as the server's `synchronous_commit` says) of every
/// record before it, the group commit's included (`write::Split`).
pub(super) const FLUSH: &str = "SELECT pg_logical_emit_message(true, 'proxypool', '')";

pub(super) const NOTIFY: &str = "SELECT pg_notify($1, currval('fleet_change_seq')::text)";

pub(super) const TRANSITION: &str =
    "WITH cur AS (SELECT claim_epoch FROM endpoints WHERE id = $1), \
     u AS (UPDATE endpoints SET state = $2, reason = $3, phase = $4, detail = $5, streak = $6, \
       reason_streak = $7, cooldown_ms = $8, \
       cooldown_until = now() + $9::bigint * interval '1 millisecond', \
       state_changed_at = now(), prev_rev = rev, rev = currval('fleet_change_seq'), \
       claim_until = NULL \
     WHERE id = $1 AND state = $10::text AND ($11::bigint IS NULL OR claim_epoch = $11) \
       AND rev < currval('fleet_change_seq') \
       AND NOT ($10::text = 'cooling' AND $2::text = 'probe_allowed' \
                AND COALESCE(cooldown_until > now(), false)) \
     RETURNING prev_rev) \
     SELECT (SELECT prev_rev FROM u), (SELECT claim_epoch FROM cur)";

/// Every endpoint row (`$1`) and pair row (`$2`, `$3`; and every pair of the endpoints
/// removed, `$4`, which their removal deletes) a commit may write, locked up front in the
/// order every daemon locks them: endpoints by id, then pairs by key (`guard::lock_rows`).
/// The pairs' sort takes every endpoint's lock first (`first`).
/// The lock an update takes, not a delete's: another daemon's insert of a pair checks
/// its endpoint with a key-share lock, which this one lets through.
pub(super) const LOCK_ROWS: &str = "WITH a AS MATERIALIZED (SELECT id FROM endpoints \
       WHERE id = ANY($1::bigint[]) ORDER BY id FOR NO KEY UPDATE), \
     b AS MATERIALIZED (SELECT p.endpoint FROM (SELECT count(*) FROM a) AS first(n), \
       destination_pairs p \
       WHERE first.n >= 0 AND (p.endpoint, p.destination) IN \
         (SELECT * FROM UNNEST($2::bigint[], $3::text[]) UNION ALL \
          SELECT r.endpoint, r.destination FROM destination_pairs r \
          WHERE r.endpoint = ANY($4::bigint[])) \
       ORDER BY p.endpoint, p.destination FOR NO KEY UPDATE OF p) \
     SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b)";

pub(super) const CLAIM: &str = "WITH cur AS (SELECT claim_until FROM endpoints WHERE id = $1), \
     u AS (UPDATE endpoints SET claim_epoch = currval('fleet_change_seq'), \
       claim_until = now() + $2::bigint * interval '1 millisecond', \
       prev_rev = rev, rev = currval('fleet_change_seq') \
     WHERE id = $1 AND state = 'probe_allowed' AND (claim_until IS NULL OR claim_until <= now()) \
       AND rev < currval('fleet_change_seq') \
     RETURNING claim_epoch, prev_rev) \
     SELECT (SELECT claim_epoch FROM u), (SELECT GREATEST(0, CEIL(COALESCE(EXTRACT(EPOCH FROM \
       (claim_until - now())), 0) * 1000))::bigint FROM cur), (SELECT prev_rev FROM u)";

pub(super) const UNCLAIM: &str = "UPDATE endpoints SET claim_until = NULL, \
       prev_rev = rev, rev = currval('fleet_change_seq') \
     WHERE id = $1 AND claim_epoch = $2 AND claim_until IS NOT NULL \
       AND rev < currval('fleet_change_seq') RETURNING prev_rev";

pub(super) const PAIR_CLAIM: &str = "WITH cur AS (SELECT claim_until FROM destination_pairs \
       WHERE endpoint = $1 AND destination = $2), \
     u AS (UPDATE destination_pairs SET claim_epoch = currval('fleet_change_seq'), \
       claim_until = now() + $3::bigint * interval '1 millisecond', \
       rev = currval('fleet_change_seq') \
     WHERE endpoint = $1 AND destination = $2 AND state = 'probe_allowed' \
       AND (claim_until IS NULL OR claim_until <= now()) \
       AND rev < currval('fleet_change_seq') RETURNING claim_epoch) \
     SELECT (SELECT claim_epoch FROM u), (SELECT GREATEST(0, CEIL(COALESCE(EXTRACT(EPOCH FROM \
       (claim_until - now())), 0) * 1000))::bigint FROM cur)";

pub(super) const PAIR_UNCLAIM: &str = "UPDATE destination_pairs SET claim_until = NULL, \
       rev = currval('fleet_change_seq') \
     WHERE endpoint = $1 AND destination = $2 AND claim_epoch = $3 AND claim_until IS NOT NULL \
       AND rev < currval('fleet_change_seq') RETURNING 1";

pub(super) const PAIR_INSERT: &str = "INSERT INTO destination_pairs (endpoint, destination, \
       state, reason, phase, status, detail, streak, reason_streak, cooldown_ms, \
       cooldown_until, state_changed_at, rev) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
       now() + $11::bigint * interval '1 millisecond', now(), currval('fleet_change_seq') \
     WHERE EXISTS (SELECT 1 FROM endpoints WHERE id = $1) \
     ON CONFLICT (endpoint, destination) DO NOTHING RETURNING 1";

pub(super) const PAIR_UPDATE: &str = "WITH cur AS (SELECT claim_epoch FROM destination_pairs \
       WHERE endpoint = $1 AND destination = $2), \
     u AS (UPDATE destination_pairs SET state = $3, reason = $4, phase = $5, status = $6, \
       detail = COALESCE($7, detail), streak = $8, reason_streak = $9, cooldown_ms = $10, \
       cooldown_until = now() + $11::bigint * interval '1 millisecond', \
       state_changed_at = now(), rev = currval('fleet_change_seq'), claim_until = NULL \
     WHERE endpoint = $1 AND destination = $2 AND state = $12::text \
       AND ($13::bigint IS NULL OR claim_epoch = $13) \
       AND rev < currval('fleet_change_seq') \
       AND NOT ($12::text = 'cooling' AND $3::text = 'probe_allowed' \
                AND COALESCE(cooldown_until > now(), false)) \
     RETURNING 1) \
     SELECT (SELECT count(*) FROM u), (SELECT claim_epoch FROM cur)";

pub(super) const PAIR_DELETE: &str = "WITH cur AS (SELECT claim_epoch FROM destination_pairs \
       WHERE endpoint = $1 AND destination = $2), \
     d AS (DELETE FROM destination_pairs WHERE endpoint = $1 AND destination = $2 \
       AND state = $3::text AND ($4::bigint IS NULL OR claim_epoch = $4) \
       AND rev < currval('fleet_change_seq') RETURNING 1) \
     SELECT (SELECT count(*) FROM d), (SELECT claim_epoch FROM cur)";

/// An endpoint's exit address (docs/exit.md): rare (each endpoint every few hours), so
/// prepared where it is sent rather than with every connection's statements.
pub(super) const EXIT: &str = "UPDATE endpoints SET exit_ip = $2::text, \
       exit_seen_at = CASE WHEN $2::text IS NULL THEN NULL ELSE now() END, \
       prev_rev = rev, rev = currval('fleet_change_seq') \
     WHERE id = $1 AND rev < currval('fleet_change_seq') RETURNING prev_rev";

pub(super) const REMOVE: &str = "DELETE FROM endpoints WHERE id = ANY($1::bigint[]) RETURNING id";

/// A batch's events, in its order, after the events' lock (`EVENTS_LOCK`, taken before the
/// first id: the one-row subquery is joined to every row), and the notification when `$12`
/// says the batch changed rows (`$13` the channel; a transaction's notifications with the
/// same payload are sent once). One statement, so that a group commit's second round trip
/// is the events, `COMMIT` and the flush.
pub(super) const EVENTS: &str = "WITH ins AS (INSERT INTO events (endpoint, kind, from_state, \
       to_state, reason, phase, detail, lease, destination, status, blame) \
     SELECT e, k, f, t, r, p, d, l, ds, s, b \
     FROM (SELECT pg_advisory_xact_lock(7378984100003398005) OFFSET 0) AS lock(held), \
       UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
       $7::text[], $8::text[], $9::text[], $10::int[], $11::text[]) \
       WITH ORDINALITY AS v(e, k, f, t, r, p, d, l, ds, s, b, o) ORDER BY o RETURNING 1) \
     SELECT (SELECT count(*) FROM ins), \
       CASE WHEN $12::bool THEN pg_notify($13, currval('fleet_change_seq')::text) END";

pub(super) const TOMBSTONES: &str = "INSERT INTO fleet_removals (rev, endpoint, destination) \
     SELECT currval('fleet_change_seq'), e, d FROM UNNEST($1::bigint[], $2::text[]) AS v(e, d)";

pub(super) const SOURCE: &str = "INSERT INTO sources (pool, name, last_at, last_ok, last_detail, \
       last_count) \
     VALUES ($1, $2, now(), $3, $4, $5) ON CONFLICT (pool, name) DO UPDATE SET \
     last_at = excluded.last_at, last_ok = excluded.last_ok, \
     last_detail = excluded.last_detail, last_count = excluded.last_count";

/// A group commit of transitions and events in one call (`commit_call`): whether to commit
/// without waiting for the flush, the channel, the transitions' eleven columns in id order,
/// then each event's transition (1-based; NULL: always written) and its eleven columns.
pub(super) const COMMIT_CALL: &str = "SELECT proxypool_commit($1, $2, $3, $4, $5, $6, $7, $8, \
     $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)";

/// The rows that changed under a commit's writes, as they are now (`outcome::fresh`): one
/// key a statement. An array of keys (`= ANY($1)`) was planned again on every call
/// (PostgreSQL's custom plan for one element always looks cheaper than its generic plan
/// for an array of unknown length): about 80 µs of planning a read-back, where one key a
/// statement runs on the generic plan after its first few.
pub(super) static FRESH_ENDPOINTS: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {ENDPOINT_COLS} FROM endpoints WHERE id = $1"));

pub(super) static FRESH_PAIRS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {PAIR_COLS} FROM destination_pairs p JOIN endpoints e ON e.id = p.endpoint \
         WHERE p.endpoint = $1 AND p.destination = $2"
    )
});

/// The statements of a batch, prepared once per connection (the pool's cache keeps them).
pub(super) struct Stmts {
    pub next: Statement,
    pub transition: Statement,
    pub lock_rows: Statement,
    pub claim: Statement,
    pub unclaim: Statement,
    pub pair_claim: Statement,
    pub pair_unclaim: Statement,
    pub pair_insert: Statement,
    pub pair_update: Statement,
    pub pair_delete: Statement,
    pub remove: Statement,
    pub events: Statement,
    pub tombstones: Statement,
    pub source: Statement,
    pub notify: Statement,
    pub flush: Statement,
    pub fresh_endpoints: Statement,
    pub fresh_pairs: Statement,
}

impl Stmts {
    pub(super) async fn prepare(
        c: &deadpool_postgres::Object,
    ) -> Result<Stmts, tokio_postgres::Error> {
        let all = join_all(
            [
                NEXT,
                TRANSITION,
                LOCK_ROWS,
                CLAIM,
                UNCLAIM,
                PAIR_CLAIM,
                PAIR_UNCLAIM,
                PAIR_INSERT,
                PAIR_UPDATE,
                PAIR_DELETE,
                REMOVE,
                EVENTS,
                TOMBSTONES,
                SOURCE,
                NOTIFY,
                FLUSH,
                &FRESH_ENDPOINTS,
                &FRESH_PAIRS,
            ]
            .map(|sql| c.prepare_cached(sql)),
        )
        .await;
        let mut it = all.into_iter();
        let mut next = || it.next().expect("one per statement");
        Ok(Stmts {
            next: next()?,
            transition: next()?,
            lock_rows: next()?,
            claim: next()?,
            unclaim: next()?,
            pair_claim: next()?,
            pair_unclaim: next()?,
            pair_insert: next()?,
            pair_update: next()?,
            pair_delete: next()?,
            remove: next()?,
            events: next()?,
            tombstones: next()?,
            source: next()?,
            notify: next()?,
            flush: next()?,
            fresh_endpoints: next()?,
            fresh_pairs: next()?,
        })
    }
}
