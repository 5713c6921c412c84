//! Table tests of `fall` (docs/destinations.md, "`fall`"): state × input with a pool that
//! cools on the 3rd consecutive failure and a reason (`destination_status`) that cools on
//! the 1st.

use super::*;
use std::time::Duration;

use State::{Available, Cooling, Disabled, ProbeAllowed};

const S: Duration = Duration::from_secs(1);

fn policy() -> Policy {
    let mut p = Policy {
        cooldown: Cooldown {
            base: 10 * S,
            factor: 2.0,
            max: 80 * S,
            jitter: 0.0,
        },
        fall: 3,
        ..Policy::default()
    };
    p.reasons.insert(
        Reason::DestinationStatus,
        ReasonPolicy {
            fall: Some(1),
            ..Default::default()
        },
    );
    p
}

fn failure(reason: Reason, trial: bool) -> Input {
    Input::Failure {
        failure: Failure::new(reason, Some(Phase::ResponseHead)),
        trial,
    }
}

/// Health in `state` with `fails` failures below `fall` and `streak` earlier coolings.
fn h(state: State, claimed: bool, fails: u32, streak: u32) -> Health {
    let mut x = Health::new(state);
    x.claimed = claimed;
    x.fails = fails;
    x.streak = streak;
    x.reason_streak = streak;
    if streak > 0 {
        x.reason = Some(Reason::ConnectRefused);
    }
    x
}

/// (name, initial, input, step, state after, fails after, streak after, cooldown after)
type Row = (
    &'static str,
    Health,
    Input,
    Step,
    State,
    u32,
    u32,
    Option<Duration>,
);

#[test]
fn fall_state_by_event_table() {
    use Reason::{ConnectRefused, ConnectTimeout, DestinationStatus};
    let recorded = Step::Recorded { late: false };
    let late = Step::Recorded { late: true };
    let changed = |from, to| Step::Changed { from, to };
    let t0 = Instant::now();
    let rows: Vec<Row> = vec![
        (
            "1st failure is recorded only",
            h(Available, false, 0, 0),
            failure(ConnectRefused, false),
            recorded.clone(),
            Available,
            1,
            0,
            None,
        ),
        (
            "2nd failure is recorded only",
            h(Available, false, 1, 0),
            failure(ConnectRefused, false),
            recorded.clone(),
            Available,
            2,
            0,
            None,
        ),
        (
            "3rd failure cools with the first cooldown",
            h(Available, false, 2, 0),
            failure(ConnectRefused, false),
            changed(Available, Cooling),
            Cooling,
            0,
            1,
            Some(10 * S),
        ),
        (
            "consecutive means any reason",
            h(Available, false, 2, 0),
            failure(ConnectTimeout, false),
            changed(Available, Cooling),
            Cooling,
            0,
            1,
            Some(10 * S),
        ),
        (
            "a reason with fall 1 cools at once",
            h(Available, false, 0, 0),
            failure(DestinationStatus, false),
            changed(Available, Cooling),
            Cooling,
            0,
            1,
            Some(10 * S),
        ),
        (
            "success resets the count",
            h(Available, false, 2, 0),
            Input::Success { trial: false },
            recorded.clone(),
            Available,
            0,
            0,
            None,
        ),
        (
            "late failure on a cooling endpoint counts nothing",
            {
                let mut x = h(Cooling, false, 0, 1);
                x.cooldown = Some(10 * S);
                x.deadline = Some(t0 + 10 * S);
                x
            },
            failure(ConnectRefused, false),
            late,
            Cooling,
            0,
            1,
            Some(10 * S),
        ),
        (
            "a trial failure decides at once (no fall)",
            h(ProbeAllowed, true, 0, 1),
            failure(ConnectRefused, true),
            changed(ProbeAllowed, Cooling),
            Cooling,
            0,
            2,
            Some(20 * S),
        ),
        (
            "a trial success recovers",
            h(ProbeAllowed, true, 0, 1),
            Input::Success { trial: true },
            changed(ProbeAllowed, Available),
            Available,
            0,
            0,
            None,
        ),
        (
            "operator disable forgets the count",
            h(Available, false, 2, 0),
            Input::Disable { detail: None },
            changed(Available, Disabled),
            Disabled,
            0,
            0,
            None,
        ),
        (
            "source removal forgets the count",
            h(Available, false, 2, 0),
            Input::SourceRemoved,
            changed(Available, Disabled),
            Disabled,
            0,
            0,
            None,
        ),
        (
            "claim does not touch the count",
            h(Available, false, 2, 0),
            Input::Claim,
            Step::Refused,
            Available,
            2,
            0,
            None,
        ),
        (
            "deadline does not touch the count",
            h(Available, false, 1, 0),
            Input::DeadlinePassed,
            Step::Refused,
            Available,
            1,
            0,
            None,
        ),
    ];
    let p = policy();
    for (name, mut health, input, step, state, fails, streak, cooldown) in rows {
        let got = health.apply(input, &p, t0, 0.0);
        assert_eq!(got, step, "{name}");
        assert_eq!(health.state, state, "{name}");
        assert_eq!(health.fails, fails, "{name}");
        assert_eq!(health.streak, streak, "{name}");
        assert_eq!(health.cooldown, cooldown, "{name}");
        assert_eq!(health.deadline, cooldown.map(|c| t0 + c), "{name}");
        if state == Available && step == recorded {
            // The failures before the N-th change nothing that is persisted.
            assert_eq!(health.reason, None, "{name}");
            assert_eq!(health.phase, None, "{name}");
        }
    }
}

#[test]
fn default_fall_is_one() {
    let p = Policy::default();
    assert_eq!(p.fall, 1);
    let mut x = Health::new(Available);
    let step = x.apply(
        failure(Reason::ConnectionReset, false),
        &p,
        Instant::now(),
        0.0,
    );
    assert_eq!(
        step,
        Step::Changed {
            from: Available,
            to: Cooling
        }
    );
}

#[test]
fn disable_after_counts_failures_that_got_past_fall() {
    // fall 3, auth disables after 3: the 3rd auth failure cools (reason streak 1); two
    // failed trials then make 3 and disable.
    let p = policy();
    let t0 = Instant::now();
    let mut x = Health::new(Available);
    let auth = Reason::ProxyAuthRejected;
    for _ in 0..2 {
        assert_eq!(
            x.apply(failure(auth, false), &p, t0, 0.0),
            Step::Recorded { late: false }
        );
    }
    assert_eq!(x.apply(failure(auth, false), &p, t0, 0.0).clone(), {
        Step::Changed {
            from: Available,
            to: Cooling,
        }
    });
    for want in [Cooling, Disabled] {
        x.apply(Input::DeadlinePassed, &p, t0 + 100 * S, 0.0);
        assert_eq!(x.apply(Input::Claim, &p, t0, 0.0), Step::Claimed);
        x.apply(failure(auth, true), &p, t0, 0.0);
        assert_eq!(x.state, want);
    }
    assert_eq!(x.reason_streak, 3);
}

#[test]
fn zero_fall_is_rejected_naming_the_key() {
    let mut p = Policy {
        fall: 0,
        ..Policy::default()
    };
    assert_eq!(
        p.validate("pool.p.cooldown").unwrap_err().to_string(),
        "pool.p.cooldown.fall: fall must be >= 1"
    );
    p.fall = 2;
    p.reasons.insert(
        Reason::SlowResponse,
        ReasonPolicy {
            fall: Some(0),
            ..Default::default()
        },
    );
    assert_eq!(
        p.validate("pool.p.cooldown").unwrap_err().to_string(),
        "pool.p.cooldown.reasons.slow_response.fall: fall must be >= 1"
    );
    p.reasons.get_mut(&Reason::SlowResponse).unwrap().fall = Some(5);
    assert!(p.validate("pool.p.cooldown").is_ok());
    assert_eq!(p.fall_for(Some(Reason::SlowResponse)), 5);
    assert_eq!(p.fall_for(Some(Reason::ConnectRefused)), 2);
}
