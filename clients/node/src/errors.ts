/**
 * Every error the package throws. The daemon answers a failed request with an error code;
 * each code has its class here, so callers catch what they can act on (`PoolExhausted`:
 * wait; `UnknownPool`: a mistake in the configuration). A code this version does not know
 * yet still throws, as a plain `ProxyPoolError` carrying that code.
 */

/**
 * An error answered by the daemon, or a failure to talk to it (code `"io"`).
 * `retryAfterMs` is set by the codes that name a time to come back (`pool_exhausted`,
 * `paced`, `destination_down`), and `null` when there is no such deadline.
 */
export class ProxyPoolError extends Error {
  readonly code: string;
  readonly retryAfterMs: number | null;
  /** The daemon's message, without the code in front. */
  readonly detail: string;

  constructor(code: string, message: string, retryAfterMs: number | null = null) {
    super(`${code}: ${message}`);
    this.code = code;
    this.detail = message;
    this.retryAfterMs = retryAfterMs;
  }

  override get name(): string {
    return this.constructor.name;
  }
}

/**
 * The daemon could not be reached, the connection broke, or no answer came in time (code
 * `"io"`). Whether the request took effect is unknown.
 */
export class TransportError extends ProxyPoolError {}

/**
 * The daemon's answer could not be read, or it answered another request (its `id`
 * differs): the connection is dropped and nothing it said is used.
 */
export class ProtocolError extends TransportError {}

/** A malformed request, a value the daemon refuses, a wrong token over TCP. */
export class BadRequest extends ProxyPoolError {}
/** The daemon does not know the op. */
export class UnknownOp extends ProxyPoolError {}
/** No pool of that name: a configuration mistake. */
export class UnknownPool extends ProxyPoolError {}
/** No live lease of that id (already reported, released, never granted), or no endpoint bound to the session reported on. */
export class UnknownLease extends ProxyPoolError {}
/** The lease outlived its `ttl`. */
export class LeaseExpired extends ProxyPoolError {}
/**
 * The pool has endpoints, none available now. `retryAfterMs`: the time until the soonest
 * cooldown ends, or `null` when nothing is cooling (waiting will not help).
 */
export class PoolExhausted extends ProxyPoolError {}
/** The pool has no endpoint at all (or none of the schemes asked for). A `PoolExhausted`. */
export class PoolEmpty extends PoolExhausted {}
/** Every endpoint was used for this destination too recently; come back after `retryAfterMs`. */
export class Paced extends ProxyPoolError {}
/** The site itself is down, not the proxies; come back after `retryAfterMs` and blame no proxy. */
export class DestinationDown extends ProxyPoolError {}
/** The token's role may not do this op; nothing changed. */
export class Forbidden extends ProxyPoolError {}
/** A trial's report came after its claim lapsed and was claimed again: ignored. */
export class StaleClaim extends ProxyPoolError {}
/** The daemon cannot write its database now; nothing was acknowledged: try again later. */
export class StoreUnavailable extends ProxyPoolError {}
/** A request line over 64 KiB (refused before sending, or by the daemon). */
export class TooLarge extends ProxyPoolError {}
/** The daemon failed; nothing was acknowledged. */
export class InternalError extends ProxyPoolError {}

type ErrorClass = new (code: string, message: string, retryAfterMs?: number | null) => ProxyPoolError;

/** The class of each error code. */
export const ERRORS: Readonly<Record<string, ErrorClass>> = Object.freeze({
  io: TransportError,
  bad_request: BadRequest,
  unknown_op: UnknownOp,
  unknown_pool: UnknownPool,
  unknown_lease: UnknownLease,
  lease_expired: LeaseExpired,
  pool_exhausted: PoolExhausted,
  pool_empty: PoolEmpty,
  paced: Paced,
  destination_down: DestinationDown,
  forbidden: Forbidden,
  stale_claim: StaleClaim,
  store_unavailable: StoreUnavailable,
  too_large: TooLarge,
  internal: InternalError,
});

/** The error for `code`; a code this version does not know stays a plain `ProxyPoolError`. */
export function errorFor(code: string, message: string, retryAfterMs: number | null = null): ProxyPoolError {
  const cls = Object.prototype.hasOwnProperty.call(ERRORS, code) ? ERRORS[code] : undefined;
  return cls ? new cls(code, message, retryAfterMs) : new ProxyPoolError(code, message, retryAfterMs);
}
