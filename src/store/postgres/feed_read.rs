//! One read of the fleet's changes (`Feed`), in a snapshot of its own: the changes of
//! transactions the last read's snapshot did not see (`Position`), the endpoint rows,
//! pairs and removals they wrote, and where the feed stands after them (`feed`'s module
//! documentation says why it goes by transaction ids).
//!
//! Under a stream of commits every daemon of a fleet reads every few milliseconds, so the
//! usual read is two round trips of statements prepared once per connection: `BEGIN`
//! (repeatable read, read only), where the feed stands and the changes listed since; then
//! their rows, pairs and removals, and `COMMIT`. Sent one by one and planned each time,
//! the same statements cost the server more than a group commit does. A reload (changes
//! were pruned past the last read) and the rest of a change too large for one slice are
//! read statement by statement (`read_in`); both are rare.

use std::collections::HashMap;
use std::sync::LazyLock;

use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::read::{endpoint_row, pair_row, ENDPOINT_COLS, PAIR_COLS};
use super::tx_error::TxError;
use super::unseen::{Unseen, SNAPSHOT, UNSEEN_COLS};
use crate::endpoint::EndpointId;
use crate::store::pairs::PairRow;
use crate::store::EndpointRow;

/// Endpoint rows read per call: an import of millions arrives in slices.
const SLICE: i64 = 20_000;

const BEGIN: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

/// Where the feed stands: what the snapshot did not see (`Unseen`), and how far changes
/// were pruned.
static HEAD: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {UNSEEN_COLS}, removed_through FROM fleet_sequence, {SNAPSHOT} WHERE id = 1")
});

/// The changes of transactions the last read's snapshot did not see: those from its
/// `xmax` ($1) on, and those it saw in progress ($2). Two index scans, so that a
/// transaction left open for hours (an idle `psql`) costs a read no more than its id.
const LISTED: &str = "SELECT seq, xid::text::bigint FROM fleet_changes \
     WHERE xid >= $1::bigint::text::xid8 \
     UNION ALL SELECT seq, xid::text::bigint FROM fleet_changes \
     WHERE xid = ANY (ARRAY(SELECT x::text::xid8 FROM unnest($2::bigint[]) AS x)) \
       AND xid < $1::bigint::text::xid8";

/// A pair deleted and written again since (by a change that took its number earlier and
/// committed later) is there: its row says so, not the tombstone.
const REMOVALS: &str = "SELECT r.rev, r.endpoint, r.destination FROM fleet_removals r \
     WHERE r.rev = ANY($1::bigint[]) AND (r.destination IS NULL OR NOT EXISTS ( \
       SELECT 1 FROM destination_pairs p \
       WHERE p.endpoint = r.endpoint AND p.destination = r.destination)) \
     ORDER BY r.rev";

/// The endpoint rows written by the changes `$1`, after (rev, id) `($2, $3)`, a slice.
/// Built once: every read under a stream of commits sends it.
static ENDPOINTS_OF: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ENDPOINT_COLS} FROM endpoints WHERE rev = ANY($1::bigint[]) \
         AND (rev, id) > ($2, $3) ORDER BY rev, id LIMIT $4"
    )
});

/// The pairs written by the changes `$1`.
static PAIRS_OF: LazyLock<String> = LazyLock::new(|| pairs_sql("WHERE p.rev = ANY($1::bigint[])"));

/// The pairs `filter` keeps, each with its endpoint's pool.
fn pairs_sql(filter: &str) -> String {
    format!(
        "SELECT {PAIR_COLS} FROM destination_pairs p JOIN endpoints e ON e.id = p.endpoint \
         {filter} ORDER BY p.rev"
    )
}

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

/// A large change read in slices: the changes it reads, the last endpoint (rev, id) read,
/// and where the feed stands once it is done.
pub(super) struct Slicing {
    seqs: Vec<i64>,
    after: (i64, EndpointId),
    done: Position,
}

/// Where the feed stands: what the snapshot of its last read did not see, and on a
/// standby (where that is everything from the snapshot's `xmin` on) the changes read that
/// the next read lists again (`seen`, skipped).
#[derive(Debug, Clone, Default)]
pub(super) struct Position {
    pub(super) unseen: Unseen,
    pub(super) seen: HashMap<i64, i64>,
}

impl Position {
    /// From `xmin` on: every transaction from there is read (once more, for those the
    /// state loaded before already holds).
    pub(super) fn from(xmin: i64) -> Position {
        Position {
            unseen: Unseen::from(xmin),
            seen: HashMap::new(),
        }
    }
}

/// Where a read leaves the feed.
pub(super) enum Next {
    Slice(Slicing),
    Done(Position),
}

/// Where the feed stands in the snapshot of `head` (what it did not see, and how far
/// changes were pruned) with the changes `listed` (seq, xid) that `at` had not seen: the
/// changes to apply now (each committed in this snapshot and not applied before), where the
/// feed stands after them, and whether changes it never read were pruned.
fn position(head: &Row, listed: &[Row], at: &Position) -> (Vec<i64>, Position, bool) {
    let pruned: i64 = head.get(4);
    let mut done = Position {
        unseen: Unseen::read(head, 0),
        seen: HashMap::new(),
    };
    let mut seqs = Vec::new();
    for r in listed {
        let (seq, xid): (i64, i64) = (r.get(0), r.get(1));
        if !at.seen.contains_key(&seq) {
            seqs.push(seq);
        }
        // On a primary never: what this snapshot lists, it saw committed.
        if done.unseen.holds(xid) {
            done.seen.insert(seq, xid);
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    (seqs, done, pruned >= at.unseen.oldest())
}

/// The changes to apply now, where the feed stands after them, and whether changes it
/// never read were pruned (`position`), read statement by statement.
async fn listed(
    tx: &tokio_postgres::Transaction<'_>,
    at: &Position,
) -> Result<(Vec<i64>, Position, bool), tokio_postgres::Error> {
    let head = tx.query_one(HEAD.as_str(), &[]).await?;
    let listed = tx.query(LISTED, &[&at.unseen.xmax, &at.unseen.xip]).await?;
    Ok(position(&head, &listed, at))
}

/// The removals those changes made that still hold (`REMOVALS`).
fn removed(rows: &[Row]) -> Vec<(i64, EndpointId, Option<String>)> {
    rows.iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The removals those changes made that still hold (`REMOVALS`).
async fn removals(
    tx: &tokio_postgres::Transaction<'_>,
    seqs: &[i64],
) -> Result<Vec<(i64, EndpointId, Option<String>)>, tokio_postgres::Error> {
    Ok(removed(&tx.query(REMOVALS, &[&seqs]).await?))
}

/// One read in the snapshot of `tx`, statement by statement: a reload, or the rest of a
/// change read in slices.
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
        tx.query(ENDPOINTS_OF.as_str(), &[&seqs, &after.0, &after.1, &SLICE])
            .await?
    };
    for r in &rows {
        out.endpoints.push(endpoint_row(r)?);
    }
    if !reload && rows.len() as i64 == SLICE {
        return Ok(sliced(out, seqs, after, done));
    }
    let pair_rows = if reload {
        tx.query(&pairs_sql(""), &[]).await?
    } else {
        tx.query(PAIRS_OF.as_str(), &[&seqs]).await?
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

/// One read; see the module documentation. After an error the connection holds no
/// transaction.
pub(super) async fn read(
    c: &mut Object,
    at: &Position,
    slicing: Option<&Slicing>,
) -> Result<(Changes, Next), TxError> {
    if slicing.is_none() {
        match pipelined(c, at).await {
            Ok(Some(read)) => return Ok(read),
            // Pruned past the last read: everything is read again below.
            Ok(None) => {}
            Err(e) => {
                let _ = c.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        }
    }
    let tx = super::snapshot(c).await?;
    let out = read_in(&tx, at, slicing).await?;
    tx.commit().await?;
    Ok(out)
}

/// The usual read in two round trips; `None` when it must be a reload (nothing read).
async fn pipelined(c: &Object, at: &Position) -> Result<Option<(Changes, Next)>, TxError> {
    let (head, listed, endpoints, pairs, removals) = futures_util::join!(
        c.prepare_cached(&HEAD),
        c.prepare_cached(LISTED),
        c.prepare_cached(&ENDPOINTS_OF),
        c.prepare_cached(&PAIRS_OF),
        c.prepare_cached(REMOVALS),
    );
    let (head, listed, endpoints, pairs, removals) =
        (head?, listed?, endpoints?, pairs?, removals?);
    let from: [&(dyn ToSql + Sync); 2] = [&at.unseen.xmax, &at.unseen.xip];
    let (begun, head, listed) = futures_util::join!(
        c.batch_execute(BEGIN),
        c.query_one(&head, &[]),
        c.query(&listed, &from)
    );
    begun?;
    let (seqs, done, reload) = position(&head?, &listed?, at);
    if reload || seqs.is_empty() {
        c.batch_execute("COMMIT").await?;
        return Ok((!reload).then(|| (Changes::default(), Next::Done(done))));
    }
    let first = (i64::MIN, EndpointId::MIN);
    let slice: [&(dyn ToSql + Sync); 4] = [&seqs, &first.0, &first.1, &SLICE];
    let of: [&(dyn ToSql + Sync); 1] = [&seqs];
    let (rows, pair_rows, removed_rows, committed) = futures_util::join!(
        c.query(&endpoints, &slice),
        c.query(&pairs, &of),
        c.query(&removals, &of),
        c.batch_execute("COMMIT")
    );
    // After a failed statement the COMMIT was a rollback: the statement's error says why.
    let (rows, pair_rows, removed_rows) = (rows?, pair_rows?, removed_rows?);
    committed?;
    let mut out = Changes::default();
    for r in &rows {
        out.endpoints.push(endpoint_row(r)?);
    }
    if rows.len() as i64 == SLICE {
        return Ok(Some(sliced(out, seqs, first, done)));
    }
    for r in &pair_rows {
        out.pairs.push(pair_row(r)?);
    }
    out.removed = removed(&removed_rows);
    out.seqs = seqs;
    Ok(Some((out, Next::Done(done))))
}

/// A slice of endpoint rows came back full: the rest, and then the pairs and removals, are
/// read by the calls after this one.
fn sliced(
    mut out: Changes,
    seqs: Vec<i64>,
    after: (i64, EndpointId),
    done: Position,
) -> (Changes, Next) {
    let last = out.endpoints.last().map_or(after, |r| (r.rev, r.id));
    out.more = true;
    (
        out,
        Next::Slice(Slicing {
            seqs,
            after: last,
            done,
        }),
    )
}
