/**
 * Where the daemon is, by the same rule as the `proxypool` CLI.
 *
 * `PROXYPOOL_CONNECT` (`tcp://HOST:PORT`, with `PROXYPOOL_LEASE_TOKEN` or
 * `PROXYPOOL_TOKEN`) comes first when set. Otherwise the Unix socket:
 * `PROXYPOOL_SOCKET`; else the config file's `[server] socket`; else
 * `$XDG_RUNTIME_DIR/proxypool.sock`; else beside the database (`proxypool.db` →
 * `proxypool.sock`). The database is `PROXYPOOL_DB`, else the config's `[store] path`,
 * else `$XDG_DATA_HOME/proxypool/proxypool.db` (or `~/.local/share/...`). The config is
 * `PROXYPOOL_CONFIG`, else `$XDG_CONFIG_HOME/proxypool/proxies.toml` when it exists.
 * Relative paths in the config are relative to its folder.
 */

import { existsSync, readFileSync } from "node:fs";
import { dirname, isAbsolute, join, parse as parsePath } from "node:path";

import { type Address, type Environment, parseAddress } from "./address.js";
import { tableString } from "./toml.js";

function xdgDir(env: Environment, name: string, fallback: string): string {
  return env[name] || join(env.HOME || ".", fallback);
}

export function defaultDbPath(env: Environment = process.env): string {
  return join(xdgDir(env, "XDG_DATA_HOME", ".local/share"), "proxypool", "proxypool.db");
}

export function defaultConfigPath(env: Environment = process.env): string {
  return join(xdgDir(env, "XDG_CONFIG_HOME", ".config"), "proxypool", "proxies.toml");
}

/** Rust's `Path::with_extension`: the last extension replaced (a leading dot starts none). */
function withExtension(path: string, ext: string): string {
  const p = parsePath(path);
  const stem = p.ext && p.name ? p.name : p.base;
  return join(p.dir, `${stem}.${ext}`);
}

function configPaths(env: Environment): { socket: string | null; db: string | null } {
  let path = env.PROXYPOOL_CONFIG || null;
  if (path === null) {
    path = defaultConfigPath(env);
    if (!existsSync(path)) return { socket: null, db: null };
  }
  const text = readFileSync(path, "utf8");
  const base = dirname(path);
  const resolve = (p: string | null): string | null => (p ? (isAbsolute(p) ? p : join(base, p)) : null);
  return { socket: resolve(tableString(text, "server", "socket")), db: resolve(tableString(text, "store", "path")) };
}

/** The Unix socket the CLI (and `proxypool serve`) would use in this environment. */
export function defaultSocketPath(env: Environment = process.env): string {
  if (env.PROXYPOOL_SOCKET) return env.PROXYPOOL_SOCKET;
  const cfg = configPaths(env);
  if (cfg.socket) return cfg.socket;
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, "proxypool.sock");
  const db = env.PROXYPOOL_DB || cfg.db || defaultDbPath(env);
  return withExtension(db, "sock");
}

/** `PROXYPOOL_CONNECT` when set, else the Unix socket of `defaultSocketPath`. */
export function defaultAddress(env: Environment = process.env): Address {
  const connect = env.PROXYPOOL_CONNECT;
  if (connect) {
    try {
      return parseAddress(connect);
    } catch (e) {
      throw new TypeError(`PROXYPOOL_CONNECT: ${(e as Error).message}`);
    }
  }
  return { kind: "unix", path: defaultSocketPath(env) };
}
