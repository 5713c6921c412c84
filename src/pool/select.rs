//! Choosing among the endpoints that qualify (docs/selection.md): what a candidate must
//! be (`Fit`), the least leased one found by rotating the ready queues, `random` and
//! `fastest` by sampling them, and slow start. No step scans the pool: an item that does
//! not fit goes behind its equals, a sample is a random index into the queues.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use rustc_hash::FxHasher;
use tokio::time::Instant;

use super::destinations::{DestRef, Destinations};
use super::entries::{Entry, EntryMap};
use super::pace::{Check, Dry, Gate, Visit};
use super::ready::{live_at, Ready};
use super::scoped::{Views, Want};
use super::shortlist::{self, Listed, Verdict};
use super::strategy::{score, warm_weight, Latencies};
use super::tag_index::carries;
use super::Pools;
use crate::config::Select;
use crate::endpoint::EndpointId;

/// Random candidates drawn before the rotating pass takes over.
const SAMPLE_TRIES: usize = 32;
/// Candidates slow start may turn down in one lease before it takes the next.
const MAX_REJECTED: u32 = 8;

/// What a candidate must be for one lease, besides available and ready.
pub(super) struct Fit<'a> {
    pub(super) p: usize,
    /// `max_leases_per_endpoint` (0: no cap).
    pub(super) cap: u32,
    pub(super) want: &'a Want,
    /// Interned tags every candidate carries.
    pub(super) tags: &'a [u32],
    pub(super) views: Views,
    /// Endpoints that just failed the target: passed over first.
    pub(super) avoid: &'a [EndpointId],
    /// The host's view when some subnet is suspect for it: endpoints of a suspect subnet
    /// are passed over first (docs/exit.md, "A subnet under suspicion").
    pub(super) spare: Option<super::destinations::DestRef>,
}

impl Fit<'_> {
    /// Schemes, tags, bans and `avoid` (not pacing, not the lease cap).
    pub(super) fn fits(&self, dests: &Destinations, id: EndpointId, e: &Entry) -> bool {
        // The entry's copy of its address number is the pairs' (every test checks it).
        debug_assert_eq!(e.exit, dests.exit_number(id), "endpoint {id}");
        self.asked(id, e)
            && dests.leasable([self.views.host, self.views.target], self.spare, id, e.exit)
    }

    /// What the lease itself asks of a candidate: schemes, tags, not one of `avoid`.
    fn asked(&self, id: EndpointId, e: &Entry) -> bool {
        self.want.fits(e) && carries(&e.tags, self.tags) && !self.avoid.contains(&id)
    }

    /// `fits`, less what the host itself excludes (its bans, its addresses' bans, its
    /// suspect subnets): a shortlist's pass has asked that already.
    fn fits_besides_host(&self, dests: &Destinations, id: EndpointId, e: &Entry) -> bool {
        self.asked(id, e)
            && (self.views.target.is_none()
                || dests.leasable([None, self.views.target], None, id, e.exit))
    }

    /// Whether the lease asks nothing of a candidate but that it is available.
    fn plain(&self) -> bool {
        !self.views.any()
            && self.want.schemes.is_none()
            && self.avoid.is_empty()
            && self.tags.is_empty()
    }

    /// What the lease asks besides its host, as the key of a remembered "nothing ready".
    pub(super) fn sig(&self) -> u64 {
        let mut h = FxHasher::default();
        (self.want.schemes, self.tags, self.cap).hash(&mut h);
        h.finish()
    }
}

/// Why nothing was chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Miss {
    /// An endpoint that fits was passed over by pacing: the soonest such one is ready
    /// then (ms since the pace origin), or `None` when only a release readies one.
    pub(super) paced: Option<Option<u64>>,
}

impl Miss {
    pub(super) fn blocked(&mut self, at: Option<u64>) {
        self.paced = Some(match (self.paced, at) {
            (Some(Some(a)), Some(b)) => Some(a.min(b)),
            (Some(a), None) => a,
            (_, b) => b,
        });
    }
}

/// Slow start for one lease: candidates are taken with their weight.
struct Warm<'r> {
    over: Duration,
    now: u64,
    rng: &'r mut fastrand::Rng,
    rejected: u32,
}

impl Warm<'_> {
    fn accept(&mut self, e: &Entry) -> bool {
        if self.over.is_zero() || self.rejected >= MAX_REJECTED {
            return true;
        }
        let age = Duration::from_millis(self.now.saturating_sub(e.up_since));
        if self.rng.f64() < warm_weight(age, self.over) {
            return true;
        }
        self.rejected += 1;
        false
    }
}

fn check(gate: Option<&Gate>, id: EndpointId) -> Check {
    gate.map_or(Check::Ready, |g| g.check(id))
}

/// Where a least-leased pass walks: the pool's ready queues, or the shortlist of the
/// lease's host (`shortlist`), from which what the host excludes is dropped.
enum Queues<'q> {
    Pool(&'q mut Ready),
    Short(Listed<'q>, DestRef),
}

impl Queues<'_> {
    fn levels(&self) -> usize {
        match self {
            Queues::Pool(r) => r.levels(),
            // The first level's only.
            Queues::Short(..) => 1,
        }
    }
}

/// What a pass thinks of a live candidate, besides its host's exclusions.
enum Judged {
    Take,
    Pass,
    /// Turned down by slow start: taken when the pass finds no other.
    Warm,
}

/// The least leased candidate, round robin among equals: a candidate that does not fit
/// (or is paced, or turned down by slow start) goes behind its equals; a level is given up
/// after its live count, so each lease skips B/(L−B) items on average over a level of L
/// with B unfit, and a host where nothing fits answers after one pass. On a shortlist (the
/// first level only) a candidate the host excludes leaves instead, so its host's leases
/// skip it once, and the pass ends after the shortlist's length. Levels from `from` on.
/// `(slot, level)`, and how many live items the pass skipped.
fn rotate(
    pass: &Pass,
    mut queues: Queues,
    from: usize,
    warm: &mut Warm,
    miss: &mut Miss,
) -> (Option<(u32, u32)>, usize) {
    let (entries, dests, gate, fit) = (pass.entries, pass.dests, pass.gate, pass.fit);
    let listed = matches!(queues, Queues::Short(..));
    let mut judge = |slot: u32| {
        let Some((id, e)) = entries.at(slot) else {
            return Judged::Pass;
        };
        // A pair waiting for its trial had its chance in `claim_trial`, which asks the
        // same questions: here it counts as banned.
        let fits = match listed {
            true => fit.fits_besides_host(dests, *id, e),
            false => fit.fits(dests, *id, e),
        };
        if !fits {
            return Judged::Pass;
        }
        match check(gate, *id) {
            Check::Blocked(at) => {
                miss.blocked(at);
                Judged::Pass
            }
            Check::Ready if warm.accept(e) => Judged::Take,
            Check::Ready => Judged::Warm,
        }
    };
    // A candidate slow start turned down, taken when the pass finds no other.
    let mut spare = None;
    let mut skipped = 0;
    for level in from..queues.levels() {
        let lv = level as u32;
        if fit.cap != 0 && lv >= fit.cap {
            break;
        }
        let live = |slot, gen| live_at(entries, slot, gen, fit.p, lv);
        let mut verdict = |slot| match judge(slot) {
            Judged::Take => Verdict::Take,
            Judged::Pass => {
                skipped += 1;
                Verdict::Pass
            }
            Judged::Warm => {
                spare = spare.or(Some((slot, lv)));
                Verdict::Pass
            }
        };
        let took = match &mut queues {
            Queues::Pool(r) => r.round(level, live, |slot| verdict(slot) == Verdict::Take),
            Queues::Short(list, host) => {
                let changed = dests.changed(*host);
                let Listed { queue, verified } = list;
                shortlist::round(queue, live, |slot| {
                    let Some((id, e)) = entries.at(slot) else {
                        return Verdict::Drop;
                    };
                    if !verified.holds(slot, *id, changed) {
                        if !dests.leasable([Some(*host), None], Some(*host), *id, e.exit) {
                            return Verdict::Drop;
                        }
                        verified.record(slot, *id, changed);
                    }
                    verdict(slot)
                })
            }
        };
        if let Some(slot) = took {
            return (Some((slot, lv)), skipped);
        }
        if spare.is_some() {
            return (spare, skipped);
        }
    }
    (spare, skipped)
}

/// A uniformly random candidate of one level that fits (`Ready::sample`); the first draw
/// uses the number drawn ahead for draw `which`.
fn sample(
    ready: &mut Ready,
    level: usize,
    which: usize,
    pass: &Pass,
    rng: &mut fastrand::Rng,
) -> Option<(u32, u32)> {
    let (entries, dests, gate, fit) = (pass.entries, pass.dests, pass.gate, pass.fit);
    let lv = level as u32;
    let live = |slot, gen| live_at(entries, slot, gen, fit.p, lv);
    let fits = |slot| {
        entries
            .at(slot)
            .is_some_and(|(id, e)| fit.fits(dests, *id, e) && check(gate, *id) == Check::Ready)
    };
    let slot = ready.sample(level, which, SAMPLE_TRIES, rng, live, fits)?;
    Some((slot, lv))
}

/// `fastest`'s duel: the one of `a` and `b` with the better score.
fn better(entries: &EntryMap, latencies: &Latencies, a: (u32, u32), b: (u32, u32)) -> (u32, u32) {
    let stats = |(slot, _): (u32, u32)| entries.at(slot).map(|(_, e)| &e.stats);
    let (sa, sb) = (stats(a), stats(b));
    // The median (a walk of its buckets) only when a candidate needs it.
    let unmeasured = [sa, sb].iter().flatten().any(|s| s.latency_ms.is_none());
    let median = if unmeasured { latencies.median() } else { None };
    let score_of = |s: Option<&crate::stats::EndpointStats>| {
        s.map_or(f64::MAX, |s| score(s.latency_ms, s.failure_rate, median))
    };
    if score_of(sb) < score_of(sa) {
        b
    } else {
        a
    }
}

/// What one lease's pass over the ready queues reads: the entries, the pairs, the host's
/// pacing and what a candidate must be.
struct Pass<'a> {
    entries: &'a EntryMap,
    dests: &'a Destinations,
    gate: Option<&'a Gate<'a>>,
    fit: &'a Fit<'a>,
}

impl Pass<'_> {
    /// A sampling strategy's choice (`random`, `fastest`: one or two uniformly random
    /// candidates of the lowest level, up to `MAX_REJECTED` turned down by slow start),
    /// and the next draws' entries prefetched.
    fn sampled(
        &self,
        ready: &mut Ready,
        latencies: &Latencies,
        select: Select,
        warm: &mut Warm,
    ) -> Option<(u32, u32)> {
        let level = ready.lowest_live(self.fit.cap)?;
        let entries = self.entries;
        let mut picked = None;
        for _ in 0..=MAX_REJECTED {
            let draw = |ready: &mut Ready, rng: &mut fastrand::Rng, which| {
                sample(ready, level, which, self, rng)
            };
            let Some(a) = draw(ready, warm.rng, 0) else {
                break;
            };
            let best = match select {
                Select::Fastest => {
                    let b = draw(ready, warm.rng, 1).unwrap_or(a);
                    better(entries, latencies, a, b)
                }
                _ => a,
            };
            if entries.at(best.0).is_some_and(|(_, e)| warm.accept(e)) {
                picked = Some(best);
                break;
            }
        }
        let n = if select == Select::Fastest { 2 } else { 1 };
        for slot in ready.draw_ahead(level, n, warm.rng).into_iter().flatten() {
            entries.prefetch(slot);
        }
        picked
    }

    /// `least_leased`'s choice (and a sampling strategy's when its draws found none): the
    /// first that fits in round robin order, lowest level first; when only endpoints that
    /// just failed the target or leave from a suspect subnet fit, one of those (a lease
    /// is never refused while only they are left). A host with a shortlist is served from
    /// it at the first level (it holds whatever that level would offer the host), then
    /// from the pool's next levels; every other lease walks the pool's queues, and a host
    /// whose walks skip often gets a shortlist.
    fn rotated(&self, ready: &mut Ready, warm: &mut Warm, miss: &mut Miss) -> Option<(u32, u32)> {
        let (dests, fit) = (self.dests, self.fit);
        let host = fit.views.host;
        // The first level from the host's shortlist, if it has one: what it does not find
        // there, the pool's first level does not have either. It drops what leaves from a
        // suspect subnet, so not for a lease that asked before the host had one (a trial's
        // ban in this very lease can start one).
        let listed = host.and_then(|h| {
            let list = ready.shortlist(h.number(), dests.lifted(h), dests.tick())?;
            (dests.has_suspects(h) == fit.spare.is_some())
                .then(|| rotate(self, Queues::Short(list, h), 0, warm, miss).0)
        });
        let first = match listed {
            Some(Some(found)) => Some(found),
            Some(None) => rotate(self, Queues::Pool(ready), 1, warm, miss).0,
            None => {
                let (first, skipped) = rotate(self, Queues::Pool(ready), 0, warm, miss);
                if let Some(h) = host {
                    ready.owe(h.number(), skipped, dests.tick());
                }
                first
            }
        };
        if first.is_some() || (fit.avoid.is_empty() && fit.spare.is_none()) {
            return first;
        }
        let again = Fit {
            avoid: &[],
            spare: None,
            ..*fit
        };
        let pass = Pass {
            fit: &again,
            ..*self
        };
        rotate(&pass, Queues::Pool(ready), 0, warm, miss).0
    }
}

impl Pools {
    /// The pool's strategy over the candidates that fit, are ready for the host (as the
    /// pool's pacing found it) and under the cap: (slot, live leases), or why none.
    pub(super) fn choose(
        &mut self,
        fit: &Fit,
        visit: Visit,
        now: Instant,
    ) -> Result<(u32, u32), Miss> {
        let ps = &self.pools[fit.p];
        let (select, over) = (ps.cfg.select, ps.cfg.slow_start);
        // A host where a pass found nothing ready, asked the same again before anything
        // changed, is answered without another pass.
        // Something of the host is held back: else the lease is chosen as if unpaced.
        let held = ps.pace.gate(visit, now).is_some();
        let memo = held && !fit.views.any() && fit.avoid.is_empty();
        let sig = if memo { fit.sig() } else { 0 };
        if let Some(until) = memo
            .then(|| ps.pace.dry(visit, self.generation, sig, now))
            .flatten()
        {
            return Err(Miss { paced: Some(until) });
        }
        if !held && fit.plain() && over.is_zero() && select == Select::LeastLeased {
            return self
                .pick(fit.p)
                .filter(|&(_, leases)| fit.cap == 0 || leases < fit.cap)
                .ok_or(Miss::default());
        }
        let now_ms = self.ms(now);
        let ps = &mut self.pools[fit.p];
        let gate = ps.pace.gate(visit, now);
        let pass = Pass {
            entries: &self.entries,
            dests: &ps.dests,
            gate: gate.as_ref(),
            fit,
        };
        let mut warm = Warm {
            over,
            now: now_ms,
            rng: &mut self.rng,
            rejected: 0,
        };
        let mut miss = Miss::default();
        let found = match select {
            Select::LeastLeased => None,
            _ => pass.sampled(ps.index.ready(), &ps.latencies, select, &mut warm),
        }
        .or_else(|| pass.rotated(ps.index.ready(), &mut warm, &mut miss));
        if let Some(found) = found {
            self.entries.prefetch_secret(found.0);
            return Ok(found);
        }
        if let (true, Some(until)) = (memo, miss.paced) {
            let dry = Dry {
                generation: self.generation,
                sig,
                until,
            };
            self.pools[fit.p].pace.set_dry(visit, dry);
        }
        Err(miss)
    }
}
