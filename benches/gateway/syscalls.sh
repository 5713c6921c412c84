#!/usr/bin/env bash
# System calls the gateway makes per CONNECT tunnel (connect, `CONNECT host:port`, one
# small GET inside, close) or per absolute-form GET (LOAD=absolute: wrk on one kept
# connection, `GET http://host/small`), counted with `strace -c -f` attached to every
# thread of the daemon while one client sends them through it to tinyproxy. The daemon's idle
# background (timers, the store thread) is counted for as long again with no client, and
# subtracted. Prints a markdown table for BENCHMARKS.md.
#
#   benches/gateway/syscalls.sh
#
# Environment (all optional):
#   LOAD=tunnels      tunnels | absolute (needs wrk, Debian package wrk)
#   DURATION=3        seconds of tunnels (strace slows the daemon: a few thousand tunnels)
#   FRONT=gateway     what is traced: the proxypool gateway, "tokio-floor" (the bare relay
#                     of benches/gateway_load.rs) or "haproxy-tcp" (HAProxy as a TCP
#                     forwarder, as run.sh starts them), to set the gateway's calls beside
#                     theirs
#   PROXYPOOL_BIN=... default: target/release/proxypool, built here with cargo
#   LOADGEN=...       default: benches/gateway_load.rs, built here with cargo
#
# Needs strace, nginx, tinyproxy (Debian), python3, cargo, and the right to ptrace the
# daemon (root, or kernel.yama.ptrace_scope = 0). Traffic stays on 127.0.0.1.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

DURATION=${DURATION:-3}
LOAD=${LOAD:-tunnels}
case $LOAD in
tunnels) UNIT=tunnel ;;
absolute) UNIT="absolute-form GET" && gw_need wrk "Debian package wrk" ;;
*) gw_log "LOAD=$LOAD: expected tunnels or absolute"; exit 2 ;;
esac

gw_need strace "Debian package strace"
gw_need nginx "Debian package nginx-light"
gw_need tinyproxy "Debian package tinyproxy"
gw_need python3 "Debian package python3"
gw_need cargo "the Rust toolchain"
gw_require_all || exit 2

D=$(mktemp -d /tmp/gwsys.XXXXXX)
trap 'gw_cleanup; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM

LOADGEN=$(gw_loadgen "$ROOT" "$D/cargo.err")
PP=
[[ ${FRONT:-gateway} == gateway ]] && PP=$(gw_proxypool "$ROOT" "$D/cargo.err")

gw_tunnel_fixtures "$D"
GW_PORT=$(gw_free_port)
FRONT=${FRONT:-gateway}
case $FRONT in
gateway) gw_start_gateway "$D/gateway" "$PP" "$GW_PORT" forward "http://127.0.0.1:$TP_PORT" ;;
tokio-floor)
    gw_start_tokio_floor "$D" "$LOADGEN" "$GW_PORT" "$TP_PORT" || exit 1
    GW_GATEWAY_PID=$GW_FRONT_PID
    ;;
haproxy-tcp)
    gw_need haproxy "Debian package haproxy"
    gw_require_all || exit 2
    gw_start_haproxy_tcp "$D" "$GW_PORT" "$TP_PORT" || exit 1
    GW_GATEWAY_PID=$GW_FRONT_PID
    ;;
*) gw_log "FRONT=$FRONT: gateway, tokio-floor or haproxy-tcp"; exit 2 ;;
esac
# One warm-up tunnel: the first one pays for lazy setup (the upstream's first dial).
"$LOADGEN" tunnels --proxy "127.0.0.1:$GW_PORT" --target "$DEST" --clients 1 --secs 0.2 >/dev/null

# count OUT SECONDS [LOADGEN ARGS...]: strace every thread for SECONDS, optionally while
# the load generator runs; the summary goes to OUT, the load generator's line to stdout.
count() {
    local out=$1 secs=$2 t pid
    shift 2
    # -f with -p attaches every thread of the process, and those it starts later.
    strace -c -f -qq -o "$out" -p "$GW_GATEWAY_PID" &
    pid=$!
    # Counted from the moment every thread is traced.
    for t in /proc/"$GW_GATEWAY_PID"/task/*; do
        local i
        for ((i = 0; i < 200; i++)); do
            [[ $(awk '/^TracerPid:/ {print $2}' "$t/status" 2>/dev/null) != 0 ]] && break
            sleep 0.05
        done
        ((i < 200)) || { gw_log "strace did not attach to ${t##*/}"; exit 1; }
    done
    if (($# == 1)) && [[ $1 == absolute ]]; then
        # wrk's summary as `ok=N errors=M`: the requests it completed, and its connect,
        # write, status and timeout errors (a read error is a front closing a kept
        # connection, as HAProxy in front of tinyproxy does after every response).
        wrk -t 1 -c 1 -d "${secs}s" --timeout 5s -s "$HERE/absolute.lua" \
            "http://127.0.0.1:$GW_PORT/" -- "$DEST" /small 2>&1 |
            awk '/^WRK / { print "ok=" $3 " errors=" $7 + $11 + $13 + $15 }' FS='[ =]+'
    elif (($#)); then
        "$LOADGEN" "$@"
    else
        sleep "$secs"
    fi
    kill -INT "$pid"
    wait "$pid" || true
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ $LOAD == tunnels ]]; then
    line=$(count "$D/busy.txt" "$DURATION" tunnels --proxy "127.0.0.1:$GW_PORT" --target "$DEST" \
        --path /small --clients 1 --secs "$DURATION")
else
    line=$(count "$D/busy.txt" "$DURATION" absolute)
fi
gw_log "$LOAD: $line"
[[ $(gw_kv errors "$line") == 0 ]] || { gw_log "$LOAD failed: $line"; exit 1; }
TUNNELS=$(gw_kv ok "$line")
count "$D/idle.txt" "$DURATION"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "System calls per $UNIT of $FRONT — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $TUNNELS ${UNIT}s"
echo "in ${DURATION}s under strace from one client, minus ${DURATION}s idle; load average before $LOAD_BEFORE, after $LOAD_AFTER."
echo
python3 - "$D/busy.txt" "$D/idle.txt" "$TUNNELS" "$UNIT" <<'PY'
import re, sys

def calls(path):
    out = {}
    for line in open(path):
        f = line.split()
        # "% time  seconds  usecs/call  calls  [errors]  syscall"
        if len(f) >= 5 and re.fullmatch(r"[\d.]+", f[0]) and f[-1] != "total":
            out[f[-1]] = int(f[3])
    return out

busy, idle, n, unit = calls(sys.argv[1]), calls(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
per = {k: (v - idle.get(k, 0)) / n for k, v in busy.items()}
per = {k: v for k, v in per.items() if v >= 0.05}
print(f"| system call | per {unit} |")
print("|---|---:|")
for k, v in sorted(per.items(), key=lambda kv: -kv[1]):
    print(f"| `{k}` | {v:.2f} |")
waits = ("epoll_wait", "futex")
print(f"| **total** | **{sum(per.values()):.1f}** |")
print(f"| total without waiting and waking ({', '.join(f'`{w}`' for w in waits)}) | "
      f"{sum(v for k, v in per.items() if k not in waits):.1f} |")
PY
