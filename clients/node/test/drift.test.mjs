// What the package copies from the daemon, checked against the daemon built from the
// same checkout: its version, the reasons and phases a report may name, the error codes
// it answers, and the statuses its gateway treats as bans. Each test fails when one side
// changes without the other.
import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import * as pp from "proxypool-client";
import { events, fx, getThrough } from "./fixtures.mjs";

function cargoVersion() {
  const text = readFileSync(join(fx.root, "Cargo.toml"), "utf8");
  const pkg = text.split("[package]")[1].split(/\n\[/)[0];
  const m = /^version\s*=\s*"([^"]+)"/m.exec(pkg);
  assert.ok(m, "no version in Cargo.toml's [package]");
  return m[1];
}

function* rustSources(dir = join(fx.root, "src")) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) yield* rustSources(p);
    else if (name.endsWith(".rs")) yield readFileSync(p, "utf8");
  }
}

/** The names of `string_enum! { ... Name { Variant => "name", ... } }`. */
function rustStringEnum(name) {
  const pattern = new RegExp(`string_enum!\\s*\\{[^{]*?\\b${name}\\s*\\{([\\s\\S]*?)\\n\\s*\\}`);
  for (const text of rustSources()) {
    const m = pattern.exec(text);
    if (m) return [...m[1].matchAll(/=>\s*"([a-z_]+)"/g)].map((x) => x[1]);
  }
  assert.fail(`no string_enum! named ${name} under src/: update this test to where the list lives`);
}

test("the package version is the daemon's", async () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  const c = new pp.Client({ address: fx.socket });
  const running = await c.ping();
  await c.close();
  const want = cargoVersion();
  assert.deepEqual([pkg.version, pp.VERSION, running], [want, want, want], "package.json, VERSION, the daemon: keep them in step");
});

test("the reasons are the daemon's", async () => {
  const c = new pp.Client({ address: fx.socket });
  const lease = await c.lease({ pool: "gw" });
  const refused = await c.report(lease, "failure", { reason: "no_such_reason" }).then(
    () => assert.fail("an unknown reason was taken"),
    (e) => e,
  );
  await lease.release();
  await c.close();
  assert.ok(refused instanceof pp.BadRequest, String(refused));
  const m = /expected one of: ([a-z_, ]+)$/.exec(refused.detail);
  assert.ok(m, refused.detail);
  const daemon = m[1].split(",").map((r) => r.trim());
  assert.deepEqual([...daemon].sort(), [...pp.REASONS].sort());
  assert.deepEqual(rustStringEnum("Reason"), daemon);
});

test("the phases are the daemon's", async () => {
  const phases = [...pp.PHASES, "no_such_phase"];
  const c = new pp.Client({ address: fx.socket });
  await c.request("add", { pool: "phases", urls: phases.map((_, i) => `http://127.0.0.1:${33000 + i}`) });
  for (const phase of phases) {
    const lease = await c.lease({ pool: "phases" });
    await c.report(lease, "failure", { reason: "connect_refused", phase, detail: `drift:${phase}` });
  }
  await c.close();
  const stored = {};
  for (const e of await events()) {
    if (e.kind === "report" && (e.detail ?? "").startsWith("drift:")) stored[e.detail.slice(6)] = e.phase;
  }
  assert.deepEqual(stored, { ...Object.fromEntries(pp.PHASES.map((p) => [p, p])), no_such_phase: null });
  assert.deepEqual([...rustStringEnum("Phase")].sort(), [...pp.PHASES].sort());
});

test("every error code of the daemon has its class", () => {
  let body = null;
  for (const text of rustSources()) {
    const m = /pub enum ErrorCode\s*\{([\s\S]*?)\n\}/.exec(text);
    if (m) body = m[1];
  }
  assert.ok(body, "no `pub enum ErrorCode` under src/: update this test to where the codes live");
  const codes = [...body.matchAll(/^\s*([A-Z][A-Za-z0-9]*),/gm)].map((m) => m[1].replace(/(?<!^)([A-Z])/g, "_$1").toLowerCase());
  assert.ok(["bad_request", "pool_exhausted", "internal"].every((c) => codes.includes(c)), codes.join());
  const missing = codes.filter((c) => !(c in pp.ERRORS) || pp.ERRORS[c] === pp.ProxyPoolError);
  assert.deepEqual(missing, [], "error codes without a class of their own");
  for (const code of codes) assert.equal(pp.errorFor(code, "m").constructor, pp.ERRORS[code]);
});

test("the default ban statuses are the gateway's", async () => {
  // The drift gateway keeps its defaults: it reports each status it counts as a ban.
  const tried = [400, 403, 404, 429, 500, 502, 503];
  for (const status of tried) {
    const r = await getThrough(pp.gatewayUrl(fx.driftGateway, { token: fx.gatewayToken }), `${fx.site}/status/${status}`);
    assert.equal(r.status, status, r.body);
  }
  const banned = new Set(
    (await events()).filter((e) => e.kind === "report" && e.reason === "destination_status" && fx.pools.drift.some((d) => d.id === e.endpoint)).map((e) => e.status),
  );
  assert.deepEqual([...banned].sort(), pp.DEFAULT_BAN_STATUSES.filter((s) => tried.includes(s)).sort());
});
