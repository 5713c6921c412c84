//! A pair's slow-down (docs/selection.md, "Slow down, not banned"): widened by a 429 (or
//! a 503 with Retry-After), held back at most the pool's cooldown `max` like a cooldown,
//! narrowed by answers, shown and cleared by an operator.

use std::time::Duration;

use super::host::{spacing, Host, Slowed};
use super::{HostRef, Pace, CALM_AFTER, MAX_EXP};
use crate::endpoint::EndpointId;

impl Pace {
    /// The longest a slow-down holds a pair back (the pool's cooldown `max`).
    pub(in crate::pool) fn set_max_hold(&mut self, max: Duration) {
        self.max_hold = max.as_millis() as u64;
    }

    /// The host answered 429 (or 503 with Retry-After) through `id`: its spacing doubles
    /// (up to 16×) and it is not used before `retry_after`; the two together hold it back
    /// at most the pool's cooldown `max` (its interval, when that is longer).
    pub(in crate::pool) fn slow_down(
        &mut self,
        host: &str,
        id: EndpointId,
        retry_after: Option<Duration>,
        now: tokio::time::Instant,
    ) -> Option<Slowed> {
        let rule = self.cfg.as_ref()?.rule_for(host);
        let at = self.now_ms(now);
        let r = match self.index.get(host) {
            Some(&i) => {
                self.touch(i);
                HostRef {
                    slot: i,
                    gen: self.slots[i as usize].gen,
                }
            }
            None => self.insert(host, Host::new(rule)),
        };
        let max_hold = self.max_hold;
        let h = self.host_mut(r)?;
        let interval = h.interval;
        let (p, added) = h.pair(id, at);
        let widened = p.exp == 0;
        p.exp = (p.exp + 1).min(MAX_EXP);
        p.calm = 0;
        let spacing = capped(interval, p.exp, max_hold);
        let asked = retry_after.map_or(0, |d| d.as_millis() as u64);
        let hold = spacing.max(asked).min(max_hold.max(interval));
        p.set_ready(p.ready().max(at + hold), at);
        let until = p.ready();
        h.busy_until = h.busy_until.max(until);
        h.dry = None;
        if widened {
            self.widened += 1;
        }
        self.settle(r.slot, added, at);
        Some(Slowed {
            spacing: Duration::from_millis(spacing),
            until: Duration::from_millis(until - at),
        })
    }

    /// The host answered through `id`: a widened spacing narrows again after
    /// `CALM_AFTER` of these in a row. No lookup while nothing is widened.
    pub(in crate::pool) fn success(&mut self, host: &str, id: EndpointId) {
        if self.widened == 0 {
            return;
        }
        let Some(&i) = self.index.get(host) else {
            return;
        };
        let h = &mut self.slots[i as usize].host;
        let Some(p) = h.pairs.get_mut(id) else {
            return;
        };
        if p.exp == 0 {
            return;
        }
        p.calm += 1;
        if p.calm >= CALM_AFTER {
            p.exp -= 1;
            p.calm = 0;
            if p.exp == 0 {
                self.widened -= 1;
            }
        }
    }

    /// How the slow-down of (`id`, `host`) stands at `now`, if the pair is slowed: its
    /// spacing and the time to its next use.
    pub(in crate::pool) fn slowed(
        &self,
        host: &str,
        id: EndpointId,
        now: tokio::time::Instant,
    ) -> Option<Slowed> {
        let &i = self.index.get(host)?;
        let h = &self.slots[i as usize].host;
        let p = h.pairs.get(id).filter(|p| p.exp > 0)?;
        let now = self.ms(now);
        let spacing = capped(h.interval, p.exp, self.max_hold);
        Some(Slowed {
            spacing: Duration::from_millis(spacing),
            until: Duration::from_millis(p.ready().saturating_sub(now)),
        })
    }

    /// `enable ID --destination HOST`: the pair's slow-down ends (its spacing back to
    /// the interval, usable at once; its leases in flight still count). What it was, if
    /// the pair was slowed.
    pub(in crate::pool) fn clear(
        &mut self,
        host: &str,
        id: EndpointId,
        now: tokio::time::Instant,
    ) -> Option<Slowed> {
        let was = self.slowed(host, id, now)?;
        let now = self.now_ms(now);
        let &i = self.index.get(host)?;
        let h = &mut self.slots[i as usize].host;
        h.dry = None;
        let p = h.pairs.get_mut(id)?;
        p.exp = 0;
        p.calm = 0;
        p.ready = now.min(u64::from(u32::MAX)) as u32;
        self.widened -= 1;
        Some(was)
    }
}

/// `interval` widened `exp` times, held to the pool's cooldown `max` (or to the interval
/// itself, when that is longer): a slow-down never spaces uses further apart than a
/// cooldown would keep the pair out.
pub(super) fn capped(interval: u64, exp: u8, max_hold: u64) -> u64 {
    spacing(interval, exp).min(max_hold.max(interval))
}
