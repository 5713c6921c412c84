//! Per-destination wiring of the pools (docs/destinations.md, docs/blame.md): what a
//! lease wants (host, target, schemes, tags), whether an endpoint's pairs allow it,
//! report by session, and the operator's view of pairs.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;
use tracing::warn;

use super::destinations::{
    place, DestRef, DestinationError, Destinations, PairHealth, Place, Usable,
};
use super::entries::Entry;
use super::evidence::{Proof, Settle};
use super::{Outcome, PoolError, PoolState, Pools};
use crate::endpoint::{EndpointError, EndpointId, Scheme};
use crate::health::blame::Blame;
use crate::health::State;
use crate::protocol::{SlowedView, TargetCleared};
use crate::store::pairs::PairRow;
use crate::store::Write;
use crate::tags::Tags;

/// The event of `enable --target` in a pool: `target_up` when it was down.
fn cleared_event(target: &str, was_down: Option<std::time::Duration>) -> Write {
    use crate::event_kind::EventKind;
    let (kind, detail) = match was_down {
        Some(d) => {
            let d = std::time::Duration::from_millis(d.as_millis() as u64);
            (
                EventKind::TargetUp,
                format!(
                    "enable --target: cleared by the operator after {} down",
                    humantime::format_duration(d)
                ),
            )
        }
        None => (
            EventKind::Operator,
            "enable --target: the target was not down; what was known of it is forgotten"
                .to_string(),
        ),
    };
    let reason = Some(crate::health::Reason::Operator);
    super::pair_target::target_event(target, None, kind, reason, &detail, None)
}

/// The `operator` row of `enable --destination` ending a slow-down.
fn slow_down_cleared(
    host: &str,
    id: EndpointId,
    spacing: std::time::Duration,
    left: std::time::Duration,
) -> Write {
    use crate::event_kind::EventKind;
    use crate::store::pairs::PairWrite;
    let ms = |d: std::time::Duration| {
        humantime::format_duration(std::time::Duration::from_millis(d.as_millis() as u64))
    };
    Write::Pair(PairWrite::Event {
        destination: host.to_string(),
        status: None,
        event: crate::store::NewEvent {
            endpoint: Some(id),
            from: Some(State::Available),
            to: Some(State::Available),
            reason: Some(crate::health::Reason::Operator),
            detail: Some(format!(
                "enable --destination: slow-down cleared (spaced every {}, next use was in {})",
                ms(spacing),
                ms(left)
            )),
            ..crate::store::NewEvent::new(EventKind::Operator)
        },
    })
}

/// What a report did: the endpoint's state afterwards, and whom a failure counted
/// against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    /// The endpoint reported on.
    pub endpoint: crate::endpoint::EndpointId,
    pub state: State,
    pub blame: Option<Blame>,
}

/// What a lease asks for besides its pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// Normalised destination host: its banned pairs are skipped, its pair trial
    /// admitted. Shared, so a lease record keeps it without an allocation per lease.
    pub destination: Option<Arc<str>>,
    /// The target `host:port` when a port was given (else the target is the host alone:
    /// see `target_key`): refused when it is down, its pairs skipped, the endpoints that
    /// just failed it passed over.
    pub target: Option<Arc<str>>,
    /// Bit set of acceptable schemes (by `Scheme::ALL` index); `None`: any.
    pub schemes: Option<u8>,
    /// Tags every endpoint leased must carry (docs/selection.md, "Tags").
    pub tags: Tags,
    /// No endpoint's or pair's trial: the request this lease is for had one already (a
    /// gateway request gets at most one trial among its tries).
    pub no_trial: bool,
}

/// What a report says besides its outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportOn {
    /// Where the use went (`None`: the lease's own place, if any).
    pub place: Option<Place>,
    /// How long the use took (feeds the latency estimate: docs/observability.md,
    /// "Per-endpoint statistics").
    pub duration: Option<std::time::Duration>,
}

impl ReportOn {
    /// A report for `destination` (`host` or `host:port`), nothing else; a name that is
    /// not a destination is ignored (callers validate what clients send).
    pub fn to(destination: Option<&str>) -> ReportOn {
        ReportOn {
            place: destination.and_then(|d| place(d).ok()),
            ..ReportOn::default()
        }
    }
}

/// Why a lease's `destination` or `schemes` was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WantError {
    #[error(transparent)]
    Destination(#[from] DestinationError),
    /// The scheme's own error already lists the schemes.
    #[error("schemes: {0}")]
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
    /// Validate what a client sent: the destination is `host` or `host:port` (normalised:
    /// lower case, canonical IPv6), every scheme must be known.
    pub fn parse(destination: Option<&str>, schemes: Option<&[String]>) -> Result<Want, WantError> {
        let place = destination.map(place).transpose()?;
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
            schemes,
            ..Want::at(place.as_ref())
        })
    }

    /// A use of `place` (any scheme).
    pub fn at(place: Option<&Place>) -> Want {
        Want {
            destination: place.map(|p| Arc::from(p.host.as_str())),
            // The host alone is its own target: one shared name, nothing to compare.
            target: place
                .filter(|p| p.target != p.host)
                .map(|p| Arc::from(p.target.as_str())),
            schemes: None,
            tags: Tags::default(),
            no_trial: false,
        }
    }

    /// The same, for endpoints carrying every one of `tags`.
    pub fn with_tags(self, tags: Tags) -> Want {
        Want { tags, ..self }
    }

    /// The target's key: `host:port`, or the host when no port was given.
    pub fn target_key(&self) -> Option<&str> {
        self.target.as_deref().or(self.destination.as_deref())
    }

    /// The schemes asked for, as a message names them (`socks5 or socks5h`).
    pub(super) fn schemes_text(&self) -> Option<String> {
        let m = self.schemes?;
        let names: Vec<&str> = Scheme::ALL
            .iter()
            .filter(|s| m & bit(**s) != 0)
            .map(|s| s.as_str())
            .collect();
        Some(names.join(" or "))
    }

    pub(super) fn fits(&self, e: &Entry) -> bool {
        self.schemes.is_none_or(|m| m & bit(e.url.scheme) != 0)
    }
}

/// The pair views a lease for a place consults: the host's (bans) and the target's
/// (reachability), each present only when it has pairs.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Views {
    pub(super) host: Option<DestRef>,
    pub(super) target: Option<DestRef>,
}

impl Views {
    pub(super) fn any(&self) -> bool {
        self.host.is_some() || self.target.is_some()
    }
}

impl PoolState {
    /// The views of `want`'s host and target: a hash lookup each.
    pub(super) fn views(&self, want: &Want) -> Views {
        let host = want
            .destination
            .as_deref()
            .and_then(|d| self.dests.lookup(d));
        let target = want.target.as_deref().and_then(|t| self.dests.lookup(t));
        Views { host, target }
    }

    /// Whether endpoint `id` may be leased for the place: its pairs of both views are
    /// available.
    pub(super) fn dests_usable(&self, v: Views, id: EndpointId) -> bool {
        usable(&self.dests, v, id)
    }
}

/// Whether endpoint `id` may be leased for the place of `v`: its pairs of both views are
/// available.
pub(super) fn usable(dests: &Destinations, v: Views, id: EndpointId) -> bool {
    let ok = |d: Option<DestRef>| d.is_none_or(|d| dests.usable(d, id) == Usable::Available);
    ok(v.host) && ok(v.target)
}

impl Pools {
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
    ) -> (Result<Reported, PoolError>, Vec<Write>) {
        if let Err(e) = outcome.check_reason() {
            return (Err(e), Vec::new());
        }
        let mut writes = self.advance(now);
        let Some(&p) = self.by_name.get(pool) else {
            return (Err(PoolError::UnknownPool(pool.to_string())), writes);
        };
        let key = self.sessions.at(p, session);
        let Some(id) = self
            .sessions
            .get(key)
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
            host: report.place.as_ref().map(|p| p.host.as_str()),
            target: report.place.as_ref().map(|p| p.target.as_str()),
            took: report.duration,
            ..Settle::default()
        };
        let settled = self.settle(on, outcome, Proof::Answer, now, wall);
        writes.extend(settled.writes);
        if failure {
            self.sessions.unbind(key);
        }
        let answer = Reported {
            endpoint: id,
            state: self.entries[&id].health.state,
            blame: settled.blame,
        };
        (Ok(answer), writes)
    }

    /// Load a stored pair on start (same clamp rule as endpoints). A pair whose endpoint
    /// is not held is skipped; one over the pool's cap is left out with a warning.
    pub fn restore_pair(&mut self, row: &PairRow, now: Instant) {
        let Some(e) = self.entries.get(&row.record.endpoint) else {
            return;
        };
        let ps = &mut self.pools[e.pool];
        if let Err(err) = ps.dests.restore(&row.record, row.claim, now) {
            warn!(endpoint = row.record.endpoint, error = %err, "stored pair not restored");
        }
    }

    /// `enable ID --destination D`: clear one pair (D normalised).
    pub fn enable_pair(
        &mut self,
        id: EndpointId,
        destination: &str,
        now: Instant,
    ) -> (Result<State, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now);
        let Some(e) = self.entries.get(&id) else {
            return (Err(PoolError::UnknownEndpoint(id)), writes);
        };
        let ps = &mut self.pools[e.pool];
        // Pacing is per host: a slow-down of the host ends too (docs/selection.md).
        let host = place(destination).map(|p| p.host).ok();
        let slowed = host
            .as_deref()
            .and_then(|h| ps.pace.clear(h, id, now).map(|s| (h, s)));
        let r = ps.dests.enable(destination, id);
        match slowed {
            // Something was cleared: no "nothing to change" row.
            Some((h, s)) => {
                if r.step != crate::health::Step::Refused {
                    writes.extend(r.writes.into_iter().map(Write::Pair));
                }
                writes.push(slow_down_cleared(h, id, s.spacing, s.until));
            }
            None => writes.extend(r.writes.into_iter().map(Write::Pair)),
        }
        (Ok(r.state), writes)
    }

    /// How each endpoint's slow-down for `host` stands (`None`: not slowed), for `list
    /// --destination`.
    pub fn slowed_for(
        &self,
        ids: &[EndpointId],
        host: &str,
        now: Instant,
    ) -> Vec<Option<SlowedView>> {
        ids.iter()
            .map(|id| {
                let e = self.entries.get(id)?;
                let s = self.pools[e.pool].pace.slowed(host, *id, now)?;
                Some(SlowedView {
                    spacing_ms: s.spacing.as_millis() as u64,
                    next_use_in_ms: s.until.as_millis() as u64,
                })
            })
            .collect()
    }

    /// `enable --target`: forget what each pool (or `pool`) knows of `target` (a key as
    /// `normalize_key` gives it): down, its trial, pending failures (docs/blame.md, "A
    /// target that is down"). The pools that knew it; refused when none did.
    pub fn enable_target(
        &mut self,
        pool: Option<&str>,
        target: &str,
        now: Instant,
    ) -> (Result<Vec<TargetCleared>, PoolError>, Vec<Write>) {
        let mut writes = self.advance(now);
        let only = match pool {
            Some(name) => match self.by_name.get(name) {
                Some(&p) => Some(p),
                None => return (Err(PoolError::UnknownPool(name.to_string())), writes),
            },
            None => None,
        };
        let mut out = Vec::new();
        for p in 0..self.pools.len() {
            if only.is_some_and(|o| o != p) || !self.is_current(p) {
                continue;
            }
            let ps = &mut self.pools[p];
            let Some(c) = ps.targets.clear(target, now) else {
                continue;
            };
            if ps.probe_target.as_deref() == Some(target) {
                ps.probe_trial = None;
            }
            let name = ps.cfg.name.clone();
            if c.was_down.is_some() && self.budget.admit(now, "operator") {
                tracing::info!(pool = %name, target, reason = "operator", "target up");
            }
            writes.push(cleared_event(target, c.was_down));
            out.push(TargetCleared {
                pool: name,
                target: target.to_string(),
                was_down: c.was_down.is_some(),
            });
        }
        if out.is_empty() {
            let e = PoolError::UnknownTarget {
                target: target.to_string(),
                pool: pool.map(str::to_string),
            };
            return (Err(e), writes);
        }
        (Ok(out), writes)
    }

    /// When `target` of `pool` is down: the time until its trial.
    pub fn target_down(
        &self,
        pool: &str,
        target: &str,
        now: Instant,
    ) -> Option<std::time::Duration> {
        let &p = self.by_name.get(pool)?;
        self.pools[p].targets.down_for(target, now)
    }

    /// Every pair held, of every pool, as (endpoint, destination).
    pub fn pair_keys(&self) -> Vec<(EndpointId, String)> {
        self.pools.iter().flat_map(|p| p.dests.keys()).collect()
    }

    /// The non-available pairs of an endpoint.
    pub fn pairs_of(&self, id: EndpointId) -> Vec<PairHealth> {
        self.entries
            .get(&id)
            .map(|e| self.pools[e.pool].dests.pairs_of(id))
            .unwrap_or_default()
    }

    /// The destinations of a pool with the most banned pairs (status page).
    pub fn most_banned(&self, pool: &str, n: usize) -> Vec<(String, usize)> {
        self.by_name
            .get(pool)
            .map(|&p| self.pools[p].dests.most_banned(n))
            .unwrap_or_default()
    }

    /// An endpoint's state for a normalised destination: its own unless it is available,
    /// then its pair's (none: available).
    pub fn state_for(&self, id: EndpointId, destination: &str) -> Option<State> {
        let e = self.entries.get(&id)?;
        if e.health.state != State::Available {
            return Some(e.health.state);
        }
        let pair = self.pools[e.pool].dests.pair(destination, id);
        Some(pair.map_or(State::Available, |p| p.health.state))
    }

    /// Active pair bans of a pool (the metric; never per host).
    pub fn pair_bans(&self, pool: &str) -> usize {
        self.by_name
            .get(pool)
            .map_or(0, |&p| self.pools[p].dests.banned())
    }
}
