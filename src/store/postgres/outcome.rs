//! What a batch leaves besides its guarded rows — the events of the writes that happened,
//! tombstones, source rows — and what its callers learn: claims won or lost, and the rows
//! that changed under them as they are now.

use std::time::Duration;

use futures_util::future::join_all;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use super::event_cols::EventCols;
use super::guard::Found;
use super::read::rows_now;
use super::statements::{Stmts, CHANNEL};
use crate::endpoint::EndpointId;
use crate::store::pairs::PairWrite;
use crate::store::{Claim, ClaimOn, ClaimResult, NewEvent, RowNow, StoreError, Unclaim, Write};

/// One row of `fleet_removals`.
type Tombstone = (EndpointId, Option<String>);

fn pair_dest(on: &ClaimOn) -> Option<&str> {
    match on {
        ClaimOn::Pair(_, d) => Some(d),
        ClaimOn::Endpoint(_) => None,
    }
}

/// What a batch leaves besides its guarded rows: its events (those of writes that
/// happened), tombstones, source rows; and what its caller learns.
#[derive(Default)]
pub(super) struct Outcome {
    events: EventCols,
    pub(super) tombstones: Vec<Tombstone>,
    pub(super) changed: bool,
    pub(super) claims: Vec<ClaimResult>,
    /// Keys whose rows go back to the caller.
    pub(super) fresh_endpoints: Vec<EndpointId>,
    pub(super) fresh_pairs: Vec<(EndpointId, String)>,
    /// The endpoint rows it wrote, each with the change it carried before.
    pub(super) before: Vec<(EndpointId, i64)>,
    /// Its events are written by another outcome, or by the database's function.
    skip_events: bool,
}

impl Outcome {
    /// What a batch's callers learn alone (claims, the rows to read back), without the
    /// batch's events: those are the commit's outcome's, or the database function's.
    pub(super) fn for_callers() -> Outcome {
        Outcome {
            skip_events: true,
            ..Outcome::default()
        }
    }

    fn event(
        &mut self,
        ev: &NewEvent,
        endpoint: Option<EndpointId>,
        destination: Option<&str>,
        status: Option<u16>,
    ) {
        if !self.skip_events {
            self.events.push_new(ev, endpoint, destination, status);
        }
    }

    pub(super) fn add(&mut self, w: &Write, f: &Found) {
        let applied = matches!(f, Found::Applied(_) | Found::Plain | Found::Won { .. });
        self.changed |=
            matches!(f, Found::Applied(_) | Found::Won { .. }) && !matches!(w, Write::Event(_));
        if let Found::Applied(Some(before))
        | Found::Won {
            before: Some(before),
            ..
        } = f
        {
            if let Some(id) = endpoint_row(w) {
                self.before.push((id, *before));
            }
        }
        match w {
            Write::Transition(h, ev) => {
                if applied {
                    self.event(ev, ev.endpoint, None, None);
                } else {
                    self.fresh_endpoints.push(h.id);
                }
            }
            Write::Event(ev) => self.event(ev, ev.endpoint, None, None),
            Write::EventStatus(ev, s) => self.event(ev, ev.endpoint, None, *s),
            Write::Remove(ids) => {
                let mut seen = std::collections::HashSet::new();
                for &id in ids.iter().filter(|id| seen.insert(**id)) {
                    let ev = NewEvent {
                        endpoint: Some(id),
                        ..NewEvent::new(crate::event_kind::EventKind::Removed)
                    };
                    self.event(&ev, Some(id), None, None);
                    self.tombstones.push((id, None));
                }
            }
            Write::Claim(c) => self.claim(c, f),
            Write::Unclaim(u) => self.unclaim(u, applied),
            Write::Pair(p) => self.add_pair(p, f, applied),
            Write::SourceResult { .. } => {}
            // Written over by a later change: the row as it is now is taken instead.
            Write::Exit { id, .. } => {
                if !applied {
                    self.fresh_endpoints.push(*id);
                }
            }
        }
    }

    /// A pair's write as the database found it (`applied`: it happened).
    fn add_pair(&mut self, w: &PairWrite, f: &Found, applied: bool) {
        match w {
            PairWrite::Claim(c) => self.claim(c, f),
            PairWrite::Unclaim(u) => self.unclaim(u, applied),
            PairWrite::Upsert(r, ev) => {
                if applied {
                    self.event(ev, Some(r.endpoint), Some(&r.destination), r.status);
                } else {
                    self.fresh_pairs.push((r.endpoint, r.destination.clone()));
                }
            }
            PairWrite::Delete {
                endpoint,
                destination,
                event,
                ..
            } => {
                if applied {
                    self.event(event, Some(*endpoint), Some(destination), None);
                    self.tombstones.push((*endpoint, Some(destination.clone())));
                } else {
                    self.fresh_pairs.push((*endpoint, destination.clone()));
                }
            }
            PairWrite::Event {
                destination,
                status,
                event,
            } => self.event(event, event.endpoint, Some(destination), *status),
        }
    }

    /// A trial's claim: won (its event written), or lost to another daemon (the row as it
    /// is now goes back to the caller).
    fn claim(&mut self, c: &Claim, f: &Found) {
        if let Found::Won { epoch, .. } = f {
            self.event(&c.event, Some(c.on.endpoint()), pair_dest(&c.on), None);
            self.claims.push(ClaimResult::Won {
                on: c.on.clone(),
                epoch: *epoch,
            });
            return;
        }
        let left = match f {
            Found::Lost(d) => *d,
            _ => Duration::ZERO,
        };
        self.claims.push(ClaimResult::Lost {
            on: c.on.clone(),
            left,
        });
        self.fresh_key(&c.on);
    }

    /// A trial handed back: its event, or the row as it is now when the claim had moved on.
    fn unclaim(&mut self, u: &Unclaim, applied: bool) {
        if applied {
            self.event(&u.event, Some(u.on.endpoint()), pair_dest(&u.on), None);
        } else {
            self.fresh_key(&u.on);
        }
    }

    fn fresh_key(&mut self, on: &ClaimOn) {
        match on {
            ClaimOn::Endpoint(id) => self.fresh_endpoints.push(*id),
            ClaimOn::Pair(id, d) => self.fresh_pairs.push((*id, d.clone())),
        }
    }
}

/// The endpoint row a write changes (not a removal's: gone, it has nothing to read).
fn endpoint_row(w: &Write) -> Option<EndpointId> {
    match w {
        Write::Transition(h, _) => Some(h.id),
        Write::Exit { id, .. } => Some(*id),
        Write::Claim(Claim {
            on: ClaimOn::Endpoint(id),
            ..
        })
        | Write::Unclaim(Unclaim {
            on: ClaimOn::Endpoint(id),
            ..
        }) => Some(*id),
        _ => None,
    }
}

/// Write what `out` holds besides the guarded rows, and the batch's source results; with
/// `notify`, notify the fleet (in the events' statement when there are events).
pub(super) async fn finish(
    c: &Client,
    st: &Stmts,
    writes: &[&Write],
    out: &Outcome,
    notify: bool,
) -> Result<(), tokio_postgres::Error> {
    let e = &out.events;
    let events = async {
        match (e.is_empty(), notify) {
            (true, false) => Ok(0),
            (true, true) => c.execute(&st.notify, &[&CHANNEL]).await,
            (false, _) => {
                let cols = e.params();
                let mut params: Vec<&(dyn ToSql + Sync)> = cols.to_vec();
                params.extend([&notify as &(dyn ToSql + Sync), &CHANNEL]);
                c.execute(&st.events, &params).await
            }
        }
    };
    let (ids, dests): (Vec<i64>, Vec<Option<String>>) = out.tombstones.iter().cloned().unzip();
    let tombstones = async {
        if ids.is_empty() {
            return Ok(0);
        }
        c.execute(&st.tombstones, &[&ids, &dests]).await
    };
    let sources = join_all(writes.iter().filter_map(|w| match w {
        Write::SourceResult {
            pool,
            name,
            ok,
            detail,
            count,
        } => Some(async move {
            let count = count.map(|c| c as i64);
            // Stored as SQLite stores it (control characters escaped).
            let detail = super::text(detail);
            c.execute(&st.source, &[pool, name, ok, &detail, &count])
                .await
        }),
        _ => None,
    }));
    let (a, b, c) = futures_util::join!(events, tombstones, sources);
    a?;
    b?;
    c.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(())
}

/// The rows of `out`'s fresh keys, as they are now (`read::rows_now`), all sent when
/// first polled: in the fast path, before its `COMMIT`.
pub(super) async fn fresh(
    c: &Client,
    st: &Stmts,
    out: &Outcome,
) -> Result<Result<Vec<RowNow>, StoreError>, tokio_postgres::Error> {
    rows_now(
        c,
        (&st.fresh_endpoints, &out.fresh_endpoints),
        (&st.fresh_pairs, &out.fresh_pairs),
    )
    .await
}

/// The error a batch that must not apply answers with.
pub(super) fn group_error(writes: &[&Write], founds: &[Found], fresh: Vec<RowNow>) -> StoreError {
    for (w, f) in writes.iter().zip(founds) {
        match f {
            Found::Missing(id) => return StoreError::NotFound(format!("with id {id}")),
            Found::Stale => {
                let what = match w {
                    Write::Transition(h, _) => format!("endpoint {}", h.id),
                    Write::Pair(PairWrite::Upsert(r, _)) => {
                        format!("endpoint {} for {}", r.endpoint, r.destination)
                    }
                    Write::Pair(PairWrite::Delete {
                        endpoint,
                        destination,
                        ..
                    }) => format!("endpoint {endpoint} for {destination}"),
                    _ => "a trial".to_string(),
                };
                return StoreError::StaleClaim { what, fresh };
            }
            _ => {}
        }
    }
    StoreError::Corrupt("a batch refused without a reason".into())
}
