#!/usr/bin/env bash
# Import scale: 1,000,000 lines with the CLI alone, the daemon holding them, and a
# lease-latency probe while another million go in through a running daemon.
# Usage: benches/import/run.sh [LINES] [BIN]   (BIN default target/release/proxypool)
# WRITES=1 adds a second probe during that import: a client that disables and enables
# endpoint 1 every 50 ms (operator writes, which wait for the import's transaction).
# Needs /usr/bin/time and python3. Everything stays in a temp dir on 127.0.0.1/Unix sockets.
set -euo pipefail
N=${1:-1000000}
BIN=${2:-target/release/proxypool}
BIN=$(realpath "$BIN")
D=$(mktemp -d /tmp/pp-import-bench.XXXXXX)
trap 'kill ${DPID:-} 2>/dev/null || true; rm -rf "$D"' EXIT
mkdir -p "$D/home" "$D/run"
export HOME="$D/home" XDG_RUNTIME_DIR="$D/run" PROXYPOOL_SOCKET="$D/run/pp.sock"
unset PROXYPOOL_CONFIG PROXYPOOL_TOKEN RUST_LOG

gen() { # $1 = lines, $2 = second octet (distinct hosts per file)
  awk -v n="$1" -v b="$2" 'BEGIN { for (i = 0; i < n; i++)
    printf "http://u%d:pw%d@10.%d.%d.%d:%d\n", i, i, b, int(i / 65536) % 256, int(i / 256) % 256, 1024 + i % 60000 }'
}
gen "$N" 1 > "$D/a.txt"
gen "$N" 2 > "$D/b.txt"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); lines: $N; bin: $BIN"

rss_of() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
timed() { /usr/bin/time -v "$@" 2> "$D/time.txt" >/dev/null || { cat "$D/time.txt"; exit 1; }
  printf '%s s, peak RSS %s MiB\n' \
    "$(awk -F': ' '/Elapsed/ {print $2}' "$D/time.txt")" \
    "$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$D/time.txt")"; }

echo -n "CLI import (no daemon): "
PROXYPOOL_DB="$D/a.db" timed "$BIN" import "$D/a.txt"

# `status` also answers without a daemon (from the database): wait for the socket too.
wait_sock() { for _ in $(seq 1200); do
  [ -S "$PROXYPOOL_SOCKET" ] && "$BIN" status >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "daemon did not start"; exit 1; }

export PROXYPOOL_DB="$D/a.db"
"$BIN" serve 2> "$D/daemon.log" & DPID=$!
wait_sock
echo "daemon holding $N endpoints: RSS $(( $(rss_of $DPID) / 1024 )) MiB"

# Lease latency while another $N lines go in through the daemon.
python3 - "$PROXYPOOL_SOCKET" > "$D/lat.txt" <<'PY' & PPID_LAT=$!
import json, socket, sys, time, os
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rwb")
worst, n, stop = 0.0, 0, time.time() + 600
while time.time() < stop and not os.path.exists(sys.argv[1] + ".stop"):
    t = time.perf_counter()
    f.write(b'{"op":"lease","ttl":"5s"}\n'); f.flush(); r = json.loads(f.readline())
    worst = max(worst, time.perf_counter() - t); n += 1
    if r.get("ok"):
        f.write(json.dumps({"op": "release", "lease": r["lease"]}).encode() + b"\n"); f.flush(); f.readline()
    time.sleep(0.005)
print(f"{n} leases, slowest {worst * 1000:.1f} ms")
PY
if [ "${WRITES:-}" = 1 ]; then
python3 - "$PROXYPOOL_SOCKET" > "$D/writes.txt" <<'PY' & PPID_W=$!
import json, socket, sys, time, os
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rwb")
worst, n, stop = 0.0, 0, time.time() + 600
while time.time() < stop and not os.path.exists(sys.argv[1] + ".stop"):
    for req in ({"op": "disable", "endpoint": 1}, {"op": "enable", "endpoint": 1, "now": True}):
        t = time.perf_counter()
        f.write(json.dumps(req).encode() + b"\n"); f.flush(); r = json.loads(f.readline())
        assert r.get("ok"), r
        worst = max(worst, time.perf_counter() - t); n += 1
    time.sleep(0.05)
print(f"{n} writes, slowest {worst * 1000:.1f} ms")
PY
fi
sleep 1
echo -n "import through the daemon: "
timed "$BIN" import "$D/b.txt"
touch "$PROXYPOOL_SOCKET.stop"; wait $PPID_LAT
echo "lease probe during that import: $(cat "$D/lat.txt")"
if [ "${WRITES:-}" = 1 ]; then
  wait $PPID_W
  echo "write probe (disable + enable every 50 ms) during that import: $(cat "$D/writes.txt")"
fi
echo "daemon holding $((2 * N)) endpoints: RSS $(( $(rss_of $DPID) / 1024 )) MiB; daemon peak $(awk '/^VmHWM/ {printf "%.0f", $2/1024}' /proc/$DPID/status) MiB"
