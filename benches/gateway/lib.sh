# Reusable loopback fixtures for benchmarks and interop runs: a static nginx destination
# and a tinyproxy upstream, each in a caller-given temp dir, stopped by gw_cleanup.
# Source it from bash:  . benches/gateway/lib.sh
# Everything listens on 127.0.0.1 only.

GW_PIDS=()
GW_MISSING=()

gw_log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# gw_need TOOL HOW-TO-INSTALL: records a missing tool; gw_require_all reports them at once.
gw_need() {
    command -v "$1" >/dev/null 2>&1 || GW_MISSING+=("$1: $2")
}

gw_require_all() {
    if ((${#GW_MISSING[@]})); then
        printf 'missing tools:\n' >&2
        printf '  %s\n' "${GW_MISSING[@]}" >&2
        return 2
    fi
}

# A free loopback TCP port (the kernel picks it; a small race with other users is accepted).
gw_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# gw_wait_port PORT [SECONDS]: waits until 127.0.0.1:PORT accepts a connection.
gw_wait_port() {
    local port=$1 secs=${2:-10} i
    for ((i = 0; i < secs * 20; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    gw_log "nothing listens on 127.0.0.1:$port after ${secs}s"
    return 1
}

# Remembers a PID we started so gw_cleanup stops exactly it (never by name).
gw_track() { GW_PIDS+=("$1"); }

gw_stop() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

gw_cleanup() {
    local pid
    for pid in "${GW_PIDS[@]}"; do gw_stop "$pid"; done
    GW_PIDS=()
}

gw_rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# gw_start_nginx DIR PORT [BIG_MIB] [SPLIT_PORT]: nginx serving DIR/www: /small (~600 bytes
# of HTML) and /big (BIG_MIB MiB, default 256, sparse so it costs no disk). On SPLIT_PORT
# the same files without `tcp_nopush`: the head goes out in one segment and the body (by
# sendfile) in another, as many sites in the wild send them. Sets GW_NGINX_PID.
gw_start_nginx() {
    local dir=$1 port=$2 big=${3:-256} split=${4:-}
    mkdir -p "$dir/www" "$dir/nginx-tmp"
    # Workers run as an unprivileged user when started as root: they must read the files.
    chmod 755 "$dir" "$dir/www"
    {
        printf '<!doctype html>\n<html><head><meta charset="utf-8"><title>gateway bench</title></head>\n<body>\n'
        local i
        for ((i = 0; i < 8; i++)); do
            printf '<p>Line %d of the small page that every bench request fetches.</p>\n' "$i"
        done
        printf '</body></html>\n'
    } >"$dir/www/small"
    truncate -s "$((big * 1024 * 1024))" "$dir/www/big"
    chmod 644 "$dir/www/small" "$dir/www/big"
    cat >"$dir/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile $(ulimit -Hn);
daemon off;
pid $dir/nginx.pid;
error_log $dir/nginx-error.log error;
events { worker_connections 32768; }
http {
    access_log off;
    client_body_temp_path $dir/nginx-tmp/body;
    proxy_temp_path $dir/nginx-tmp/proxy;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$port;
        root $dir/www;
        location = /small { default_type text/html; }
    }
$([[ -n $split ]] && printf '    server {\n        listen 127.0.0.1:%s;\n        root %s/www;\n        tcp_nopush off;\n        location = /small { default_type text/html; }\n    }\n' "$split" "$dir")
}
CONF
    nginx -p "$dir" -c "$dir/nginx.conf" >"$dir/nginx.out" 2>&1 &
    GW_NGINX_PID=$!
    gw_track "$GW_NGINX_PID"
    gw_wait_port "$port" || { cat "$dir/nginx.out" "$dir/nginx-error.log" >&2 2>/dev/null; return 1; }
}

# gw_start_tinyproxy DIR PORT [NAME] [USER:PASSWORD]: an open tinyproxy (127.0.0.1 clients
# only, every CONNECT port allowed, errors-only log), asking for Basic proxy credentials
# when USER:PASSWORD is given. Sets GW_TINYPROXY_PID.
gw_start_tinyproxy() {
    local dir=$1 port=$2 name=${3:-tinyproxy} auth=${4:-}
    cat >"$dir/$name.conf" <<CONF
Port $port
Listen 127.0.0.1
Timeout 600
MaxClients 30000
Allow 127.0.0.1
LogLevel Error
LogFile "$dir/$name.log"
DisableViaHeader Yes
${auth:+BasicAuth ${auth%%:*} ${auth#*:}}
CONF
    tinyproxy -d -c "$dir/$name.conf" >"$dir/$name.out" 2>&1 &
    GW_TINYPROXY_PID=$!
    gw_track "$GW_TINYPROXY_PID"
    gw_wait_port "$port" || { cat "$dir/$name.out" >&2; return 1; }
}

# gw_tunnel_fixtures DIR: what the per-tunnel scripts (profile, syscalls, allocs) put
# behind a front: nginx serving /small and one tinyproxy in front of it. Sets NGINX_PORT,
# TP_PORT and DEST (the nginx address a tunnel asks for).
gw_tunnel_fixtures() {
    local dir=$1
    NGINX_PORT=$(gw_free_port)
    TP_PORT=$(gw_free_port)
    gw_start_nginx "$dir" "$NGINX_PORT" 1
    gw_start_tinyproxy "$dir" "$TP_PORT"
    DEST=127.0.0.1:$NGINX_PORT
}

# gw_start_haproxy_tcp DIR PORT UPSTREAM_PORT: HAProxy as a layer-4 forwarder to the
# upstream on 127.0.0.1 (bytes copied both ways, CONNECT and absolute-form alike reach it
# untouched: the cheapest possible extra hop), one thread per core like the gateway's
# runtime. Sets GW_FRONT_PID.
gw_start_haproxy_tcp() {
    local dir=$1 port=$2 up=$3
    cat >"$dir/haproxy.cfg" <<CONF
global
    maxconn $((($(ulimit -n) - 200) / 2))
    nbthread $(nproc)
defaults
    mode tcp
    timeout connect 5s
    timeout client 120s
    timeout server 120s
listen floor
    bind 127.0.0.1:$port
    server tinyproxy 127.0.0.1:$up
CONF
    haproxy -db -f "$dir/haproxy.cfg" >"$dir/haproxy.out" 2>&1 &
    GW_FRONT_PID=$!
    gw_track "$GW_FRONT_PID"
    gw_wait_port "$port" 20 || { cat "$dir/haproxy.out" >&2; return 1; }
}

# gw_start_tokio_floor DIR LOADGEN PORT UPSTREAM_PORT: the bare relay of
# benches/gateway_load.rs (`floor`), what doing the gateway's job on tokio costs at the
# least, nothing else done. Sets GW_FRONT_PID.
gw_start_tokio_floor() {
    local dir=$1 loadgen=$2 port=$3 up=$4
    "$loadgen" --threads "$(nproc)" floor --listen "127.0.0.1:$port" --upstream "127.0.0.1:$up" >"$dir/tokio-floor.out" 2>&1 &
    GW_FRONT_PID=$!
    gw_track "$GW_FRONT_PID"
    gw_wait_port "$port" 20 || { cat "$dir/tokio-floor.out" >&2; return 1; }
}

# gw_start_hyper_floor DIR LOADGEN PORT UPSTREAM_PORT: the bare hyper forward proxy of
# benches/gateway_load.rs (`hyper-floor`), absolute-form requests only. Sets GW_FRONT_PID.
gw_start_hyper_floor() {
    local dir=$1 loadgen=$2 port=$3 up=$4
    "$loadgen" --threads "$(nproc)" hyper-floor --listen "127.0.0.1:$port" --upstream "127.0.0.1:$up" >"$dir/hyper-floor.out" 2>&1 &
    GW_FRONT_PID=$!
    gw_track "$GW_FRONT_PID"
    gw_wait_port "$port" 20 || { cat "$dir/hyper-floor.out" >&2; return 1; }
}

# gw_loadgen ROOT ERRFILE: prints the path of the load generator (benches/gateway_load.rs),
# `$LOADGEN` when set, else built here with `cargo bench --no-run` (the bench profile).
gw_loadgen() {
    local root=$1 err=$2 exe
    if [[ -n ${LOADGEN:-} ]]; then
        [[ -x $LOADGEN ]] || { gw_log "LOADGEN=$LOADGEN is not an executable"; return 1; }
        printf '%s\n' "$LOADGEN"
        return
    fi
    gw_log "building the load generator (cargo bench --no-run --bench gateway_load)"
    exe=$(cd "$root" && cargo bench --bench gateway_load --no-run --message-format=json 2>"$err" |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gateway_load" and m.get("executable"):
        print(m["executable"])') || true
    [[ -x $exe ]] || { cat "$err" >&2; gw_log "could not build benches/gateway_load.rs"; return 1; }
    printf '%s\n' "$exe"
}

# gw_proxypool ROOT ERRFILE: prints `$PROXYPOOL_BIN` when set, else builds and prints
# target/$GW_PROFILE/proxypool (`release` by default; `profiling` is release code with
# line tables, for perf).
gw_proxypool() {
    local root=$1 err=$2 profile=${GW_PROFILE:-release}
    if [[ -n ${PROXYPOOL_BIN:-} ]]; then
        [[ -x $PROXYPOOL_BIN ]] || { gw_log "PROXYPOOL_BIN=$PROXYPOOL_BIN is not an executable"; return 1; }
        printf '%s\n' "$PROXYPOOL_BIN"
        return
    fi
    gw_log "building target/$profile/proxypool"
    (cd "$root" && cargo build --profile "$profile" --bin proxypool 2>"$err") || { cat "$err" >&2; return 1; }
    printf '%s\n' "$root/target/$profile/proxypool"
}

# gw_start_gateway DIR BIN PORT MODE UPSTREAM [GATEWAY_TOML]: a proxypool daemon (BIN) in
# its own folder DIR whose `default` pool holds only UPSTREAM, with one gateway on
# 127.0.0.1:PORT (`plain_http = MODE`; GATEWAY_TOML is added to its table). A
# `static-no-ping` pool without a probe target is never probed: no traffic competes with
# the loads. When GATEWAY_TOML sets `intercept`, the install's CA is made first (`ca
# init`, beside the database); GATEWAY_TOML may end with tables of its own (`[tls]`).
# Sets GW_GATEWAY_PID.
gw_start_gateway() {
    local dir=$1 bin=$2 port=$3 mode=$4 upstream=$5 extra=${6:-}
    mkdir -p "$dir"
    cat >"$dir/proxypool.toml" <<CONF
[store]
path = "proxypool.db"

[server]
socket = "proxypool.sock"

[[pool]]
name = "default"
mode = "static-no-ping"

[[gateway]]
listen = "127.0.0.1:$port"
plain_http = "$mode"
$extra
CONF
    "$bin" --config "$dir/proxypool.toml" add "$upstream" >"$dir/add.out" 2>&1 ||
        { cat "$dir/add.out" >&2; return 1; }
    if grep -q '^intercept *=' <<<"$extra"; then
        "$bin" --config "$dir/proxypool.toml" ca init >"$dir/ca.out" 2>&1 ||
            { cat "$dir/ca.out" >&2; return 1; }
    fi
    "$bin" --config "$dir/proxypool.toml" serve >"$dir/serve.out" 2>&1 &
    GW_GATEWAY_PID=$!
    gw_track "$GW_GATEWAY_PID"
    gw_wait_port "$port" 20 || { cat "$dir/serve.out" >&2; return 1; }
}

# gw_cpu_split PID: "USER SYSTEM" CPU (clock ticks) of PID and every live descendant
# (nginx's worker; tinyproxy's, when a build forks them), from /proc/*/stat; "0 0" once
# PID is gone.
gw_cpu_split() {
    python3 - "$1" <<'PY'
import os, sys
root = int(sys.argv[1])
procs = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()
        procs[int(p)] = (int(rest[1]), int(rest[11]), int(rest[12]))  # ppid, utime, stime
user, system, todo = 0, 0, [root]
while todo:
    p = todo.pop()
    if p in procs:
        user += procs[p][1]
        system += procs[p][2]
        todo.extend(c for c, (pp, _, _) in procs.items() if pp == p)
print(user, system)
PY
}

# gw_cpu_ticks PID: user + system CPU (clock ticks), as gw_cpu_split counts it.
gw_cpu_ticks() {
    local u s
    read -r u s <<<"$(gw_cpu_split "$1")"
    echo $((u + s))
}

# gw_kv KEY LINE: the value of KEY=... in a `key=value` line.
gw_kv() {
    sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2"
}
