#!/usr/bin/env bash
# Gateway benchmark (docs/gateway.md): the proxypool gateway side by side with direct
# tinyproxy, proxy-chain (npm) and pproxy (PyPI), all forwarding to ONE tinyproxy upstream
# in front of a loopback nginx, in one run. Prints markdown tables for BENCHMARKS.md.
#
#   benches/gateway/run.sh
#
# Environment (all optional):
#   DURATION=10        seconds per measured load and front
#   CLIENTS=8          concurrent clients for the tunnel and absolute-form loads
#   IDLE_TUNNELS=10000 idle tunnels held open for the memory load (capped by `ulimit -Hn`)
#   BIG_MIB=256        size of the bulk file
#   BULK_RUNS=3        bulk downloads per front (one at a time; the best is kept)
#   FRONTS="direct gateway gateway-tunnel haproxy-tcp proxy-chain pproxy"   rows to run
#                      (gateway: plain_http "forward", the default; gateway-tunnel: "tunnel";
#                      also "haproxy-tcp": HAProxy as a plain TCP forwarder to tinyproxy, the
#                      cheapest possible extra hop, which parses nothing; Debian `haproxy`;
#                      and "tokio-floor", not in the default list: the bare relay of
#                      benches/gateway_load.rs, the least the gateway's job costs on its
#                      own runtime; and "hyper-floor", not in the default list either:
#                      a bare hyper forward proxy, absolute-form GETs only, the least
#                      the gateway's forward path costs with hyper parsing both heads)
#   LOADS="tunnels absolute split bulk idle"     loads to run (split: absolute-form GETs
#                      to an nginx without tcp_nopush, which writes head and body apart:
#                      through a relay without TCP_NODELAY such as tinyproxy, a delayed ACK
#                      on a kept upstream connection costs 40 ms a request)
#   ROUNDS=1           rounds of the tunnel and absolute-form loads, fronts interleaved
#                      (order reversed every other round); medians reported, errors summed
#   GWBENCH_TOOLS=/tmp/gwbench-tools   where proxy-chain and pproxy were installed (below)
#   PROXYPOOL_BIN=...  default: target/release/proxypool, built here with cargo
#   PROXYPOOL_BIN_BEFORE=...  another build, for the "gateway-before" row (not in the
#                      default list): the same config as "gateway", so that a change is
#                      measured against the build before it in one interleaved run
#                      (the table of ratios then has "gateway / gateway-before")
#                      Also not in the default list: "gateway-intercepting", the
#                      "gateway" row with HTTPS interception on (docs/intercept.md) for a
#                      host the loads never ask for, at the port they ask for: every
#                      CONNECT is matched against `intercept` and stays a tunnel (its CA
#                      made by `ca init`)
#   KEEP=1             keep the temp dir (configs, logs) and print its path
#
# Installs nothing. Needs: nginx-light, tinyproxy, wrk, curl (Debian), python3, cargo, and
# for the peer rows node + `npm install proxy-chain` and a venv with `pip install pproxy`
# in $GWBENCH_TOOLS (a missing peer skips its row with a note). Traffic stays on 127.0.0.1;
# every load is bounded in time.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-1}
CLIENTS=${CLIENTS:-8}
IDLE_TUNNELS=${IDLE_TUNNELS:-10000}
BIG_MIB=${BIG_MIB:-256}
FRONTS=${FRONTS:-direct gateway gateway-tunnel haproxy-tcp proxy-chain pproxy}
LOADS=${LOADS:-tunnels absolute split bulk idle}
TOOLS=${GWBENCH_TOOLS:-/tmp/gwbench-tools}

gw_need nginx "Debian package nginx-light (apt-get install nginx-light)"
gw_need tinyproxy "Debian package tinyproxy"
gw_need wrk "Debian package wrk"
gw_need curl "Debian package curl"
gw_need python3 "Debian package python3"
gw_need cargo "the Rust toolchain"
gw_require_all || exit 2

NOTES=()
note() { NOTES+=("$*"); gw_log "note: $*"; }

D=$(mktemp -d /tmp/gwbench.XXXXXX)
finish() {
    gw_cleanup
    if [[ ${KEEP:-} == 1 ]]; then gw_log "kept $D"; else rm -rf "$D"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

# 10,000 idle tunnels need ~20,000 descriptors in the front (client + upstream side) and
# as many in the upstream tinyproxy; a hard limit below that caps the count (noted).
ulimit -n "$(ulimit -Hn)"
max_idle=$((($(ulimit -n) - 200) / 2))
if ((IDLE_TUNNELS > max_idle)); then
    note "idle tunnels capped at $max_idle (was $IDLE_TUNNELS): open-file hard limit $(ulimit -Hn)"
    IDLE_TUNNELS=$max_idle
fi

# ---- build: the load generator (bench profile) and the proxypool binary ----
LOADGEN=$(gw_loadgen "$ROOT" "$D/cargo.err")
PP=
if [[ " $FRONTS " == *" gateway"* ]]; then
    PP=$(gw_proxypool "$ROOT" "$D/cargo.err")
fi

# ---- fixtures ----
NGINX_PORT=$(gw_free_port)
TP_PORT=$(gw_free_port)
SPLIT_PORT=$(gw_free_port)
gw_start_nginx "$D" "$NGINX_PORT" "$BIG_MIB" "$SPLIT_PORT"
gw_wait_port "$SPLIT_PORT" || exit 1
SPLIT_DEST=127.0.0.1:$SPLIT_PORT
gw_start_tinyproxy "$D" "$TP_PORT"
DEST=127.0.0.1:$NGINX_PORT
UPSTREAM=http://127.0.0.1:$TP_PORT
gw_log "nginx on $DEST, upstream tinyproxy on $UPSTREAM"

declare -A PORT PID
ORDER=()

start_front() { # NAME PORT PID
    PORT[$1]=$2
    PID[$1]=$3
    ORDER+=("$1")
}

for f in $FRONTS; do
    case $f in
    direct)
        start_front direct "$TP_PORT" "$GW_TINYPROXY_PID"
        ;;
    gateway-before)
        if [[ ! -x ${PROXYPOOL_BIN_BEFORE:-} ]]; then
            note "gateway-before row skipped: PROXYPOOL_BIN_BEFORE names no executable"
            continue
        fi
        p=$(gw_free_port)
        gw_start_gateway "$D/$f" "$PROXYPOOL_BIN_BEFORE" "$p" forward "$UPSTREAM"
        start_front "$f" "$p" "$GW_GATEWAY_PID"
        ;;
    gateway-intercepting)
        p=$(gw_free_port)
        gw_start_gateway "$D/$f" "$PP" "$p" forward "$UPSTREAM" \
            "intercept = [\"intercepted.invalid\"]
intercept_ports = [$NGINX_PORT]"
        start_front "$f" "$p" "$GW_GATEWAY_PID"
        ;;
    gateway | gateway-tunnel)
        if ! "$PP" serve --help 2>/dev/null | grep -q -- '--gateway'; then
            note "$f row skipped: \`$PP serve --help\` has no --gateway (the gateway is not merged into this build yet)"
            continue
        fi
        p=$(gw_free_port)
        mode=forward
        [[ $f == gateway-tunnel ]] && mode=tunnel
        # One daemon per database: each gateway row gets its own folder.
        gw_start_gateway "$D/$f" "$PP" "$p" "$mode" "$UPSTREAM"
        start_front "$f" "$p" "$GW_GATEWAY_PID"
        ;;
    proxy-chain)
        if ! command -v node >/dev/null || [[ ! -d $TOOLS/node_modules/proxy-chain ]]; then
            note "proxy-chain row skipped: needs node (Debian nodejs) and \`mkdir -p $TOOLS && cd $TOOLS && npm install proxy-chain\`"
            continue
        fi
        p=$(gw_free_port)
        node "$HERE/proxy_chain.mjs" "$TOOLS" "$p" "$UPSTREAM" >"$D/proxy-chain.out" 2>&1 &
        pid=$!
        gw_track "$pid"
        gw_wait_port "$p" 20 || { cat "$D/proxy-chain.out" >&2; exit 1; }
        start_front proxy-chain "$p" "$pid"
        ;;
    haproxy-tcp)
        if ! command -v haproxy >/dev/null; then
            note "haproxy-tcp row skipped: needs Debian package haproxy"
            continue
        fi
        p=$(gw_free_port)
        gw_start_haproxy_tcp "$D" "$p" "$TP_PORT" || exit 1
        start_front haproxy-tcp "$p" "$GW_FRONT_PID"
        ;;
    tokio-floor)
        p=$(gw_free_port)
        gw_start_tokio_floor "$D" "$LOADGEN" "$p" "$TP_PORT" || exit 1
        start_front tokio-floor "$p" "$GW_FRONT_PID"
        ;;
    hyper-floor)
        p=$(gw_free_port)
        gw_start_hyper_floor "$D" "$LOADGEN" "$p" "$TP_PORT" || exit 1
        start_front hyper-floor "$p" "$GW_FRONT_PID"
        ;;
    pproxy)
        if [[ ! -x $TOOLS/venv/bin/pproxy ]]; then
            note "pproxy row skipped: needs \`python3 -m venv $TOOLS/venv && $TOOLS/venv/bin/pip install pproxy\`"
            continue
        fi
        p=$(gw_free_port)
        "$TOOLS/venv/bin/pproxy" -l "http://127.0.0.1:$p" -r "$UPSTREAM" >"$D/pproxy.out" 2>&1 &
        pid=$!
        gw_track "$pid"
        gw_wait_port "$p" 20 || { cat "$D/pproxy.out" >&2; exit 1; }
        start_front pproxy "$p" "$pid"
        ;;
    *)
        gw_log "unknown front '$f' (direct gateway gateway-tunnel gateway-before gateway-intercepting haproxy-tcp tokio-floor hyper-floor proxy-chain pproxy)"
        exit 2
        ;;
    esac
done

# Every front must carry both request forms before it is timed.
for f in "${ORDER[@]}"; do
    a=200
    # The hyper floor forwards absolute-form requests only.
    [[ $f == hyper-floor ]] ||
        a=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -p -x "127.0.0.1:${PORT[$f]}" "http://$DEST/small" || true)
    b=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -x "127.0.0.1:${PORT[$f]}" "http://$DEST/small" || true)
    if [[ $a != 200 || $b != 200 ]]; then
        gw_log "$f on port ${PORT[$f]} fails the smoke test (CONNECT: $a, absolute-form: $b)"
        exit 1
    fi
done

declare -A TUN TUN_ERR TUN_FIRST GET GET_BAD GET_SOCK SPLIT SPLIT_BAD BULK BULK_NOTE MEM MEM_NOTE

kv() { gw_kv "$@"; }

# The front's own CPU (user and system ticks of its process and any children, threads
# included; `gw_cpu_split`), read around a cell: what one operation costs the front itself,
# beside the rate that all processes on the machine's cores share.
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# cpu_note FRONT WHAT OPS "U0 S0": a note with the µs of user and system CPU per operation
# (none when the front is gone or nothing was counted).
cpu_note() {
    local u0 s0 u1 s1 per
    read -r u0 s0 <<<"$4"
    read -r u1 s1 <<<"$(gw_cpu_split "${PID[$1]}")"
    [[ -n $u0 && -n $u1 && $u1 -ge $u0 && $s1 -ge $s0 ]] || return 0
    per=$(awk -v n="$3" -v u=$(((u1 - u0) * TICK_US)) -v s=$(((s1 - s0) * TICK_US)) \
        'BEGIN { if (n > 0) printf "user %.1f µs, system %.1f µs", u / n, s / n }')
    [[ -z $per ]] || note "$1 CPU per $2: $per"
}

# TCP segments sent on the whole machine so far (`OutSegs` of /proc/net/snmp): every hop of
# a tunnel is on loopback, so their count per tunnel says how the fronts packetise it.
out_segs() { awk '/^Tcp:/ { n++; if (n == 2) print $12 }' /proc/net/snmp; }

run_tunnels() {
    local f=$1 line cpu segs per
    cpu=$(gw_cpu_split "${PID[$f]}")
    segs=$(out_segs)
    line=$("$LOADGEN" tunnels --proxy "127.0.0.1:${PORT[$f]}" --target "$DEST" --path /small \
        --clients "$CLIENTS" --secs "$DURATION")
    segs=$(($(out_segs) - segs))
    gw_log "$f tunnels: $line"
    cpu_note "$f" tunnel "$(kv ok "$line")" "$cpu"
    per=$(awk -v n="$(kv ok "$line")" -v s="$segs" 'BEGIN { if (n > 0) printf "%.2f", s / n }')
    [[ -z $per ]] || note "$f TCP segments per tunnel (whole machine): $per"
    TUN[$f]=$(kv rate "$line")
    TUN_ERR[$f]=$(kv errors "$line")
    TUN_FIRST[$f]=$(sed -n 's/.*first_error=\(.*\)/\1/p' <<<"$line")
}

# wrk_absolute FRONT DEST: absolute-form GETs of DEST/small through FRONT; sets W_RATE,
# W_REQ (requests done), W_BAD (status >= 400) and W_SOCK (socket errors), empty when wrk
# printed no result.
wrk_absolute() {
    local f=$1 out line req us
    W_RATE= W_BAD= W_SOCK= W_REQ=
    out=$(wrk -t 2 -c "$CLIENTS" -d "${DURATION}s" --timeout 5s -s "$HERE/absolute.lua" \
        "http://127.0.0.1:${PORT[$f]}/" -- "$2" /small 2>&1)
    line=$(grep '^WRK ' <<<"$out" || true)
    [[ -n $line ]] || { gw_log "$f absolute-form to $2: wrk printed no result"; printf '%s\n' "$out" >&2; return; }
    gw_log "$f absolute-form to $2: $line"
    req=$(kv requests "$line")
    W_REQ=$req
    us=$(kv duration_us "$line")
    W_RATE=$(awk -v r="$req" -v u="$us" 'BEGIN { printf "%.1f", r / (u / 1e6) }')
    W_BAD=$(kv status "$line")
    W_SOCK=$(awk -v c="$(kv connect "$line")" -v r="$(kv read "$line")" -v w="$(kv write "$line")" \
        -v t="$(kv timeout "$line")" 'BEGIN { print c + r + w + t }')
}

run_absolute() {
    local cpu
    cpu=$(gw_cpu_split "${PID[$1]}")
    wrk_absolute "$1" "$DEST"
    [[ -n $W_RATE ]] || return 0
    cpu_note "$1" "absolute-form GET" "$W_REQ" "$cpu"
    GET[$1]=$W_RATE GET_BAD[$1]=$W_BAD GET_SOCK[$1]=$W_SOCK
}

# The destination that writes head and body apart (see LOADS above).
run_split() {
    wrk_absolute "$1" "$SPLIT_DEST"
    [[ -n $W_RATE ]] || return 0
    SPLIT[$1]=$W_RATE SPLIT_BAD[$1]=$W_BAD
}

# One download at a time, BULK_RUNS times per front, the best kept: a single transfer of a
# few seconds on a shared machine is at the mercy of whatever else runs in that moment.
BULK_RUNS=${BULK_RUNS:-3}
bulk_once() { # PROXY_ARGS... -> "status bytes bytes_per_s"
    curl -s "$@" --max-time 120 -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' \
        "http://$DEST/big" || true
}

run_bulk() {
    local f=$1 i out code size speed best=
    for ((i = 0; i < BULK_RUNS; i++)); do
        out=$(bulk_once -p -x "127.0.0.1:${PORT[$f]}")
        read -r code size speed <<<"$out"
        gw_log "$f bulk: status $code, $size bytes, $speed bytes/s"
        if [[ $code != 200 || $size != $((BIG_MIB * 1024 * 1024)) ]]; then
            BULK_NOTE[$f]="failed: status $code, $size bytes"
            return
        fi
        best=$(awk -v s="$speed" -v b="${best:-0}" 'BEGIN { s /= 1e6; printf "%.1f", (s > b ? s : b) }')
    done
    BULK[$f]=$best
}

run_idle() {
    local f=$1 line opened errors live
    line=$("$LOADGEN" idle --proxy "127.0.0.1:${PORT[$f]}" --target "$DEST" --path /small \
        --count "$IDLE_TUNNELS" --pid "${PID[$f]}")
    gw_log "$f idle: $line"
    opened=$(kv opened "$line")
    errors=$(kv errors "$line")
    live=$(kv sample_live "$line")
    MEM[$f]=$(awk -v b="$(kv bytes_per_tunnel "$line")" 'BEGIN { printf "%.1f", b / 1024 }')
    [[ $errors == 0 && ${live%/*} == "${live#*/}" ]] ||
        MEM_NOTE[$f]="$opened opened, $errors failed, $live sampled tunnels live"
    # Let the closed tunnels drain out of the front and the upstream before the next row.
    sleep 3
}

gw_log "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ " $LOADS " == *" bulk "* ]]; then
    # The first read of the (sparse) file fills the page cache; no front should pay for it.
    # This run without a proxy is also the floor every front is held against.
    bulk_once >/dev/null
    read -r _ _ speed <<<"$(bulk_once)"
    NGINX_BULK=$(awk -v s="$speed" 'BEGIN { printf "%.0f", s / 1e6 }')
    gw_log "bulk without a proxy: $NGINX_BULK MB/s"
    note "bulk without any proxy (curl straight to nginx): $NGINX_BULK MB/s"
fi
# ROUNDS > 1: the tunnel and absolute-form loads run again, the fronts in reverse order
# every other round (A B, B A, A B ...); each front's figure is then the median of its
# rounds and its error counts the sum. The other loads run in the first round only.
declare -A TUN_R TUN_ERR_R GET_R GET_BAD_R GET_SOCK_R
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END {
    if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for round in $(seq 1 "$ROUNDS"); do
    fronts=("${ORDER[@]}")
    if ((round % 2 == 0)); then
        fronts=()
        for ((i = ${#ORDER[@]} - 1; i >= 0; i--)); do fronts+=("${ORDER[$i]}"); done
    fi
    for load in $LOADS; do
        [[ $round == 1 || $load == tunnels || $load == absolute ]] || continue
        for f in "${fronts[@]}"; do
            [[ $f != hyper-floor || $load == absolute ]] || continue
            case $load in
            tunnels)
                run_tunnels "$f"
                TUN_R[$f]+="${TUN[$f]} "
                TUN_ERR_R[$f]=$((${TUN_ERR_R[$f]:-0} + ${TUN_ERR[$f]:-0}))
                ;;
            absolute)
                run_absolute "$f"
                GET_R[$f]+="${GET[$f]:-} "
                GET_BAD_R[$f]=$((${GET_BAD_R[$f]:-0} + ${GET_BAD[$f]:-0}))
                GET_SOCK_R[$f]=$((${GET_SOCK_R[$f]:-0} + ${GET_SOCK[$f]:-0}))
                ;;
            split) run_split "$f" ;;
            bulk) run_bulk "$f" ;;
            idle) run_idle "$f" ;;
            *) gw_log "unknown load '$load' (tunnels absolute split bulk idle)"; exit 2 ;;
            esac
        done
    done
done
if ((ROUNDS > 1)); then
    for f in "${ORDER[@]}"; do
        if [[ -n ${TUN_R[$f]:-} ]]; then
            TUN[$f]=$(median <<<"${TUN_R[$f]}")
            TUN_ERR[$f]=${TUN_ERR_R[$f]}
            note "$f tunnels/s by round: ${TUN_R[$f]% }"
        fi
        if [[ -n ${GET_R[$f]:-} && -n ${GET_R[$f]// /} ]]; then
            GET[$f]=$(median <<<"${GET_R[$f]}")
            GET_BAD[$f]=${GET_BAD_R[$f]}
            GET_SOCK[$f]=${GET_SOCK_R[$f]}
            note "$f absolute-form GETs/s by round: ${GET_R[$f]% }"
        fi
    done
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report ----
num() { # thousands separators; one decimal only below 100
    awk -v x="$1" 'BEGIN {
        if (x == "") { print "—"; exit }
        if (x >= 100 || x == int(x)) { s = sprintf("%.0f", x); out = ""
            while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
            print s out } else printf "%.1f\n", x }'
}
ratio() { # A B -> A/B with two decimals, or n/a
    if [[ -z $1 || -z $2 ]]; then echo "n/a"; else awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2f×\n", a / b }'; fi
}
label() {
    case $1 in
    direct) echo "tinyproxy directly" ;;
    gateway) echo "proxypool gateway (plain_http = \"forward\", the default) → tinyproxy" ;;
    gateway-tunnel) echo "proxypool gateway (plain_http = \"tunnel\") → tinyproxy" ;;
    gateway-before) echo "the same, the build of PROXYPOOL_BIN_BEFORE → tinyproxy" ;;
    gateway-intercepting) echo "proxypool gateway (\"forward\"), intercepting another host → tinyproxy" ;;
    proxy-chain) echo "proxy-chain $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$TOOLS/node_modules/proxy-chain/package.json" | head -1) → tinyproxy" ;;
    haproxy-tcp) echo "HAProxy $(haproxy -v 2>/dev/null | awk 'NR == 1 {print $3}') as a TCP forwarder → tinyproxy" ;;
    tokio-floor) echo "a bare tokio relay (read the head, dial, CONNECT, answer, copy) → tinyproxy" ;;
    hyper-floor) echo "a bare hyper forward proxy (hyper server, a new hyper client connection per request, nothing else) → tinyproxy" ;;
    pproxy) echo "pproxy $("$TOOLS/venv/bin/pproxy" --version 2>/dev/null | awk '{print $NF}') → tinyproxy" ;;
    esac
}

echo
echo "Gateway benchmark — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)),"
echo "Linux $(uname -r), $(tinyproxy -v 2>&1 | head -1), nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), $CLIENTS clients, ${DURATION}s per cell,"
echo "load average before $LOAD_BEFORE, after $LOAD_AFTER."
echo
echo "| front | CONNECT tunnels/s (errors) | absolute-form GETs/s (status ≥ 400, socket errors) | absolute-form GETs/s, head and body apart (status ≥ 400) | bulk ${BIG_MIB} MiB via tunnel, MB/s (best of $BULK_RUNS) | RSS per idle tunnel, KiB ($(num "$IDLE_TUNNELS") open) |"
echo "|---|---:|---:|---:|---:|---:|"
for f in "${ORDER[@]}"; do
    t=${TUN[$f]:+$(num "${TUN[$f]}") ($(num "${TUN_ERR[$f]}"))}
    g=${GET[$f]:+$(num "${GET[$f]}") ($(num "${GET_BAD[$f]}"), $(num "${GET_SOCK[$f]}"))}
    s=${SPLIT[$f]:+$(num "${SPLIT[$f]}") ($(num "${SPLIT_BAD[$f]}"))}
    b=${BULK[$f]:+$(num "${BULK[$f]}")}
    b=${b:-${BULK_NOTE[$f]:-—}}
    m=${MEM[$f]:+$(num "${MEM[$f]}")}
    [[ -n ${MEM_NOTE[$f]:-} ]] && m="$m (${MEM_NOTE[$f]})"
    echo "| $(label "$f") | ${t:-—} | ${g:-—} | ${s:-—} | $b | ${m:-—} |"
done
echo
echo "| ratio | tunnels/s | absolute-form GETs/s | head and body apart | bulk MB/s | RSS per idle tunnel |"
echo "|---|---:|---:|---:|---:|---:|"
for gw in gateway gateway-intercepting gateway-tunnel tokio-floor hyper-floor haproxy-tcp; do
    [[ -n ${PORT[$gw]:-} ]] || continue
    for peer in gateway-before direct tokio-floor hyper-floor haproxy-tcp proxy-chain pproxy; do
        [[ $peer != "$gw" ]] || continue
        [[ -n ${PORT[$peer]:-} ]] || continue
        echo "| $gw / $peer | $(ratio "${TUN[$gw]:-}" "${TUN[$peer]:-}") | $(ratio "${GET[$gw]:-}" "${GET[$peer]:-}") | $(ratio "${SPLIT[$gw]:-}" "${SPLIT[$peer]:-}") | $(ratio "${BULK[$gw]:-}" "${BULK[$peer]:-}") | $(ratio "${MEM[$gw]:-}" "${MEM[$peer]:-}") |"
    done
done
echo
echo "Goals (issue 10): gateway ≥ 0.80× direct on tunnels/s and on absolute-form GETs/s with zero errors,"
echo "≥ 0.90× direct on bulk MB/s, ≤ 32 KiB resident per idle tunnel."
echo "Socket errors are wrk's connect + read + write + timeout counts: a front that closes the client"
echo "connection after a response without \`Connection: close\` (tinyproxy does) shows one read error per"
echo "response there; wrk reconnects and the responses themselves completed."
for f in "${ORDER[@]}"; do
    [[ -n ${TUN_FIRST[$f]:-} && ${TUN_FIRST[$f]} != '""' ]] && echo "- $f: first tunnel error ${TUN_FIRST[$f]}"
done
for n in "${NOTES[@]}"; do echo "- $n"; done
exit 0
