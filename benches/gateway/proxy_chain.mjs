// proxy-chain (npm, the gateway Crawlee uses) on 127.0.0.1:PORT, chaining every request to
// one upstream HTTP proxy. Usage: node proxy_chain.mjs MODULES_DIR PORT UPSTREAM_URL
// MODULES_DIR is where `npm install proxy-chain` was run.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [dir, port, upstream] = process.argv.slice(2);
if (!dir || !port || !upstream) {
    console.error('usage: node proxy_chain.mjs MODULES_DIR PORT UPSTREAM_URL');
    process.exit(2);
}
const entry = createRequire(`${dir}/`).resolve('proxy-chain');
const { Server } = await import(pathToFileURL(entry).href);
const server = new Server({
    host: '127.0.0.1',
    port: Number(port),
    verbose: false,
    prepareRequestFunction: () => ({ upstreamProxyUrl: upstream }),
});
await server.listen();
console.log(`proxy-chain on 127.0.0.1:${port} -> ${upstream}`);
