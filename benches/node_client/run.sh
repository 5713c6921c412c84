#!/usr/bin/env bash
# Leases + releases a second over the daemon's Unix socket from one process: a bare loop
# of Node `net` writes and reads of the client's own lines and the Node client
# (clients/node), in alternating 200 ms slices of one Node process, then the Python
# package's asyncio client, round by round against one daemon, at 1 and at 16 calls in
# flight.
#
#   benches/node_client/run.sh [BIN]
#
# Needs: a built proxypool (BIN, default target/release/proxypool: `cargo build
# --release`), Node with `npm ci` done in clients/node, python3.
# Knobs: ROUNDS (default 5), SECONDS_PER figure (default 3), ENDPOINTS in the pool (64).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:-target/release/proxypool}"
rounds="${ROUNDS:-5}"
seconds="${SECONDS_PER:-3}"
endpoints="${ENDPOINTS:-64}"
[ -x "$bin" ] || { echo "no $bin: cargo build --release" >&2; exit 1; }
(cd clients/node && node scripts/build.mjs)

home="$(mktemp -d)"
trap 'kill "$daemon" 2>/dev/null || true; rm -rf "$home"' EXIT
printf '[[pool]]\nname = "bench"\nmode = "static-no-ping"\n' >"$home/proxies.toml"
export PROXYPOOL_CONFIG="$home/proxies.toml" PROXYPOOL_DB="$home/pp.db" PROXYPOOL_SOCKET="$home/pp.sock"
unset XDG_RUNTIME_DIR PROXYPOOL_CONNECT
urls=()
for i in $(seq 1 "$endpoints"); do urls+=("http://127.0.0.1:$((40000 + i))"); done
"$bin" add --pool bench "${urls[@]}" >/dev/null
"$bin" serve 2>"$home/daemon.log" &
daemon=$!
for _ in $(seq 1 200); do "$bin" ping >/dev/null 2>&1 && break; sleep 0.05; done

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), load: $(cut -d' ' -f1-3 /proc/loadavg), node $(node --version), $(python3 --version)"
for c in 1 16; do
    for r in $(seq 1 "$rounds"); do
        node=$(node benches/node_client/bench.mjs "$PROXYPOOL_SOCKET" bench "$seconds" "$c")
        py=$(python3 benches/node_client/asyncio_bench.py "$PROXYPOOL_SOCKET" bench "$seconds" "$c")
        python3 - "$c" "$r" "$node" "$py" <<'PY'
import json, sys
c, r = sys.argv[1], sys.argv[2]
node, py = json.loads(sys.argv[3]), json.loads(sys.argv[4])
print("in flight %2s round %s: bare %7.0f/s  client %7.0f/s  client/bare %.2f  "
      "(node CPU per lease+release: bare %5.1f us, client %5.1f us)  python asyncio %7.0f/s"
      % (c, r, node["bare"], node["client"], node["client"] / node["bare"], node["bareCpuUs"],
         node["clientCpuUs"], py["rate"]))
PY
    done
done
