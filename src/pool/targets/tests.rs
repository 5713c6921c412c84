use super::*;
use crate::health::blame::PairKey;
use crate::health::blame::Rules;

/// Where a target stands for its next use, read without claiming anything: what the lease
/// path's `admit` decides before it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Open,
    Trial,
    Down {
        retry_after: Duration,
        trial_out: bool,
    },
}

impl Targets {
    /// The trial's claim, when this use is the trial.
    fn claim_trial(&mut self, target: &str, now: Instant) -> Option<u32> {
        match self.admit(target, now) {
            Admission::Trial(gen) => Some(gen),
            _ => None,
        }
    }

    fn gate(&mut self, target: &str, now: Instant) -> Standing {
        let policy = &self.rules.target;
        let Some(d) = self.map.get_mut(target).and_then(|t| t.down.as_mut()) else {
            return Standing::Open;
        };
        match d.stand(policy, now) {
            Stand::TrialDue => Standing::Trial,
            Stand::TrialOut(left) => Standing::Down {
                retry_after: left,
                trial_out: true,
            },
            Stand::Cooling(left) => Standing::Down {
                retry_after: left,
                trial_out: false,
            },
        }
    }
}

const T: &str = "shop.example:443";
const HOLD: Duration = DEFAULT_TRIAL_HOLD;

fn unreachable() -> Failure {
    Failure::new(Reason::UpstreamUnreachable, Some(Phase::ProxyHandshake))
}

fn refused() -> Failure {
    Failure::new(Reason::ProxyRejected, Some(Phase::ProxyHandshake))
}

fn targets() -> Targets {
    Targets::new(Rules::default(), 100)
}

fn targets_with_cap(cap: usize) -> Targets {
    Targets::new(Rules::default(), cap)
}

/// A failure of `class` through `e` (not a probe, not a trial, not alone).
fn use_of(e: EndpointId, class: Class, f: &Failure) -> Failed<'_> {
    Failed {
        endpoint: e,
        class,
        failure: f,
        probe: false,
        alone: false,
        trial: None,
        pair_trial: false,
    }
}

/// A failure of the unreachable class through `e` (not a probe, not the trial, no jitter).
fn fail(t: &mut Targets, target: &str, e: EndpointId, now: Instant) -> Judged {
    let f = unreachable();
    t.failed(target, use_of(e, Class::Unreachable, &f), now, 0.0)
}

/// The trial (generation `gen`) fails through `e` with `class`.
fn trial_fails(t: &mut Targets, e: EndpointId, class: Class, gen: u32, now: Instant) -> Judged {
    let f = match class {
        Class::Proxy => Failure::new(Reason::ConnectRefused, Some(Phase::Connect)),
        _ => unreachable(),
    };
    let u = Failed {
        trial: Some(gen),
        ..use_of(e, class, &f)
    };
    t.failed(T, u, now, 0.0)
}

fn blame(j: &Judged) -> (Blame, Option<PairKey>) {
    (j.verdict.blame, j.verdict.pair)
}

fn down(t: &mut Targets, now: Instant) {
    fail(t, T, 1, now);
    fail(t, T, 2, now);
    assert_eq!(t.down_count(), 1);
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
    assert_eq!(t.gate(T, now), Standing::Open, "pending is not down");
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
        Standing::Down {
            retry_after: Duration::from_secs(2),
            trial_out: false
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

/// State x event: what a success through another endpoint before, or after, a failure
/// makes of it. Only "after" is contrast.
#[tokio::test(start_paused = true)]
async fn only_a_success_after_a_failure_contrasts_it() {
    let s = Duration::from_secs(1);
    let now = Instant::now();
    // (reached by 2 at, failed by 1 at, a success by 2 after?) → (blame, confirmed).
    let rows = [
        // A success just before: no contrast, pending; nothing confirms it.
        (Some(0), 1, None, Blame::Pending, 0),
        // A success just before and one after: confirmed by the one after.
        (Some(0), 1, Some(2), Blame::Pending, 1),
        // Nothing before, a success after: confirmed.
        (None, 1, Some(2), Blame::Pending, 1),
        // A success after, but past contrast_window: it says nothing about the failure.
        (None, 1, Some(62), Blame::Pending, 0),
    ];
    for (before, at, after, want, confirmed) in rows {
        let mut t = targets();
        if let Some(b) = before {
            t.reached(T, 2, now + b * s);
        }
        let j = fail(&mut t, T, 1, now + at * s);
        assert_eq!(j.verdict.blame, want, "{before:?} {at} {after:?}");
        let r = after
            .map(|a| t.reached(T, 2, now + a * s))
            .unwrap_or_default();
        assert_eq!(r.confirmed.len(), confirmed, "{before:?} {at} {after:?}");
        if confirmed > 0 {
            assert_eq!(r.confirmed[0].endpoint, 1);
            let d = r.confirmed[0].failure(2).detail.unwrap();
            assert!(d.contains("endpoint 2 reached the target after"), "{d}");
        }
    }
    // An endpoint's own success is no evidence against its earlier failure.
    let mut t = targets();
    fail(&mut t, T, 1, now);
    assert!(t.reached(T, 1, now).confirmed.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_site_reached_before_it_went_down_goes_down_and_cools_nobody() {
    let mut t = targets();
    let now = Instant::now();
    let ports: Vec<String> = (0..5)
        .map(|i| format!("shop.example:{}", 8000 + i))
        .collect();
    for (i, p) in ports.iter().enumerate() {
        t.reached(p, 1 + i as EndpointId % 3, now);
    }
    let later = now + Duration::from_secs(1);
    for p in &ports {
        for e in [1, 2, 3] {
            let j = fail(&mut t, p, e, later);
            assert!(
                matches!(j.verdict.blame, Blame::Pending | Blame::Target),
                "{p} {e}: {j:?}"
            );
        }
    }
    assert_eq!(t.down_count(), 5);
    for e in [1, 2, 3] {
        assert_eq!(t.strikes_of(e), 0, "endpoint {e}");
    }
}

#[tokio::test(start_paused = true)]
async fn evidence_counts_only_within_the_contrast_window() {
    let mut t = targets();
    let now = Instant::now();
    let window = Rules::default().contrast_window;
    fail(&mut t, T, 1, now);
    let late = now + window + Duration::from_millis(1);
    // A pending failure older than the window neither counts towards down...
    assert_eq!(blame(&fail(&mut t, T, 3, late)), (Blame::Pending, None));
    // ...nor is confirmed by a later success.
    let mut t = targets();
    fail(&mut t, T, 1, now);
    assert!(t.reached(T, 2, late).confirmed.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_pool_of_one_has_no_contrast_and_its_pair_cools() {
    let mut t = targets();
    let now = Instant::now();
    let f = unreachable();
    let u = Failed {
        alone: true,
        ..use_of(1, Class::Unreachable, &f)
    };
    let j = t.failed(T, u, now, 0.0);
    assert_eq!(blame(&j), (Blame::Pair, Some(PairKey::Target)));
    assert_eq!(
        t.strikes_of(1),
        0,
        "nothing to contrast with: no escalation"
    );
}

#[tokio::test(start_paused = true)]
async fn the_trial_of_a_pair_that_cooled_by_contrast_fails_as_the_pair() {
    let mut t = targets();
    let now = Instant::now();
    let f = unreachable();
    let u = Failed {
        pair_trial: true,
        ..use_of(1, Class::Unreachable, &f)
    };
    let j = t.failed(T, u, now, 0.0);
    assert_eq!(blame(&j), (Blame::Pair, Some(PairKey::Target)));
    assert!(!t.prefers_other(T, 1, now), "not pending");
    assert_eq!(t.strikes_of(1), 0, "no new contrast: no strike");
}

#[tokio::test(start_paused = true)]
async fn a_probe_failure_confirmed_by_a_later_success_is_the_endpoints() {
    let mut t = targets();
    let now = Instant::now();
    let f = unreachable();
    let u = Failed {
        probe: true,
        ..use_of(1, Class::Unreachable, &f)
    };
    assert_eq!(blame(&t.failed(T, u, now, 0.0)), (Blame::Pending, None));
    let r = t.reached(T, 2, now);
    assert_eq!(r.confirmed.len(), 1);
    assert!(r.confirmed[0].probe);
    assert!(r.escalated.is_empty());
    assert_eq!(
        t.strikes_of(1),
        0,
        "a probe's failure cools its endpoint directly"
    );
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_that_fails_three_targets_others_reach_after_it_escalates() {
    let mut t = targets();
    let now = Instant::now();
    let targets = [
        "a.example:443",
        "b.example:443",
        "c.example:443",
        "d.example:443",
    ];
    // Endpoint 1 fails a target, then endpoint 2 reaches it: one strike.
    let strike = |t: &mut Targets, x: &str| {
        fail(t, x, 1, now);
        t.reached(x, 2, now).escalated
    };
    let rf = refused();
    let j = t.failed(targets[0], use_of(1, Class::Refused, &rf), now, 0.0);
    assert_eq!(blame(&j), (Blame::Pair, Some(PairKey::Target)));
    assert_eq!(
        t.strikes_of(1),
        0,
        "a refusal counts once someone gets through"
    );
    assert!(t.reached(targets[0], 2, now).escalated.is_empty());
    assert_eq!(t.strikes_of(1), 1);
    // The same target twice is one target.
    assert!(strike(&mut t, targets[0]).is_empty());
    assert!(strike(&mut t, targets[1]).is_empty());
    assert_eq!(
        strike(&mut t, targets[2]),
        vec![1],
        "the third distinct target"
    );
    // Counting starts again after escalating, and after any success of its own.
    assert!(strike(&mut t, targets[3]).is_empty());
    assert!(strike(&mut t, targets[0]).is_empty());
    t.endpoint_succeeded(1);
    assert!(strike(&mut t, targets[1]).is_empty());
    assert!(strike(&mut t, targets[2]).is_empty());
    assert_eq!(strike(&mut t, targets[3]), vec![1]);
    // Failures on targets nobody reached never escalate: a bad URL list cools nobody.
    let mut t = targets_with_cap(1000);
    for i in 0..50 {
        let bogus = format!("host-{i}.invalid:443");
        let j = fail(&mut t, &bogus, 1, now);
        assert_ne!(j.verdict.blame, Blame::Endpoint);
        assert_ne!(j.verdict.blame, Blame::Pair);
    }
    assert_eq!(t.strikes_of(1), 0);
}

/// A target that turned out to be down (or that is forgotten) takes back the strikes it
/// gave: escalation never counts it.
#[tokio::test(start_paused = true)]
async fn a_target_that_goes_down_or_is_forgotten_takes_its_strikes_back() {
    let now = Instant::now();
    for how in ["down", "forgotten", "cleared"] {
        let mut t = targets_with_cap(3);
        for x in ["a.example:443", "b.example:443"] {
            fail(&mut t, x, 1, now);
            t.reached(x, 2, now);
        }
        assert_eq!(t.strikes_of(1), 2, "{how}");
        match how {
            "down" => {
                for e in [3, 4] {
                    fail(&mut t, "a.example:443", e, now);
                }
                assert_eq!(t.down_count(), 1);
            }
            "forgotten" => {
                // Three new targets push the two struck ones out of a table of three.
                for x in ["x.invalid:443", "y.invalid:443", "z.invalid:443"] {
                    fail(&mut t, x, 5, now);
                }
                assert_eq!(t.dropped(), 2);
            }
            _ => {
                assert!(t.clear("a.example:443", now).is_some());
            }
        }
        let left = if how == "forgotten" { 0 } else { 1 };
        assert_eq!(t.strikes_of(1), left, "{how}");
        // So the next target others reach after it does not escalate.
        fail(&mut t, "c.example:443", 1, now);
        let r = t.reached("c.example:443", 2, now);
        assert!(r.escalated.is_empty(), "{how}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_down_target_admits_exactly_one_trial_at_its_deadline() {
    let mut t = targets();
    let now = Instant::now();
    down(&mut t, now);
    let due = now + Duration::from_secs(2);
    assert_eq!(
        t.gate(T, due - Duration::from_millis(1)),
        Standing::Down {
            retry_after: Duration::from_millis(1),
            trial_out: false
        }
    );
    assert_eq!(t.claim_trial(T, due - Duration::from_millis(1)), None);
    assert_eq!(t.gate(T, due), Standing::Trial);
    let wins: Vec<u32> = (0..100).filter_map(|_| t.claim_trial(T, due)).collect();
    assert_eq!(wins.len(), 1, "a 100-way stampede gets one trial");
    let gen = wins[0];
    // While it is out, the answer says so and when it is handed back at the latest.
    assert_eq!(
        t.gate(T, due),
        Standing::Down {
            retry_after: HOLD,
            trial_out: true
        }
    );
    assert_eq!(t.down_for(T, due), Some(HOLD));
    // The trial fails the same way: the target's cooldown grows (2 s, then 4 s).
    let j = trial_fails(&mut t, 3, Class::Unreachable, gen, due);
    assert_eq!(blame(&j), (Blame::Target, None));
    assert_eq!(j.down_for, Some(Duration::from_secs(4)));
    assert_eq!(
        t.gate(T, due),
        Standing::Down {
            retry_after: Duration::from_secs(4),
            trial_out: false
        }
    );
    let list = t.down_list(due, 10);
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].target.as_str(), list[0].streak), (T, 2));
    assert_eq!(list[0].down_for, Duration::from_secs(2));
    // The next trial gets through: the target is up, the gate open.
    let due = due + Duration::from_secs(4);
    assert!(t.claim_trial(T, due).is_some());
    let r = t.reached(T, 3, due);
    assert_eq!(r.up, Some(Duration::from_secs(6)), "down for 6 s");
    assert_eq!(t.down_count(), 0);
    assert_eq!(t.gate(T, due), Standing::Open);
    assert!(t.down_list(due, 10).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_trial_that_fails_for_the_endpoints_own_reason_is_given_back() {
    let mut t = targets();
    let now = Instant::now();
    down(&mut t, now);
    let due = now + Duration::from_secs(2);
    let gen = t.claim_trial(T, due).unwrap();
    let j = trial_fails(&mut t, 3, Class::Proxy, gen, due);
    assert_eq!(blame(&j), (Blame::Endpoint, None));
    assert_eq!(t.gate(T, due), Standing::Trial, "the next use is the trial");
    // And a trial given back without any outcome, likewise.
    let gen = t.claim_trial(T, due).unwrap();
    assert!(t.abandon_trial(T, gen, due));
    assert_eq!(t.gate(T, due), Standing::Trial);
}

/// State x event for a trial that is out: its own use decides it; a use whose claim is
/// not the current one (handed back at the hold, claimed again since) decides nothing.
#[tokio::test(start_paused = true)]
async fn only_the_current_claim_decides_a_trial_and_a_held_one_lapses() {
    let now = Instant::now();
    let due = now + Duration::from_secs(2);
    let mut t = targets();
    down(&mut t, now);
    let first = t.claim_trial(T, due).unwrap();
    assert!(t.lapse(due + HOLD - Duration::from_millis(1)).is_empty());
    assert_eq!(t.next_lapse(), Some(due + HOLD));
    // The hold passes with no answer: handed back, whatever the lease's ttl.
    let at = due + HOLD;
    assert_eq!(t.lapse(at), vec![Box::<str>::from(T)]);
    assert_eq!(t.gate(T, at), Standing::Trial);
    let second = t.claim_trial(T, at).unwrap();
    assert_ne!(first, second);
    // The first use's late release, failure or own-reason failure: not the trial now.
    assert!(!t.abandon_trial(T, first, at));
    let j = trial_fails(&mut t, 3, Class::Unreachable, first, at);
    assert_eq!((blame(&j), j.down_for), ((Blame::Target, None), None));
    trial_fails(&mut t, 3, Class::Proxy, first, at);
    assert!(matches!(
        t.gate(T, at),
        Standing::Down {
            trial_out: true,
            ..
        }
    ));
    // The stale hold item of the first claim hands back nothing later.
    assert!(t.lapse(at + Duration::from_millis(1)).is_empty());
    // The second one's answer decides.
    let j = trial_fails(&mut t, 4, Class::Unreachable, second, at);
    assert_eq!(j.down_for, Some(Duration::from_secs(4)));
    assert!(
        t.lapse(at + HOLD).is_empty(),
        "decided: nothing to hand back"
    );
}

#[tokio::test(start_paused = true)]
async fn any_success_brings_a_down_target_up() {
    let mut t = targets();
    let now = Instant::now();
    down(&mut t, now);
    // A tunnel that opened just before the target went down reports late.
    assert_eq!(t.reached(T, 4, now).up, Some(Duration::ZERO));
    assert_eq!(t.gate(T, now), Standing::Open);
}

#[tokio::test(start_paused = true)]
async fn clearing_forgets_a_target_down_or_not() {
    let mut t = targets();
    let now = Instant::now();
    assert_eq!(t.clear(T, now), None, "never seen");
    down(&mut t, now);
    let later = now + Duration::from_secs(3);
    let gen = t.claim_trial(T, later).unwrap();
    assert_eq!(
        t.clear(T, later),
        Some(Cleared {
            was_down: Some(Duration::from_secs(3))
        })
    );
    assert_eq!((t.down_count(), t.gate(T, later)), (0, Standing::Open));
    // The cleared trial's use decides nothing.
    assert!(!t.abandon_trial(T, gen, later));
    assert!(t.lapse(later + HOLD).is_empty());
    fail(&mut t, T, 1, later);
    assert_eq!(t.clear(T, later), Some(Cleared { was_down: None }));
    assert!(!t.prefers_other(T, 1, later), "pending failures forgotten");
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
    assert_eq!(t.gate("a.invalid:80", now), Standing::Open);
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
            let j = t.failed(T, use_of(e, class, &f), now, 0.0);
            assert!(!j.verdict.target_goes_down, "{class:?}");
            assert_ne!(j.verdict.blame, Blame::Pending);
        }
    }
    assert_eq!(t.down_count(), 0);
    assert!(!t.prefers_other(T, 1, now));
}

/// A certificate that failed through `e` and verified through another endpoint afterwards
/// is confirmed as the endpoint's own (cooled endpoint-wide by the caller): it is never a
/// strike towards escalation, however many sites it happens on.
#[tokio::test(start_paused = true)]
async fn a_confirmed_certificate_failure_is_endpoint_wide_and_never_a_strike() {
    let mut t = targets();
    let now = Instant::now();
    let f = Failure {
        substituted: true,
        ..Failure::new(Reason::TlsFailed, Some(Phase::DestinationTls))
    };
    for (i, x) in ["a.example:443", "b.example:443", "c.example:443"]
        .into_iter()
        .enumerate()
    {
        let j = t.failed(x, use_of(1, Class::Certificate, &f), now, 0.0);
        assert_eq!(blame(&j), (Blame::Pending, None));
        assert_eq!(t.avoid(x, now), vec![1], "passed over while pending");
        let r = t.reached(x, 2, now);
        assert_eq!(r.confirmed.len(), 1);
        let p = &r.confirmed[0];
        assert!(p.endpoint_wide(), "{p:?}");
        assert_eq!(p.class, Class::Certificate);
        assert!(p.failure(2).detail.unwrap().contains("tampers with TLS"));
        assert!(r.escalated.is_empty(), "site {i}: no strike");
    }
    assert_eq!(t.strikes_of(1), 0);
    // An unreachable failure confirmed the same way is the pair's and strikes.
    let u = unreachable();
    t.failed("d.example:443", use_of(1, Class::Unreachable, &u), now, 0.0);
    let r = t.reached("d.example:443", 2, now);
    assert!(!r.confirmed[0].endpoint_wide());
    assert_eq!(t.strikes_of(1), 1);
}

/// A certificate failure is confirmed only by a reach that verified the origin's
/// certificate: a tunnel's open (or a TLS handshake that broke) leaves it pending. And one
/// from a trusted chain (expired, another name: a CDN region, say) is its pair's.
#[tokio::test(start_paused = true)]
async fn only_a_verified_reach_confirms_a_certificate_and_a_trusted_chain_is_the_pairs() {
    let mut t = targets();
    let now = Instant::now();
    let expired = Failure::new(Reason::TlsFailed, Some(Phase::DestinationTls));
    t.failed(T, use_of(1, Class::Certificate, &expired), now, 0.0);
    let r = t.reached_as(T, 2, now, false);
    assert!(r.confirmed.is_empty(), "a tunnel verified nothing");
    assert_eq!(t.avoid(T, now), vec![1], "still pending");
    let r = t.reached_as(T, 3, now, true);
    assert_eq!(r.confirmed.len(), 1);
    assert!(!r.confirmed[0].endpoint_wide(), "a trusted chain: the pair");
    assert!(!r.confirmed[0]
        .failure(3)
        .detail
        .unwrap()
        .contains("tampers"));
    // The unreachable class takes any reach, a tunnel's too.
    let u = unreachable();
    t.failed("e.example:443", use_of(1, Class::Unreachable, &u), now, 0.0);
    assert_eq!(
        t.reached_as("e.example:443", 2, now, false).confirmed.len(),
        1
    );
}
