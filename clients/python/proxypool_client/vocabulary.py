"""The names the daemon understands in a report, as it spells them.

A test (``tests/test_drift.py``) compares these with what the daemon built from the same
checkout accepts, so a reason or phase added on one side cannot go missing on the other.
"""

from __future__ import annotations

from typing import FrozenSet

#: Why a use failed; the reason picks the cooldown policy (``operator`` and
#: ``source_removed`` are the daemon's own and appear in its answers).
REASONS: FrozenSet[str] = frozenset(
    [
        "connect_refused",
        "connect_timeout",
        "dns_failed",
        "tls_failed",
        "proxy_auth_rejected",
        "proxy_protocol_error",
        "proxy_rejected",
        "upstream_unreachable",
        "destination_status",
        "body_mismatch",
        "slow_response",
        "connection_reset",
        "operator",
        "source_removed",
    ]
)

#: Where in the exchange a failure happened.
PHASES: FrozenSet[str] = frozenset(
    [
        "connect",
        "proxy_tls",
        "proxy_handshake",
        "destination_tls",
        "request",
        "response_head",
        "response_body",
    ]
)
