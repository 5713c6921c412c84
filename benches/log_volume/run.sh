#!/usr/bin/env bash
# Log and event volume of a daemon with many endpoints (docs/observability.md, "Log
# volume"). Two runs per binary, binaries alternating:
#   dead:    N endpoints where nothing listens (loopback, connection refused), probed
#            for DEAD_S seconds with a 10 s cooldown, stopped for 11 s, then restarted
#            for RESTART_S seconds;
#   healthy: N endpoints through one microsocks, periodic checks every 10 s for
#            HEALTHY_S seconds.
# Prints, per binary and run: INFO lines, lines before `serving` on the restart, event
# rows (all, and probe_success).
#
# Usage: benches/log_volume/run.sh BIN... (e.g. a main build and this branch's build)
# Env: N (5000), DEAD_S (30), RESTART_S (10), HEALTHY_S (60). Needs: python3, sqlite3
# (python module), microsocks.
set -euo pipefail
N=${N:-5000}
DEAD_S=${DEAD_S:-30}
RESTART_S=${RESTART_S:-10}
HEALTHY_S=${HEALTHY_S:-60}
[ $# -ge 1 ] || { echo "usage: run.sh BIN..." >&2; exit 2; }
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
web=$(free_port)
python3 -m http.server "$web" --bind 127.0.0.1 --directory "$work" >/dev/null 2>&1 &
pids+=($!)
socks=$(free_port)
microsocks -i 0.0.0.0 -p "$socks" >/dev/null 2>&1 &
pids+=($!)

# list PREFIX PORT: N URLs on distinct loopback addresses.
list() {
    python3 - "$1" "$2" "$N" <<'PY'
import sys
scheme, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    print(f"{scheme}://127.{10 + i // 65000}.{(i // 250) % 250 + 1}.{i % 250 + 1}:{port}")
PY
}

# run BIN NAME CONFIG LIST SECONDS [RESTART_SECONDS]
run() {
    local bin=$1 name=$2 cfg=$3 urls=$4 secs=$5 again=${6:-0}
    local home="$work/$name"
    rm -rf "$home"; mkdir -p "$home"/{home,data,config,run}
    printf '%s' "$cfg" >"$home/proxies.toml"
    export HOME="$home/home" XDG_DATA_HOME="$home/data" XDG_CONFIG_HOME="$home/config" \
        XDG_RUNTIME_DIR="$home/run" PROXYPOOL_DB="$home/data/pp.db" \
        PROXYPOOL_SOCKET="$home/run/pp.sock" PROXYPOOL_CONFIG="$home/proxies.toml"
    printf '%s\n' "$urls" >"$home/list.txt"
    "$bin" import "$home/list.txt" >/dev/null 2>&1
    RUST_LOG=info "$bin" serve 2>"$home/log1" >/dev/null &
    local p=$!
    sleep "$secs"; kill -TERM "$p"; wait "$p" || true
    local lines2=0 before=0
    if [ "$again" -gt 0 ]; then
        # Stopped past the cooldown: every cooldown ends while the daemon is down.
        sleep 11
        RUST_LOG=info "$bin" serve 2>"$home/log2" >/dev/null &
        p=$!
        sleep "$again"; kill -TERM "$p"; wait "$p" || true
        lines2=$(wc -l <"$home/log2")
        before=$(awk '/serving/{exit} {n++} END{print n+0}' "$home/log2")
    fi
    python3 - "$home/data/pp.db" "$(wc -l <"$home/log1")" "$lines2" "$before" "$bin" "$name" <<'PY'
import sqlite3, sys
db, l1, l2, before, binary, name = sys.argv[1:]
c = sqlite3.connect(db)
total = c.execute("select count(*) from events").fetchone()[0]
ok = c.execute("select count(*) from events where kind='probe_success'").fetchone()[0]
print(f"{name:8} {binary:40} lines {l1:>6}  restart lines {l2:>5} (before serving {before:>4})  events {total:>6}  probe_success {ok:>6}")
PY
}

dead_cfg="[[pool]]
name = \"default\"
mode = \"static\"
[pool.probe]
url = \"http://127.0.0.1:$web/\"
timeout = \"2s\"
concurrency = 256
[pool.cooldown]
base = \"10s\"
max = \"10s\"
"
healthy_cfg="[[pool]]
name = \"default\"
mode = \"static\"
[pool.probe]
url = \"http://127.0.0.1:$web/\"
timeout = \"5s\"
interval = \"10s\"
concurrency = 256
"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for bin in "$@"; do
    run "$bin" dead "$dead_cfg" "$(list http 9)" "$DEAD_S" "$RESTART_S"
done
for bin in "$@"; do
    run "$bin" healthy "$healthy_cfg" "$(list socks5 "$socks")" "$HEALTHY_S"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
