/**
 * A granted lease, and what `leased()` sends when its function ends: whatever happens,
 * the lease ends reported or given back, or the loss is logged. Nothing here throws
 * into the caller's code.
 */

import type { Outcome, ReportAnswer } from "./answers.js";
import type { Grant, LeaseRequest, ReportDetails } from "./calls.js";
import { MAX_RETRY_AFTER, classifyError } from "./classify.js";
import { LeaseExpired, ProxyPoolError, TransportError, UnknownLease } from "./errors.js";
import type { Logger } from "./logger.js";
import type { Reply } from "./protocol.js";
import { isPhase, isReason } from "./vocabulary.js";

/** What a lease asks for, and the call's own options. */
export interface LeaseOptions extends LeaseRequest {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** The client as a lease uses it. */
export interface LeaseOwner {
  readonly logger: Logger;
  report(lease: string, outcome: Outcome, options?: ReportDetails & { signal?: AbortSignal }): Promise<ReportAnswer>;
  release(lease: string, options?: { signal?: AbortSignal }): Promise<void>;
}

/** A lease's client, for `finishLease` (not part of a lease's public shape). */
let ownerOf: (lease: Lease) => LeaseOwner;

/** Longest `detail` sent; the daemon keeps 1000 characters of one. */
export const MAX_DETAIL = 500;

/**
 * A lease: `id`, `proxy` (the proxy URL with its credentials), `endpoint` (its id),
 * `trial` (this use is the endpoint's single recovery attempt), `scope`
 * (`"destination"` for a destination's trial, `"target"` for a down target's),
 * `expiresInMs`, and the `pool`, `destination` and `session` it was asked for.
 * `outcome` is set once the lease was reported or given back. Printing a lease never
 * shows its proxy URL, which holds a password.
 */
export class Lease {
  readonly id: string;
  readonly endpoint: number;
  readonly trial: boolean;
  readonly scope: "destination" | "target" | null;
  readonly expiresInMs: number | null;
  readonly pool: string;
  readonly destination: string | null;
  readonly session: string | null;
  outcome: "success" | "failure" | "released" | null = null;
  readonly #owner: LeaseOwner;
  readonly #proxy: string;
  readonly #reply: Reply;

  constructor(owner: LeaseOwner, grant: Grant, request: LeaseRequest) {
    const r = grant.reply;
    this.#owner = owner;
    this.#proxy = grant.proxy;
    this.#reply = r;
    this.id = grant.id;
    this.endpoint = grant.endpoint;
    this.trial = r.trial === true;
    this.scope = r.scope === "destination" || r.scope === "target" ? r.scope : null;
    this.expiresInMs = typeof r.expires_in_ms === "number" ? r.expires_in_ms : null;
    this.pool = typeof r.pool === "string" ? r.pool : (request.pool ?? "default");
    this.destination = request.destination ?? null;
    this.session = request.session ?? null;
  }

  static {
    ownerOf = (lease) => lease.#owner;
  }

  /** The proxy URL with its credentials (`http://user:pass@host:port`, `socks5h://...`). */
  get proxy(): string {
    return this.#proxy;
  }

  /** The proxy's scheme: `http`, `https`, `socks5`, `socks5h`... */
  get scheme(): string {
    return this.#proxy.slice(0, Math.max(0, this.#proxy.indexOf("://"))).toLowerCase();
  }

  /** The daemon's whole answer (it holds the proxy URL). */
  get reply(): Reply {
    return this.#reply;
  }

  /** Report how the use went (`destination` defaults to the lease's). */
  async report(outcome: Outcome, details: ReportDetails & { signal?: AbortSignal } = {}): Promise<ReportAnswer> {
    const answer = await this.#owner.report(this.id, outcome, {
      ...(this.destination !== null ? { destination: this.destination } : {}),
      ...details,
    });
    this.outcome = outcome;
    return answer;
  }

  success(details: ReportDetails & { signal?: AbortSignal } = {}): Promise<ReportAnswer> {
    return this.report("success", details);
  }

  failure(reason: NonNullable<ReportDetails["reason"]>, details: ReportDetails & { signal?: AbortSignal } = {}): Promise<ReportAnswer> {
    return this.report("failure", { ...details, reason });
  }

  /** Give the lease back without a verdict. */
  async release(options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.#owner.release(this.id, options);
    this.outcome = "released";
  }

  toJSON(): Record<string, unknown> {
    return {
      id: this.id,
      endpoint: this.endpoint,
      trial: this.trial,
      scope: this.scope,
      expiresInMs: this.expiresInMs,
      pool: this.pool,
      destination: this.destination,
      session: this.session,
      outcome: this.outcome,
    };
  }

  toString(): string {
    return `Lease(${this.id}, endpoint ${this.endpoint})`;
  }
}

function safeGet(obj: unknown, key: string): unknown {
  if ((typeof obj !== "object" && typeof obj !== "function") || obj === null) return undefined;
  try {
    return (obj as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

function clip(text: unknown, limit = MAX_DETAIL): string | undefined {
  if (typeof text !== "string" || !text) return undefined;
  return text.length <= limit ? text : `${text.slice(0, limit - 1)}…`;
}

function retryAfterOf(value: unknown): number | string | undefined {
  if (typeof value === "number") return Number.isFinite(value) && value >= 0 ? value : undefined;
  if (typeof value !== "string") return undefined;
  const v = value.trim();
  return v && v.length <= MAX_RETRY_AFTER ? v : undefined;
}

function errorText(err: unknown): string | undefined {
  const name = safeGet(err, "name");
  const message = safeGet(err, "message");
  if (typeof message !== "string") return typeof name === "string" ? name : undefined;
  return typeof name === "string" ? `${name}: ${message}` : message;
}

function isAbort(err: unknown): boolean {
  const name = safeGet(err, "name");
  // An abort, or AbortSignal.timeout()'s DOMException: the caller's decision, no verdict.
  return name === "AbortError" || (name === "TimeoutError" && safeGet(err, "code") === 23);
}

/**
 * `["success", {}]`, `["failure", details]` or `["release", {}]` for a function that
 * ended (`exit` null) or threw `exit.error`. A `reason` counts only when it is one of
 * the daemon's reasons; anything else goes through the classifier, and what it cannot
 * place is released, not blamed on the proxy. Every field copied from the error is
 * checked and bounded, so the report always fits in a request line.
 */
export function exitReport(exit: { error: unknown } | null): ["success" | "failure" | "release", ReportDetails] {
  if (exit === null) return ["success", {}];
  const err = exit.error;
  if (isAbort(err)) return ["release", {}];
  const reason = safeGet(err, "reason");
  if (isReason(reason)) {
    const phase = safeGet(err, "phase");
    const status = safeGet(err, "status");
    const detail = safeGet(err, "detail");
    return [
      "failure",
      dropUndefined({
        reason,
        phase: isPhase(phase) ? phase : undefined,
        status: Number.isInteger(status) && (status as number) >= 100 && (status as number) <= 999 ? (status as number) : undefined,
        retryAfter: retryAfterOf(safeGet(err, "retryAfter")),
        detail: clip(typeof detail === "string" && detail ? detail : safeGet(err, "message")),
      }),
    ];
  }
  const found = classifyError(err);
  if (found === null) return ["release", {}];
  return [
    "failure",
    dropUndefined({
      reason: found.reason,
      phase: found.phase ?? undefined,
      status: found.status ?? undefined,
      retryAfter: found.retryAfter ?? undefined,
      detail: clip(errorText(err)),
    }),
  ];
}

function dropUndefined<T extends object>(obj: T): T {
  for (const k of Object.keys(obj) as (keyof T)[]) if (obj[k] === undefined) delete obj[k];
  return obj;
}

/**
 * Report (or release) `lease` for a function that ended with `exit`. A report the daemon
 * refuses falls back to a release; a lease the daemon no longer has, or a daemon that
 * cannot be reached, is logged. Never throws.
 */
export async function finishLease(lease: Lease, exit: { error: unknown } | null): Promise<void> {
  if (lease.outcome !== null) return; // the function reported or released it itself
  const [action, details] = exitReport(exit);
  const log = ownerOf(lease).logger;
  if (action !== "release") {
    try {
      await lease.report(action, details);
      return;
    } catch (e) {
      log.warn(`could not report ${action === "success" ? "success for" : "the failure of"} lease ${lease.id}: ${(e as Error).message}`);
      if (e instanceof LeaseExpired || e instanceof UnknownLease || e instanceof TransportError || !(e instanceof ProxyPoolError)) return;
      // Refused (a reason it does not know...): give it back rather than let it sit until its TTL.
    }
  }
  try {
    await lease.release();
  } catch (e) {
    log.warn(`could not release lease ${lease.id}: ${(e as Error).message}`);
  }
}
