// What the suite runs against: a daemon of this checkout's build, its gateway, real
// upstream proxies and a real site, started by tests/node_client.rs, which names them in
// the JSON file given by PROXYPOOL_TEST_FIXTURES. Run the suite through that test:
//
//     cargo test --test node_client
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import { promisify } from "node:util";

const path = process.env.PROXYPOOL_TEST_FIXTURES;
if (!path) {
  throw new Error(
    "PROXYPOOL_TEST_FIXTURES is not set: this suite runs against the daemon, gateway, upstreams and site " +
      "that `cargo test --test node_client` starts (build the package first: npm run build)",
  );
}

/** @type {{bin: string, root: string, env: Record<string,string>, socket: string, tcp: string, adminToken: string,
 *  leaseToken: string, gateway: string, driftGateway: string, gatewayToken: string, site: string, banned: string,
 *  pools: Record<string, {id: number, exit: string}[]>, chromium: string|null, chromiumArgs: string[]}} */
export const fx = JSON.parse(readFileSync(path, "utf8"));

const run = promisify(execFile);

/** The `proxypool` CLI of this build, in the daemon's home; its stdout. */
export async function cli(...args) {
  const { stdout } = await run(fx.bin, args, { env: { ...process.env, ...fx.env }, maxBuffer: 64 << 20 });
  return stdout;
}

/** Every event so far, oldest first (`proxypool events --json`). */
export async function events() {
  const out = await cli("events", "--json", "--limit", "100000");
  return out
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));
}

/** Poll `check` until it returns a value that is not undefined, or fail after `ms`. */
export async function eventually(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms${last ? `: ${last.message}` : ""}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** GET `url` through the HTTP proxy `proxyUrl` (absolute form, as any proxy client sends it). */
export function getThrough(proxyUrl, url) {
  const proxy = new URL(proxyUrl);
  const headers = { Host: new URL(url).host };
  if (proxy.username || proxy.password) {
    const cred = `${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`;
    headers["Proxy-Authorization"] = `Basic ${Buffer.from(cred).toString("base64")}`;
  }
  return new Promise((resolve, reject) => {
    const req = request({ host: proxy.hostname, port: proxy.port, path: url, headers }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body, url }));
    });
    req.on("error", reject);
    req.end();
  });
}

