#!/usr/bin/env bash
# Resident memory of the gateway per idle CONNECT tunnel, through an `http://` upstream and
# through an `https://` one (each tunnel then keeps its TLS session to the proxy). The
# `https://` upstream is HAProxy terminating TLS in front of the same tinyproxy, trusted
# through the gateway's `ca_file`. Each side gets a fresh daemon; `gateway_load idle`
# opens the tunnels, holds them, reads the daemon's VmRSS before and after, and checks
# that every 100th tunnel still carries a GET. Prints the figures for BENCHMARKS.md and
# docs/gateway.md.
#
#   benches/gateway/https_idle.sh
#
# Environment (all optional):
#   IDLE_TUNNELS=4000  tunnels held open per side (capped by the open-file hard limit)
#   PROXYPOOL_BIN=...  default: target/release/proxypool, built here with cargo
#   LOADGEN=...        default: benches/gateway_load.rs, built here with cargo
#
# Needs nginx, tinyproxy, haproxy, openssl (Debian), python3, cargo. Traffic stays on
# 127.0.0.1.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

IDLE_TUNNELS=${IDLE_TUNNELS:-4000}

gw_need nginx "Debian package nginx-light"
gw_need tinyproxy "Debian package tinyproxy"
gw_need haproxy "Debian package haproxy"
gw_need openssl "Debian package openssl"
gw_need python3 "Debian package python3"
gw_need cargo "the Rust toolchain"
gw_require_all || exit 2

D=$(mktemp -d /tmp/gwtls.XXXXXX)
trap 'gw_cleanup; rm -rf "$D"' EXIT
trap 'exit 130' INT TERM
# Every tunnel is two descriptors in the gateway, two in HAProxy and in tinyproxy.
ulimit -n "$(ulimit -Hn)"
max=$((($(ulimit -n) - 200) / 2))
if ((IDLE_TUNNELS > max)); then
    gw_log "idle tunnels capped at $max (was $IDLE_TUNNELS): open-file hard limit $(ulimit -Hn)"
    IDLE_TUNNELS=$max
fi

LOADGEN=$(gw_loadgen "$ROOT" "$D/cargo.err")
PP=$(gw_proxypool "$ROOT" "$D/cargo.err")

# A private CA and a certificate for 127.0.0.1 signed by it (a CA certificate itself is
# refused as a server's by the gateway's verifier).
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=gwbench CA" \
    -keyout "$D/ca.key" -out "$D/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$D/proxy.key" -out "$D/proxy.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$D/ext"
openssl x509 -req -in "$D/proxy.csr" -CA "$D/ca.pem" -CAkey "$D/ca.key" -CAcreateserial \
    -days 2 -extfile "$D/ext" -out "$D/proxy.crt" 2>/dev/null
cat "$D/proxy.crt" "$D/proxy.key" >"$D/proxy.pem"

NGINX_PORT=$(gw_free_port)
TP_PORT=$(gw_free_port)
TLS_PORT=$(gw_free_port)
gw_start_nginx "$D" "$NGINX_PORT" 1
gw_start_tinyproxy "$D" "$TP_PORT"
DEST=127.0.0.1:$NGINX_PORT
cat >"$D/haproxy.cfg" <<CONF
global
    maxconn $((IDLE_TUNNELS + 100))
defaults
    mode tcp
    timeout connect 5s
    timeout client 300s
    timeout server 300s
listen tls
    bind 127.0.0.1:$TLS_PORT ssl crt $D/proxy.pem
    server tinyproxy 127.0.0.1:$TP_PORT
CONF
haproxy -db -f "$D/haproxy.cfg" >"$D/haproxy.out" 2>&1 &
gw_track $!
gw_wait_port "$TLS_PORT" 20 || { cat "$D/haproxy.out" >&2; exit 1; }

declare -A BYTES
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for side in http https; do
    p=$(gw_free_port)
    if [[ $side == http ]]; then
        gw_start_gateway "$D/$side" "$PP" "$p" forward "http://127.0.0.1:$TP_PORT"
    else
        gw_start_gateway "$D/$side" "$PP" "$p" forward "https://127.0.0.1:$TLS_PORT" \
            "ca_file = \"$D/ca.pem\""
    fi
    # Both request forms work before anything is measured.
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -p -x "127.0.0.1:$p" "http://$DEST/small" || true)
    [[ $code == 200 ]] || { gw_log "$side: a tunnel through the gateway answered $code"; cat "$D/$side/serve.out" >&2; exit 1; }
    line=$("$LOADGEN" idle --proxy "127.0.0.1:$p" --target "$DEST" --path /small \
        --count "$IDLE_TUNNELS" --pid "$GW_GATEWAY_PID")
    gw_log "$side: $line"
    live=$(gw_kv sample_live "$line")
    if [[ $(gw_kv errors "$line") != 0 || ${live%/*} != "${live#*/}" ]]; then
        gw_log "$side: not every tunnel opened and stayed live: $line"
        exit 1
    fi
    BYTES[$side]=$(gw_kv bytes_per_tunnel "$line")
    gw_stop "$GW_GATEWAY_PID"
    # Let the closed tunnels drain out of HAProxy and tinyproxy before the next side.
    sleep 3
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "Idle tunnels through http:// and https:// upstreams — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores,"
echo "$IDLE_TUNNELS idle tunnels per side, load average before $LOAD_BEFORE, after $LOAD_AFTER."
echo
echo "| upstream | gateway RSS per idle tunnel |"
echo "|---|---:|"
for side in http https; do
    awk -v s="$side" -v b="${BYTES[$side]}" 'BEGIN { printf "| `%s://` | %d B (%.1f KiB) |\n", s, b, b / 1024 }'
done
awk -v a="${BYTES[http]}" -v b="${BYTES[https]}" 'BEGIN { printf "\nThe TLS session each tunnel keeps: %d B.\n", b - a }'
