//! Which health a failure counts against (docs/destinations.md, "The scoping rule"): the
//! endpoint as a whole, or only the (endpoint, destination) pair. Pure logic.

use super::{Phase, Reason};

/// What a failure counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The endpoint, for every destination (docs/reference.md, "States").
    Endpoint,
    /// Only the (endpoint, destination) pair.
    Destination,
}

impl Scope {
    /// The name used in the protocol (`"scope": "destination"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Endpoint => "endpoint",
            Scope::Destination => "destination",
        }
    }
}

/// Decide the scope of a failure.
///
/// `has_destination`: the report named a destination. `probe`: the failure came from a
/// probe, whose URL is the pool's own requirement, so it always speaks for the endpoint.
pub fn scope(reason: Reason, phase: Option<Phase>, has_destination: bool, probe: bool) -> Scope {
    if probe || !has_destination {
        return Scope::Endpoint;
    }
    match reason {
        // Credentials and acts on the endpoint itself are never about one site.
        Reason::ProxyAuthRejected | Reason::Operator | Reason::SourceRemoved => {
            return Scope::Endpoint
        }
        // The proxy is fine; it could not reach this destination (even though it says so
        // during the handshake: SOCKS host unreachable, 502 to CONNECT).
        Reason::UpstreamUnreachable => return Scope::Destination,
        _ => {}
    }
    match phase {
        // Before the destination was reached: the proxy failed, whatever the reason says.
        Some(Phase::Connect | Phase::ProxyTls | Phase::ProxyHandshake) => Scope::Endpoint,
        Some(
            Phase::DestinationTls | Phase::Request | Phase::ResponseHead | Phase::ResponseBody,
        ) => Scope::Destination,
        None => match reason {
            Reason::DestinationStatus | Reason::BodyMismatch => Scope::Destination,
            // Without a phase nothing says the destination is to blame: the default of
            // §3 (endpoint-wide) stands.
            _ => Scope::Endpoint,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected scope of a failure reported WITH a destination, not by a probe: one row
    /// per reason, one letter per phase in the order
    /// `-` (no phase), connect, proxy_tls, proxy_handshake, destination_tls, request,
    /// response_head, response_body. `E` endpoint, `D` destination.
    const TABLE: &[(&str, &str)] = &[
        ("connect_refused", "EEEEDDDD"),
        ("connect_timeout", "EEEEDDDD"),
        ("dns_failed", "EEEEDDDD"),
        ("tls_failed", "EEEEDDDD"),
        ("proxy_auth_rejected", "EEEEEEEE"),
        ("proxy_protocol_error", "EEEEDDDD"),
        ("proxy_rejected", "EEEEDDDD"),
        ("upstream_unreachable", "DDDDDDDD"),
        ("destination_status", "DEEEDDDD"),
        ("body_mismatch", "DEEEDDDD"),
        ("slow_response", "EEEEDDDD"),
        ("connection_reset", "EEEEDDDD"),
        ("operator", "EEEEEEEE"),
        ("source_removed", "EEEEEEEE"),
    ];

    fn phases() -> Vec<Option<Phase>> {
        std::iter::once(None)
            .chain(Phase::ALL.iter().copied().map(Some))
            .collect()
    }

    #[test]
    fn table_covers_every_reason_and_phase() {
        let names: Vec<&str> = TABLE.iter().map(|(r, _)| *r).collect();
        let all: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, all, "one row per reason, in declaration order");
        assert_eq!(phases().len(), 8);
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
    }

    #[test]
    fn every_reason_phase_destination_and_probe() {
        let mut checked = 0;
        for (name, letters) in TABLE {
            let reason: Reason = name.parse().unwrap();
            for (phase, letter) in phases().into_iter().zip(letters.chars()) {
                let want = match letter {
                    'E' => Scope::Endpoint,
                    'D' => Scope::Destination,
                    other => panic!("bad letter {other}"),
                };
                for (has_dest, probe) in
                    [(true, false), (true, true), (false, false), (false, true)]
                {
                    // Probes and reports without a destination are endpoint-wide, always.
                    let expected = if has_dest && !probe {
                        want
                    } else {
                        Scope::Endpoint
                    };
                    assert_eq!(
                        scope(reason, phase, has_dest, probe),
                        expected,
                        "{name} at {phase:?}, destination {has_dest}, probe {probe}"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 14 * 8 * 4);
    }

    #[test]
    fn names() {
        assert_eq!(Scope::Endpoint.as_str(), "endpoint");
        assert_eq!(Scope::Destination.as_str(), "destination");
    }
}
