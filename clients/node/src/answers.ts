/** The daemon's answers, typed: what each op gives back, in the package's own spelling. */

import { ProtocolError } from "./errors.js";
import type { Reply } from "./protocol.js";
import type { Blame, EndpointState, Reason } from "./vocabulary.js";

export type Outcome = "success" | "failure";

/** A target every endpoint failed to reach lately (`status`). */
export interface DownTarget {
  readonly target: string;
  readonly retryAfterMs: number | null;
  readonly streak: number;
  readonly reason: Reason | null;
  readonly downForMs: number | null;
}

/** What a pool's pacing holds (`status`, pools that pace). */
export interface PaceStatus {
  readonly hosts: number;
  readonly pairs: number;
  readonly hostsDropped: number;
  readonly paced: number;
}

/** One pool's counts by state and its live leases. */
export interface PoolStatus {
  readonly pool: string;
  readonly mode: string;
  readonly available: number;
  readonly cooling: number;
  readonly probeAllowed: number;
  readonly disabled: number;
  readonly leases: number;
  readonly nextDeadlineMs: number | null;
  readonly targetsDown: number;
  readonly downTargets: readonly DownTarget[];
  readonly pace: PaceStatus | null;
  /** The object as the daemon sent it (fields this version does not know included). */
  readonly raw: Readonly<Record<string, unknown>>;
}

/** What a `report` answers: the endpoint's state afterwards, and whom a failure counted against. */
export interface ReportAnswer {
  readonly state: EndpointState | null;
  readonly blame: Blame | null;
}

/** An endpoint as `endpoints` lists it (passwords redacted); the daemon's field names. */
export type EndpointInfo = Readonly<Record<string, unknown>> & {
  readonly id: number;
  readonly url: string;
  readonly state: EndpointState;
  readonly pool: string;
};

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

function numOrNull(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

function str(v: unknown): string | null {
  return typeof v === "string" ? v : null;
}

export function field<T>(reply: Reply, name: string, kind: "string" | "number" | "object", op: string): T {
  const v = reply[name];
  const ok = kind === "object" ? typeof v === "object" && v !== null : typeof v === kind;
  if (!ok) {
    throw new ProtocolError("io", `answer to ${op} lacks ${kind} ${JSON.stringify(name)}: ${JSON.stringify(reply).slice(0, 200)}`);
  }
  return v as T;
}

export function poolStatus(raw: Record<string, unknown>): PoolStatus {
  const down = Array.isArray(raw.down_targets) ? (raw.down_targets as Record<string, unknown>[]) : [];
  const pace = typeof raw.pace === "object" && raw.pace !== null ? (raw.pace as Record<string, unknown>) : null;
  return {
    pool: str(raw.pool) ?? "",
    mode: str(raw.mode) ?? "",
    available: num(raw.available),
    cooling: num(raw.cooling),
    probeAllowed: num(raw.probe_allowed),
    disabled: num(raw.disabled),
    leases: num(raw.leases),
    nextDeadlineMs: numOrNull(raw.next_deadline_ms),
    targetsDown: num(raw.targets_down),
    downTargets: down.map((t) => ({
      target: str(t.target) ?? "",
      retryAfterMs: numOrNull(t.retry_after_ms),
      streak: num(t.streak),
      reason: str(t.reason) as Reason | null,
      downForMs: numOrNull(t.down_for_ms),
    })),
    pace: pace && {
      hosts: num(pace.hosts),
      pairs: num(pace.pairs),
      hostsDropped: num(pace.hosts_dropped),
      paced: num(pace.paced),
    },
    raw,
  };
}

export function reportAnswer(reply: Reply): ReportAnswer {
  return { state: str(reply.state) as EndpointState | null, blame: str(reply.blame) as Blame | null };
}
