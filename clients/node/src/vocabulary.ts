/**
 * The names the daemon understands, as it spells them. The package's tests compare each
 * list with what the daemon built from the same checkout accepts, so a name added on one
 * side cannot go missing on the other.
 */

/**
 * Why a use failed; the reason picks the cooldown policy. `operator` and
 * `source_removed` are the daemon's own and appear only in its answers.
 */
export const REASONS = [
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
] as const;
export type Reason = (typeof REASONS)[number];

/** Where in the exchange a failure happened. */
export const PHASES = [
  "connect",
  "proxy_tls",
  "proxy_handshake",
  "destination_tls",
  "request",
  "response_head",
  "response_body",
] as const;
export type Phase = (typeof PHASES)[number];

/** An endpoint's (or a pair's) health state. */
export const STATES = ["available", "cooling", "probe_allowed", "disabled"] as const;
export type EndpointState = (typeof STATES)[number];

/** Whom a failure counted against, as a `report` answers it. */
export type Blame = "endpoint" | "pair" | "target" | "pending";

/** The gateway's default `ban_status`: what a site answers when it blocks a client. */
export const DEFAULT_BAN_STATUSES: readonly number[] = Object.freeze([403, 429]);

const reasonSet: ReadonlySet<string> = new Set(REASONS);
const phaseSet: ReadonlySet<string> = new Set(PHASES);

export function isReason(value: unknown): value is Reason {
  return typeof value === "string" && reasonSet.has(value);
}

export function isPhase(value: unknown): value is Phase {
  return typeof value === "string" && phaseSet.has(value);
}
