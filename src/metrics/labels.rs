//! Label values and label sets. Every label is a closed enum or a configured pool name,
//! so the series count stays bounded.

use prometheus_client::encoding::EncodeLabelSet;

use crate::health::blame::Blame;
use crate::health::{Reason, State};

macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }
        impl $name {
            /// Every value, in declaration order (the order of the handle arrays).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }
        }
    };
}

label_enum! {
    /// `result` of `proxypool_leases_total`.
    LeaseResult {
        /// An ordinary lease.
        Granted => "granted",
        /// The single recovery attempt.
        Trial => "trial",
        /// Nothing to lease (after any `wait`).
        Exhausted => "exhausted",
        /// Every endpoint that fits was used for the destination too recently (pacing,
        /// after its `wait`).
        Paced => "paced",
        /// The pool has no endpoint (of the schemes asked for) at all: `pool_empty`.
        Empty => "empty",
    }
}

label_enum! {
    /// `protocol` of `proxypool_gateway_requests_total`.
    GatewayProtocol {
        /// HTTP `CONNECT`.
        HttpConnect => "http_connect",
        /// HTTP absolute-form request.
        HttpForward => "http_forward",
        /// SOCKS5 `CONNECT`.
        Socks5 => "socks5",
    }
}

label_enum! {
    /// `outcome` of `proxypool_gateway_requests_total`.
    GatewayOutcome {
        /// Served through an upstream.
        Ok => "ok",
        /// Every upstream tried failed (502 / SOCKS5 error).
        UpstreamFailed => "upstream_failed",
        /// The destination is down: answered at once, nothing dialed (502 / SOCKS5 0x04).
        DestinationDown => "destination_down",
        /// The pool had nothing to lease (503).
        Exhausted => "exhausted",
        /// Every endpoint that fits was used for the destination too recently (503,
        /// `X-Proxypool-Error: paced`).
        Paced => "paced",
        /// Out of local resources: the gateway's descriptor budget, or this machine's
        /// descriptors, memory or ports (503; nothing reported).
        LocalResources => "local_resources",
        /// Wrong or missing gateway token (407).
        Denied => "denied",
        /// Malformed request or unknown routing key.
        BadRequest => "bad_request",
        /// The gateway itself failed (store error, unusable stored URL): 500.
        Internal => "internal",
    }
}

label_enum! {
    /// `direction` of `proxypool_gateway_bytes_total`.
    Direction {
        /// Bytes from the client sent on to the upstream.
        ToUpstream => "to_upstream",
        /// Bytes from the upstream sent back to the client.
        ToClient => "to_client",
    }
}

pub(super) const OUTCOMES: [&str; 2] = ["success", "failure"];
pub(super) const NO_REASON: &str = "none";
pub(super) const N_STATES: usize = 4;
pub(super) const N_REASONS: usize = 14;
// Keeps the index arithmetic honest if a state or reason is added.
const _: () = assert!(State::ALL.len() == N_STATES && Reason::ALL.len() == N_REASONS);

pub(super) fn outcome(ok: bool) -> &'static str {
    OUTCOMES[usize::from(!ok)]
}

pub(super) fn state_idx(s: State) -> usize {
    s as usize
}

pub(super) fn reason_idx(r: Option<Reason>) -> usize {
    r.map_or(0, |r| r as usize + 1)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolLabels {
    pub(super) pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LeaseLabels {
    pub(super) pool: String,
    pub(super) result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReportLabels {
    pub(super) pool: String,
    pub(super) outcome: &'static str,
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct BlameLabels {
    pub(super) pool: String,
    pub(super) blame: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TransitionLabels {
    pub(super) pool: String,
    pub(super) from: &'static str,
    pub(super) to: &'static str,
    pub(super) reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) pool: String,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct GatewayLabels {
    pub(super) protocol: &'static str,
    pub(super) outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolDirectionLabels {
    pub(super) pool: String,
    pub(super) direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ConnectionLabels {
    pub(super) connection: &'static str,
}

pub(super) const N_BLAMES: usize = Blame::ALL.len();
