/**
 * One socket to the daemon: lines written, answer lines read one at a time. A
 * connection carries one request at a time (the client gives each request in flight a
 * connection of its own), so an answer is always for the request just written; its id
 * is checked all the same.
 */

import { Socket, createConnection } from "node:net";

import { type Address, formatAddress } from "./address.js";
import { ProtocolError, TransportError } from "./errors.js";
import { MAX_REPLY } from "./protocol.js";

export type LineCallback = (err: TransportError | null, line: string | null) => void;

export class Connection {
  readonly socket: Socket;
  readonly address: Address;
  /** Closed, broken, or half-closed by us: never to be reused. */
  dead = false;
  private chunks: Buffer[] = [];
  private buffered = 0;
  private lines: string[] = [];
  private waiter: LineCallback | null = null;
  private failure: TransportError | null = null;
  // One timer a connection, refreshed for each request rather than made anew: it fires
  // into nothing once the answer came (`onExpire` cleared), and never keeps the process alive.
  private timer: NodeJS.Timeout | null = null;
  private timerMs = 0;
  private onExpire: (() => void) | null = null;

  private constructor(socket: Socket, address: Address) {
    this.socket = socket;
    this.address = address;
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("end", () => this.fail(new TransportError("io", `the daemon closed the connection (${formatAddress(address)})`)));
    socket.on("error", (e: Error) => this.fail(new TransportError("io", `socket ${formatAddress(address)}: ${e.message}`)));
    socket.on("close", () => this.fail(new TransportError("io", `connection to ${formatAddress(address)} closed`)));
  }

  /** A new connection, within `timeoutMs`; an abort destroys it and rejects with the signal's reason. */
  static open(address: Address, timeoutMs: number, signal?: AbortSignal): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const socket =
        address.kind === "unix" ? createConnection({ path: address.path }) : createConnection({ host: address.host, port: address.port });
      const done = (err: unknown): void => {
        clearTimeout(timer);
        socket.removeListener("connect", onConnect);
        socket.removeListener("error", onError);
        signal?.removeEventListener("abort", onAbort);
        if (err === null) {
          if (address.kind === "tcp") socket.setNoDelay(true);
          resolve(new Connection(socket, address));
        } else {
          socket.destroy();
          reject(err);
        }
      };
      const onConnect = (): void => done(null);
      const onError = (e: Error): void => done(new TransportError("io", `cannot connect to ${formatAddress(address)}: ${e.message}`));
      const onAbort = (): void => done(signal?.reason);
      const timer = setTimeout(() => done(new TransportError("io", `cannot connect to ${formatAddress(address)}: timed out`)), timeoutMs);
      socket.once("connect", onConnect);
      socket.once("error", onError);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Write `line`; `callback` gets the next answer line, or the error that ended the connection. */
  exchange(line: string, callback: LineCallback): void {
    if (this.failure !== null) {
      callback(this.failure, null);
      return;
    }
    this.waiter = callback;
    this.socket.write(line);
  }

  /** Wait for the next line without writing (an answer still owed to an abandoned request). */
  expect(callback: LineCallback): void {
    const queued = this.lines.shift();
    if (queued !== undefined) callback(null, queued);
    else if (this.failure !== null) callback(this.failure, null);
    else this.waiter = callback;
  }

  /** Call `onExpire` in `ms`, unless `disarm` comes first. */
  arm(ms: number, onExpire: () => void): void {
    this.onExpire = onExpire;
    if (this.timer !== null && this.timerMs === ms) {
      this.timer.refresh();
      return;
    }
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerMs = ms;
    this.timer = setTimeout(() => {
      const expire = this.onExpire;
      this.onExpire = null;
      expire?.();
    }, ms);
    this.timer.unref();
  }

  disarm(): void {
    this.onExpire = null;
  }

  /** Nothing read past the last answer: the connection is in step for another request. */
  get clean(): boolean {
    return !this.dead && this.failure === null && this.buffered === 0 && this.lines.length === 0;
  }

  /** Shut down our sending side: a lease still waiting in the daemon is given up there. */
  halfClose(): void {
    this.dead = true;
    this.socket.end();
  }

  destroy(): void {
    this.dead = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.onExpire = null;
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    let nl = chunk.indexOf(10);
    while (nl !== -1) {
      let line: string;
      if (this.buffered === 0) {
        line = chunk.toString("utf8", start, nl);
      } else {
        this.chunks.push(chunk.subarray(start, nl));
        line = Buffer.concat(this.chunks).toString("utf8");
        this.chunks = [];
        this.buffered = 0;
      }
      this.deliver(line);
      start = nl + 1;
      nl = chunk.indexOf(10, start);
    }
    if (start < chunk.length) {
      const rest = start === 0 ? chunk : chunk.subarray(start);
      this.chunks.push(rest);
      this.buffered += rest.length;
      if (this.buffered > MAX_REPLY) {
        this.fail(new ProtocolError("io", `answer from ${formatAddress(this.address)} longer than ${MAX_REPLY} bytes`));
        this.socket.destroy();
      }
    }
  }

  private deliver(line: string): void {
    const waiter = this.waiter;
    if (waiter === null) {
      this.lines.push(line);
      return;
    }
    this.waiter = null;
    waiter(null, line);
  }

  private fail(err: TransportError): void {
    this.dead = true;
    if (this.failure === null) this.failure = err;
    const waiter = this.waiter;
    if (waiter !== null) {
      this.waiter = null;
      waiter(this.failure, null);
    }
  }
}
