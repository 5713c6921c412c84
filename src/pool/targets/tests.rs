use super::*;
use crate::health::blame::PairKey;
use crate::health::blame::Rules;

const T: &str = "shop.example:443";

fn unreachable() -> Failure {
    Failure::new(Reason::UpstreamUnreachable, Some(Phase::ProxyHandshake))
}

fn targets() -> Targets {
    Targets::new(Rules::default(), 100)
}

/// A failure of the unreachable class through `e` (not a probe, not the trial, no jitter).
fn fail(t: &mut Targets, target: &str, e: EndpointId, now: Instant) -> Judged {
    t.failed(
        target,
        e,
        Class::Unreachable,
        &unreachable(),
        false,
        false,
        false,
        now,
        0.0,
    )
}

fn blame(j: &Judged) -> (Blame, Option<PairKey>) {
    (j.verdict.blame, j.verdict.pair)
}

#[tokio::test(start_paused = true)]
async fn two_endpoints_failing_with_no_success_make_the_target_down_and_cool_nobody() {
    let mut t = targets();
    let now = Instant::now();
    let first = fail(&mut t, T, 1, now);
    assert_eq!(blame(&first), (Blame::Pending, None));
    assert!(
        t.prefers_other(T, 1, now),
        "the next use prefers another endpoint"
    );
    assert!(!t.prefers_other(T, 2, now));
    assert_eq!(t.avoid(T, now), vec![1]);
    assert!(t.avoid("other.example:443", now).is_empty());
    assert_eq!(t.gate(T, now), Gate::Open, "pending is not down");
    // The same endpoint again is still one endpoint.
    assert_eq!(blame(&fail(&mut t, T, 1, now)), (Blame::Pending, None));
    let second = fail(&mut t, T, 2, now);
    assert_eq!(blame(&second), (Blame::Target, None));
    assert!(second.verdict.target_goes_down);
    assert_eq!(second.absolved, vec![1]);
    assert_eq!(second.down_for, Some(Duration::from_secs(2)));
    assert_eq!(t.down_count(), 1);
    assert_eq!(
        t.gate(T, now),
        Gate::Down {
            retry_after: Duration::from_secs(2)
        }
    );
    // While down, every failure is the target's and changes nothing.
    let third = fail(&mut t, T, 3, now);
    assert_eq!(blame(&third), (Blame::Target, None));
    assert!(!third.verdict.target_goes_down);
    assert_eq!(t.down_count(), 1);
    assert!(
        !t.prefers_other(T, 1, now),
        "going down cleared the pending failures"
    );
}

#[tokio::test(start_paused = true)]
async fn a_target_others_reach_blames_the_pair_and_confirms_pending_failures() {
    let mut t = targets();
    let now = Instant::now();
    assert_eq!(blame(&fail(&mut t, T, 1, now)), (Blame::Pending, None));
    let r = t.reached(T, 2, now + Duration::from_secs(1));
    assert_eq!(r.up, None);
    assert_eq!(r.confirmed.len(), 1);
    assert_eq!(r.confirmed[0].endpoint, 1);
    assert_eq!(r.confirmed[0].reason, Reason::UpstreamUnreachable);
    assert!(r.confirmed[0]
        .failure(2)
        .detail
        .unwrap()
        .contains("endpoint 2 reached"));
    // From now on endpoint 1's failures there are its pair's, at once.
    let j = fail(&mut t, T, 1, now + Duration::from_secs(2));
    assert_eq!(blame(&j), (Blame::Pair, Some(PairKey::Target)));
    assert!(j.verdict.contrasted);
    // An endpoint's own success is no evidence against its earlier failure.
    let mut t = targets();
    fail(&mut t, T, 1, now);
    assert!(t.reached(T, 1, now).confirmed.is_empty());
}

#[tokio::test(start_paused = true)]
async fn evidence_counts_only_within_the_contrast_window() {
    let mut t = targets();
    let now = Instant::now();
    let window = Rules::default().contrast_window;
    t.reached(T, 2, now);
    let late = now + window + Duration::from_millis(1);
    // A success older than the window says nothing about now.
    assert_eq!(blame(&fail(&mut t, T, 1, late)), (Blame::Pending, None));
    // A pending failure older than the window neither counts towards down...
    let later = late + window + Duration::from_millis(1);
    assert_eq!(blame(&fail(&mut t, T, 3, later)), (Blame::Pending, None));
    // ...nor is confirmed by a later success.
    let mut t = targets();
    fail(&mut t, T, 1, now);
    assert!(t.reached(T, 2, late).confirmed.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_pool_of_one_has_no_contrast_and_its_pair_cools() {
    let mut t = targets();
    let now = Instant::now();
    let j = t.failed(
        T,
        1,
        Class::Unreachable,
        &unreachable(),
        false,
        true,
        false,
        now,
        0.0,
    );
    assert_eq!(blame(&j), (Blame::Pair, Some(PairKey::Target)));
    assert!(
        !j.verdict.contrasted,
        "nothing to contrast with: no escalation"
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_failure_confirmed_by_contrast_is_the_endpoints() {
    let mut t = targets();
    let now = Instant::now();
    t.reached(T, 2, now);
    let j = t.failed(
        T,
        1,
        Class::Unreachable,
        &unreachable(),
        true,
        false,
        false,
        now,
        0.0,
    );
    assert_eq!(blame(&j), (Blame::Endpoint, None));
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_that_fails_what_others_reach_on_three_targets_escalates() {
    let mut t = targets();
    let now = Instant::now();
    let targets = [
        "a.example:443",
        "b.example:443",
        "c.example:443",
        "d.example:443",
    ];
    for x in targets {
        t.reached(x, 2, now);
    }
    let refused = Failure::new(Reason::ProxyRejected, Some(Phase::ProxyHandshake));
    let j = t.failed(
        targets[0],
        1,
        Class::Refused,
        &refused,
        false,
        false,
        false,
        now,
        0.0,
    );
    assert_eq!(blame(&j), (Blame::Pair, Some(PairKey::Target)));
    assert!(!j.escalate);
    // The same target twice is one target.
    assert!(!fail(&mut t, targets[0], 1, now).escalate);
    assert!(!fail(&mut t, targets[1], 1, now).escalate);
    assert!(
        fail(&mut t, targets[2], 1, now).escalate,
        "the third distinct target"
    );
    // Counting starts again after escalating, and after any success of its own.
    assert!(!fail(&mut t, targets[3], 1, now).escalate);
    assert!(!fail(&mut t, targets[0], 1, now).escalate);
    t.endpoint_succeeded(1);
    assert!(!fail(&mut t, targets[1], 1, now).escalate);
    assert!(!fail(&mut t, targets[2], 1, now).escalate);
    assert!(fail(&mut t, targets[3], 1, now).escalate);
    // Failures on targets nobody reached never escalate: a bad URL list cools nobody.
    let mut t = targets_with_cap(1000);
    for i in 0..50 {
        let bogus = format!("host-{i}.invalid:443");
        let j = fail(&mut t, &bogus, 1, now);
        assert!(!j.escalate);
        assert_ne!(j.verdict.blame, Blame::Endpoint);
        assert_ne!(j.verdict.blame, Blame::Pair);
    }
}

fn targets_with_cap(cap: usize) -> Targets {
    Targets::new(Rules::default(), cap)
}

#[tokio::test(start_paused = true)]
async fn a_down_target_admits_exactly_one_trial_at_its_deadline() {
    let mut t = targets();
    let now = Instant::now();
    fail(&mut t, T, 1, now);
    fail(&mut t, T, 2, now);
    let due = now + Duration::from_secs(2);
    assert_eq!(
        t.gate(T, due - Duration::from_millis(1)),
        Gate::Down {
            retry_after: Duration::from_millis(1)
        }
    );
    assert!(!t.claim_trial(T, due - Duration::from_millis(1)));
    assert_eq!(t.gate(T, due), Gate::Trial);
    let wins = (0..100).filter(|_| t.claim_trial(T, due)).count();
    assert_eq!(wins, 1, "a 100-way stampede gets one trial");
    assert!(matches!(t.gate(T, due), Gate::Down { .. }));
    // The trial fails the same way: the target's cooldown grows (2 s, then 4 s).
    let j = t.failed(
        T,
        3,
        Class::Unreachable,
        &unreachable(),
        false,
        false,
        true,
        due,
        0.0,
    );
    assert_eq!(blame(&j), (Blame::Target, None));
    assert_eq!(j.down_for, Some(Duration::from_secs(4)));
    assert_eq!(
        t.gate(T, due),
        Gate::Down {
            retry_after: Duration::from_secs(4)
        }
    );
    let list = t.down_list(due, 10);
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].target.as_str(), list[0].streak), (T, 2));
    assert_eq!(list[0].down_for, Duration::from_secs(2));
    // The next trial gets through: the target is up, the gate open.
    let due = due + Duration::from_secs(4);
    assert!(t.claim_trial(T, due));
    let r = t.reached(T, 3, due);
    assert_eq!(r.up, Some(Duration::from_secs(6)), "down for 6 s");
    assert_eq!(t.down_count(), 0);
    assert_eq!(t.gate(T, due), Gate::Open);
    assert!(t.down_list(due, 10).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_trial_that_fails_for_the_endpoints_own_reason_is_given_back() {
    let mut t = targets();
    let now = Instant::now();
    fail(&mut t, T, 1, now);
    fail(&mut t, T, 2, now);
    let due = now + Duration::from_secs(2);
    assert!(t.claim_trial(T, due));
    let refused = Failure::new(Reason::ConnectRefused, Some(Phase::Connect));
    let j = t.failed(T, 3, Class::Proxy, &refused, false, false, true, due, 0.0);
    assert_eq!(blame(&j), (Blame::Endpoint, None));
    assert_eq!(t.gate(T, due), Gate::Trial, "the next use is the trial");
    // And a trial given back without any outcome, likewise.
    assert!(t.claim_trial(T, due));
    t.abandon_trial(T, due);
    assert_eq!(t.gate(T, due), Gate::Trial);
}

#[tokio::test(start_paused = true)]
async fn any_success_brings_a_down_target_up() {
    let mut t = targets();
    let now = Instant::now();
    fail(&mut t, T, 1, now);
    fail(&mut t, T, 2, now);
    // A tunnel that opened just before the target went down reports late.
    assert_eq!(t.reached(T, 4, now).up, Some(Duration::ZERO));
    assert_eq!(t.gate(T, now), Gate::Open);
}

#[tokio::test(start_paused = true)]
async fn the_table_stays_within_its_cap_and_counts_what_it_drops() {
    let mut t = targets_with_cap(3);
    let now = Instant::now();
    // The first target goes down, then three others push it out.
    fail(&mut t, "a.invalid:80", 1, now);
    fail(&mut t, "a.invalid:80", 2, now);
    assert_eq!(t.down_count(), 1);
    for x in ["b.invalid:80", "c.invalid:80", "d.invalid:80"] {
        fail(&mut t, x, 1, now);
    }
    assert_eq!(t.len(), 3);
    assert_eq!(t.dropped(), 1);
    assert_eq!(
        t.down_count(),
        0,
        "a dropped target is no longer counted down"
    );
    assert_eq!(t.gate("a.invalid:80", now), Gate::Open);
    // A lookup is a use: the least recently used goes first.
    t.gate("b.invalid:80", now);
    t.prefers_other("c.invalid:80", 1, now); // a peek, not a use
    fail(&mut t, "e.invalid:80", 1, now);
    assert!(t.prefers_other("b.invalid:80", 1, now));
    assert!(
        !t.prefers_other("c.invalid:80", 1, now),
        "c was the least recently used"
    );
}

#[tokio::test(start_paused = true)]
async fn other_classes_leave_the_target_alone() {
    let mut t = targets();
    let now = Instant::now();
    for (class, reason, phase) in [
        (Class::Proxy, Reason::ConnectRefused, Phase::Connect),
        (Class::Ban, Reason::DestinationStatus, Phase::ResponseHead),
        (
            Class::Destination,
            Reason::ConnectionReset,
            Phase::ResponseBody,
        ),
    ] {
        for e in 1..5 {
            let f = Failure::new(reason, Some(phase));
            let j = t.failed(T, e, class, &f, false, false, false, now, 0.0);
            assert!(!j.verdict.target_goes_down, "{class:?}");
            assert_ne!(j.verdict.blame, Blame::Pending);
        }
    }
    assert_eq!(t.down_count(), 0);
    assert!(!t.prefers_other(T, 1, now));
}
