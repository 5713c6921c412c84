//! Table tests of the health state machine: every state × input of docs/reference.md,
//! "States", including the transitions that must NOT happen, and the cooldown policy
//! ("Cooldown policy").

use super::*;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use State::{Available, Cooling, Disabled, ProbeAllowed};

const S: Duration = Duration::from_secs(1);

/// Table policy: base 10s, factor 2, max 80s, no jitter, auth disables after 3.
fn policy() -> Policy {
    Policy {
        cooldown: Cooldown {
            base: 10 * S,
            factor: 2.0,
            max: 80 * S,
            jitter: 0.0,
        },
        ..Policy::default()
    }
}

/// Cooling endpoints of the table end their (10 s) cooldown at `t0 + 10 s`.
const COOLING_DEADLINE_MS: u64 = 10_000;

/// An initial health: `streak` failures, all of `reason` (so `reason_streak == streak`).
fn h(t0: Instant, state: State, claimed: bool, streak: u32, reason: Option<Reason>) -> Health {
    let mut x = Health::new(state);
    x.claimed = claimed;
    x.streak = streak;
    x.reason_streak = if reason.is_some() { streak } else { 0 };
    x.reason = reason;
    if reason.is_some() && reason != Some(Reason::Operator) && reason != Some(Reason::SourceRemoved)
    {
        x.phase = Some(Phase::Connect);
        x.cooldown = Some(10 * S);
    }
    if state == Cooling {
        x.deadline = Some(t0 + Duration::from_millis(COOLING_DEADLINE_MS));
    }
    x
}

fn fail(reason: Reason) -> Failure {
    Failure::new(reason, Some(Phase::Connect))
}

fn failure(reason: Reason, trial: bool) -> Input {
    Input::Failure {
        failure: fail(reason),
        trial,
    }
}

/// Which initial health a row starts from.
#[derive(Debug, Clone, Copy)]
enum Init {
    /// available, streak 0.
    Avail,
    /// cooling after `n` failures of connect_refused, deadline t0+10s.
    Cool(u32),
    /// probe_allowed, unclaimed, `n` failures of connect_refused.
    Pa(u32),
    /// probe_allowed, claimed, `n` failures of `reason`.
    PaClaimed(u32, Reason),
    /// disabled by the operator (streak 2 kept from before).
    OpDisabled,
    /// disabled because its source dropped it (streak 1 kept).
    SrcRemoved,
    /// disabled automatically after 3 proxy_auth_rejected.
    AuthDisabled,
}

impl Init {
    fn health(self, t0: Instant) -> Health {
        use Reason::*;
        match self {
            Init::Avail => h(t0, Available, false, 0, None),
            Init::Cool(n) => h(t0, Cooling, false, n, Some(ConnectRefused)),
            Init::Pa(n) => h(t0, ProbeAllowed, false, n, Some(ConnectRefused)),
            Init::PaClaimed(n, r) => h(t0, ProbeAllowed, true, n, Some(r)),
            Init::OpDisabled => {
                let mut x = h(t0, Disabled, false, 2, Some(Operator));
                x.reason_streak = 2;
                x
            }
            Init::SrcRemoved => h(t0, Disabled, false, 1, Some(SourceRemoved)),
            Init::AuthDisabled => h(t0, Disabled, false, 3, Some(ProxyAuthRejected)),
        }
    }
}

/// Expected health after the input.
#[derive(Debug, Clone, Copy)]
struct After {
    state: State,
    claimed: bool,
    streak: u32,
    reason: Option<Reason>,
    /// Deadline as ms after t0 (None: no deadline).
    deadline_ms: Option<u64>,
}

fn after(
    state: State,
    claimed: bool,
    streak: u32,
    reason: Option<Reason>,
    deadline_ms: Option<u64>,
) -> After {
    After {
        state,
        claimed,
        streak,
        reason,
        deadline_ms,
    }
}

/// The input leaves the health exactly as it was.
const SAME: Option<After> = None;

struct Row {
    name: &'static str,
    init: Init,
    input: Input,
    /// `now` as ms after t0.
    at_ms: u64,
    step: Step,
    /// `None`: the health must be unchanged (field by field).
    after: Option<After>,
}

fn row(
    name: &'static str,
    init: Init,
    input: Input,
    at_ms: u64,
    step: Step,
    after: Option<After>,
) -> Row {
    Row {
        name,
        init,
        input,
        at_ms,
        step,
        after,
    }
}

fn changed(from: State, to: State) -> Step {
    Step::Changed { from, to }
}

const LATE: Step = Step::Recorded { late: true };

fn table() -> Vec<Row> {
    use Init::*;
    use Input::*;
    use Reason::{ConnectRefused, ConnectTimeout, Operator, ProxyAuthRejected};
    let refused = ConnectRefused;
    let auth = ProxyAuthRejected;
    vec![
        // ---- Operator probe (docs/probe.md) ---------------------------------------------
        row(
            "cooling + operator probe success -> available, streak 0",
            Cool(2),
            OperatorProbeSuccess,
            1_000,
            changed(Cooling, Available),
            Some(after(Available, false, 0, None, None)),
        ),
        row(
            "probe_allowed + operator probe success -> available",
            Pa(1),
            OperatorProbeSuccess,
            0,
            changed(ProbeAllowed, Available),
            Some(after(Available, false, 0, None, None)),
        ),
        row(
            "claimed + operator probe success -> available, claim gone",
            PaClaimed(1, refused),
            OperatorProbeSuccess,
            0,
            changed(ProbeAllowed, Available),
            Some(after(Available, false, 0, None, None)),
        ),
        row(
            "operator-disabled + operator probe success -> stays disabled",
            OpDisabled,
            OperatorProbeSuccess,
            0,
            LATE,
            SAME,
        ),
        row(
            "auth-disabled + operator probe success -> stays disabled",
            AuthDisabled,
            OperatorProbeSuccess,
            0,
            LATE,
            SAME,
        ),
        // ---- Failure -------------------------------------------------------------
        row(
            "available + failure -> cooling (base)",
            Avail,
            failure(refused, false),
            0,
            changed(Available, Cooling),
            Some(after(Cooling, false, 1, Some(refused), Some(10_000))),
        ),
        row(
            "available + failure at t0+5s -> deadline t0+15s",
            Avail,
            failure(ConnectTimeout, false),
            5_000,
            changed(Available, Cooling),
            Some(after(Cooling, false, 1, Some(ConnectTimeout), Some(15_000))),
        ),
        row(
            "available + auth failure (1st) -> cooling, not disabled",
            Avail,
            failure(auth, false),
            0,
            changed(Available, Cooling),
            Some(after(Cooling, false, 1, Some(auth), Some(10_000))),
        ),
        row(
            "claimed + trial failure -> cooling, longer (streak 2)",
            PaClaimed(1, refused),
            failure(refused, true),
            0,
            changed(ProbeAllowed, Cooling),
            Some(after(Cooling, false, 2, Some(refused), Some(20_000))),
        ),
        row(
            "claimed + trial failure streak 4 -> 80s (= max)",
            PaClaimed(3, refused),
            failure(refused, true),
            0,
            changed(ProbeAllowed, Cooling),
            Some(after(Cooling, false, 4, Some(refused), Some(80_000))),
        ),
        row(
            "claimed + trial failure streak 9 -> bounded by max",
            PaClaimed(8, refused),
            failure(refused, true),
            0,
            changed(ProbeAllowed, Cooling),
            Some(after(Cooling, false, 9, Some(refused), Some(80_000))),
        ),
        row(
            "claimed + 2nd auth failure -> cooling",
            PaClaimed(1, auth),
            failure(auth, true),
            0,
            changed(ProbeAllowed, Cooling),
            Some(after(Cooling, false, 2, Some(auth), Some(20_000))),
        ),
        row(
            "claimed + 3rd auth failure in a row -> disabled",
            PaClaimed(2, auth),
            failure(auth, true),
            0,
            changed(ProbeAllowed, Disabled),
            Some(after(Disabled, false, 3, Some(auth), None)),
        ),
        row(
            "claimed + auth after 2 refused -> cooling (other reason)",
            PaClaimed(2, refused),
            failure(auth, true),
            0,
            changed(ProbeAllowed, Cooling),
            Some(after(Cooling, false, 3, Some(auth), Some(40_000))),
        ),
        row(
            "cooling + late failure -> recorded, deadline and streak unchanged",
            Cool(1),
            failure(refused, false),
            3_000,
            LATE,
            SAME,
        ),
        row(
            "cooling + late auth failure -> recorded, not disabled",
            Cool(2),
            failure(auth, false),
            3_000,
            LATE,
            SAME,
        ),
        row(
            "cooling + failure flagged trial -> recorded",
            Cool(1),
            failure(refused, true),
            0,
            LATE,
            SAME,
        ),
        row(
            "probe_allowed (unclaimed) + non-trial failure -> ignored",
            Pa(1),
            failure(refused, false),
            0,
            LATE,
            SAME,
        ),
        row(
            "probe_allowed (unclaimed) + trial failure -> ignored",
            Pa(1),
            failure(refused, true),
            0,
            LATE,
            SAME,
        ),
        row(
            "claimed + non-trial failure -> ignored, still claimed",
            PaClaimed(1, refused),
            failure(refused, false),
            0,
            LATE,
            SAME,
        ),
        row(
            "available + failure flagged trial -> recorded only",
            Avail,
            failure(refused, true),
            0,
            LATE,
            SAME,
        ),
        row(
            "operator-disabled + failure -> stays disabled",
            OpDisabled,
            failure(refused, false),
            0,
            LATE,
            SAME,
        ),
        row(
            "operator-disabled + trial failure -> stays disabled",
            OpDisabled,
            failure(auth, true),
            0,
            LATE,
            SAME,
        ),
        row(
            "source-removed + failure -> stays disabled",
            SrcRemoved,
            failure(refused, false),
            0,
            LATE,
            SAME,
        ),
        // ---- Success -------------------------------------------------------------
        row(
            "available + success -> recorded (not late)",
            Avail,
            Success { trial: false },
            0,
            Step::Recorded { late: false },
            SAME,
        ),
        row(
            "claimed + trial success -> available, streak reset",
            PaClaimed(5, refused),
            Success { trial: true },
            0,
            changed(ProbeAllowed, Available),
            Some(after(Available, false, 0, None, None)),
        ),
        row(
            "claimed + non-trial success -> ignored, still claimed",
            PaClaimed(2, refused),
            Success { trial: false },
            0,
            LATE,
            SAME,
        ),
        row(
            "probe_allowed (unclaimed) + non-trial success -> ignored",
            Pa(2),
            Success { trial: false },
            0,
            LATE,
            SAME,
        ),
        row(
            "probe_allowed (unclaimed) + trial success -> ignored",
            Pa(2),
            Success { trial: true },
            0,
            LATE,
            SAME,
        ),
        row(
            "cooling + late success -> recorded, still cooling",
            Cool(3),
            Success { trial: false },
            1_000,
            LATE,
            SAME,
        ),
        row(
            "operator-disabled + success -> stays disabled",
            OpDisabled,
            Success { trial: false },
            0,
            LATE,
            SAME,
        ),
        row(
            "operator-disabled + trial success -> stays disabled",
            OpDisabled,
            Success { trial: true },
            0,
            LATE,
            SAME,
        ),
        row(
            "auth-disabled + success -> stays disabled",
            AuthDisabled,
            Success { trial: false },
            0,
            LATE,
            SAME,
        ),
        // ---- DeadlinePassed ------------------------------------------------------
        row(
            "cooling + deadline (exactly) -> probe_allowed",
            Cool(2),
            DeadlinePassed,
            COOLING_DEADLINE_MS,
            changed(Cooling, ProbeAllowed),
            Some(after(ProbeAllowed, false, 2, Some(refused), None)),
        ),
        row(
            "cooling + deadline long past -> probe_allowed",
            Cool(1),
            DeadlinePassed,
            COOLING_DEADLINE_MS * 100,
            changed(Cooling, ProbeAllowed),
            Some(after(ProbeAllowed, false, 1, Some(refused), None)),
        ),
        row(
            "cooling + deadline - 1ms -> refused",
            Cool(2),
            DeadlinePassed,
            COOLING_DEADLINE_MS - 1,
            Step::Refused,
            SAME,
        ),
        row(
            "available + deadline -> refused",
            Avail,
            DeadlinePassed,
            COOLING_DEADLINE_MS,
            Step::Refused,
            SAME,
        ),
        row(
            "probe_allowed + deadline -> refused",
            Pa(1),
            DeadlinePassed,
            COOLING_DEADLINE_MS,
            Step::Refused,
            SAME,
        ),
        row(
            "claimed + deadline -> refused (claim kept)",
            PaClaimed(1, refused),
            DeadlinePassed,
            COOLING_DEADLINE_MS,
            Step::Refused,
            SAME,
        ),
        row(
            "operator-disabled + deadline -> refused",
            OpDisabled,
            DeadlinePassed,
            COOLING_DEADLINE_MS,
            Step::Refused,
            SAME,
        ),
        // ---- Claim ---------------------------------------------------------------
        row(
            "probe_allowed + claim -> claimed",
            Pa(3),
            Claim,
            0,
            Step::Claimed,
            Some(after(ProbeAllowed, true, 3, Some(refused), None)),
        ),
        row(
            "claimed + claim -> refused",
            PaClaimed(3, refused),
            Claim,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "available + claim -> refused",
            Avail,
            Claim,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "cooling + claim -> refused",
            Cool(1),
            Claim,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "cooling + claim after its deadline -> refused (not yet moved)",
            Cool(1),
            Claim,
            COOLING_DEADLINE_MS,
            Step::Refused,
            SAME,
        ),
        row(
            "operator-disabled + claim -> refused",
            OpDisabled,
            Claim,
            0,
            Step::Refused,
            SAME,
        ),
        // ---- Abandon -------------------------------------------------------------
        row(
            "claimed + abandon -> probe_allowed, streak kept",
            PaClaimed(4, refused),
            Abandon,
            0,
            Step::Abandoned,
            Some(after(ProbeAllowed, false, 4, Some(refused), None)),
        ),
        row(
            "probe_allowed (unclaimed) + abandon -> refused",
            Pa(4),
            Abandon,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "available + abandon -> refused",
            Avail,
            Abandon,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "cooling + abandon -> refused",
            Cool(1),
            Abandon,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "operator-disabled + abandon -> refused",
            OpDisabled,
            Abandon,
            0,
            Step::Refused,
            SAME,
        ),
        // ---- Disable (operator) --------------------------------------------------
        row(
            "available + disable -> disabled (operator)",
            Avail,
            Disable { detail: None },
            0,
            changed(Available, Disabled),
            Some(after(Disabled, false, 0, Some(Operator), None)),
        ),
        row(
            "cooling + disable -> disabled, deadline dropped, streak kept",
            Cool(2),
            Disable { detail: None },
            0,
            changed(Cooling, Disabled),
            Some(after(Disabled, false, 2, Some(Operator), None)),
        ),
        row(
            "probe_allowed + disable -> disabled",
            Pa(1),
            Disable { detail: None },
            0,
            changed(ProbeAllowed, Disabled),
            Some(after(Disabled, false, 1, Some(Operator), None)),
        ),
        row(
            "claimed + disable -> disabled, claim dropped",
            PaClaimed(1, refused),
            Disable { detail: None },
            0,
            changed(ProbeAllowed, Disabled),
            Some(after(Disabled, false, 1, Some(Operator), None)),
        ),
        row(
            "operator-disabled + disable -> refused",
            OpDisabled,
            Disable {
                detail: Some("again".into()),
            },
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "source-removed + disable -> operator-disabled (sticky now)",
            SrcRemoved,
            Disable { detail: None },
            0,
            changed(Disabled, Disabled),
            Some(after(Disabled, false, 1, Some(Operator), None)),
        ),
        row(
            "auth-disabled + disable -> operator-disabled",
            AuthDisabled,
            Disable { detail: None },
            0,
            changed(Disabled, Disabled),
            Some(after(Disabled, false, 3, Some(Operator), None)),
        ),
        // ---- Enable (operator) ---------------------------------------------------
        row(
            "operator-disabled + enable -> probe_allowed",
            OpDisabled,
            Enable { now: false },
            0,
            changed(Disabled, ProbeAllowed),
            Some(after(ProbeAllowed, false, 2, None, None)),
        ),
        row(
            "operator-disabled + enable --now -> available, streak reset",
            OpDisabled,
            Enable { now: true },
            0,
            changed(Disabled, Available),
            Some(after(Available, false, 0, None, None)),
        ),
        row(
            "auth-disabled + enable -> probe_allowed",
            AuthDisabled,
            Enable { now: false },
            0,
            changed(Disabled, ProbeAllowed),
            Some(after(ProbeAllowed, false, 3, None, None)),
        ),
        row(
            "source-removed + enable -> probe_allowed",
            SrcRemoved,
            Enable { now: false },
            0,
            changed(Disabled, ProbeAllowed),
            Some(after(ProbeAllowed, false, 1, None, None)),
        ),
        row(
            "cooling + enable -> probe_allowed",
            Cool(2),
            Enable { now: false },
            0,
            changed(Cooling, ProbeAllowed),
            Some(after(ProbeAllowed, false, 2, None, None)),
        ),
        row(
            "cooling + enable --now -> available",
            Cool(2),
            Enable { now: true },
            0,
            changed(Cooling, Available),
            Some(after(Available, false, 0, None, None)),
        ),
        row(
            "claimed + enable --now -> available, claim dropped",
            PaClaimed(2, refused),
            Enable { now: true },
            0,
            changed(ProbeAllowed, Available),
            Some(after(Available, false, 0, None, None)),
        ),
        row(
            "probe_allowed + enable -> refused",
            Pa(2),
            Enable { now: false },
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "claimed + enable -> refused (claim kept)",
            PaClaimed(2, refused),
            Enable { now: false },
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "available + enable -> refused",
            Avail,
            Enable { now: false },
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "available + enable --now -> refused",
            Avail,
            Enable { now: true },
            0,
            Step::Refused,
            SAME,
        ),
        // ---- SourceRemoved -------------------------------------------------------
        row(
            "available + source removed -> disabled (source_removed)",
            Avail,
            SourceRemoved,
            0,
            changed(Available, Disabled),
            Some(after(Disabled, false, 0, Some(Reason::SourceRemoved), None)),
        ),
        row(
            "cooling + source removed -> disabled, streak kept",
            Cool(3),
            SourceRemoved,
            0,
            changed(Cooling, Disabled),
            Some(after(Disabled, false, 3, Some(Reason::SourceRemoved), None)),
        ),
        row(
            "claimed + source removed -> disabled, claim dropped",
            PaClaimed(1, refused),
            SourceRemoved,
            0,
            changed(ProbeAllowed, Disabled),
            Some(after(Disabled, false, 1, Some(Reason::SourceRemoved), None)),
        ),
        row(
            "operator-disabled + source removed -> refused (stays operator)",
            OpDisabled,
            SourceRemoved,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "source-removed + source removed -> refused",
            SrcRemoved,
            SourceRemoved,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "auth-disabled + source removed -> refused",
            AuthDisabled,
            SourceRemoved,
            0,
            Step::Refused,
            SAME,
        ),
        // ---- SourceReturned ------------------------------------------------------
        row(
            "source-removed + source returned -> probe_allowed",
            SrcRemoved,
            SourceReturned,
            0,
            changed(Disabled, ProbeAllowed),
            Some(after(ProbeAllowed, false, 1, None, None)),
        ),
        row(
            "operator-disabled + source returned -> refused",
            OpDisabled,
            SourceReturned,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "auth-disabled + source returned -> refused",
            AuthDisabled,
            SourceReturned,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "available + source returned -> refused",
            Avail,
            SourceReturned,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "cooling + source returned -> refused",
            Cool(1),
            SourceReturned,
            0,
            Step::Refused,
            SAME,
        ),
        row(
            "claimed + source returned -> refused",
            PaClaimed(1, refused),
            SourceReturned,
            0,
            Step::Refused,
            SAME,
        ),
    ]
}

#[test]
fn state_by_event_table() {
    let p = policy();
    let t0 = Instant::now();
    let mut failures = Vec::new();
    for r in table() {
        let before = r.init.health(t0);
        let mut hl = before.clone();
        let now = t0 + Duration::from_millis(r.at_ms);
        // The sample must not matter: jitter is 0 in this policy.
        let step = hl.apply(r.input.clone(), &p, now, 0.7);
        let mut why = Vec::new();
        if step != r.step {
            why.push(format!("step {step:?}, expected {:?}", r.step));
        }
        match r.after {
            None => {
                if hl != before {
                    why.push(format!("health changed: {before:?} -> {hl:?}"));
                }
            }
            Some(a) => {
                let deadline_ms = hl.deadline.map(|d| d.duration_since(t0).as_millis() as u64);
                let got = (hl.state, hl.claimed, hl.streak, hl.reason, deadline_ms);
                let want = (a.state, a.claimed, a.streak, a.reason, a.deadline_ms);
                if got != want {
                    why.push(format!(
                        "(state, claimed, streak, reason, deadline_ms) = {got:?}, expected {want:?}"
                    ));
                }
                // Invariants of every resulting health.
                if hl.claimed && hl.state != ProbeAllowed {
                    why.push(format!("claimed while {}", hl.state));
                }
                if (hl.state == Cooling) != hl.deadline.is_some() {
                    why.push(format!("deadline {:?} in state {}", hl.deadline, hl.state));
                }
                if hl.state == Cooling {
                    let len = hl.cooldown.expect("cooling has a length");
                    if hl.deadline != Some(now + len) {
                        why.push(format!("deadline != now + cooldown ({len:?})"));
                    }
                }
            }
        }
        if !why.is_empty() {
            failures.push(format!("{}: {}", r.name, why.join("; ")));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Every input that must leave an operator-disabled endpoint disabled.
#[test]
fn operator_disabled_is_sticky() {
    let p = policy();
    let t0 = Instant::now();
    let inputs = vec![
        Input::SourceReturned,
        Input::SourceRemoved,
        Input::DeadlinePassed,
        Input::Success { trial: false },
        Input::Success { trial: true },
        failure(Reason::ConnectRefused, false),
        failure(Reason::ProxyAuthRejected, true),
        Input::Abandon,
        Input::Claim,
        Input::Disable { detail: None },
    ];
    let mut hl = Init::OpDisabled.health(t0);
    for (i, input) in inputs.into_iter().enumerate() {
        let now = t0 + Duration::from_secs(1_000 * i as u64);
        let step = hl.apply(input.clone(), &p, now, 0.0);
        assert!(
            matches!(step, Step::Refused | Step::Recorded { late: true }),
            "{input:?} -> {step:?}"
        );
        assert_eq!(hl.state, Disabled, "{input:?}");
        assert_eq!(hl.reason, Some(Reason::Operator), "{input:?}");
        assert!(hl.operator_disabled());
        assert!(!hl.claimed);
    }
    // Only the operator brings it back.
    assert_eq!(
        hl.apply(Input::Enable { now: false }, &p, t0, 0.0),
        changed(Disabled, ProbeAllowed)
    );
    assert!(!hl.operator_disabled());
}

/// Drive a health through `fail → deadline → claim → fail ...` with the given reasons.
fn fail_sequence(reasons: &[Reason]) -> (Health, Vec<Step>) {
    let p = policy();
    let mut now = Instant::now();
    let mut hl = Health::new(Available);
    let mut steps = Vec::new();
    for (i, &r) in reasons.iter().enumerate() {
        let trial = i > 0;
        if trial {
            now = hl.deadline.expect("cooling");
            assert_eq!(
                hl.apply(Input::DeadlinePassed, &p, now, 0.0),
                changed(Cooling, ProbeAllowed)
            );
            assert_eq!(hl.apply(Input::Claim, &p, now, 0.0), Step::Claimed);
        }
        steps.push(hl.apply(failure(r, trial), &p, now, 0.0));
        if hl.state != Cooling {
            break;
        }
    }
    (hl, steps)
}

#[test]
fn disable_after_counts_consecutive_failures_of_the_same_reason() {
    use Reason::{ConnectRefused as Refused, ProxyAuthRejected as Auth};
    let (hl, steps) = fail_sequence(&[Auth, Auth, Auth]);
    assert_eq!(
        steps,
        vec![
            changed(Available, Cooling),
            changed(ProbeAllowed, Cooling),
            changed(ProbeAllowed, Disabled),
        ]
    );
    assert_eq!(hl.state, Disabled);
    assert_eq!(hl.reason, Some(Auth));
    assert!(!hl.operator_disabled(), "auto-disable is not operator");
    assert_eq!((hl.streak, hl.reason_streak), (3, 3));

    // auth, auth, refused, auth: never three auth in a row.
    let (hl, steps) = fail_sequence(&[Auth, Auth, Refused, Auth]);
    assert_eq!(steps.len(), 4);
    assert_eq!(hl.state, Cooling, "{steps:?}");
    assert_eq!((hl.streak, hl.reason_streak), (4, 1));
    // ... one more auth is only the second in a row; the third disables.
    let (hl, _) = fail_sequence(&[Auth, Auth, Refused, Auth, Auth]);
    assert_eq!(hl.state, Cooling);
    let (hl, _) = fail_sequence(&[Auth, Auth, Refused, Auth, Auth, Auth]);
    assert_eq!(hl.state, Disabled);

    // A success in between resets the count.
    let p = policy();
    let t = Instant::now();
    let mut hl = Health::new(Available);
    for _ in 0..2 {
        hl.apply(failure(Auth, false), &p, t, 0.0);
        hl.apply(Input::DeadlinePassed, &p, hl.deadline.unwrap(), 0.0);
        hl.apply(Input::Claim, &p, t, 0.0);
        assert_eq!(
            hl.apply(Input::Success { trial: true }, &p, t, 0.0),
            changed(ProbeAllowed, Available)
        );
    }
    assert_eq!(hl.state, Available);
    assert_eq!(hl.reason_streak, 0);

    // Reasons without disable_after never disable.
    let (hl, _) = fail_sequence(&[Refused; 20]);
    assert_eq!(hl.state, Cooling);
    assert_eq!(hl.streak, 20);
}

#[test]
fn late_failure_does_not_extend_cooldown() {
    let p = policy();
    let t0 = Instant::now();
    let mut hl = Health::new(Available);
    hl.apply(failure(Reason::ConnectRefused, false), &p, t0, 0.0);
    let snapshot = hl.clone();
    for i in 1..10u64 {
        let now = t0 + Duration::from_millis(999 * i);
        assert_eq!(
            hl.apply(failure(Reason::SlowResponse, false), &p, now, 0.0),
            LATE
        );
        assert_eq!(
            hl.apply(Input::Success { trial: false }, &p, now, 0.0),
            LATE
        );
    }
    assert_eq!(hl, snapshot);
    assert_eq!(hl.deadline, Some(t0 + 10 * S));
}

// ---- cooldown policy ------------------------------------------------------------

fn cooldown(base: Duration, factor: f64, max: Duration, jitter: f64) -> Policy {
    Policy {
        cooldown: Cooldown {
            base,
            factor,
            max,
            jitter,
        },
        reasons: BTreeMap::new(),
        fall: 1,
    }
}

fn any_failure() -> Failure {
    fail(Reason::ConnectRefused)
}

#[test]
fn cooldown_without_jitter_is_exact_and_stops_at_max() {
    // (base ms, integer factor, max ms)
    let cases: &[(u64, u64, u64)] = &[
        (60_000, 2, 30 * 60_000),
        (100, 3, 60_000),
        (300, 2, 100_000),
        (700, 1, 700),
        (1_100, 2, 1_000_000),
        (10, 10, 86_400_000),
    ];
    for &(base, factor, max) in cases {
        let p = cooldown(
            Duration::from_millis(base),
            factor as f64,
            Duration::from_millis(max),
            0.0,
        );
        p.validate("t").unwrap();
        let mut reached_max = false;
        for streak in 1..=12u32 {
            let want = (base as u128 * (factor as u128).pow(streak - 1)).min(max as u128) as u64;
            for sample in [-1.0, 0.0, 0.37, 1.0] {
                assert_eq!(
                    p.cooldown(&any_failure(), streak, sample),
                    Duration::from_millis(want),
                    "base {base}ms factor {factor} max {max}ms streak {streak} sample {sample}"
                );
            }
            if reached_max {
                assert_eq!(want, max, "stays at max");
            }
            reached_max |= want == max;
        }
    }
    // Default cooldowns (docs/reference.md, "`[pool.cooldown]`") without jitter: 1m 2m 4m
    // 8m 16m 30m 30m ...
    let mut p = Policy::default();
    p.cooldown.jitter = 0.0;
    let mins: Vec<u64> = (1..=12)
        .map(|s| p.cooldown(&any_failure(), s, 0.0).as_secs())
        .collect();
    assert_eq!(
        mins,
        [60, 120, 240, 480, 960, 1800, 1800, 1800, 1800, 1800, 1800, 1800]
    );
    // Absurd streaks stay bounded.
    assert_eq!(p.cooldown(&any_failure(), u32::MAX, 0.0), 30 * 60 * S);
    // Streak 0 is treated as the first failure.
    assert_eq!(p.cooldown(&any_failure(), 0, 0.0), 60 * S);
}

#[test]
fn cooldown_jitter_stays_within_bounds_and_below_max() {
    for jitter in [0.1, 0.25, 0.5, 0.99] {
        let p = cooldown(60 * S, 2.0, 30 * 60 * S, jitter);
        p.validate("t").unwrap();
        let mut seen_low = false;
        let mut seen_high = false;
        for streak in 1..=12u32 {
            let nominal = (60.0 * 2f64.powi(streak as i32 - 1)).min(1800.0);
            let lo = nominal * (1.0 - jitter) - 0.001;
            let hi = nominal * (1.0 + jitter) + 0.001;
            for i in 0..=40 {
                let sample = -1.0 + i as f64 * 0.05;
                let d = p.cooldown(&any_failure(), streak, sample).as_secs_f64();
                assert!(
                    d >= lo && d <= hi,
                    "jitter {jitter} streak {streak} sample {sample}: {d} not in [{lo}, {hi}]"
                );
                assert!(d <= 1800.0, "never above max: {d}");
                seen_low |= d < nominal;
                seen_high |= d > nominal;
            }
            // Samples outside [-1, 1] are clamped.
            for sample in [-50.0, 50.0, f64::INFINITY, f64::NEG_INFINITY] {
                let d = p.cooldown(&any_failure(), streak, sample).as_secs_f64();
                assert!(d >= lo && d <= hi && d <= 1800.0, "sample {sample}: {d}");
            }
        }
        assert!(seen_low && seen_high, "jitter {jitter} does move the value");
    }
}

#[test]
fn per_reason_overrides() {
    let mut p = cooldown(60 * S, 2.0, 30 * 60 * S, 0.0);
    p.reasons.insert(
        Reason::ConnectTimeout,
        ReasonPolicy {
            base: Some(5 * S),
            factor: Some(3.0),
            max: Some(20 * S),
            ..Default::default()
        },
    );
    p.reasons.insert(
        Reason::DestinationStatus,
        ReasonPolicy {
            base: Some(Duration::from_millis(1_500)),
            ..Default::default()
        },
    );
    p.reasons.insert(
        Reason::ProxyAuthRejected,
        ReasonPolicy {
            disable_after: Some(2),
            ..Default::default()
        },
    );
    p.validate("pools.default").unwrap();
    let cd = |r: Reason, s: u32| p.cooldown(&fail(r), s, 0.0);
    assert_eq!(
        (1..=4)
            .map(|s| cd(Reason::ConnectTimeout, s))
            .collect::<Vec<_>>(),
        vec![5 * S, 15 * S, 20 * S, 20 * S]
    );
    // Only base overridden: factor and max from the pool.
    assert_eq!(
        cd(Reason::DestinationStatus, 1),
        Duration::from_millis(1_500)
    );
    assert_eq!(
        cd(Reason::DestinationStatus, 3),
        Duration::from_millis(6_000)
    );
    assert_eq!(cd(Reason::DestinationStatus, 20), 30 * 60 * S);
    // Others: the pool default.
    assert_eq!(cd(Reason::ConnectRefused, 2), 120 * S);
    assert_eq!(cd(Reason::ProxyAuthRejected, 1), 60 * S);
    assert_eq!(p.cooldown(&Failure::default(), 1, 0.0), 60 * S);
    // disable_after per reason.
    assert_eq!(p.disable_after(Some(Reason::ProxyAuthRejected)), Some(2));
    assert_eq!(p.disable_after(Some(Reason::ConnectTimeout)), None);
    assert_eq!(p.disable_after(None), None);
    assert_eq!(
        Policy::default().disable_after(Some(Reason::ProxyAuthRejected)),
        Some(3)
    );
    let (mut hl, t) = (Health::new(Available), Instant::now());
    hl.apply(failure(Reason::ProxyAuthRejected, false), &p, t, 0.0);
    hl.apply(Input::DeadlinePassed, &p, t + 60 * S, 0.0);
    hl.apply(Input::Claim, &p, t, 0.0);
    assert_eq!(
        hl.apply(failure(Reason::ProxyAuthRejected, true), &p, t, 0.0),
        changed(ProbeAllowed, Disabled)
    );
    // A transition uses the override of its own reason.
    let mut hl = Health::new(Available);
    hl.apply(failure(Reason::ConnectTimeout, false), &p, t, 0.0);
    assert_eq!(hl.deadline, Some(t + 5 * S));
}

#[test]
fn retry_after_on_429_and_503_only() {
    let p = cooldown(60 * S, 2.0, 30 * 60 * S, 0.0);
    let with = |status: Option<u16>, ra: Option<Duration>| Failure {
        reason: Some(Reason::DestinationStatus),
        phase: Some(Phase::ResponseHead),
        status,
        retry_after: ra,
        detail: None,
        substituted: false,
    };
    let ten_min = Some(10 * 60 * S);
    for status in [429, 503] {
        assert_eq!(p.cooldown(&with(Some(status), ten_min), 1, 0.0), 600 * S);
        // Bounded by max.
        assert_eq!(
            p.cooldown(&with(Some(status), Some(7200 * S)), 1, 0.0),
            1800 * S
        );
        // A shorter Retry-After never shortens the cooldown.
        assert_eq!(
            p.cooldown(&with(Some(status), Some(10 * S)), 1, 0.0),
            60 * S
        );
        assert_eq!(
            p.cooldown(&with(Some(status), Some(10 * S)), 3, 0.0),
            240 * S
        );
        // Without Retry-After: the plain cooldown.
        assert_eq!(p.cooldown(&with(Some(status), None), 1, 0.0), 60 * S);
        // Jitter cannot take it below Retry-After.
        let pj = cooldown(60 * S, 2.0, 30 * 60 * S, 0.5);
        assert!(pj.cooldown(&with(Some(status), ten_min), 1, -1.0) >= 600 * S);
        assert!(pj.cooldown(&with(Some(status), ten_min), 1, 1.0) >= 600 * S);
    }
    for status in [Some(403), Some(500), Some(502), Some(504), Some(200), None] {
        assert_eq!(
            p.cooldown(&with(status, ten_min), 1, 0.0),
            60 * S,
            "status {status:?} ignores Retry-After"
        );
    }
    // Through the state machine too.
    let t = Instant::now();
    let mut hl = Health::new(Available);
    hl.apply(
        Input::Failure {
            failure: with(Some(429), Some(300 * S)),
            trial: false,
        },
        &p,
        t,
        0.0,
    );
    assert_eq!(hl.cooldown, Some(300 * S));
    assert_eq!(hl.deadline, Some(t + 300 * S));
}

#[test]
fn validate_rejects_bad_values_naming_the_key() {
    let ok = cooldown(60 * S, 1.0, 60 * S, 0.0);
    assert_eq!(ok.validate("pools.a"), Ok(()));
    assert_eq!(Policy::default().validate("pools.default"), Ok(()));
    let cases: Vec<(Policy, &str)> = vec![
        (cooldown(60 * S, 0.5, 600 * S, 0.1), "pools.a.factor"),
        (cooldown(60 * S, 0.0, 600 * S, 0.1), "pools.a.factor"),
        (cooldown(60 * S, -2.0, 600 * S, 0.1), "pools.a.factor"),
        (cooldown(60 * S, f64::NAN, 600 * S, 0.1), "pools.a.factor"),
        (
            cooldown(60 * S, f64::INFINITY, 600 * S, 0.1),
            "pools.a.factor",
        ),
        (cooldown(60 * S, 2.0, 600 * S, 1.0), "pools.a.jitter"),
        (cooldown(60 * S, 2.0, 600 * S, 1.5), "pools.a.jitter"),
        (cooldown(60 * S, 2.0, 600 * S, -0.1), "pools.a.jitter"),
        (cooldown(60 * S, 2.0, 600 * S, f64::NAN), "pools.a.jitter"),
        (cooldown(601 * S, 2.0, 600 * S, 0.1), "pools.a.base"),
        (cooldown(Duration::ZERO, 2.0, 600 * S, 0.1), "pools.a.base"),
    ];
    for (p, key) in cases {
        let err = p
            .validate("pools.a")
            .expect_err(&format!("{:?} must be rejected", p.cooldown));
        let msg = err.to_string();
        assert!(msg.starts_with(&format!("{key}:")), "{msg:?} names {key}");
    }
    // base > max says both values the humantime way.
    let msg = cooldown(10 * 60 * S, 2.0, 5 * 60 * S, 0.1)
        .validate("pools.a")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("10m") && msg.contains("5m"), "{msg}");

    // Per-reason overrides are checked with their own key.
    let mut p = Policy::default();
    p.reasons.insert(
        Reason::ConnectTimeout,
        ReasonPolicy {
            factor: Some(0.9),
            ..Default::default()
        },
    );
    let msg = p.validate("pools.a").unwrap_err().to_string();
    assert!(
        msg.starts_with("pools.a.reasons.connect_timeout.factor:"),
        "{msg}"
    );
    let mut p = Policy::default();
    p.reasons.insert(
        Reason::SlowResponse,
        ReasonPolicy {
            jitter: Some(1.0),
            ..Default::default()
        },
    );
    let msg = p.validate("pools.a").unwrap_err().to_string();
    assert!(
        msg.starts_with("pools.a.reasons.slow_response.jitter:"),
        "{msg}"
    );
    // An override base above the pool max (inherited) is caught.
    let mut p = Policy::default();
    p.reasons.insert(
        Reason::DnsFailed,
        ReasonPolicy {
            base: Some(3600 * S),
            ..Default::default()
        },
    );
    let msg = p.validate("pools.a").unwrap_err().to_string();
    assert!(msg.starts_with("pools.a.reasons.dns_failed.base:"), "{msg}");
    let mut p = Policy::default();
    p.reasons.insert(
        Reason::ProxyAuthRejected,
        ReasonPolicy {
            disable_after: Some(0),
            ..Default::default()
        },
    );
    let msg = p.validate("pools.a").unwrap_err().to_string();
    assert!(
        msg.starts_with("pools.a.reasons.proxy_auth_rejected.disable_after:"),
        "{msg}"
    );
}

#[test]
fn cooldown_left_is_what_remains_of_a_cooling_health() {
    let now = Instant::now();
    let cases = [
        (Cooling, Some(now + 30 * S), Some(30 * S)),
        (Cooling, Some(now), Some(Duration::ZERO)),
        (Cooling, None, None),
        // A deadline left from an earlier cooldown means nothing in another state.
        (Available, Some(now + 30 * S), None),
        (ProbeAllowed, Some(now + 30 * S), None),
        (Disabled, Some(now + 30 * S), None),
    ];
    for (state, deadline, want) in cases {
        let mut h = Health::new(state);
        h.deadline = deadline;
        assert_eq!(h.cooldown_left(now), want, "{state:?} {deadline:?}");
    }
    // A deadline already past leaves nothing.
    let mut h = Health::new(Cooling);
    h.deadline = Some(now);
    assert_eq!(h.cooldown_left(now + 5 * S), Some(Duration::ZERO));
}

#[test]
fn restore_cooldown_rebuilds_a_stored_deadline_on_the_monotonic_clock() {
    let now = Instant::now();
    // (state, cooldown_ms, left as the store read it, deadline wanted)
    let cases = [
        (Cooling, Some(60_000), Some(25 * S), Some(now + 25 * S)),
        // Clamped to the cooldown's length.
        (Cooling, Some(60_000), Some(600 * S), Some(now + 60 * S)),
        // Over while the daemon was down, or never stored: due at once.
        (Cooling, Some(60_000), Some(Duration::ZERO), Some(now)),
        (Cooling, Some(60_000), None, Some(now)),
        (Cooling, None, Some(25 * S), Some(now)),
        // Only a cooling health has a deadline.
        (ProbeAllowed, Some(60_000), Some(25 * S), None),
        (Available, None, None, None),
    ];
    for (state, ms, left, want) in cases {
        let mut h = Health::new(state);
        h.restore_cooldown(ms, left, now);
        assert_eq!(h.deadline, want, "{state:?} {ms:?} {left:?}");
        assert_eq!(h.cooldown, ms.map(Duration::from_millis), "{state:?}");
    }
    // What `cooldown_left` stores, `restore_cooldown` reads back.
    let mut h = Health::new(Cooling);
    h.deadline = Some(now + 42 * S);
    h.cooldown = Some(60 * S);
    let mut back = Health::new(Cooling);
    back.restore_cooldown(Some(60_000), h.cooldown_left(now), now);
    assert_eq!(back.deadline, h.deadline);
}

#[test]
fn restored_remaining_clamps() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let cd = 60 * S;
    // Normal: what is left.
    assert_eq!(restored_remaining(now + 25 * S, now, cd), 25 * S);
    assert_eq!(restored_remaining(now + cd, now, cd), cd);
    assert_eq!(
        restored_remaining(now + Duration::from_millis(1), now, cd),
        Duration::from_millis(1)
    );
    // Far beyond its own length (clock jumped back, or a row edited): the length.
    assert_eq!(restored_remaining(now + 61 * S, now, cd), cd);
    assert_eq!(
        restored_remaining(now + 100 * 365 * 86_400 * S, now, cd),
        cd
    );
    // Past or now: zero, never negative.
    assert_eq!(restored_remaining(now, now, cd), Duration::ZERO);
    assert_eq!(restored_remaining(now - S, now, cd), Duration::ZERO);
    assert_eq!(
        restored_remaining(SystemTime::UNIX_EPOCH, now, cd),
        Duration::ZERO
    );
    // A zero-length cooldown never waits.
    assert_eq!(
        restored_remaining(now + S, now, Duration::ZERO),
        Duration::ZERO
    );
}

#[test]
fn names_round_trip() {
    for s in State::ALL {
        assert_eq!(s.as_str().parse::<State>(), Ok(*s));
    }
    for r in Reason::ALL {
        assert_eq!(r.as_str().parse::<Reason>(), Ok(*r));
    }
    for p in Phase::ALL {
        assert_eq!(p.as_str().parse::<Phase>(), Ok(*p));
    }
    assert_eq!(State::ALL.len(), 4);
    let err = "cool".parse::<State>().unwrap_err().to_string();
    assert!(
        err.contains("available, cooling, probe_allowed, disabled"),
        "{err}"
    );
}
