//! A group commit of endpoint transitions and events as one call of the database's
//! `proxypool_commit` function (migrations 12 and 13): one statement of the protocol and one round
//! trip, where the statements of a group commit are one each per transition, the change
//! number, the events, `BEGIN` and `COMMIT`. It is the common commit (reports that cool or
//! free endpoints); every other write goes through the statements (`write`).
//!
//! The function applies the transitions as `statements::TRANSITION` does, in id order,
//! then writes the events of those that applied under the events' lock, and notifies the
//! fleet: the same rows, locks and order; for each transition it returns one more than the
//! change its row carried before, or 0 where the row had changed. A trial's outcome under
//! a claim that moved on aborts the call (`STALE`): nothing was written, and the commit is
//! redone batch by batch.

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use super::event_cols::EventCols;
use super::guard::{self, Found};
use super::statements::CHANNEL;
use crate::health::{Phase, Reason};
use crate::store::{HealthRecord, Write};

/// The SQLSTATE the function raises for a trial's outcome under a stale claim.
const STALE: &str = "PPST0";

/// Whether the commit of `writes` fits one call: transitions and events only.
pub(super) fn fits<'a>(mut writes: impl Iterator<Item = &'a Write>) -> bool {
    writes.all(|w| {
        matches!(
            w,
            Write::Transition(..) | Write::Event(_) | Write::EventStatus(..)
        )
    })
}

/// Whether `e` says the server will not run a statement at all: the function is missing,
/// or this role may not execute it (SQLSTATE class 42), not that one commit was refused.
pub(super) fn is_refused(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code().starts_with("42"))
}

/// Whether `e` is the function's refusal of a stale trial's outcome.
pub(super) fn is_stale(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code() == STALE)
}

/// The transitions' columns, in the order the function locks them (by id).
#[derive(Default)]
struct Transitions {
    id: Vec<i64>,
    state: Vec<&'static str>,
    reason: Vec<Option<&'static str>>,
    phase: Vec<Option<&'static str>>,
    detail: Vec<Option<String>>,
    streak: Vec<i32>,
    reason_streak: Vec<i32>,
    cooldown_ms: Vec<Option<i64>>,
    left: Vec<Option<i64>>,
    from: Vec<&'static str>,
    trial: Vec<Option<i64>>,
}

impl Transitions {
    fn push(&mut self, h: &HealthRecord) {
        let s = &h.health;
        self.id.push(h.id);
        self.state.push(s.state.as_str());
        self.reason.push(s.reason.map(Reason::as_str));
        self.phase.push(s.phase.map(Phase::as_str));
        self.detail.push(super::text(&s.detail));
        self.streak.push(s.streak as i32);
        self.reason_streak.push(s.reason_streak as i32);
        self.cooldown_ms.push(guard::cooldown_ms(s.cooldown_ms));
        self.left.push(guard::ms(s.cooldown_left));
        self.from.push(h.from.as_str());
        self.trial.push(h.trial);
    }
}

/// One call for `writes` (all of them `fits`): the change number and one `Found` per
/// write, in the order of `writes`. `split`: commit without waiting for the flush (the
/// caller's next statement waits for it).
pub(super) async fn call(
    c: &Client,
    call: &Statement,
    writes: &[&Write],
    split: bool,
) -> Result<(i64, Vec<Found>), tokio_postgres::Error> {
    // Transitions by id (a stable sort: one endpoint's transitions keep their order); the
    // position of each write's transition among them.
    let mut order: Vec<(i64, usize)> = writes
        .iter()
        .enumerate()
        .filter_map(|(i, w)| match w {
            Write::Transition(h, _) => Some((h.id, i)),
            _ => None,
        })
        .collect();
    order.sort_by_key(|&(id, _)| id);
    let mut at = vec![None; writes.len()];
    let mut t = Transitions::default();
    for (k, &(_, i)) in order.iter().enumerate() {
        if let Write::Transition(h, _) = writes[i] {
            t.push(h);
            at[i] = Some(k);
        }
    }
    let mut events = EventCols::default();
    let mut on: Vec<Option<i32>> = Vec::new();
    for (w, k) in writes.iter().zip(&at) {
        let (ev, status) = match w {
            Write::Transition(_, ev) | Write::Event(ev) => (ev, None),
            Write::EventStatus(ev, s) => (ev, *s),
            _ => continue,
        };
        events.push_new(ev, ev.endpoint, None, status);
        on.push(k.map(|k| k as i32 + 1));
    }
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &split,
        &CHANNEL,
        &t.id,
        &t.state,
        &t.reason,
        &t.phase,
        &t.detail,
        &t.streak,
        &t.reason_streak,
        &t.cooldown_ms,
        &t.left,
        &t.from,
        &t.trial,
        &on,
    ];
    params.extend(events.params());
    let out: Vec<i64> = c.query_one(call, &params).await?.get(0);
    // One number per transition after the change number: one more than the change its row
    // carried before, or 0 where it found the row changed (and so does a missing one: it
    // is read back).
    let seq = out.first().copied().unwrap_or_default();
    let found = at
        .iter()
        .map(|k| match k.and_then(|k| out.get(k + 1)) {
            None if k.is_none() => Found::Plain,
            Some(&n) if n > 0 => Found::Applied(Some(n - 1)),
            _ => Found::Conflict,
        })
        .collect();
    Ok((seq, found))
}
