// What a CommonJS user writes; it must type-check against the published .d.ts files.
import pp = require("proxypool-client");
import crawlee = require("proxypool-client/crawlee");

export async function use(): Promise<string> {
  const client = new pp.Client();
  const [status] = await client.status();
  const config = new crawlee.ProxyPoolConfiguration({ gateway: "http://127.0.0.1:8899", client: false });
  return `${status?.pool} ${await config.newUrl(1)} ${pp.REASONS.join()}`;
}
