#!/usr/bin/env bash
# Where the CPU goes, per operation: the CPU time (user + system, from /proc/PID/stat) that
# the front, tinyproxy, nginx and the client each spend per CONNECT tunnel and per
# absolute-form GET, directly through tinyproxy and through the proxypool gateway. On a
# machine where every process shares the same cores, throughput follows the total.
# Prints a markdown table for BENCHMARKS.md ("Where the CPU goes").
#
#   benches/gateway/cpu.sh
#
# Environment (all optional):
#   DURATION=5        seconds per measured load
#   CLIENTS=8         concurrent clients
#   ROWS="tunnel-direct tunnel-gateway get-direct get-gateway get-gateway-tunnel"
#   PROXYPOOL_BIN=... default: target/release/proxypool, built here with cargo
#   LOADGEN=...       default: benches/gateway_load.rs, built here with cargo
#   TOKIO_WORKER_THREADS=1   passed on to the gateway (its runtime's worker count)
#
# Needs nginx, tinyproxy, wrk (Debian), python3, cargo. Traffic stays on 127.0.0.1.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

DURATION=${DURATION:-5}
CLIENTS=${CLIENTS:-8}
ROWS=${ROWS:-tunnel-direct tunnel-gateway get-direct get-gateway get-gateway-tunnel}

gw_need nginx "Debian package nginx-light"
gw_need tinyproxy "Debian package tinyproxy"
gw_need wrk "Debian package wrk"
gw_need python3 "Debian package python3"
gw_need cargo "the Rust toolchain"
gw_require_all || exit 2

D=$(mktemp -d /tmp/gwcpu.XXXXXX)
trap 'gw_cleanup; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM
ulimit -n "$(ulimit -Hn)"

LOADGEN=$(gw_loadgen "$ROOT" "$D/cargo.err")
PP=$(gw_proxypool "$ROOT" "$D/cargo.err")

NGINX_PORT=$(gw_free_port)
TP_PORT=$(gw_free_port)
gw_start_nginx "$D" "$NGINX_PORT" 1
NGINX_PID=$GW_NGINX_PID
gw_start_tinyproxy "$D" "$TP_PORT"
TP_PID=$GW_TINYPROXY_PID
DEST=127.0.0.1:$NGINX_PORT
declare -A GW_PORT GW_PID
for mode in forward tunnel; do
    p=$(gw_free_port)
    gw_start_gateway "$D/gateway-$mode" "$PP" "$p" "$mode" "http://127.0.0.1:$TP_PORT"
    GW_PORT[$mode]=$p
    GW_PID[$mode]=$GW_GATEWAY_PID
done
TICK=$(getconf CLK_TCK)

# measure LABEL FRONT_PID PORT KIND: one load of DURATION seconds, CPU before and after.
declare -a OUT
measure() {
    local label=$1 front_pid=$2 port=$3 kind=$4 f0 t0 n0 f1 t1 n1 line ops client
    f0=0; [[ $front_pid != - ]] && f0=$(gw_cpu_ticks "$front_pid")
    t0=$(gw_cpu_ticks "$TP_PID")
    n0=$(gw_cpu_ticks "$NGINX_PID")
    local TIMEFORMAT='%3U %3S'
    if [[ $kind == tunnel ]]; then
        { time "$LOADGEN" tunnels --proxy "127.0.0.1:$port" --target "$DEST" --path /small \
            --clients "$CLIENTS" --secs "$DURATION" >"$D/out" ; } 2>"$D/time"
        line=$(cat "$D/out")
        ops=$(gw_kv ok "$line")
        [[ $(gw_kv errors "$line") == 0 ]] || gw_log "$label: $line"
    else
        { time wrk -t 2 -c "$CLIENTS" -d "${DURATION}s" --timeout 5s -s "$HERE/absolute.lua" \
            "http://127.0.0.1:$port/" -- "$DEST" /small >"$D/out" 2>&1 ; } 2>"$D/time"
        line=$(grep '^WRK ' "$D/out")
        ops=$(gw_kv requests "$line")
        [[ $(gw_kv status "$line") == 0 ]] || gw_log "$label: $line"
    fi
    f1=0; [[ $front_pid != - ]] && f1=$(gw_cpu_ticks "$front_pid")
    t1=$(gw_cpu_ticks "$TP_PID")
    n1=$(gw_cpu_ticks "$NGINX_PID")
    client=$(awk '{ print $1 + $2 }' "$D/time")
    gw_log "$label: $ops operations; $line"
    OUT+=("$(awk -v l="$label" -v ops="$ops" -v tick="$TICK" -v fr="$([[ $front_pid == - ]] && echo - || echo $((f1 - f0)))" \
        -v tp=$((t1 - t0)) -v ng=$((n1 - n0)) -v cl="$client" 'BEGIN {
        us = 1e6 / tick / ops
        f = (fr == "-") ? 0 : fr * us; t = tp * us; n = ng * us; c = cl * 1e6 / ops
        printf "| %s | %s | %.0f | %.0f | %.0f | **%.0f** |\n", l, (fr == "-") ? "—" : sprintf("%.0f", f), t, n, c, f + t + n + c
    }')")
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for row in $ROWS; do
    case $row in
    tunnel-direct) measure "tunnel, direct tinyproxy" - "$TP_PORT" tunnel ;;
    tunnel-gateway) measure "tunnel, through the gateway" "${GW_PID[forward]}" "${GW_PORT[forward]}" tunnel ;;
    get-direct) measure "absolute-form GET, direct tinyproxy" - "$TP_PORT" get ;;
    get-gateway) measure "GET, gateway \`forward\`" "${GW_PID[forward]}" "${GW_PORT[forward]}" get ;;
    get-gateway-tunnel) measure "GET, gateway \`tunnel\`" "${GW_PID[tunnel]}" "${GW_PORT[tunnel]}" get ;;
    *) gw_log "unknown row '$row'"; exit 2 ;;
    esac
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "CPU per operation — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $CLIENTS clients, ${DURATION}s per row,"
echo "load average before $LOAD_BEFORE, after $LOAD_AFTER${TOKIO_WORKER_THREADS:+, TOKIO_WORKER_THREADS=$TOKIO_WORKER_THREADS}."
echo
echo "| per operation, µs of CPU | front | tinyproxy | nginx | client | total |"
echo "|---|---:|---:|---:|---:|---:|"
printf '%s\n' "${OUT[@]}"
