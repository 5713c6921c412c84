//! The health state machine. Pure logic: no I/O, no clock reads. The cooldown policy it
//! applies is in `policy`.
//!
//! The caller passes `now` and a jitter sample in, so every transition is reproducible
//! and testable with tables of state × event.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

pub mod cell;
mod policy;

pub use policy::{Cooldown, Policy, PolicyError, ReasonPolicy};

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The name used in storage, config and the protocol.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($s => Ok($name::$variant),)+
                    _ => Err(UnknownName {
                        kind: stringify!($name),
                        value: s.to_string(),
                        expected: [$($s),+].join(", "),
                    }),
                }
            }
        }
    };
}

// After the macro: the blame names are a closed set like the others.
pub mod blame;

/// A name that is not one of the known values of a closed set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}; expected one of: {expected}")]
pub struct UnknownName {
    /// Which set (State, Reason, Phase).
    pub kind: &'static str,
    /// The rejected text.
    pub value: String,
    /// The accepted names.
    pub expected: String,
}

string_enum! {
    /// Persisted health state of an endpoint.
    State {
        /// Usable for ordinary work.
        Available => "available",
        /// Withheld until a deadline.
        Cooling => "cooling",
        /// Deadline passed; one controlled attempt decides recovery.
        ProbeAllowed => "probe_allowed",
        /// Out of service until an operator (or its source) brings it back.
        Disabled => "disabled",
    }
}

string_enum! {
    /// Why an endpoint failed or was taken out of service.
    Reason {
        /// TCP connection to the proxy refused.
        ConnectRefused => "connect_refused",
        /// TCP connection to the proxy timed out.
        ConnectTimeout => "connect_timeout",
        /// The proxy (or destination, client-side) name did not resolve.
        DnsFailed => "dns_failed",
        /// TLS handshake failed (proxy or destination).
        TlsFailed => "tls_failed",
        /// The proxy rejected our credentials (407, 401, SOCKS auth failure).
        ProxyAuthRejected => "proxy_auth_rejected",
        /// The proxy spoke something we could not understand.
        ProxyProtocolError => "proxy_protocol_error",
        /// The proxy refused the tunnel.
        ProxyRejected => "proxy_rejected",
        /// The proxy could not reach the destination.
        UpstreamUnreachable => "upstream_unreachable",
        /// The destination answered with an unexpected status.
        DestinationStatus => "destination_status",
        /// The body did not contain what was expected.
        BodyMismatch => "body_mismatch",
        /// A deadline passed after the TCP connection was up.
        SlowResponse => "slow_response",
        /// The connection was reset or closed early.
        ConnectionReset => "connection_reset",
        /// An operator disabled it.
        Operator => "operator",
        /// The source that added it no longer lists it.
        SourceRemoved => "source_removed",
    }
}

string_enum! {
    /// Where in the transaction a failure happened.
    Phase {
        /// TCP to the proxy.
        Connect => "connect",
        /// TLS to an https proxy.
        ProxyTls => "proxy_tls",
        /// SOCKS greeting/auth or CONNECT request/response.
        ProxyHandshake => "proxy_handshake",
        /// TLS to the destination.
        DestinationTls => "destination_tls",
        /// Sending the request.
        Request => "request",
        /// Status line and headers.
        ResponseHead => "response_head",
        /// The body.
        ResponseBody => "response_body",
    }
}

/// A failed attempt, as reported by a probe or a scraper.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Failure {
    /// Why it failed; decides the policy.
    pub reason: Option<Reason>,
    /// Where it failed.
    pub phase: Option<Phase>,
    /// HTTP status, when one was seen.
    pub status: Option<u16>,
    /// `Retry-After` the destination sent, honoured on 429/503.
    pub retry_after: Option<Duration>,
    /// Free text for operators (never contains a password).
    pub detail: Option<String>,
    /// At `destination_tls`: the certificate, as this process verified it, chains to no
    /// trusted root (an unknown issuer, a bad signature). Once other endpoints verify the
    /// same origin, that is someone else's certificate: the endpoint tampers with TLS.
    /// Never set by a client's report (a client's TLS error says less than that).
    pub substituted: bool,
}

impl Failure {
    /// A failure with a reason and phase.
    pub fn new(reason: Reason, phase: Option<Phase>) -> Self {
        Failure {
            reason: Some(reason),
            phase,
            ..Default::default()
        }
    }
}

/// The in-memory health of one endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// Persisted state.
    pub state: State,
    /// In memory only: the single recovery attempt is in flight.
    pub claimed: bool,
    /// Consecutive failures (any reason).
    pub streak: u32,
    /// Consecutive failures with the current `reason`.
    pub reason_streak: u32,
    /// In memory only: failures while available that did not reach `fall` yet. Not
    /// persisted, like a claim: they changed no state, and forgetting them on a restart
    /// errs towards keeping a proxy in service.
    pub fails: u32,
    /// Last failure / disable reason.
    pub reason: Option<Reason>,
    /// Last failure phase.
    pub phase: Option<Phase>,
    /// Last failure detail.
    pub detail: Option<String>,
    /// Length of the current (or last) cooldown.
    pub cooldown: Option<Duration>,
    /// When the current cooldown ends.
    pub deadline: Option<Instant>,
}

impl Health {
    /// A fresh endpoint in `state`.
    pub fn new(state: State) -> Self {
        Health {
            state,
            claimed: false,
            streak: 0,
            reason_streak: 0,
            fails: 0,
            reason: None,
            phase: None,
            detail: None,
            cooldown: None,
            deadline: None,
        }
    }

    /// True when the endpoint was disabled by an operator (sticky).
    pub fn operator_disabled(&self) -> bool {
        self.state == State::Disabled && self.reason == Some(Reason::Operator)
    }

    /// What is left of the cooldown at `now`, as stored: only a cooling health has one,
    /// and a deadline already past leaves zero. The store turns it into a deadline by its
    /// own clock.
    pub fn cooldown_left(&self, now: Instant) -> Option<Duration> {
        match (self.state, self.deadline) {
            (State::Cooling, Some(d)) => Some(d.saturating_duration_since(now)),
            _ => None,
        }
    }

    /// The cooldown of a stored health, back on the monotonic clock: its length from
    /// `cooldown_ms`, and a cooling one ends `left` after `now` (what the store read:
    /// `clamp(cooldown_until − its now, 0, cooldown_ms)`; none reads as due now).
    pub fn restore_cooldown(
        &mut self,
        cooldown_ms: Option<u64>,
        left: Option<Duration>,
        now: Instant,
    ) {
        self.cooldown = cooldown_ms.map(Duration::from_millis);
        if self.state == State::Cooling {
            let len = self.cooldown.unwrap_or(Duration::ZERO);
            self.deadline = Some(now + left.unwrap_or(Duration::ZERO).min(len));
        }
    }
}

/// Something that happens to an endpoint.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// An attempt failed. `trial` says whether it was the single recovery attempt.
    Failure {
        /// The failure.
        failure: Failure,
        /// It was the claimed recovery attempt.
        trial: bool,
    },
    /// An attempt succeeded.
    Success {
        /// It was the claimed recovery attempt.
        trial: bool,
    },
    /// An operator's probe passed: whatever the cooldown, the endpoint is usable.
    OperatorProbeSuccess,
    /// The monotonic clock reached the cooldown deadline.
    DeadlinePassed,
    /// Someone wants the single recovery attempt.
    Claim,
    /// The claimed attempt ended without an outcome.
    Abandon,
    /// Operator disable.
    Disable {
        /// Operator's text.
        detail: Option<String>,
    },
    /// Operator enable; `now` skips the recovery probe.
    Enable {
        /// Straight to `available`.
        now: bool,
    },
    /// The endpoint's source stopped listing it.
    SourceRemoved,
    /// The endpoint's source lists it again.
    SourceReturned,
}

/// What an input did to the health.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The persisted state changed (write it and a `state_changed` event).
    Changed {
        /// State before.
        from: State,
        /// State after.
        to: State,
    },
    /// A result that does not change the persisted state but should be recorded
    /// (`report`/`probe_*` event): success while available, or a late result.
    Recorded {
        /// It arrived for an endpoint that was not in a position to take it.
        late: bool,
    },
    /// The single attempt was granted.
    Claimed,
    /// The single attempt was handed back.
    Abandoned,
    /// The input does not apply in this state; nothing changed.
    Refused,
}

impl Health {
    /// Apply an input. `now` is the monotonic time, `jitter_sample` in [-1, 1]. One method
    /// per input below; each says what it does in every state.
    pub fn apply(
        &mut self,
        input: Input,
        policy: &Policy,
        now: Instant,
        jitter_sample: f64,
    ) -> Step {
        match input {
            Input::Failure { failure, trial } => {
                self.on_failure(failure, trial, policy, now, jitter_sample)
            }
            Input::Success { trial } => self.on_success(trial),
            Input::OperatorProbeSuccess => self.on_operator_probe_success(),
            Input::DeadlinePassed => self.on_deadline(now),
            Input::Claim => self.on_claim(),
            Input::Abandon => self.on_abandon(),
            Input::Disable { detail } => self.on_disable(detail),
            Input::Enable { now: immediate } => self.on_enable(immediate),
            Input::SourceRemoved => self.on_source_removed(),
            Input::SourceReturned => self.on_source_returned(),
        }
    }

    fn changed(&self, from: State) -> Step {
        Step::Changed {
            from,
            to: self.state,
        }
    }

    fn on_failure(
        &mut self,
        failure: Failure,
        trial: bool,
        policy: &Policy,
        now: Instant,
        jitter: f64,
    ) -> Step {
        match (self.state, self.claimed, trial) {
            (State::Available, _, false) => {
                // `fall`: the failures before the N-th are recorded, nothing more.
                self.fails = self.fails.saturating_add(1);
                if self.fails < policy.fall_for(failure.reason) {
                    return Step::Recorded { late: false };
                }
                self.fail(failure, policy, now, jitter)
            }
            (State::ProbeAllowed, true, true) => {
                self.claimed = false;
                self.fail(failure, policy, now, jitter)
            }
            _ => Step::Recorded { late: true },
        }
    }

    fn on_success(&mut self, trial: bool) -> Step {
        match (self.state, self.claimed, trial) {
            (State::Available, _, false) => {
                self.streak = 0;
                self.reason_streak = 0;
                self.fails = 0;
                Step::Recorded { late: false }
            }
            (State::ProbeAllowed, true, true) => {
                let from = self.state;
                self.claimed = false;
                self.recover();
                self.changed(from)
            }
            _ => Step::Recorded { late: true },
        }
    }

    fn on_operator_probe_success(&mut self) -> Step {
        match self.state {
            State::Cooling | State::ProbeAllowed => {
                let from = self.state;
                self.claimed = false;
                self.recover();
                self.changed(from)
            }
            State::Available => {
                self.streak = 0;
                self.reason_streak = 0;
                Step::Recorded { late: false }
            }
            // Only `enable` brings a disabled endpoint back.
            State::Disabled => Step::Recorded { late: true },
        }
    }

    fn on_deadline(&mut self, now: Instant) -> Step {
        if self.state != State::Cooling || self.deadline.is_some_and(|d| d > now) {
            return Step::Refused;
        }
        self.state = State::ProbeAllowed;
        self.claimed = false;
        self.deadline = None;
        self.changed(State::Cooling)
    }

    fn on_claim(&mut self) -> Step {
        if self.state == State::ProbeAllowed && !self.claimed {
            self.claimed = true;
            Step::Claimed
        } else {
            Step::Refused
        }
    }

    fn on_abandon(&mut self) -> Step {
        if self.state == State::ProbeAllowed && self.claimed {
            self.claimed = false;
            Step::Abandoned
        } else {
            Step::Refused
        }
    }

    fn on_disable(&mut self, detail: Option<String>) -> Step {
        if self.operator_disabled() {
            return Step::Refused;
        }
        let from = self.state;
        self.take_out(Reason::Operator, detail);
        self.changed(from)
    }

    fn on_enable(&mut self, immediate: bool) -> Step {
        let from = self.state;
        match (self.state, immediate) {
            (State::Available, _) | (State::ProbeAllowed, false) => return Step::Refused,
            (_, true) => {
                self.claimed = false;
                self.recover();
            }
            (_, false) => {
                self.state = State::ProbeAllowed;
                self.claimed = false;
                self.deadline = None;
                self.reason = None;
                self.phase = None;
                self.detail = None;
            }
        }
        self.changed(from)
    }

    fn on_source_removed(&mut self) -> Step {
        if self.state == State::Disabled {
            return Step::Refused;
        }
        let from = self.state;
        self.take_out(Reason::SourceRemoved, None);
        self.changed(from)
    }

    fn on_source_returned(&mut self) -> Step {
        if self.state != State::Disabled || self.reason != Some(Reason::SourceRemoved) {
            return Step::Refused;
        }
        self.state = State::ProbeAllowed;
        self.reason = None;
        self.detail = None;
        self.changed(State::Disabled)
    }

    /// Out of service for `reason` (an operator's disable, or its source dropping it).
    fn take_out(&mut self, reason: Reason, detail: Option<String>) {
        self.state = State::Disabled;
        self.claimed = false;
        self.fails = 0;
        self.deadline = None;
        self.reason = Some(reason);
        self.phase = None;
        self.detail = detail;
    }

    fn recover(&mut self) {
        self.state = State::Available;
        self.streak = 0;
        self.reason_streak = 0;
        self.fails = 0;
        self.reason = None;
        self.phase = None;
        self.detail = None;
        self.cooldown = None;
        self.deadline = None;
    }

    fn fail(&mut self, failure: Failure, policy: &Policy, now: Instant, jitter: f64) -> Step {
        let from = self.state;
        self.fails = 0;
        self.streak = self.streak.saturating_add(1);
        self.reason_streak = if self.reason == failure.reason && self.reason_streak > 0 {
            self.reason_streak.saturating_add(1)
        } else {
            1
        };
        self.reason = failure.reason;
        self.phase = failure.phase;
        self.detail = failure.detail.clone();
        if let Some(n) = policy.disable_after(failure.reason) {
            if self.reason_streak >= n {
                self.state = State::Disabled;
                self.deadline = None;
                self.cooldown = None;
                return Step::Changed {
                    from,
                    to: State::Disabled,
                };
            }
        }
        let d = policy.cooldown(&failure, self.streak, jitter);
        self.state = State::Cooling;
        self.cooldown = Some(d);
        self.deadline = Some(now + d);
        Step::Changed {
            from,
            to: State::Cooling,
        }
    }
}

/// The monotonic deadline to restore after a restart:
/// `clamp(cooldown_until − now_wall, 0, cooldown_ms)`.
pub fn restored_remaining(
    cooldown_until: std::time::SystemTime,
    now_wall: std::time::SystemTime,
    cooldown: Duration,
) -> Duration {
    cooldown_until
        .duration_since(now_wall)
        .unwrap_or(Duration::ZERO)
        .min(cooldown)
}

#[cfg(test)]
mod fall_tests;
#[cfg(test)]
mod tests;
