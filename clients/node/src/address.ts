/**
 * Where a client talks to the daemon: a Unix socket path, or `tcp://HOST:PORT`.
 *
 * Over TCP the daemon wants a token on every request. Unless one is given, the token is
 * `PROXYPOOL_LEASE_TOKEN` if set, else `PROXYPOOL_TOKEN` (the CLI's rule). A token is
 * never part of an address's text or an error message.
 */

export type Address = { readonly kind: "unix"; readonly path: string } | TcpAddress;

export interface TcpAddress {
  readonly kind: "tcp";
  readonly host: string;
  readonly port: number;
}

export type Environment = Readonly<Record<string, string | undefined>>;

/** The address as written: the socket path, or `tcp://HOST:PORT`. */
export function formatAddress(address: Address): string {
  if (address.kind === "unix") return address.path;
  const host = address.host.includes(":") ? `[${address.host}]` : address.host;
  return `tcp://${host}:${address.port}`;
}

/** `tcp://HOST:PORT` (an IPv6 host in brackets), `unix://PATH`, or else a socket path. */
export function parseAddress(value: string | Address): Address {
  if (typeof value !== "string") return value;
  if (!value) throw new TypeError("empty daemon address: give a socket path or tcp://HOST:PORT");
  const sep = value.indexOf("://");
  if (sep < 0) return { kind: "unix", path: value };
  const scheme = value.slice(0, sep).toLowerCase();
  const rest = value.slice(sep + 3);
  if (scheme === "unix") return { kind: "unix", path: rest };
  if (scheme !== "tcp") {
    throw new TypeError(`daemon address ${JSON.stringify(value)}: expected a socket path or tcp://HOST:PORT`);
  }
  if (rest.includes("@")) {
    throw new TypeError(
      `daemon address tcp://${rest.slice(rest.lastIndexOf("@") + 1)}: give the token with the token option ` +
        "or PROXYPOOL_TOKEN, not in the address",
    );
  }
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:/?#[\]]+)):(\d{1,5})\/?$/.exec(rest);
  const port = m ? Number(m[3]) : 0;
  if (!m || port < 1 || port > 65535) {
    throw new TypeError(`daemon address ${JSON.stringify(value)}: expected tcp://HOST:PORT`);
  }
  return { kind: "tcp", host: (m[1] ?? m[2]) as string, port };
}

/** `PROXYPOOL_LEASE_TOKEN` if set and not empty, else `PROXYPOOL_TOKEN`, else null. */
export function tokenFromEnv(env: Environment = process.env): string | null {
  return env.PROXYPOOL_LEASE_TOKEN || env.PROXYPOOL_TOKEN || null;
}

/**
 * The token to send: null on a Unix socket; over TCP the given one, else the
 * environment's. A TCP address without any token is refused here, before anything is
 * sent, since the daemon would refuse every request.
 */
export function resolveToken(address: Address, token: string | undefined, env: Environment = process.env): string | null {
  if (address.kind === "unix") return null;
  const chosen = token ?? tokenFromEnv(env);
  if (!chosen) {
    throw new TypeError(
      `${formatAddress(address)} needs a token: pass the token option, or set PROXYPOOL_LEASE_TOKEN or PROXYPOOL_TOKEN`,
    );
  }
  return chosen;
}
