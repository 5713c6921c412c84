// The published shape: what `npm pack` would ship, the exports map, ESM and CommonJS
// builds with the same names, their .d.ts files, no runtime dependencies.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const require = createRequire(import.meta.url);

test("the package ships its builds, their types and nothing else, and depends on nothing", () => {
  const npm = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ["npm"];
  const out = execFileSync(npm[0], [...npm.slice(1), "pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8" });
  const files = JSON.parse(out)[0].files.map((f) => f.path);
  for (const want of ["package.json", "README.md", "dist/esm/index.js", "dist/esm/index.d.ts", "dist/cjs/index.js", "dist/cjs/index.d.ts", "dist/cjs/package.json", "dist/esm/crawlee.js", "dist/cjs/crawlee.d.ts"]) {
    assert.ok(files.includes(want), `${want} not shipped: ${files}`);
  }
  assert.deepEqual(files.filter((f) => !/^(package\.json|README\.md|dist\/(esm|cjs)\/[a-z]+\.(js|d\.ts)|dist\/cjs\/package\.json)$/.test(f)), []);
  assert.equal(pkg.dependencies, undefined, "no runtime dependencies");
  assert.deepEqual(Object.keys(pkg.peerDependencies), ["@crawlee/core"]);
  assert.equal(pkg.peerDependenciesMeta["@crawlee/core"].optional, true);
  for (const [entry, conditions] of Object.entries(pkg.exports)) {
    if (typeof conditions === "string") continue;
    for (const kind of ["import", "require"]) {
      for (const file of [conditions[kind].types, conditions[kind].default]) {
        assert.ok(existsSync(join(root, file)), `${entry} ${kind}: ${file} missing`);
      }
    }
  }
});

test("the ESM and CommonJS builds export the same names, with types", async () => {
  for (const entry of ["proxypool-client", "proxypool-client/crawlee"]) {
    const esm = await import(entry);
    const cjs = require(entry);
    assert.deepEqual(Object.keys(esm).sort(), Object.keys(cjs).filter((k) => k !== "__esModule").sort(), entry);
  }
  const cjs = require("proxypool-client");
  assert.equal(cjs.VERSION, pkg.version);
  assert.ok(new cjs.PoolEmpty("pool_empty", "m") instanceof cjs.PoolExhausted);
  // A TypeScript user's code type-checks against the .d.ts files, as ESM and as CommonJS.
  const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
  try {
    execFileSync(process.execPath, [tsc, "-p", join(root, "test", "types", "tsconfig.json")], { cwd: root, encoding: "utf8" });
  } catch (e) {
    assert.fail(`the types do not check:\n${e.stdout}${e.stderr}`);
  }
});
