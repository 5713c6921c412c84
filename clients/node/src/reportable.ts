/** The error that tells `leased()` how the proxy failed. */

import { classifyStatus } from "./classify.js";
import type { Duration } from "./protocol.js";
import type { Phase, Reason } from "./vocabulary.js";

export interface ReportableDetails {
  phase?: Phase;
  status?: number;
  retryAfter?: Duration;
  detail?: string;
}

/**
 * Thrown inside `leased()`, it reports a failure with its `reason` (one of the daemon's
 * reasons: `destination_status`, `connect_refused`...) and the details given.
 */
export class ReportableError extends Error {
  readonly reason: Reason;
  readonly phase: Phase | undefined;
  readonly status: number | undefined;
  readonly retryAfter: Duration | undefined;
  readonly detail: string | undefined;

  constructor(reason: Reason, details: ReportableDetails = {}) {
    super(details.detail ?? reason);
    this.reason = reason;
    this.phase = details.phase;
    this.status = details.status;
    this.retryAfter = details.retryAfter;
    this.detail = details.detail;
  }

  override get name(): string {
    return "ReportableError";
  }

  /**
   * A `ReportableError` for a ban-like response (`status` and `headers`, as fetch, got,
   * undici or Playwright give them), or null when it looks fine.
   */
  static fromResponse(
    response: { status?: number; statusCode?: number; headers?: unknown },
    banStatuses?: readonly number[],
  ): ReportableError | null {
    const status = response.statusCode ?? response.status;
    if (typeof status !== "number") return null;
    const found = classifyStatus(status, response.headers, banStatuses);
    if (found === null) return null;
    return new ReportableError(found.reason, {
      ...(found.phase ? { phase: found.phase } : {}),
      status,
      ...(found.retryAfter ? { retryAfter: found.retryAfter } : {}),
      detail: `HTTP ${status}`,
    });
  }
}
