//! The compact in-memory health of one (endpoint, destination) pair.

use std::time::Duration;

use tokio::time::Instant;

use crate::health::{Health, Phase, Reason, State};

/// Compact health of one pair: 48 bytes. The deadline is kept as whole milliseconds
/// after the destinations' `origin` (rounded up, so a pair is never released early), and
/// `NONE` stands for "no deadline" / "no cooldown".
#[derive(Debug, Clone, Copy)]
pub(super) struct Pair {
    pub(super) deadline: u64,
    pub(super) cooldown_ms: u64,
    pub(super) streak: u32,
    pub(super) reason_streak: u32,
    pub(super) fails: u32,
    pub(super) status: Option<u16>,
    pub(super) state: State,
    pub(super) claimed: bool,
    /// This daemon's confirmed claim of the trial (docs/fleet.md, "Ownership"): none while
    /// unclaimed, while a claim waits for the store, or while another daemon holds it.
    /// Kept as epoch + 1 (0: none) so that it takes 8 bytes, not 16: epochs are never
    /// negative. See [`Pair::epoch`].
    pub(super) claim: u64,
    pub(super) reason: Option<Reason>,
    pub(super) phase: Option<Phase>,
    /// When it last failed, in the pool's order of failures: the pair failed least
    /// recently gives way first at the cap (`Destinations::make_room`).
    pub(super) touched: u32,
}

pub(super) const NONE: u64 = u64::MAX;

/// Milliseconds from `origin` to `t`, rounded up.
pub(super) fn ticks(origin: Instant, t: Instant) -> u64 {
    let d = t.saturating_duration_since(origin);
    let ms = d.as_millis() as u64;
    if d > Duration::from_millis(ms) {
        ms + 1
    } else {
        ms
    }
}

pub(super) fn at(origin: Instant, ticks: u64) -> Instant {
    origin + Duration::from_millis(ticks)
}

impl Pair {
    pub(super) fn available() -> Pair {
        Pair {
            deadline: NONE,
            cooldown_ms: NONE,
            streak: 0,
            reason_streak: 0,
            fails: 0,
            status: None,
            state: State::Available,
            claimed: false,
            claim: 0,
            reason: None,
            phase: None,
            touched: 0,
        }
    }

    /// This daemon's confirmed claim of the trial, if any.
    pub(super) fn epoch(&self) -> Option<crate::store::Epoch> {
        self.claim.checked_sub(1).map(|e| e as crate::store::Epoch)
    }

    pub(super) fn set_epoch(&mut self, epoch: Option<crate::store::Epoch>) {
        self.claim = epoch.map_or(0, |e| e.max(0) as u64 + 1);
    }

    pub(super) fn health(&self, origin: Instant) -> Health {
        let mut h = Health::new(self.state);
        h.claimed = self.claimed;
        h.streak = self.streak;
        h.reason_streak = self.reason_streak;
        h.fails = self.fails;
        h.reason = self.reason;
        h.phase = self.phase;
        h.cooldown = (self.cooldown_ms != NONE).then(|| Duration::from_millis(self.cooldown_ms));
        h.deadline = (self.deadline != NONE).then(|| at(origin, self.deadline));
        h
    }

    pub(super) fn from_health(h: &Health, status: Option<u16>, origin: Instant) -> Pair {
        Pair {
            deadline: h.deadline.map_or(NONE, |d| ticks(origin, d)),
            cooldown_ms: h.cooldown.map_or(NONE, |d| d.as_millis() as u64),
            streak: h.streak,
            reason_streak: h.reason_streak,
            fails: h.fails,
            status,
            state: h.state,
            claimed: h.claimed,
            claim: 0,
            reason: h.reason,
            phase: h.phase,
            touched: 0,
        }
    }

    /// Worth keeping in memory: banned, or counting failures towards `fall`.
    pub(super) fn needed(&self) -> bool {
        self.state != State::Available || self.fails > 0
    }
}
