//! Per-destination wiring of the pools (docs/destinations.md): what a lease wants
//! (destination, schemes), selection that skips banned pairs without scanning the pool, the
//! scoping of a report, report by session, and the operator's view of pairs.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;
use tracing::{info, warn};

use super::apply::Act;
use super::destinations::{normalize, DestRef, DestinationError, PairHealth, Usable};
use super::entries::Entry;
use super::ready::live_at;
use super::{Outcome, PoolError, PoolState, Pools};
use crate::endpoint::{EndpointError, EndpointId, Scheme};
use crate::event_kind::EventKind;
use crate::health::scope::{scope, Scope};
use crate::health::{Input, State, Step};
use crate::store::pairs::PairRow;
use crate::store::{NewEvent, Write};

/// What a lease asks for besides its pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// Normalised destination: its banned pairs are skipped, its pair trial admitted.
    /// Shared, so a lease record keeps it without an allocation per lease.
    pub destination: Option<Arc<str>>,
    /// Bit set of acceptable schemes (by `Scheme::ALL` index); `None`: any.
    pub schemes: Option<u8>,
}

/// What a report says besides its outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportOn {
    /// Normalised destination the use was for (`None`: the lease's own, if any).
    pub destination: Option<String>,
    /// How long the use took (feeds the latency estimate: docs/observability.md,
    /// "Per-endpoint statistics").
    pub duration: Option<std::time::Duration>,
}

impl ReportOn {
    /// A report for `destination` (already normalised), nothing else.
    pub fn to(destination: Option<&str>) -> ReportOn {
        ReportOn {
            destination: destination.map(str::to_string),
            ..ReportOn::default()
        }
    }
}

/// Why a lease's `destination` or `schemes` was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WantError {
    #[error(transparent)]
    Destination(#[from] DestinationError),
    #[error("schemes: {0} (expected some of: {list})", list = scheme_list())]
    Scheme(#[source] EndpointError),
    #[error("schemes is empty: name at least one of {}", scheme_list())]
    NoSchemes,
}

fn scheme_list() -> String {
    Scheme::ALL.map(Scheme::as_str).join(", ")
}

fn bit(s: Scheme) -> u8 {
    1 << Scheme::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

impl Want {
    /// Validate what a client sent: the destination is normalised (host, lower case,
    /// no port), every scheme must be known.
    pub fn parse(destination: Option<&str>, schemes: Option<&[String]>) -> Result<Want, WantError> {
        let destination = destination.map(normalize).transpose()?.map(Arc::from);
        let schemes = match schemes {
            None => None,
            Some([]) => return Err(WantError::NoSchemes),
            Some(list) => {
                let mut mask = 0;
                for s in list {
                    mask |= bit(s.parse::<Scheme>().map_err(WantError::Scheme)?);
                }
                Some(mask)
            }
        };
        Ok(Want {
            destination,
            schemes,
        })
    }

    pub(super) fn fits(&self, e: &Entry) -> bool {
        self.schemes.is_none_or(|m| m & bit(e.url.scheme) != 0)
    }
}

impl PoolState {
    /// Whether endpoint `id` may be leased for the destination: one hash lookup.
    pub(super) fn dests_usable(&self, d: Option<DestRef>, id: EndpointId) -> bool {
        d.is_none_or(|d| self.dests.usable(d, id) == Usable::Available)
    }
}

/// Whom a report is about.
pub(super) struct Settle<'a> {
    pub(super) id: EndpointId,
    /// The lease was the endpoint's single recovery attempt.
    pub(super) trial: bool,
    /// The lease was the trial of this destination's pair.
    pub(super) pair_trial: Option<&'a str>,
    /// The destination the report speaks for.
    pub(super) destination: Option<&'a str>,
    pub(super) lease: Option<String>,
    /// How long the use took, when the client said (the latency estimate).
    pub(super) took: Option<std::time::Duration>,
}

impl Pools {
    /// The least-leased available endpoint of pool `p` that fits `want` and is not
    /// banned for `dref`: (slot, live leases).
    ///
    /// An item that does not fit goes to the back of its level (it is live, so moving it
    /// leaves nothing stale); a level is given up after its live count, so each lease
    /// skips B/(L−B) items on average over a level of L with B banned, and a destination
    /// where everything is banned answers after one pass.
    pub(super) fn pick_where(
        &mut self,
        p: usize,
        dref: Option<DestRef>,
        want: &Want,
        cap: u32,
    ) -> Option<(u32, u32)> {
        let entries = &self.entries;
        let ps = &mut self.pools[p];
        for level in 0..ps.ready.levels.len() {
            if cap != 0 && level as u32 >= cap {
                return None;
            }
            let live = ps.ready.live[level];
            let mut seen = 0;
            while seen < live {
                let Some(&(slot, gen)) = ps.ready.levels[level].front() else {
                    break;
                };
                let q = &mut ps.ready.levels[level];
                if !live_at(entries, slot, gen, p, level as u32) {
                    q.pop_front();
                    continue;
                }
                seen += 1;
                let Some((id, e)) = entries.at(slot) else {
                    q.pop_front();
                    continue;
                };
                // A pair waiting for its trial had its chance in `claim_trial`, which
                // asks the same questions: here it counts as banned.
                let usable = dref.is_none_or(|d| ps.dests.usable(d, *id) == Usable::Available);
                if want.fits(e) && usable {
                    return Some((slot, level as u32));
                }
                ps.ready.levels[level].rotate_left(1);
            }
        }
        None
    }

    /// Apply a report's outcome to the endpoint or to a pair, by the scope rule.
    pub(super) fn settle(
        &mut self,
        on: Settle<'_>,
        outcome: Outcome,
        now: Instant,
        wall: SystemTime,
    ) -> Vec<Write> {
        let id = on.id;
        let pool = self.entries[&id].pool;
        let outcome = match outcome {
            Outcome::Failure(mut f) => {
                // Scrapers paste exception texts holding the proxy URL: never store them raw.
                let known = [self.entries[&id]
                    .url
                    .password
                    .as_deref()
                    .unwrap_or_default()];
                f.detail = f.detail.map(|d| crate::redact::redact_text(&d, &known));
                Outcome::Failure(f)
            }
            success => success,
        };
        let failure = match &outcome {
            Outcome::Failure(f) => Some(f.reason),
            Outcome::Success => None,
        };
        self.count_outcome(id, failure, on.took, wall, true);
        let (sc, status) = match &outcome {
            Outcome::Failure(f) => (
                scope(
                    f.reason.expect("callers check the reason"),
                    f.phase,
                    on.destination.is_some(),
                    false,
                ),
                f.status,
            ),
            Outcome::Success => (Scope::Endpoint, None),
        };
        let mut writes = Vec::new();
        // The pair this report decides: a destination-scoped failure, or a success on a
        // pair that is held (its trial, or failures counting towards `fall`).
        let pair_dest = match &outcome {
            Outcome::Failure(_) if sc == Scope::Destination => on.destination,
            Outcome::Success => on
                .destination
                .filter(|d| self.pools[pool].dests.pair(d, id).is_some()),
            Outcome::Failure(_) => None,
        };
        if let Some(t) = on.pair_trial.filter(|t| pair_dest != Some(*t)) {
            let ps = &mut self.pools[pool];
            let why = "the report did not decide the pair";
            let r = ps
                .dests
                .abandon(t, id, why, on.lease.clone(), &ps.cfg.policy, now, wall);
            writes.extend(r.writes.into_iter().map(Write::Pair));
        }
        if let Some(d) = pair_dest {
            let trial = on.pair_trial == Some(d);
            let (input, act) = match outcome.clone() {
                Outcome::Success => (Input::Success { trial }, NewEvent::new(EventKind::Report)),
                Outcome::Failure(f) => (
                    Input::Failure {
                        trial,
                        failure: f.clone(),
                    },
                    NewEvent {
                        reason: f.reason,
                        phase: f.phase,
                        detail: f.detail,
                        ..NewEvent::new(EventKind::Report)
                    },
                ),
            };
            let act = NewEvent {
                lease: on.lease.clone(),
                ..act
            };
            let jitter = self.rng.f64() * 2.0 - 1.0;
            let ps = &mut self.pools[pool];
            let r = ps.dests.apply(
                d,
                id,
                input,
                status,
                Some(act),
                &ps.cfg.policy,
                now,
                wall,
                jitter,
            );
            writes.extend(r.writes.into_iter().map(Write::Pair));
        }
        if sc == Scope::Destination {
            // The proxy did its part; a trial of the endpoint got no answer about it.
            if on.trial {
                let ev = Act {
                    kind: Some(EventKind::TrialAbandoned),
                    detail: Some("the failure was the destination's".into()),
                    lease: on.lease,
                    ..Default::default()
                };
                writes.extend(self.apply(id, Input::Abandon, now, wall, ev).1);
            }
            return writes;
        }
        let (input, detail, reason, phase) = match outcome {
            Outcome::Success => (Input::Success { trial: on.trial }, None, None, None),
            Outcome::Failure(f) => {
                let (d, r, ph) = (f.detail.clone(), f.reason, f.phase);
                (
                    Input::Failure {
                        failure: f,
                        trial: on.trial,
                    },
                    d,
                    r,
                    ph,
                )
            }
        };
        let success = matches!(input, Input::Success { .. });
        let h = &self.entries[&id].health;
        let (cur_state, cur_streak) = (h.state, h.streak);
        // A plain success on a healthy endpoint changes nothing worth a row.
        let quiet = success && cur_state == State::Available && cur_streak == 0;
        let ev = Act {
            kind: (!quiet).then_some(EventKind::Report),
            lease: on.lease,
            detail: detail.or_else(|| {
                (!on.trial && cur_state != State::Available)
                    .then(|| format!("late result ignored: endpoint is {cur_state}"))
            }),
            reason,
            phase,
            status,
        };
        let (step, w) = self.apply(id, input, now, wall, ev);
        writes.extend(w);
        if let Step::Recorded { late: true } = step {
            info!(endpoint = id, state = %cur_state, "late result ignored");
        }
        writes
    }

    /// Report on the endpoint bound to a sticky session (no lease: e.g. a ban seen inside
    /// an HTTPS tunnel of the gateway). A failure unbinds the session, so its next
    /// request gets another endpoint. Returns the endpoint's state.
    pub fn report_session(
        &mut self,
        pool: &str,
        session: &str,
        outcome: Outcome,
        report: &ReportOn,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        if let Err(e) = outcome.check_reason() {
            return (Err(e), Vec::new());
        }
        let mut writes = self.advance(now, wall);
        let Some(&p) = self.by_name.get(pool) else {
            return (Err(PoolError::UnknownPool(pool.to_string())), writes);
        };
        let key = (p, session.to_string());
        let Some(id) = self
            .sessions
            .get(&key)
            .copied()
            .filter(|id| self.entries.contains_key(id))
        else {
            let e = PoolError::UnknownSession {
                pool: pool.to_string(),
                session: session.to_string(),
            };
            return (Err(e), writes);
        };
        let failure = matches!(outcome, Outcome::Failure(_));
        let on = Settle {
            id,
            trial: false,
            pair_trial: None,
            destination: report.destination.as_deref(),
            lease: None,
            took: report.duration,
        };
        writes.extend(self.settle(on, outcome, now, wall));
        if failure {
            self.sessions.remove(&key);
        }
        (Ok(self.entries[&id].health.state), writes)
    }

    /// Load a stored pair on start (same clamp rule as endpoints). A pair whose endpoint
    /// is not held is skipped; one over the pool's cap is left out with a warning.
    pub fn restore_pair(&mut self, row: &PairRow, now: Instant, wall: SystemTime) {
        let Some(e) = self.entries.get(&row.record.endpoint) else {
            return;
        };
        let ps = &mut self.pools[e.pool];
        if let Err(err) = ps.dests.restore(&row.record, now, wall) {
            warn!(endpoint = row.record.endpoint, error = %err, "stored pair not restored");
        }
    }

    /// `enable ID --destination D`: clear one pair (D normalised).
    pub fn enable_pair(
        &mut self,
        id: EndpointId,
        destination: &str,
        now: Instant,
        wall: SystemTime,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now, wall);
        let Some(e) = self.entries.get(&id) else {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        };
        let r = self.pools[e.pool].dests.enable(destination, id);
        writes.extend(r.writes.into_iter().map(Write::Pair));
        (Ok(r.state), writes)
    }

    /// The non-available pairs of an endpoint.
    pub fn pairs_of(&self, id: EndpointId) -> Vec<PairHealth> {
        self.entries
            .get(&id)
            .map(|e| self.pools[e.pool].dests.pairs_of(id))
            .unwrap_or_default()
    }

    /// Active pair bans of a pool (the metric; never per host).
    pub fn pair_bans(&self, pool: &str) -> usize {
        self.by_name
            .get(pool)
            .map_or(0, |&p| self.pools[p].dests.banned())
    }
}
