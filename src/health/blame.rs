//! Whom a failure counts against: the endpoint, one of its pairs, the target, or nobody
//! yet. Pure logic; docs/blame.md has the table and worked examples.
//!
//! A failure is evidence against what caused it. A name that does not resolve, a closed
//! port or a site that is down fail through every proxy, so a failure of the
//! "unreachable" class is judged by contrast with what the pool's other endpoints see:
//! it waits (pending) until another endpoint reaches the target AFTER it, which shows
//! that this endpoint cannot reach what others can (its pair cools); if several fail and
//! none succeeds, the target is down and no endpoint is blamed at all. A success from
//! before the failure is no contrast: the target may have gone away since.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Cooldown, Phase, Policy, Reason, UnknownName};

/// A pool's rules for judging targets (`[[pool]]` keys, docs/blame.md "Settings").
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    /// How long a success (or a failure) through one endpoint counts as evidence about
    /// its target for the others.
    pub contrast_window: Duration,
    /// Distinct endpoints failing a target, with no success, that make it down.
    pub down_after: u32,
    /// Distinct targets others reach that an endpoint fails, with no success of its own,
    /// before it cools endpoint-wide (0: never).
    pub escalate_after: u32,
    /// How long after a tunnel closed a report can still decide the ban trial it carried.
    pub verdict_window: Duration,
    /// The cooldown of a target that is down (`[pool.cooldown.target]`).
    pub target: Policy,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            contrast_window: Duration::from_secs(60),
            down_after: 2,
            escalate_after: 3,
            verdict_window: Duration::from_secs(10),
            target: target_policy(default_target_cooldown()),
        }
    }
}

/// Most distinct endpoints `down_after` may ask for (the pending list is that long).
pub const MAX_DOWN_AFTER: u32 = 64;

/// The default cooldown of a target that is down: 2 s, doubling, at most 60 s.
pub fn default_target_cooldown() -> Cooldown {
    Cooldown {
        base: Duration::from_secs(2),
        factor: 2.0,
        max: Duration::from_secs(60),
        jitter: 0.1,
    }
}

/// A target's policy from its cooldown: every failed trial extends it, nothing disables.
pub fn target_policy(cooldown: Cooldown) -> Policy {
    Policy {
        cooldown,
        reasons: Default::default(),
        fall: 1,
    }
}

/// What kind of evidence a failure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// The proxy itself failed (TCP or TLS to it, its greeting, its credentials, its
    /// protocol): the endpoint, for every destination.
    Proxy,
    /// The proxy refused this target by its own policy (CONNECT 403, SOCKS5 0x02): the
    /// pair (endpoint, target).
    Refused,
    /// The proxy could not reach the target (CONNECT 5xx, SOCKS5 host unreachable or
    /// connection refused, the name does not resolve, no answer to the connect request):
    /// judged by contrast with the other endpoints.
    Unreachable,
    /// The destination was reached and refused the use (`destination_status`,
    /// `body_mismatch`): a ban, on the pair (endpoint, host).
    Ban,
    /// The destination was reached and the exchange broke afterwards (its TLS, the
    /// request, the response): the pair (endpoint, host).
    Destination,
}

string_enum! {
    /// Whom a failure counted against; every failure event carries it.
    Blame {
        /// The endpoint, for every destination.
        Endpoint => "endpoint",
        /// One (endpoint, host) or (endpoint, target) pair.
        Pair => "pair",
        /// The target is down: nobody's health changes.
        Target => "target",
        /// Not known yet: nothing cools until the pool's other endpoints have been tried.
        Pending => "pending",
    }
}

/// Which pair a pair-blamed failure cools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairKey {
    /// (endpoint, host): bans and what broke after the destination was reached.
    Host,
    /// (endpoint, `host:port`): reachability and the proxy's policy for that target.
    Target,
}

/// The class of a failure with `reason` at `phase`.
///
/// `has_destination`: the failure names where the use went (a report without one speaks
/// for the endpoint: there is nothing to contrast). `probe`: it came from a probe, whose
/// URL is the pool's own requirement, so everything but the unreachable class counts
/// against the endpoint.
pub fn classify(reason: Reason, phase: Option<Phase>, has_destination: bool, probe: bool) -> Class {
    if !has_destination {
        return Class::Proxy;
    }
    let class = by_reason_and_phase(reason, phase);
    match class {
        Class::Unreachable => Class::Unreachable,
        _ if probe => Class::Proxy,
        c => c,
    }
}

/// Whether a ban-class failure is the destination asking to slow down rather than a
/// ban: `destination_status` with status 429, or 503 with a Retry-After. In a pool whose
/// `[pool.pace] slow_down` is on, it widens the (endpoint, host) pair's pacing instead of
/// cooling the pair (docs/blame.md, "Slow down, not banned"); elsewhere it is a ban like
/// any other.
pub fn slows_down(reason: Reason, status: Option<u16>, retry_after: Option<Duration>) -> bool {
    reason == Reason::DestinationStatus
        && match status {
            Some(429) => true,
            Some(503) => retry_after.is_some(),
            _ => false,
        }
}

fn by_reason_and_phase(reason: Reason, phase: Option<Phase>) -> Class {
    use Phase::*;
    let before_greeting = matches!(phase, Some(Connect | ProxyTls));
    let after_destination = matches!(
        phase,
        Some(DestinationTls | Request | ResponseHead | ResponseBody)
    );
    match reason {
        // Credentials and acts on the endpoint itself are never about one site.
        Reason::ProxyAuthRejected | Reason::Operator | Reason::SourceRemoved => Class::Proxy,
        // TCP or TLS to the proxy never got as far as asking it for the target.
        _ if before_greeting => Class::Proxy,
        // The proxy's own word that it could not get there, whatever the phase.
        Reason::UpstreamUnreachable => Class::Unreachable,
        // Only a name the proxy was asked to resolve for the target (or that this
        // process resolved for a SOCKS variant without remote DNS) is about the target.
        Reason::DnsFailed if phase == Some(ProxyHandshake) => Class::Unreachable,
        Reason::ProxyRejected if !after_destination => Class::Refused,
        Reason::DestinationStatus | Reason::BodyMismatch
            if !matches!(phase, Some(ProxyHandshake)) =>
        {
            Class::Ban
        }
        _ if after_destination => Class::Destination,
        // Without a phase, nothing says the destination is to blame: the proxy is.
        _ => Class::Proxy,
    }
}

/// What the pool knows about the target when an unreachable-class failure arrives.
///
/// There is no "others reached it" here: a success from before the failure cannot tell
/// "this endpoint cannot reach the target" from "the target went away since". Contrast
/// comes later, from a success through another endpoint after the failure, which
/// confirms the pending failure (docs/blame.md, "Contrast").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evidence {
    /// The target is down already (cooling, or its single trial is out).
    pub target_down: bool,
    /// The use was the trial of this endpoint's own pair for the target: the pair cooled
    /// because another endpoint reached the target after this one failed it.
    pub pair_trial: bool,
    /// The pool has no other endpoint to contrast with.
    pub alone: bool,
    /// Distinct endpoints, this one included, that failed the target with the
    /// unreachable class within `contrast_window` while nobody reached it.
    pub failing: u32,
    /// How many distinct endpoints must fail it so for the target to be down.
    pub down_after: u32,
}

/// The decision on one failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whom it counts against.
    pub blame: Blame,
    /// For `Blame::Pair`: which pair.
    pub pair: Option<PairKey>,
    /// This failure makes the target down.
    pub target_goes_down: bool,
}

impl Verdict {
    fn on(blame: Blame, pair: Option<PairKey>) -> Verdict {
        Verdict {
            blame,
            pair,
            target_goes_down: false,
        }
    }
}

/// Decide whom a failure of `class` counts against. `probe`: a probe's confirmed failure
/// counts against the endpoint (the probe URL is the pool's requirement), not a pair.
/// Nothing is counted towards escalation here: only a later success through another
/// endpoint does that (`pool::targets`).
pub fn judge(class: Class, probe: bool, ev: Evidence) -> Verdict {
    match class {
        Class::Proxy => Verdict::on(Blame::Endpoint, None),
        // The proxy's own word that it will not go there: its pair, at once.
        Class::Refused => Verdict::on(Blame::Pair, Some(PairKey::Target)),
        Class::Ban | Class::Destination => Verdict::on(Blame::Pair, Some(PairKey::Host)),
        Class::Unreachable => {
            let confirmed = if probe {
                Verdict::on(Blame::Endpoint, None)
            } else {
                Verdict::on(Blame::Pair, Some(PairKey::Target))
            };
            if ev.target_down {
                Verdict::on(Blame::Target, None)
            } else if ev.alone || ev.pair_trial {
                // Nothing to contrast with; or the pair's trial failed as the pair did.
                confirmed
            } else if ev.failing >= ev.down_after.max(1) {
                Verdict {
                    target_goes_down: true,
                    ..Verdict::on(Blame::Target, None)
                }
            } else {
                Verdict::on(Blame::Pending, None)
            }
        }
    }
}

/// Whether an endpoint that failed on `distinct_targets` targets others reached, with no
/// success of its own in between, reaches nothing and cools endpoint-wide.
pub fn escalates(distinct_targets: usize, escalate_after: u32) -> bool {
    escalate_after > 0 && distinct_targets >= escalate_after as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Class of a failure reported WITH a destination, not by a probe: one row per
    /// reason, one letter per phase in the order `-` (no phase), connect, proxy_tls,
    /// proxy_handshake, destination_tls, request, response_head, response_body.
    /// `P` proxy, `R` refused, `U` unreachable, `B` ban, `D` destination.
    const TABLE: &[(&str, &str)] = &[
        ("connect_refused", "PPPPDDDD"),
        ("connect_timeout", "PPPPDDDD"),
        ("dns_failed", "PPPUDDDD"),
        ("tls_failed", "PPPPDDDD"),
        ("proxy_auth_rejected", "PPPPPPPP"),
        ("proxy_protocol_error", "PPPPDDDD"),
        ("proxy_rejected", "RPPRDDDD"),
        ("upstream_unreachable", "UPPUUUUU"),
        ("destination_status", "BPPPBBBB"),
        ("body_mismatch", "BPPPBBBB"),
        ("slow_response", "PPPPDDDD"),
        ("connection_reset", "PPPPDDDD"),
        ("operator", "PPPPPPPP"),
        ("source_removed", "PPPPPPPP"),
    ];

    fn phases() -> Vec<Option<Phase>> {
        std::iter::once(None)
            .chain(Phase::ALL.iter().copied().map(Some))
            .collect()
    }

    fn letter(c: Class) -> char {
        match c {
            Class::Proxy => 'P',
            Class::Refused => 'R',
            Class::Unreachable => 'U',
            Class::Ban => 'B',
            Class::Destination => 'D',
        }
    }

    #[test]
    fn which_answers_ask_to_slow_down() {
        let ra = Some(Duration::from_secs(30));
        let cases = [
            (Reason::DestinationStatus, Some(429), None, true),
            (Reason::DestinationStatus, Some(429), ra, true),
            (Reason::DestinationStatus, Some(503), ra, true),
            // A 503 without Retry-After says nothing about pace.
            (Reason::DestinationStatus, Some(503), None, false),
            (Reason::DestinationStatus, Some(403), ra, false),
            (Reason::DestinationStatus, None, ra, false),
            (Reason::BodyMismatch, Some(429), ra, false),
            (Reason::ProxyRejected, Some(429), ra, false),
        ];
        for (reason, status, retry_after, want) in cases {
            assert_eq!(
                slows_down(reason, status, retry_after),
                want,
                "{reason} {status:?} {retry_after:?}"
            );
        }
    }

    #[test]
    fn the_table_has_one_row_per_reason_and_a_column_per_phase() {
        let names: Vec<&str> = TABLE.iter().map(|(r, _)| *r).collect();
        let all: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, all, "one row per reason, in declaration order");
        assert_eq!(
            Phase::ALL.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            [
                "connect",
                "proxy_tls",
                "proxy_handshake",
                "destination_tls",
                "request",
                "response_head",
                "response_body"
            ],
            "the letter columns follow this order"
        );
        assert!(TABLE.iter().all(|(_, l)| l.len() == phases().len()));
    }

    #[test]
    fn every_reason_phase_destination_and_probe() {
        let mut checked = 0;
        for (name, letters) in TABLE {
            let reason: Reason = name.parse().unwrap();
            for (phase, want) in phases().into_iter().zip(letters.chars()) {
                for (has_dest, probe) in
                    [(true, false), (true, true), (false, false), (false, true)]
                {
                    let got = letter(classify(reason, phase, has_dest, probe));
                    // Without a destination there is nothing to contrast: the endpoint.
                    // A probe's failures are the endpoint's, but for the unreachable
                    // class, which is judged on the probe target by contrast.
                    let expected = match (has_dest, probe, want) {
                        (false, _, _) => 'P',
                        (true, true, 'U') => 'U',
                        (true, true, _) => 'P',
                        (true, false, w) => w,
                    };
                    assert_eq!(
                        got, expected,
                        "{name} at {phase:?}, destination {has_dest}, probe {probe}"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, Reason::ALL.len() * 8 * 4);
    }

    /// The rule for the unreachable class, state x event: each row is the evidence (down,
    /// pair trial, alone, failing) and the expected (blame, pair, goes down) for a report
    /// and for a probe.
    #[test]
    fn unreachable_failures_by_what_is_known() {
        let ev = |target_down, pair_trial, alone, failing| Evidence {
            target_down,
            pair_trial,
            alone,
            failing,
            down_after: 2,
        };
        use Blame::*;
        let t = Some(PairKey::Target);
        let rows = [
            // down already: the target's, whatever else is known
            (
                ev(true, true, false, 1),
                (Target, None, false),
                (Target, None, false),
            ),
            (
                ev(true, false, true, 5),
                (Target, None, false),
                (Target, None, false),
            ),
            // the first failure: nobody yet, however many others reached the target
            // before (that cannot tell a proxy that cannot from a site that went away)
            (
                ev(false, false, false, 1),
                (Pending, None, false),
                (Pending, None, false),
            ),
            // a pool of one has no contrast: as before, the pair (a probe: the endpoint)
            (
                ev(false, false, true, 1),
                (Pair, t, false),
                (Endpoint, None, false),
            ),
            // the trial of a pair that cooled by contrast fails again: the pair's
            (
                ev(false, true, false, 1),
                (Pair, t, false),
                (Endpoint, None, false),
            ),
            (
                ev(false, true, false, 3),
                (Pair, t, false),
                (Endpoint, None, false),
            ),
            // down_after distinct endpoints failed it and none reached it: target down
            (
                ev(false, false, false, 2),
                (Target, None, true),
                (Target, None, true),
            ),
            (
                ev(false, false, false, 7),
                (Target, None, true),
                (Target, None, true),
            ),
        ];
        for (e, report, probe) in rows {
            for (is_probe, want) in [(false, report), (true, probe)] {
                let v = judge(Class::Unreachable, is_probe, e);
                assert_eq!(
                    (v.blame, v.pair, v.target_goes_down),
                    want,
                    "{e:?}, probe {is_probe}"
                );
            }
        }
    }

    #[test]
    fn other_classes_ignore_the_targets_evidence() {
        let evidences = [
            Evidence::default(),
            Evidence {
                target_down: true,
                failing: 9,
                down_after: 2,
                ..Default::default()
            },
            Evidence {
                pair_trial: true,
                alone: true,
                ..Default::default()
            },
        ];
        for e in evidences {
            assert_eq!(judge(Class::Proxy, false, e).blame, Blame::Endpoint);
            assert_eq!(judge(Class::Ban, false, e).pair, Some(PairKey::Host));
            assert_eq!(
                judge(Class::Destination, false, e).pair,
                Some(PairKey::Host)
            );
            let r = judge(Class::Refused, false, e);
            assert_eq!((r.blame, r.pair), (Blame::Pair, Some(PairKey::Target)));
            assert!(!r.target_goes_down);
        }
    }

    #[test]
    fn down_after_of_one_makes_the_first_uncontrasted_failure_the_targets() {
        let e = Evidence {
            failing: 1,
            down_after: 1,
            ..Default::default()
        };
        let v = judge(Class::Unreachable, false, e);
        assert_eq!((v.blame, v.target_goes_down), (Blame::Target, true));
    }

    #[test]
    fn escalation_needs_escalate_after_distinct_targets() {
        assert!(!escalates(2, 3));
        assert!(escalates(3, 3));
        assert!(escalates(4, 3));
        assert!(!escalates(100, 0), "0 turns escalation off");
    }

    #[test]
    fn blame_names_round_trip() {
        let names: Vec<&str> = Blame::ALL.iter().map(|b| b.as_str()).collect();
        assert_eq!(names, ["endpoint", "pair", "target", "pending"]);
        for b in Blame::ALL {
            assert_eq!(b.as_str().parse::<Blame>(), Ok(*b));
        }
        assert!("proxy".parse::<Blame>().is_err());
    }
}
