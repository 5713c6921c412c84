#!/usr/bin/env bash
# Heap allocations the gateway makes per CONNECT tunnel (connect, `CONNECT host:port`, one
# small GET inside, close): uprobes on the allocator's entry points (mimalloc, linked into
# the release binary), counted with `perf stat` while one client opens tunnels through the
# daemon to tinyproxy. Counts are exact, unlike times on a shared machine: what a change
# to the tunnel's path saves shows here whatever the noise. Prints a markdown table.
#
#   benches/gateway/allocs.sh
#
# Environment (all optional):
#   DURATION=3        seconds of tunnels
#   PROXYPOOL_BIN=... default: target/release/proxypool, built here with cargo
#   LOADGEN=...       default: benches/gateway_load.rs, built here with cargo
#
# Needs perf (Debian linux-perf) with the right to add uprobes (root), nginx, tinyproxy,
# python3, cargo. Traffic stays on 127.0.0.1.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

DURATION=${DURATION:-3}

gw_need perf "Debian package linux-perf"
gw_need nginx "Debian package nginx-light"
gw_need tinyproxy "Debian package tinyproxy"
gw_need python3 "Debian package python3"
gw_need cargo "the Rust toolchain"
gw_require_all || exit 2

D=$(mktemp -d /tmp/gwalloc.XXXXXX)
GROUP=ppalloc$$
STAT=
cleanup() {
    # perf stat first: the kernel keeps probes that are still in use.
    if [[ -n $STAT ]]; then
        kill -INT "$STAT" 2>/dev/null || true
        wait "$STAT" 2>/dev/null || true
    fi
    perf probe -q -d "$GROUP:*" 2>/dev/null || true
    gw_cleanup
    rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

LOADGEN=$(gw_loadgen "$ROOT" "$D/cargo.err")
PP=$(gw_proxypool "$ROOT" "$D/cargo.err")
# A copy of its own: the probes are set on this file.
cp "$PP" "$D/proxypool"
PP=$D/proxypool

gw_tunnel_fixtures "$D"
GW_PORT=$(gw_free_port)
gw_start_gateway "$D/gateway" "$PP" "$GW_PORT" forward "http://127.0.0.1:$TP_PORT"
# One warm-up: the first tunnel pays for lazy setup.
"$LOADGEN" tunnels --proxy "127.0.0.1:$GW_PORT" --target "$DEST" --clients 1 --secs 0.2 >/dev/null

FNS="mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned mi_free"
events=()
for f in $FNS; do
    perf probe -q -x "$PP" --add "$GROUP:$f=$f" 2>"$D/probe.err" ||
        { gw_log "cannot probe $f:"; cat "$D/probe.err" >&2; exit 1; }
    events+=(-e "$GROUP:$f")
done
perf stat -x, -o "$D/stat.txt" "${events[@]}" -p "$GW_GATEWAY_PID" &
STAT=$!
sleep 1
line=$("$LOADGEN" tunnels --proxy "127.0.0.1:$GW_PORT" --target "$DEST" --path /small \
    --clients 1 --secs "$DURATION")
sleep 0.5
kill -INT "$STAT"
wait "$STAT" || true
STAT=
gw_log "tunnels: $line"
[[ $(gw_kv errors "$line") == 0 ]] || { gw_log "tunnels failed: $line"; exit 1; }
TUNNELS=$(gw_kv ok "$line")

echo
echo "Gateway heap calls per tunnel — $(date -u '+%Y-%m-%d %H:%M UTC'), $TUNNELS tunnels from one client"
echo "(the daemon's idle background in the same seconds included; it allocates nothing measurable)."
echo
python3 - "$D/stat.txt" "$TUNNELS" <<'PY'
import sys
n = int(sys.argv[2])
print("| allocator call | per tunnel |")
print("|---|---:|")
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].isdigit():
        print(f"| `{f[2].split(':')[-1]}` | {int(f[0]) / n:.2f} |")
PY
