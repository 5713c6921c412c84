//! One health machine with the claim of its single trial, as an endpoint and an
//! (endpoint, destination) pair each hold it. An input steps both the same way, so what a
//! claim does is written once: it lives from its confirmation by the store to its trial's
//! end (granted anew, decided or handed back), and a trial's outcome settles only the claim
//! that was current when it came (docs/fleet.md, "Ownership").

use tokio::time::Instant;

use super::{Health, Input, Policy, State, Step};

/// What one input did to a cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Stepped {
    pub step: Step,
    /// The state before.
    pub from: State,
    /// The claim held before the step: the one a trial handed back gives up.
    pub held: Option<i64>,
    /// The claim a trial's outcome settles (`held`, when the input was a trial's success
    /// or failure): the store applies the outcome only while that claim is current.
    pub settles: Option<i64>,
    /// The claim held after the step.
    pub claim: Option<i64>,
}

impl Stepped {
    /// The act that stepped the cell is recorded (its own event row) unless the input
    /// was refused: a claim or a hand-back that did not happen is not an event.
    pub fn recorded(&self) -> bool {
        self.step != Step::Refused
    }
}

/// Step `health`, whose trial holds `claim`, with `input`.
pub fn step(
    health: &mut Health,
    claim: Option<i64>,
    input: Input,
    policy: &Policy,
    now: Instant,
    jitter: f64,
) -> Stepped {
    let deciding = matches!(
        input,
        Input::Success { trial: true } | Input::Failure { trial: true, .. }
    );
    let from = health.state;
    let step = health.apply(input, policy, now, jitter);
    let ends = matches!(step, Step::Claimed | Step::Changed { .. } | Step::Abandoned);
    Stepped {
        from,
        held: claim,
        settles: claim.filter(|_| deciding),
        claim: claim.filter(|_| !ends),
        step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Failure, Reason};

    fn failure(trial: bool) -> Input {
        Input::Failure {
            failure: Failure::new(Reason::ConnectTimeout, None),
            trial,
        }
    }

    /// A health in `state`, its trial claimed when `claimed`.
    fn health(state: State, claimed: bool, policy: &Policy, now: Instant) -> Health {
        let mut h = Health::new(state);
        if claimed {
            assert_eq!(h.apply(Input::Claim, policy, now, 0.0), Step::Claimed);
        }
        h
    }

    /// (state, claimed), input, recorded, settles, claim after.
    type Row = ((State, bool), Input, bool, Option<i64>, Option<i64>);

    /// State × input, with claim 7 held before: what is recorded, settled and still held.
    #[test]
    fn a_claim_lives_to_its_trials_end_and_only_a_trials_outcome_settles_it() {
        let policy = Policy::default();
        let now = Instant::now();
        let available = (State::Available, false);
        let waiting = (State::ProbeAllowed, false);
        let claimed = (State::ProbeAllowed, true);
        let cooling = (State::Cooling, false);
        let table: Vec<Row> = vec![
            (claimed, Input::Success { trial: true }, true, Some(7), None),
            (claimed, failure(true), true, Some(7), None),
            (claimed, Input::Abandon, true, None, None),
            (
                claimed,
                Input::Success { trial: false },
                true,
                None,
                Some(7),
            ),
            (waiting, Input::Claim, true, None, None),
            (
                available,
                Input::Success { trial: false },
                true,
                None,
                Some(7),
            ),
            (available, failure(false), true, None, None),
            (cooling, Input::Claim, false, None, Some(7)),
            (cooling, Input::Abandon, false, None, Some(7)),
        ];
        for (i, ((state, c), input, recorded, settles, after)) in table.into_iter().enumerate() {
            let mut h = health(state, c, &policy, now);
            let s = step(&mut h, Some(7), input.clone(), &policy, now, 0.0);
            assert_eq!(s.from, state, "row {i}");
            assert_eq!(s.held, Some(7), "row {i}");
            assert_eq!(
                (s.recorded(), s.settles, s.claim),
                (recorded, settles, after),
                "row {i}: {state:?} claimed={c} {input:?} -> {:?}",
                s.step
            );
        }
    }
}
