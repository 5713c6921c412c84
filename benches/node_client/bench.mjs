// Two figures of benches/node_client/run.sh: leases + releases a second from this one
// process over the daemon's Unix socket, for SECONDS after a warm-up, two ways in
// alternating slices:
//
//   node bench.mjs SOCKET POOL SECONDS [CONCURRENCY]
//
// bare:   a loop of `net` writes and reads of the same lines the client sends (the
//         lease's id parsed from its answer), one connection per loop;
// client: the same loops through one shared proxypool-client `Client`
//         (`await client.lease()`, `await client.release()`).
import { createConnection } from "node:net";
import { once } from "node:events";

import { Client } from "../../clients/node/dist/esm/index.js";

const [socket, pool, secondsText, concurrencyText = "1"] = process.argv.slice(2);
const seconds = Number(secondsText);
const concurrency = Number(concurrencyText);

/** A bare JSON-lines connection: write a line, read the next one. */
async function bareConnection() {
  const sock = createConnection({ path: socket });
  await once(sock, "connect");
  let buf = "";
  let waiter = null;
  sock.setEncoding("utf8");
  sock.on("data", (chunk) => {
    buf += chunk;
    const nl = buf.indexOf("\n");
    if (nl >= 0 && waiter) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const w = waiter;
      waiter = null;
      w(line);
    }
  });
  let id = 0;
  return {
    exchange(req) {
      req.id = ++id;
      return new Promise((resolve) => {
        waiter = resolve;
        sock.write(JSON.stringify(req) + "\n");
      });
    },
    close: () => sock.destroy(),
  };
}

async function bareLoop(c, until) {
  let n = 0;
  while (performance.now() < until) {
    const grant = JSON.parse(await c.exchange({ op: "lease", pool }));
    if (!grant.ok) throw new Error(JSON.stringify(grant));
    const done = JSON.parse(await c.exchange({ op: "release", lease: grant.lease }));
    if (!done.ok) throw new Error(JSON.stringify(done));
    n++;
  }
  return n;
}

async function clientLoop(client, until) {
  let n = 0;
  while (performance.now() < until) {
    const lease = await client.lease({ pool });
    await client.release(lease);
    n++;
  }
  return n;
}

// Both ways side by side in this one process, in alternating slices of SLICE ms, so that
// whatever else the machine does falls on both alike.
const SLICE = 200;
const bare = await Promise.all(Array.from({ length: concurrency }, bareConnection));
const client = new Client({ address: socket, maxIdle: Math.max(16, concurrency) });
const totals = { bare: { ops: 0, ms: 0, cpu: 0 }, client: { ops: 0, ms: 0, cpu: 0 } };
async function slice(which, ms) {
  const cpu = process.cpuUsage();
  const start = performance.now();
  const until = start + ms;
  const counts =
    which === "bare"
      ? await Promise.all(bare.map((c) => bareLoop(c, until)))
      : await Promise.all(Array.from({ length: concurrency }, () => clientLoop(client, until)));
  const used = process.cpuUsage(cpu);
  return { ops: counts.reduce((a, b) => a + b, 0), ms: performance.now() - start, cpu: used.user + used.system };
}
// Warm-up: the JIT, the daemon's caches.
for (let i = 0; i < 3; i++) for (const which of ["bare", "client"]) await slice(which, SLICE);
const end = performance.now() + seconds * 1000;
let round = 0;
while (performance.now() < end) {
  // Alternate which goes first, too.
  for (const which of round++ % 2 ? ["client", "bare"] : ["bare", "client"]) {
    const r = await slice(which, SLICE);
    totals[which].ops += r.ops;
    totals[which].ms += r.ms;
    totals[which].cpu += r.cpu;
  }
}
await client.close();
for (const c of bare) c.close();
const rate = (t) => (t.ops * 1000) / t.ms;
// This process's CPU (user + system) per lease + release, in microseconds.
const cpu = (t) => t.cpu / t.ops;
console.log(
  JSON.stringify({
    concurrency,
    bare: rate(totals.bare),
    client: rate(totals.client),
    bareCpuUs: cpu(totals.bare),
    clientCpuUs: cpu(totals.client),
  }),
);
