/**
 * The client of the lease socket. One `Client` may be shared by any number of concurrent
 * calls: each request in flight has a connection of its own (an idle one, or a new one;
 * up to `maxIdle` idle ones are kept), so a lease that waits never holds up a report sent
 * meanwhile, and every answer's id is checked against its request's.
 *
 * Every call takes an `AbortSignal`. An aborted call rejects at once with the signal's
 * reason and leaves nothing behind: a request not yet sent is not sent; one already sent
 * is read to its end in the background (so the connection stays in step), and a lease
 * granted to a caller who is gone is released. `close()` waits for those give-backs.
 */

import { type Address, formatAddress, parseAddress, resolveToken } from "./address.js";
import type { EndpointInfo, Outcome, PoolStatus, ReportAnswer } from "./answers.js";
import * as calls from "./calls.js";
import { Connection } from "./connection.js";
import { defaultAddress } from "./discovery.js";
import { ProxyPoolError, TransportError } from "./errors.js";
import { Lease, type LeaseOptions, finishLease } from "./lease.js";
import { type Logger, stderrLogger } from "./logger.js";
import { type Call, type Reply, decode, encode } from "./protocol.js";

/** How long an answer is still awaited, after its caller left, to give a late grant back. */
const LATE_GRANT_MS = 10_000;

export interface ClientOptions {
  /** `tcp://HOST:PORT` or a socket path; by default found by the CLI's rule. */
  address?: string | Address;
  /** Over TCP: the token (default `PROXYPOOL_LEASE_TOKEN`, else `PROXYPOOL_TOKEN`). */
  token?: string;
  /** Bounds connecting and each answer (a lease's `wait` is added to it). Default 30 s. */
  timeoutMs?: number;
  /** Idle connections kept for reuse (default 16). */
  maxIdle?: number;
  /** Where give-backs that failed after their caller left are told (default: stderr). */
  logger?: Logger;
}

export interface CallOptions {
  signal?: AbortSignal;
  /** This call's timeout instead of the client's. */
  timeoutMs?: number;
}

export interface ReportOptions extends calls.ReportDetails, CallOptions {}

export class Client {
  readonly address: Address;
  readonly timeoutMs: number;
  readonly maxIdle: number;
  readonly logger: Logger;
  readonly #token: string | null;
  #idle: Connection[] = [];
  #nextId = 1;
  #background = new Set<Promise<void>>();

  constructor(options: ClientOptions = {}) {
    this.address = options.address === undefined ? defaultAddress() : parseAddress(options.address);
    this.#token = resolveToken(this.address, options.token);
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.maxIdle = options.maxIdle ?? 16;
    this.logger = options.logger ?? stderrLogger;
    if (!(this.timeoutMs > 0)) throw new TypeError("timeoutMs must be more than 0");
  }

  toString(): string {
    return `Client(${formatAddress(this.address)})`;
  }

  /** Run one call: its parsed answer, or the `ProxyPoolError` the daemon answered. */
  send<T>(call: Call<T>, options: CallOptions = {}): Promise<T> {
    const { signal } = options;
    let line: string;
    try {
      signal?.throwIfAborted();
      line = encode(call, this.#nextId, this.#token);
    } catch (e) {
      return Promise.reject(e);
    }
    const id = this.#nextId++;
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    let conn: Connection | undefined;
    while ((conn = this.#idle.pop()) !== undefined && conn.dead) {
      conn.destroy();
    }
    if (conn === undefined) {
      return Connection.open(this.address, timeoutMs, signal).then((c) =>
        this.#exchange(c, call, id, line, timeoutMs + call.waitMs, signal),
      );
    }
    conn.socket.ref();
    return this.#exchange(conn, call, id, line, timeoutMs + call.waitMs, signal);
  }

  #exchange<T>(conn: Connection, call: Call<T>, id: number, line: string, limitMs: number, signal?: AbortSignal): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      // waiting: the caller awaits; left: the caller is gone (aborted, timed out), the
      // answer still owed is read and undone in the background.
      let state: "waiting" | "left" | "done" = "waiting";
      let settleBackground: (() => void) | null = null;
      const onAbort = (): void => {
        if (state !== "waiting") return;
        state = "left";
        reject(signal?.reason);
        settleBackground = this.#leave(conn, call);
        // A lease may still be granted: wait for its answer a while longer, to give it back.
        if (call.undo !== undefined) conn.arm(Math.max(limitMs, LATE_GRANT_MS), expire);
      };
      const expire = (): void => {
        if (state === "waiting") {
          state = "left";
          signal?.removeEventListener("abort", onAbort);
          reject(new TransportError("io", `no answer from ${formatAddress(this.address)} within ${limitMs} ms`));
          if (call.undo !== undefined) {
            settleBackground = this.#leave(conn, call);
            conn.arm(Math.max(limitMs, LATE_GRANT_MS), expire);
            return;
          }
        }
        conn.destroy();
        settleBackground?.();
      };
      if (signal?.aborted) {
        // Aborted while the connection was being opened: nothing was sent.
        state = "done";
        this.#checkin(conn);
        reject(signal.reason);
        return;
      }
      conn.arm(limitMs, expire);
      signal?.addEventListener("abort", onAbort, { once: true });
      conn.exchange(line, (err, text) => {
        conn.disarm();
        signal?.removeEventListener("abort", onAbort);
        const waiting = state === "waiting";
        state = "done";
        if (err !== null) {
          conn.destroy();
          if (waiting) reject(err);
          settleBackground?.();
          return;
        }
        let reply: Reply;
        try {
          reply = decode(text as string, id);
        } catch (e) {
          // A transport error leaves the connection out of step; the daemon closes after too_large.
          if (e instanceof TransportError || (e as ProxyPoolError).code === "too_large") conn.destroy();
          else this.#checkin(conn);
          if (waiting) reject(e);
          settleBackground?.();
          return;
        }
        if (waiting) {
          let result: T;
          try {
            result = call.parse(reply);
          } catch (e) {
            conn.destroy();
            reject(e);
            return;
          }
          this.#checkin(conn);
          resolve(result);
          return;
        }
        this.#checkin(conn);
        this.#undo(call, reply).finally(() => settleBackground?.());
      });
    });
  }

  /**
   * The caller left a call that was sent. A lease may still be granted: shut down our
   * sending side, so a lease still waiting in the daemon is given up there, and read the
   * answer in the background. Returns what ends the background task.
   */
  #leave(conn: Connection, call: Call<unknown>): () => void {
    if (call.undo !== undefined) conn.halfClose();
    let settle!: () => void;
    const task = new Promise<void>((resolve) => {
      settle = resolve;
    });
    this.#background.add(task);
    void task.then(() => this.#background.delete(task));
    return settle;
  }

  async #undo(call: Call<unknown>, reply: Reply): Promise<void> {
    if (call.undo === undefined) return;
    try {
      call.parse(reply);
    } catch {
      return; // not a grant: nothing to give back
    }
    const undo = call.undo(reply);
    try {
      await this.send(undo);
      this.logger.debug?.(`gave back lease ${String(reply.lease)}, granted after its caller left`);
    } catch (e) {
      this.logger.warn(`could not give back lease ${String(reply.lease)}, granted after its caller left: ${(e as Error).message}`);
    }
  }

  #checkin(conn: Connection): void {
    if (conn.clean && this.#idle.length < this.maxIdle) {
      conn.socket.unref();
      this.#idle.push(conn);
    } else {
      conn.destroy();
    }
  }

  /**
   * Wait for the give-backs of calls whose callers left, then close the idle connections.
   * The client stays usable: the next call connects again.
   */
  async close(): Promise<void> {
    while (this.#background.size > 0) await Promise.all([...this.#background]);
    for (const conn of this.#idle.splice(0)) conn.destroy();
  }

  // -- ops -------------------------------------------------------------------------

  /** Any op with its fields; the answer object whole. */
  request(op: string, fields: Readonly<Record<string, unknown>> = {}, options?: CallOptions): Promise<Reply> {
    return this.#call(() => calls.raw(op, fields), options);
  }

  /** Lease an endpoint. */
  lease(options: LeaseOptions = {}): Promise<Lease> {
    return this.#call(() => calls.lease(options), options).then((grant) => new Lease(this, grant, options));
  }

  /** Report how a lease went; the endpoint's state afterwards (and, for a failure, whom it counted against). */
  report(lease: calls.LeaseRef, outcome: Outcome, options: ReportOptions = {}): Promise<ReportAnswer> {
    return this.#call(() => calls.report({ lease }, outcome, options), options);
  }

  /** Report on the endpoint bound to sticky `session` of `pool` (default `"default"`); a failure unbinds the session. */
  reportSession(session: string, outcome: Outcome, options: ReportOptions & { pool?: string } = {}): Promise<ReportAnswer> {
    return this.#call(() => calls.report({ session, pool: options.pool }, outcome, options), options);
  }

  /** Give a lease back without a verdict. */
  release(lease: calls.LeaseRef, options?: CallOptions): Promise<void> {
    return this.#call(() => calls.release(lease), options);
  }

  /** Per-pool counts by state and live leases (every pool, or `pool`). */
  status(options: CallOptions & { pool?: string } = {}): Promise<PoolStatus[]> {
    return this.#call(() => calls.status(options.pool), options);
  }

  /** The endpoints, passwords redacted. */
  endpoints(query: calls.EndpointsQuery & CallOptions = {}): Promise<EndpointInfo[]> {
    const { signal, timeoutMs, ...fields } = query;
    return this.#call(() => calls.endpoints(fields), { signal, timeoutMs });
  }

  /** The daemon's version. */
  ping(options?: CallOptions): Promise<string> {
    return this.#call(() => calls.ping(), options);
  }

  /** Build a call and send it: a call that cannot be built (a bad argument) is a rejection too. */
  #call<T>(build: () => Call<T>, options?: CallOptions): Promise<T> {
    let call: Call<T>;
    try {
      call = build();
    } catch (e) {
      return Promise.reject(e);
    }
    return this.send(call, options);
  }

  /**
   * Lease, run `fn` with the lease, and end the lease whatever happens: `fn` returning
   * reports success; `fn` throwing reports a failure when the error says how the proxy
   * failed (a `reason`, or a network error the classifier recognises), and releases the
   * lease otherwise (a bug in the caller's code, an abort). The error is rethrown
   * unchanged; a report that cannot be delivered is logged, never thrown.
   */
  async leased<T>(fn: (lease: Lease) => Promise<T> | T, options: LeaseOptions = {}): Promise<T> {
    const lease = await this.lease(options);
    let result: T;
    try {
      result = await fn(lease);
    } catch (e) {
      await finishLease(lease, { error: e });
      throw e;
    }
    await finishLease(lease, null);
    return result;
  }
}
