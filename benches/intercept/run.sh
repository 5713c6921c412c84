#!/usr/bin/env bash
# HTTPS interception benchmark (issue 48, docs/intercept.md): what the gateway's
# interception costs a client, side by side with a plain tunnel and with mitmproxy, in one
# run, rounds interleaved. Prints markdown tables for BENCHMARKS.md.
#
#   benches/intercept/run.sh
#
# The fixtures, all on 127.0.0.1: an nginx HTTPS origin whose CA and ECDSA P-256 leaf
# (names localhost and 127.0.0.1) this script makes with openssl, on two ports of the same
# server (P: intercepted, P2: not); one tinyproxy asking for Basic credentials in front of
# it; a proxypool daemon whose pool holds only that tinyproxy, its gateway intercepting
# `localhost` at port P only (its CA made by `proxypool ca init`, the origin's CA in
# `[tls] extra_roots`); mitmdump in upstream mode to the same tinyproxy.
#
# Loads:
#   curl        keep-alive HTTPS GETs/s of /small (~600 bytes) by CLIENTS curl processes,
#               each given one URL glob (/small?[1-N]: curl keeps one connection for all of
#               them) and stopped after DURATION seconds; each trusts the CA its front
#               presents (--cacert) and speaks HTTP/1.1 (CURL_HTTP). Rows: GET_FRONTS.
#               curl's own CPU is part of the picture: on a small machine the clients
#               and the front share the cores, as they would on a crawler's host.
# and, by the load generator (benches/intercept/load.rs, modes of
# benches/gateway_load.rs: a rustls client in one process, trusting the one CA its front
# presents, ALPN http/1.1), what the front alone costs:
#   gets        keep-alive HTTPS GETs/s of /small: CLIENTS clients, each on
#               one connection (CONNECT, TLS, then GETs one after the other), through
#                 tunnel     the gateway, CONNECT localhost:P2 (not intercepted): a plain
#                            tunnel, the client's TLS end to end with nginx
#                 intercept  the gateway, CONNECT localhost:P: the client's TLS ends at the
#                            gateway, which sends each request on its own TLS connection
#                            to nginx through tinyproxy (kept per upstream and origin)
#                 mitmproxy  mitmdump --mode upstream:http://TINYPROXY --upstream-auth
#                            --ssl-insecure (it does not check nginx's certificate; the
#                            gateway does), CONNECT localhost:P
#               and, not in the default list, tinyproxy (the tunnel straight through
#               tinyproxy) and nginx (no proxy at all).
#   handshakes  new TLS handshakes/s, no request, the client remembering no session:
#                 nginx      straight to nginx's port P (its ECDSA P-256 leaf)
#                 intercept  the gateway: CONNECT localhost:P (answered at once, no
#                            upstream dialled), then TLS with the gateway's ECDSA P-256
#                            leaf for localhost, from its cache
#
# Environment (all optional):
#   DURATION=8        seconds per cell
#   CLIENTS=8         concurrent clients of each load
#   ROUNDS=3          rounds; each runs every load's rows, in reverse order every other
#                     round; medians reported, errors summed
#   LOADS="curl gets handshakes"
#   GET_FRONTS="tunnel intercept mitmproxy"     rows of the curl and gets loads (see above)
#   CURL_HTTP=--http1.1  the curl load's protocol flag (--http2: HTTP/2 where offered)
#   HS_FRONTS="nginx intercept"                 rows of the handshakes load
#   ORIGIN_H2=1       nginx offers HTTP/2 by ALPN (the gateway's origin side takes it: one
#                     HTTP/2 connection per upstream and origin); 0: HTTP/1.1 only (one
#                     kept connection per request in flight)
#   NGINX_WORKERS=$(nproc)
#   LOADGEN_THREADS=2 the load generator's runtime threads
#   MITMDUMP=mitmdump the mitmdump to run (a venv's: /path/venv/bin/mitmdump)
#   PROXYPOOL_BIN=... default: target/release/proxypool, built here with cargo
#   LOADGEN=...       default: benches/gateway_load.rs, built here (cargo bench --no-run)
#   KEEP=1            keep the temp dir (configs, logs) and print its path
#
# Installs nothing. Needs: nginx-light, tinyproxy, openssl, curl, python3 (Debian), cargo;
# for the mitmproxy row `python3 -m venv VENV && VENV/bin/pip install 'mitmproxy>=11,<12'`
# and MITMDUMP=VENV/bin/mitmdump (a missing mitmdump skips its row with a note). Every load
# is bounded in time.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../gateway/lib.sh
. "$HERE/../gateway/lib.sh"

DURATION=${DURATION:-8}
CLIENTS=${CLIENTS:-8}
ROUNDS=${ROUNDS:-3}
LOADS=${LOADS:-curl gets handshakes}
CURL_HTTP=${CURL_HTTP:---http1.1}
GET_FRONTS=${GET_FRONTS:-tunnel intercept mitmproxy}
HS_FRONTS=${HS_FRONTS:-nginx intercept}
ORIGIN_H2=${ORIGIN_H2:-1}
NGINX_WORKERS=${NGINX_WORKERS:-$(nproc)}
LOADGEN_THREADS=${LOADGEN_THREADS:-2}
MITMDUMP=${MITMDUMP:-mitmdump}
AUTH=bench:s3cret

gw_need nginx "Debian package nginx-light (apt-get install nginx-light)"
gw_need tinyproxy "Debian package tinyproxy"
gw_need openssl "Debian package openssl"
gw_need curl "Debian package curl"
gw_need python3 "Debian package python3"
gw_need cargo "the Rust toolchain"
gw_require_all || exit 2

NOTES=()
note() { NOTES+=("$*"); gw_log "note: $*"; }

D=$(mktemp -d /tmp/icptbench.XXXXXX)
# nginx's workers run as an unprivileged user when started as root: they must reach www/.
chmod 755 "$D"
finish() {
    gw_cleanup
    if [[ ${KEEP:-} == 1 ]]; then gw_log "kept $D"; else rm -rf "$D"; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

LOADGEN=$(gw_loadgen "$ROOT" "$D/cargo.err")
PP=$(gw_proxypool "$ROOT" "$D/cargo.err")

# ---- the origin: its CA and ECDSA P-256 leaf, nginx on two TLS ports ----
# make_origin_pki DIR: DIR/ca.pem (the CA clients of the origin trust), DIR/leaf.pem and
# DIR/leaf.key (localhost, 127.0.0.1).
make_origin_pki() {
    local d=$1
    mkdir -p "$d"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$d/ca.key" -sha256 -days 30 -subj "/CN=intercept bench origin CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$d/ca.pem" 2>/dev/null
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/leaf.key" 2>/dev/null
    openssl req -new -key "$d/leaf.key" -subj "/CN=localhost" -out "$d/leaf.csr" 2>/dev/null
    printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$d/leaf.ext"
    openssl x509 -req -in "$d/leaf.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -days 30 -sha256 -extfile "$d/leaf.ext" -out "$d/leaf.pem" 2>/dev/null
    chmod 644 "$d/leaf.key"
}

# start_tls_nginx DIR PORT PORT2: nginx serving /small over TLS on both ports. Sets
# NGINX_PID.
start_tls_nginx() {
    local d=$1 p=$2 p2=$3 h2=
    [[ $ORIGIN_H2 == 1 ]] && h2=" http2"
    mkdir -p "$d/www" "$d/tmp"
    chmod 755 "$d" "$d/www"
    {
        printf '<!doctype html>\n<html><head><meta charset="utf-8"><title>intercept bench</title></head>\n<body>\n'
        for ((i = 0; i < 8; i++)); do
            printf '<p>Line %d of the small page that every bench request fetches.</p>\n' "$i"
        done
        printf '</body></html>\n'
    } >"$d/www/small"
    chmod 644 "$d/www/small"
    cat >"$d/nginx.conf" <<CONF
worker_processes $NGINX_WORKERS;
worker_rlimit_nofile $(ulimit -Hn);
daemon off;
pid $d/nginx.pid;
error_log $d/nginx-error.log error;
events { worker_connections 32768; }
http {
    access_log off;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    http2_max_requests 1000000;
    server {
        listen 127.0.0.1:$p ssl$h2;
        listen 127.0.0.1:$p2 ssl$h2;
        ssl_certificate $d/leaf.pem;
        ssl_certificate_key $d/leaf.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        root $d/www;
        location = /small { default_type text/html; }
    }
}
CONF
    nginx -p "$d" -c "$d/nginx.conf" >"$d/nginx.out" 2>&1 &
    NGINX_PID=$!
    gw_track "$NGINX_PID"
    gw_wait_port "$p" || { cat "$d/nginx.out" "$d/nginx-error.log" >&2 2>/dev/null; exit 1; }
}

make_origin_pki "$D/origin"
P=$(gw_free_port)
P2=$(gw_free_port)
start_tls_nginx "$D/origin" "$P" "$P2"
TP_PORT=$(gw_free_port)
gw_start_tinyproxy "$D" "$TP_PORT" tinyproxy "$AUTH"
gw_log "nginx on TLS ports $P and $P2, tinyproxy on $TP_PORT"

declare -A PORT PID CA TARGET AUTHOF
GW_PORT=$(gw_free_port)
gw_start_gateway "$D/gateway" "$PP" "$GW_PORT" forward "http://$AUTH@127.0.0.1:$TP_PORT" \
    "intercept = [\"localhost\"]
intercept_ports = [$P]

[tls]
extra_roots = \"$D/origin/ca.pem\""
GW_PID=$GW_GATEWAY_PID
PORT[tunnel]=$GW_PORT PID[tunnel]=$GW_PID CA[tunnel]=$D/origin/ca.pem TARGET[tunnel]=localhost:$P2
PORT[intercept]=$GW_PORT PID[intercept]=$GW_PID CA[intercept]=$D/gateway/ca.pem TARGET[intercept]=localhost:$P
PORT[tinyproxy]=$TP_PORT PID[tinyproxy]=$GW_TINYPROXY_PID CA[tinyproxy]=$D/origin/ca.pem TARGET[tinyproxy]=localhost:$P
AUTHOF[tinyproxy]=$AUTH
PORT[nginx]= PID[nginx]=$NGINX_PID CA[nginx]=$D/origin/ca.pem TARGET[nginx]=127.0.0.1:$P

for f in $GET_FRONTS $HS_FRONTS; do
    [[ -n ${TARGET[$f]:-} || $f == mitmproxy ]] ||
        { gw_log "unknown row '$f' (tunnel intercept mitmproxy tinyproxy nginx)"; exit 2; }
done
if [[ " $GET_FRONTS $HS_FRONTS " == *" mitmproxy "* ]]; then
    if command -v "$MITMDUMP" >/dev/null; then
        MP=$(gw_free_port)
        mkdir -p "$D/mitm"
        "$MITMDUMP" -q --listen-host 127.0.0.1 --listen-port "$MP" \
            --mode "upstream:http://127.0.0.1:$TP_PORT" --upstream-auth "$AUTH" \
            --ssl-insecure --set confdir="$D/mitm" >"$D/mitm.out" 2>&1 &
        pid=$!
        gw_track "$pid"
        gw_wait_port "$MP" 30 || { cat "$D/mitm.out" >&2; exit 1; }
        PORT[mitmproxy]=$MP PID[mitmproxy]=$pid CA[mitmproxy]=$D/mitm/mitmproxy-ca-cert.pem
        TARGET[mitmproxy]=localhost:$P
        MITM_VERSION=$("$MITMDUMP" --version 2>/dev/null | sed -n 's/^Mitmproxy: //p')
    else
        note "mitmproxy row skipped: no \`$MITMDUMP\`; \`python3 -m venv VENV && VENV/bin/pip install 'mitmproxy>=11,<12'\`, then MITMDUMP=VENV/bin/mitmdump"
        GET_FRONTS=${GET_FRONTS//mitmproxy/} HS_FRONTS=${HS_FRONTS//mitmproxy/}
    fi
fi

# Every row must answer through curl (trusting the same CA as the load) before it is
# timed; the first also mints the gateway's leaf, so that no timed cell pays for it.
for f in $GET_FRONTS $HS_FRONTS; do
    args=(--cacert "${CA[$f]}")
    [[ -n ${PORT[$f]} ]] && args+=(-x "http://127.0.0.1:${PORT[$f]}")
    [[ $f == tinyproxy ]] && args+=(--proxy-user "$AUTH")
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --http1.1 "${args[@]}" \
        "https://${TARGET[$f]}/small" || true)
    if [[ $code != 200 ]]; then
        gw_log "$f fails the smoke test (https://${TARGET[$f]}/small answered $code)"
        tail -20 "$D/gateway/serve.out" "$D/mitm.out" 2>/dev/null >&2 || true
        exit 1
    fi
done

kv() { gw_kv "$@"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# cpu_per FRONT OPS "U0 S0": the µs of CPU (user + system) the front's process spent per
# operation since U0 S0 (clock ticks), empty when nothing was counted.
cpu_per() {
    local u0 s0 u1 s1
    read -r u0 s0 <<<"$3"
    read -r u1 s1 <<<"$(gw_cpu_split "${PID[$1]}")"
    awk -v n="$2" -v t=$(((u1 - u0 + s1 - s0) * TICK_US)) 'BEGIN { if (n > 0) printf "%.0f", t / n }'
}

# curl_cell FRONT: the curl load's cell (see the header), its tally as one key=value line
# as the load generator prints it. Each transfer writes its status and whether it opened a
# connection to stderr; a transfer cut off by the deadline is not counted.
curl_cell() {
    local f=$1 i t0 t1 out=$D/curl pids=()
    local args=(-s "$CURL_HTTP" --cacert "${CA[$f]}" -o /dev/null
        -w '%{stderr}%{http_code} %{num_connects}\n')
    [[ -n ${PORT[$f]} ]] && args+=(-x "http://127.0.0.1:${PORT[$f]}")
    [[ -n ${AUTHOF[$f]:-} ]] && args+=(--proxy-user "${AUTHOF[$f]}")
    t0=$(date +%s.%N)
    for ((i = 0; i < CLIENTS; i++)); do
        timeout -s INT "$DURATION" curl "${args[@]}" "https://${TARGET[$f]}/small?[1-100000000]" \
            2>"$out.$i" >/dev/null &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    t1=$(date +%s.%N)
    # A file at a time: the last line of one cut off by the deadline ("20") is skipped,
    # not joined to the next file's first.
    awk -v secs="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" '
        NF != 2 || $1 !~ /^[0-9][0-9][0-9]$/ || $2 !~ /^[0-9]+$/ { next }
        { conns += $2 }
        $1 == 200 { ok++ } $1 != 200 { err++; if (first == "") first = "HTTP " $1 }
        END { printf "mode=curl ok=%d errors=%d connections=%d secs=%.2f rate=%.1f first_error=\"%s\"\n",
            ok, err, conns, secs, ok / secs, first }' "$out".*
    rm -f "$out".*
}

declare -A R ERR CONNS CPU
# run LOAD FRONT: one cell; appends to R[LOAD.FRONT] and the rest.
run() {
    local load=$1 f=$2 line cpu args
    args=(--target "${TARGET[$f]}" --name localhost --cacert "${CA[$f]}" --clients "$CLIENTS" --secs "$DURATION")
    [[ -n ${PORT[$f]} ]] && args+=(--proxy "127.0.0.1:${PORT[$f]}")
    [[ -n ${AUTHOF[$f]:-} ]] && args+=(--proxy-auth "${AUTHOF[$f]}")
    cpu=$(gw_cpu_split "${PID[$f]}")
    if [[ $load == curl ]]; then
        line=$(curl_cell "$f")
    else
        line=$("$LOADGEN" --threads "$LOADGEN_THREADS" "$load" "${args[@]}")
    fi
    gw_log "$load $f: $line"
    R[$load.$f]+="$(kv rate "$line") "
    ERR[$load.$f]=$((${ERR[$load.$f]:-0} + $(kv errors "$line")))
    CONNS[$load.$f]=$((${CONNS[$load.$f]:-0} + $(kv connections "$line")))
    CPU[$load.$f]+="$(cpu_per "$f" "$(kv ok "$line")" "$cpu") "
    first=$(sed -n 's/.*first_error=\(.*\)/\1/p' <<<"$line")
    [[ -z $first || $first == '""' ]] || note "$load $f: first error $first"
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
reversed() { local a=("$@") i; for ((i = ${#a[@]} - 1; i >= 0; i--)); do printf '%s ' "${a[$i]}"; done; }

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
gw_log "machine: $(nproc) cores, load average $LOAD_BEFORE"
for round in $(seq 1 "$ROUNDS"); do
    for load in $LOADS; do
        case $load in
        curl) mode=curl rows=$GET_FRONTS ;;
        gets) mode=https-gets rows=$GET_FRONTS ;;
        handshakes) mode=handshakes rows=$HS_FRONTS ;;
        *) gw_log "unknown load '$load' (curl gets handshakes)"; exit 2 ;;
        esac
        # shellcheck disable=SC2086 # rows is a list of words
        ((round % 2 == 0)) && rows=$(reversed $rows)
        for f in $rows; do run "$mode" "$f"; done
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report ----
num() { awk -v x="$1" 'BEGIN { if (x == "") { print "—"; exit } s = sprintf("%.0f", x); out = ""
    while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
    print s out }'; }
ratio() { if [[ -z $1 || -z $2 ]]; then echo "n/a"; else awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2f×\n", a / b }'; fi; }
med() { median <<<"${R[$1]:-}"; }
label() { # FRONT [LOAD]
    if [[ ${2:-} == handshakes ]]; then
        case $1 in
        intercept) echo "the gateway: CONNECT answered at once, then its leaf for localhost, from the cache"; return ;;
        nginx) echo "nginx straight"; return ;;
        esac
    fi
    case $1 in
    tunnel) echo "gateway, host not intercepted: a plain tunnel → tinyproxy → nginx" ;;
    intercept) echo "gateway intercepting → tinyproxy → nginx" ;;
    mitmproxy) echo "mitmproxy ${MITM_VERSION:-} (upstream mode) → tinyproxy → nginx" ;;
    tinyproxy) echo "tinyproxy tunnel → nginx" ;;
    nginx) echo "nginx straight" ;;
    esac
}
row() { # LOAD FRONT
    local k=$1.$2
    echo "| $(label "$2" "$1") | **$(num "$(med "$k")")** | $(num "${ERR[$k]}") | $(num "${CONNS[$k]}") | $(num "$(median <<<"${CPU[$k]}")") | $(for v in ${R[$k]}; do printf '%s ' "$(num "$v")"; done)|"
}

echo
echo "HTTPS interception benchmark — $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)),"
echo "Linux $(uname -r), nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') with $(nginx -V 2>&1 | grep -o 'running with OpenSSL [0-9.]*' | sed 's/running with //') ($NGINX_WORKERS workers, HTTP/2 offered: $ORIGIN_H2), $(tinyproxy -v 2>&1 | head -1),"
echo "$CLIENTS clients, ${DURATION}s per cell, $ROUNDS rounds interleaved, load average before $LOAD_BEFORE, after $LOAD_AFTER."
# gets_table MODE WHAT: the table and ratios of a GET load.
gets_table() {
    local mode=$1 what=$2 a b
    echo
    echo "| keep-alive HTTPS GETs of /small ($what) through | GETs/s (median) | errors | connections opened | front's CPU µs per GET | GETs/s by round |"
    echo "|---|---:|---:|---:|---:|---|"
    for f in $GET_FRONTS; do row "$mode" "$f"; done
    echo
    for pair in "intercept tunnel" "intercept tinyproxy" "intercept mitmproxy" "mitmproxy tunnel"; do
        read -r a b <<<"$pair"
        [[ " $GET_FRONTS " == *" $a "* && " $GET_FRONTS " == *" $b "* ]] || continue
        echo "- $what, $a / $b: **$(ratio "$(med "$mode.$a")" "$(med "$mode.$b")")**"
    done
}
[[ " $LOADS " == *" curl "* ]] && gets_table curl "$CLIENTS curl processes, $CURL_HTTP"
[[ " $LOADS " == *" gets "* ]] && gets_table https-gets "$CLIENTS rustls clients of the load generator"
if [[ " $LOADS " == *" handshakes "* ]]; then
    echo
    echo "| new TLS handshakes (no resumption, ECDSA P-256 leaf) with | handshakes/s (median) | errors | connections opened | server's CPU µs per handshake | handshakes/s by round |"
    echo "|---|---:|---:|---:|---:|---|"
    for f in $HS_FRONTS; do row handshakes "$f"; done
    echo
    if [[ " $HS_FRONTS " == *" intercept "* && " $HS_FRONTS " == *" nginx "* ]]; then
        echo "- intercept / nginx: **$(ratio "$(med handshakes.intercept)" "$(med handshakes.nginx)")**"
    fi
fi
echo
echo "Goals (issue 48): intercepted GETs/s ≥ 0.5× the tunnel's; the gateway's new handshakes/s ≥ 0.8× nginx's."
echo "CPU is the front's own process (the gateway, mitmdump, nginx's master and workers), user + system."
for n in "${NOTES[@]}"; do echo "- $n"; done
exit 0
