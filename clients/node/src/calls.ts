/**
 * One function per op: the request it sends and how its answer is read. Optional fields
 * are sent only when given, so a request carries only what its caller asked for.
 */

import {
  type EndpointInfo,
  type Outcome,
  type PoolStatus,
  type ReportAnswer,
  field,
  poolStatus,
  reportAnswer,
} from "./answers.js";
import { type Call, type Duration, type Reply, durationField, durationMs } from "./protocol.js";
import { type Phase, type Reason, REASONS } from "./vocabulary.js";

/** A lease, or its id. */
export type LeaseRef = string | { readonly id: string };

export function leaseId(ref: LeaseRef): string {
  const id = typeof ref === "string" ? ref : ref?.id;
  if (typeof id !== "string" || !id) throw new TypeError("a lease id (or a lease) is needed");
  return id;
}

export interface LeaseRequest {
  /** The pool (default `"default"`). */
  pool?: string;
  /** How long the lease lives: seconds or `"30s"` (the daemon's default: 60 s). */
  ttl?: Duration;
  /** How long the daemon may wait for a free endpoint before `pool_exhausted`. */
  wait?: Duration;
  /** A sticky key: the same endpoint while it stays available. */
  session?: string;
  /** The host the proxy will be used for: endpoints banned by it are skipped. */
  destination?: string;
  /** Only endpoints of these schemes, e.g. `["http", "https"]`. */
  schemes?: string | readonly string[];
  /** Only endpoints carrying every one of these tags, e.g. `{ country: "us" }`. */
  tags?: Readonly<Record<string, string>>;
}

/** A lease granted, as the daemon answered it. */
export interface Grant {
  readonly reply: Reply;
  readonly id: string;
  readonly proxy: string;
  readonly endpoint: number;
}

function grant(reply: Reply): Grant {
  return {
    reply,
    id: field<string>(reply, "lease", "string", "lease"),
    proxy: field<string>(reply, "proxy", "string", "lease"),
    endpoint: field<number>(reply, "endpoint", "number", "lease"),
  };
}

function giveBack(reply: Reply): Call<void> {
  return release(reply.lease as string);
}

export function lease(req: LeaseRequest): Call<Grant> {
  const schemes = typeof req.schemes === "string" ? [req.schemes] : req.schemes;
  if (req.tags !== undefined && (typeof req.tags !== "object" || req.tags === null || Array.isArray(req.tags))) {
    throw new TypeError('tags is an object of tag key to value, e.g. { country: "us" }');
  }
  const tags = req.tags && Object.keys(req.tags).length > 0 ? stringRecord(req.tags) : undefined;
  const wait = durationField("wait", req.wait);
  return {
    op: "lease",
    fields: {
      pool: req.pool ?? "default",
      ttl: durationField("ttl", req.ttl),
      wait,
      session: req.session,
      destination: req.destination,
      schemes: schemes === undefined ? undefined : schemes.map(String),
      tags,
    },
    parse: grant,
    waitMs: durationMs(wait),
    undo: giveBack,
  };
}

function stringRecord(tags: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(tags)) out[k] = String(v);
  return out;
}

/** What a report may say besides its outcome. */
export interface ReportDetails {
  /** Required for a failure: why (the reason picks the cooldown policy). */
  reason?: Reason;
  phase?: Phase;
  /** The HTTP status seen. */
  status?: number;
  /** A `Retry-After`: seconds, `"90s"` or the header's value. */
  retryAfter?: Duration;
  /** Free text (the daemon keeps 1000 characters). */
  detail?: string;
  /** The host the use was for (a lease's own destination when not given). */
  destination?: string;
  /** How long the use took, for the endpoint's latency estimate. */
  durationMs?: number;
}

const reasonList = REASONS.join(", ");

/** A `report`: by lease, or by `session` (+ `pool`) when `lease` is null. */
export function report(
  target: { lease: LeaseRef } | { session: string; pool?: string | undefined },
  outcome: Outcome,
  details: ReportDetails = {},
): Call<ReportAnswer> {
  if (outcome !== "success" && outcome !== "failure") {
    throw new TypeError(`outcome is "success" or "failure", not ${JSON.stringify(outcome)}`);
  }
  if (outcome === "failure" && !details.reason) {
    throw new TypeError(`a failure report needs a reason (one of ${reasonList})`);
  }
  const by =
    "lease" in target
      ? { lease: leaseId(target.lease) }
      : { session: requireString("session", target.session), pool: target.pool };
  return {
    op: "report",
    fields: {
      ...by,
      outcome,
      reason: details.reason,
      phase: details.phase,
      status: httpStatus(details.status),
      retry_after: durationField("retryAfter", details.retryAfter),
      detail: details.detail,
      destination: details.destination,
      duration_ms: details.durationMs === undefined ? undefined : Math.round(finite("durationMs", details.durationMs)),
    },
    parse: reportAnswer,
    waitMs: 0,
  };
}

function httpStatus(status: number | undefined): number | undefined {
  if (status === undefined) return undefined;
  if (!Number.isInteger(status) || status < 100 || status > 999) {
    throw new TypeError(`status is an HTTP status (100-999), not ${String(status)}`);
  }
  return status;
}

function finite(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) throw new TypeError(`${name} is a number of at least 0, not ${String(value)}`);
  return value;
}

function requireString(name: string, value: unknown): string {
  if (typeof value !== "string" || !value) throw new TypeError(`${name} must be a non-empty string`);
  return value;
}

const nothing = (): void => undefined;

export function release(ref: LeaseRef): Call<void> {
  return { op: "release", fields: { lease: leaseId(ref) }, parse: nothing, waitMs: 0 };
}

export function status(pool?: string): Call<PoolStatus[]> {
  return {
    op: "status",
    fields: { pool },
    parse: (reply) => field<Record<string, unknown>[]>(reply, "pools", "object", "status").map(poolStatus),
    waitMs: 0,
  };
}

export interface EndpointsQuery {
  pool?: string;
  state?: string;
  endpoint?: number;
  tags?: Readonly<Record<string, string>>;
  /** A host: each endpoint also gets `destination_state`, its state for that host. */
  destination?: string;
}

export function endpoints(query: EndpointsQuery): Call<EndpointInfo[]> {
  return {
    op: "endpoints",
    fields: { ...query },
    parse: (reply) => field<EndpointInfo[]>(reply, "endpoints", "object", "endpoints"),
    waitMs: 0,
  };
}

export function ping(): Call<string> {
  return { op: "ping", fields: {}, parse: (reply) => field<string>(reply, "version", "string", "ping"), waitMs: 0 };
}

/** Any op, its answer returned whole (`wait` is honoured for the read deadline). */
export function raw(op: string, fields: Readonly<Record<string, unknown>>): Call<Reply> {
  const wait = fields.wait as Duration | undefined;
  return { op, fields, parse: (reply) => reply, waitMs: durationMs(wait) };
}
