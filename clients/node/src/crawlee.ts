/**
 * Crawlee through the pool's gateway: a `ProxyConfiguration` whose URLs carry Crawlee's
 * session id as the gateway's `session-<id>`, so each Crawlee session keeps one upstream
 * proxy; and a pre-navigation hook that, when Crawlee retires a session (or marks it bad)
 * on a blocked status, reports that ban to the daemon by session, with the destination.
 * The pool then cools only that (proxy, site) pair and unbinds the session, so its next
 * request goes out through another proxy; the other sessions keep theirs.
 *
 * ```js
 * import { CheerioCrawler } from "crawlee";
 * import { ProxyPoolConfiguration } from "proxypool-client/crawlee";
 *
 * const proxypool = new ProxyPoolConfiguration({ gateway: "http://127.0.0.1:8899", token });
 * const crawler = new CheerioCrawler(proxypool.crawlerOptions({ requestHandler }));
 * ```
 */

import { ProxyConfiguration, type Session, log as crawleeLog } from "@crawlee/core";

import { Client, type ClientOptions } from "./client.js";
import { UnknownLease } from "./errors.js";
import { type GatewayRoute, type SessionReport, classifyResponse, gatewayUrl, gatewayUsername } from "./gateway.js";
import { DEFAULT_BAN_STATUSES } from "./vocabulary.js";

export interface ProxyPoolConfigurationOptions {
  /** The gateway: `http://HOST:PORT`. */
  gateway: string;
  /** The gateway's token (default `PROXYPOOL_GATEWAY_TOKEN`). */
  token?: string;
  /** The pool to lease from (default: the gateway's `pool`), and the pool bans are reported in (default `"default"`). */
  pool?: string;
  /** Only upstreams carrying every one of these tags. */
  tags?: Readonly<Record<string, string>>;
  /**
   * The lease socket the bans are reported to: a `Client`, the options of one, or
   * `false` for no reports (the URLs alone). Default: `new Client()` (found by the CLI's rule).
   */
  client?: Client | ClientOptions | false;
}

/** What the hook has reported so far. */
export interface BanStats {
  /** Bans reported and taken. */
  reported: number;
  /** Reports answered `unknown_lease`: the session had no upstream bound any more (the gateway judged the answer itself, or another report came first). */
  unbound: number;
  /** Reports that could not be delivered (logged). */
  failed: number;
}

/** The part of Crawlee's crawling context the hook reads. */
interface Context {
  session?: Session;
  request?: { url: string; loadedUrl?: string };
  response?: unknown;
}

/**
 * A pre-navigation hook as every Crawlee crawler takes one (each passes its own context
 * type; the hook reads only the context's session, request and response).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Hook = (context: any, ...rest: any[]) => void;

/** Sessions reported once, remembered up to this many (a retired session is never used again). */
const REMEMBERED = 65_536;

const WRAPPED = Symbol("proxypool.session");

export class ProxyPoolConfiguration extends ProxyConfiguration {
  readonly gateway: string;
  readonly pool: string | undefined;
  readonly client: Client | null;
  readonly stats: BanStats = { reported: 0, unbound: 0, failed: 0 };
  readonly #route: Omit<GatewayRoute, "session">;
  readonly #reported = new Set<string>();
  readonly #pending = new Set<Promise<void>>();
  readonly #log = crawleeLog.child({ prefix: "ProxyPool" });

  constructor(options: ProxyPoolConfigurationOptions) {
    super({});
    const token = options.token ?? process.env.PROXYPOOL_GATEWAY_TOKEN;
    this.#route = {
      ...(options.pool !== undefined ? { pool: options.pool } : {}),
      ...(options.tags !== undefined ? { tags: options.tags } : {}),
      ...(token ? { token } : {}),
    };
    gatewayUrl(options.gateway, this.#route); // refuses a bad gateway, pool or tag now
    for (const [what, text] of [
      ["token", token ?? ""],
      ["pool or tags", gatewayUsername(this.#route)],
    ] as const) {
      if (!survivesUrlSetters(text)) {
        throw new TypeError(
          `the gateway's ${what} holds "%", which Crawlee cannot carry: it puts credentials back into URLs with ` +
            "Node's URL setters, which leave % as written, and the gateway would then get another value",
        );
      }
    }
    this.gateway = options.gateway;
    this.pool = options.pool;
    const c = options.client;
    this.client = c === false ? null : c instanceof Client ? c : new Client(c ?? {});
  }

  /** The gateway URL for Crawlee session `sessionId` (without one: a new upstream per request). */
  override async newUrl(sessionId?: string | number, _options?: Parameters<ProxyConfiguration["newUrl"]>[1]): Promise<string> {
    const session = sessionId === undefined || sessionId === null ? undefined : String(sessionId);
    return gatewayUrl(this.gateway, { ...this.#route, ...(session !== undefined ? { session } : {}) });
  }

  /**
   * The pre-navigation hook (`preNavigationHooks: [proxypool.preNavigationHook]`): it
   * watches this request's session, so that Crawlee retiring it, or marking it bad, on a
   * blocked status reports the ban.
   */
  readonly preNavigationHook: Hook = (context: Context): void => {
    const session = context.session;
    if (session === undefined || session === null || (session as unknown as Record<symbol, unknown>)[WRAPPED]) return;
    context.session = this.#watch(session, context);
  };

  /**
   * Crawler options with this configuration and its hook added: `new
   * CheerioCrawler(proxypool.crawlerOptions({ requestHandler }))`.
   */
  crawlerOptions<T extends object>(options: T): T & { proxyConfiguration: ProxyPoolConfiguration; preNavigationHooks: Hook[] } {
    const hooks = (options as { preNavigationHooks?: Hook[] }).preNavigationHooks ?? [];
    return { ...options, proxyConfiguration: this, preNavigationHooks: [this.preNavigationHook, ...hooks] };
  }

  /** Wait for the reports sent so far (call it after `crawler.run()`), then close the client's idle connections. */
  async flush(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
    await this.client?.close();
  }

  /** The session as this request sees it: Crawlee's own object, with its verdicts watched. */
  #watch(session: Session, context: Context): Session {
    let seen = false;
    const ban = (how: string, blocked: boolean): void => {
      if (seen) return;
      seen = true;
      this.#ban(session.id, context, how, blocked);
    };
    const methods: Record<PropertyKey, unknown> = {
      [WRAPPED]: true,
      retire(): void {
        session.retire();
        ban("retired", false);
      },
      markBad(): void {
        session.markBad();
        ban("marked bad", true);
      },
      retireOnBlockedStatusCodes(status: number, additional: number[] = []): boolean {
        const blocked = session.retireOnBlockedStatusCodes(status, additional);
        if (blocked) ban("retired", false);
        return blocked;
      },
    };
    return new Proxy(session, {
      get(target, prop) {
        if (Object.prototype.hasOwnProperty.call(methods, prop)) return methods[prop];
        const value = Reflect.get(target, prop, target) as unknown;
        return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
      set(target, prop, value) {
        return Reflect.set(target, prop, value, target);
      },
    });
  }

  /**
   * Crawlee gave up on `sessionId` after this request's response: report the ban by
   * session, once. A session that failed without a response from the site (the gateway's
   * own answer, a broken tunnel) is the gateway's to judge, and it has; a session marked
   * bad counts only on a blocked status, since Crawlee marks one bad for any error.
   */
  #ban(sessionId: string, context: Context, how: string, needBlockedStatus: boolean): void {
    if (this.client === null || this.#reported.has(sessionId)) return;
    const response = context.response as Parameters<typeof classifyResponse>[0] | undefined;
    if (response === undefined || response === null) return;
    const blocked = blockedStatuses(context.session);
    const url = context.request?.loadedUrl ?? context.request?.url;
    const verdict = classifyResponse(response, { banStatuses: blocked, ...destinationOf(response, url) });
    let report = verdict.report;
    if (verdict.gatewayError !== null) return;
    if (report === null) {
      // Retired on something else than a status (a captcha the handler found): still a ban.
      if (needBlockedStatus) return;
      report = { outcome: "failure", reason: "destination_status", phase: "response_head", status: verdict.status, ...destinationOf(response, url) };
    }
    this.#remember(sessionId);
    const task = this.#send(sessionId, report, `crawlee ${how} the session on HTTP ${verdict.status}`);
    this.#pending.add(task);
    void task.finally(() => this.#pending.delete(task));
  }

  async #send(sessionId: string, report: SessionReport, detail: string): Promise<void> {
    const client = this.client as Client;
    const pool = report.pool ?? this.pool;
    try {
      await client.reportSession(sessionId, "failure", {
        ...report,
        ...(pool !== undefined ? { pool } : {}),
        detail,
      });
      this.stats.reported++;
      this.#log.debug(`reported the ban of session ${sessionId}`, { destination: report.destination, status: report.status });
    } catch (e) {
      if (e instanceof UnknownLease) {
        this.stats.unbound++;
        this.#log.debug(`session ${sessionId} had no upstream bound any more: ${e.detail}`);
      } else {
        this.stats.failed++;
        this.#log.warning(`could not report the ban of session ${sessionId}: ${(e as Error).message}`);
      }
    }
  }

  #remember(sessionId: string): void {
    this.#reported.add(sessionId);
    if (this.#reported.size > REMEMBERED) {
      const oldest = this.#reported.values().next().value as string;
      this.#reported.delete(oldest);
    }
  }
}

/**
 * Whether `text` comes back unchanged from a URL's password setter and
 * `decodeURIComponent`, as Crawlee's browser plugins pass credentials on (`%` does not:
 * the setter leaves it unescaped).
 */
function survivesUrlSetters(text: string): boolean {
  const url = new URL("http://h");
  url.password = text;
  try {
    return decodeURIComponent(url.password) === text;
  } catch {
    return false;
  }
}

/** The statuses Crawlee's session pool counts as blocked (its `blockedStatusCodes`). */
function blockedStatuses(session: Session | undefined): readonly number[] {
  const pool = (session as unknown as { sessionPool?: { blockedStatusCodes?: unknown } } | undefined)?.sessionPool;
  const codes = pool?.blockedStatusCodes;
  return Array.isArray(codes) && codes.length > 0 ? (codes as number[]) : [401, ...DEFAULT_BAN_STATUSES];
}

function destinationOf(response: unknown, fallbackUrl: string | undefined): { destination?: string } {
  let url: unknown = (response as { url?: unknown }).url;
  try {
    if (typeof url === "function") url = (url as () => unknown).call(response);
    const host = new URL(typeof url === "string" && url ? url : (fallbackUrl ?? "")).hostname;
    return host ? { destination: host } : {};
  } catch {
    return {};
  }
}
