#!/usr/bin/env bash
# Where the gateway's own CPU goes under a load of run.sh: `perf record -g` on the daemon
# while CLIENTS clients open CONNECT tunnels through it to tinyproxy (LOAD=tunnels) or send
# absolute-form GETs through it with wrk (LOAD=absolute). Prints the
# share of samples by shared object (kernel, libc, proxypool...), the inclusive share of
# the busiest system calls and of the scheduler, and the binary's own busiest functions,
# for BENCHMARKS.md.
#
#   benches/gateway/profile.sh
#
# Environment (all optional):
#   LOAD=tunnels      tunnels | absolute
#   DURATION=8        seconds recorded
#   CLIENTS=8         concurrent clients
#   PROXYPOOL_BIN=... default: target/profiling/proxypool, built here with cargo
#                     (`--profile profiling`: release code with line tables, so
#                     symbols and lines resolve; the release binary has none)
#   LOADGEN=...       default: benches/gateway_load.rs, built here with cargo
#
# Needs perf (Debian linux-perf) with the right to sample the daemon and the kernel (root,
# or kernel.perf_event_paranoid <= 1), nginx, tinyproxy, python3, cargo.
set -euo pipefail

# Release code with line tables (Cargo.toml, [profile.profiling]).
GW_PROFILE=${GW_PROFILE:-profiling}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

DURATION=${DURATION:-8}
CLIENTS=${CLIENTS:-8}
LOAD=${LOAD:-tunnels}
case $LOAD in
tunnels) ;;
absolute) gw_need wrk "Debian package wrk" ;;
*) gw_log "LOAD=$LOAD: expected tunnels or absolute"; exit 2 ;;
esac

gw_need perf "Debian package linux-perf"
gw_need nginx "Debian package nginx-light"
gw_need tinyproxy "Debian package tinyproxy"
gw_need python3 "Debian package python3"
gw_need cargo "the Rust toolchain"
gw_require_all || exit 2

D=$(mktemp -d /tmp/gwprof.XXXXXX)
trap 'gw_cleanup; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM
ulimit -n "$(ulimit -Hn)"

LOADGEN=$(gw_loadgen "$ROOT" "$D/cargo.err")
PP=$(gw_proxypool "$ROOT" "$D/cargo.err")

gw_tunnel_fixtures "$D"
GW_PORT=$(gw_free_port)
gw_start_gateway "$D/gateway" "$PP" "$GW_PORT" forward "http://127.0.0.1:$TP_PORT"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ $LOAD == tunnels ]]; then
    "$LOADGEN" tunnels --proxy "127.0.0.1:$GW_PORT" --target "$DEST" --path /small \
        --clients "$CLIENTS" --secs $((DURATION + 2)) >"$D/load.out" &
else
    wrk -t 2 -c "$CLIENTS" -d "$((DURATION + 2))s" --timeout 5s -s "$HERE/absolute.lua" \
        "http://127.0.0.1:$GW_PORT/" -- "$DEST" /small 2>&1 |
        awk '/^WRK / { printf "rate=%.1f\n", $3 / ($5 / 1e6) }' FS='[ =]+' >"$D/load.out" &
fi
LOADER=$!
gw_track "$LOADER"
perf record -q -g -o "$D/perf.data" -p "$GW_GATEWAY_PID" -- sleep "$DURATION" 2>"$D/perf.err" ||
    { cat "$D/perf.err" >&2; exit 1; }
wait "$LOADER"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
line=$(cat "$D/load.out")
gw_log "$LOAD: $line"

perf report -i "$D/perf.data" --stdio --no-children --sort dso -g none 2>/dev/null >"$D/dso.txt"
perf report -i "$D/perf.data" --stdio --children --sort sym -g none 2>/dev/null >"$D/sym.txt"
perf report -i "$D/perf.data" --stdio --no-children --sort sym -g none \
    --dsos "$(basename "$PP")" 2>/dev/null >"$D/own.txt"
samples=$(sed -n 's/^# Samples: \([^ ]*\).*/\1/p' "$D/dso.txt" | head -1)

echo
echo "Gateway profile — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $CLIENTS clients, ${DURATION}s recorded,"
echo "$samples samples, $(gw_kv rate "$line") $([[ $LOAD == tunnels ]] && echo tunnels || echo absolute-form GETs)/s; load average before $LOAD_BEFORE, after $LOAD_AFTER."
echo
python3 - "$D/dso.txt" "$D/sym.txt" "$D/own.txt" <<'PY'
import re, sys

def rows(path):
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        yield line.split()

print("| shared object | share of samples |")
print("|---|---:|")
for f in rows(sys.argv[1]):
    if f[0].endswith("%") and float(f[0][:-1]) >= 0.5:
        print(f"| `{f[1]}` | {f[0]} |")
print()
print("| in (inclusive) | share of samples |")
print("|---|---:|")
seen = set()
for f in rows(sys.argv[2]):
    # "Children  Self  [k]  symbol"
    if len(f) < 4 or not f[0].endswith("%"):
        continue
    sym = f[-1]
    m = re.fullmatch(r"__(?:x64|arm64)_sys_(\w+)", sym)
    name = m.group(1) if m else ("scheduler (context switches)" if sym == "__schedule" else None)
    if name and name not in seen and float(f[0][:-1]) >= 1.0:
        seen.add(name)
        print(f"| {name if name.startswith('sched') else '`' + name + '`'} | {f[0]} |")
print()
print("| the binary's own code, busiest functions (self) | share of all samples |")
print("|---|---:|")
shown = 0
for f in rows(sys.argv[3]):
    if shown == 25 or len(f) < 3 or not f[0].endswith("%"):
        continue
    shown += 1
    sym = " ".join(f[2:])[:110].replace("|", "\\|")
    print(f"| `{sym}` | {f[0]} |")
PY
