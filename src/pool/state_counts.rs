//! How many endpoints of a pool are in each state, kept by the indexes as entries move.

use crate::health::State;

const N: usize = State::ALL.len();

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct StateCounts([usize; N]);

impl StateCounts {
    pub(super) fn add(&mut self, s: State) {
        self.0[s as usize] += 1;
    }

    pub(super) fn remove(&mut self, s: State) {
        self.0[s as usize] -= 1;
    }

    pub(super) fn of(&self, s: State) -> usize {
        self.0[s as usize]
    }

    pub(super) fn total(&self) -> usize {
        self.0.iter().sum()
    }

    /// Endpoints not disabled: available, cooling or awaiting their recovery attempt.
    pub(super) fn in_service(&self) -> usize {
        self.total() - self.of(State::Disabled)
    }

    /// Nothing is available and nothing awaits its recovery attempt.
    pub(super) fn exhausted(&self) -> bool {
        self.of(State::Available) == 0 && self.of(State::ProbeAllowed) == 0
    }

    /// The counts in `State::ALL` order, as the metrics take them.
    pub(super) fn in_order(&self) -> [u64; N] {
        let mut out = [0; N];
        for (o, s) in out.iter_mut().zip(State::ALL) {
            *o = self.of(*s) as u64;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_is_its_own_count() {
        let mut c = StateCounts::default();
        for (i, s) in State::ALL.iter().enumerate() {
            for _ in 0..=i {
                c.add(*s);
            }
        }
        assert_eq!(c.in_order(), [1, 2, 3, 4]);
        assert_eq!(c.total(), 10);
        assert_eq!(c.in_service(), 6);
        assert!(!c.exhausted());
        c.remove(State::Available);
        for _ in 0..3 {
            c.remove(State::ProbeAllowed);
        }
        assert!(c.exhausted());
        assert_eq!(c.of(State::Cooling), 2);
    }
}
