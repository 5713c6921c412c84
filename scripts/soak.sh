#!/usr/bin/env bash
# Soak (issue 13; not CI): real tinyproxy and microsocks upstreams killed and restarted
# every few seconds while 32 clients lease and report through the Unix socket; then check
# that no acknowledged report is missing from the database, RSS stayed flat after warm-up
# (< 10% growth), descriptors did not grow, and each endpoint's state is where its events
# say. Usage: scripts/soak.sh [MINUTES=30] [BIN=target/release/proxypool, else debug]
set -euo pipefail
MIN=${1:-30}
BIN=${2:-}
if [ -z "$BIN" ]; then
  BIN=target/release/proxypool; [ -x "$BIN" ] || BIN=target/debug/proxypool
fi
BIN=$(realpath "$BIN")
for t in tinyproxy microsocks python3; do
  command -v $t >/dev/null || { echo "soak: needs $t (apt-get install tinyproxy microsocks)"; exit 2; }
done
D=$(mktemp -d /tmp/pp-soak.XXXXXX)
cleanup() { kill ${KPID:-} ${CPID:-} ${DPID:-} 2>/dev/null || true
  [ -f "$D/up.pids" ] && kill $(cat "$D/up.pids") 2>/dev/null || true; }
trap cleanup EXIT
mkdir -p "$D/home" "$D/run"
export HOME="$D/home" XDG_RUNTIME_DIR="$D/run" PROXYPOOL_DB="$D/pp.db" PROXYPOOL_SOCKET="$D/run/pp.sock"
unset PROXYPOOL_TOKEN
# Short cooldowns so a killed upstream cycles cooling -> probe_allowed -> trial many times a
# minute (the default 60 s base would leave most of the run on the healthy upstreams).
cat > "$D/soak.toml" <<'TOML'
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "1s"
factor = 2.0
max = "8s"
jitter = 0.1
TOML
export PROXYPOOL_CONFIG="$D/soak.toml"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# 4 tinyproxy + 4 microsocks, each restartable by index.
declare -a KIND PORT UP
for i in 0 1 2 3 4 5 6 7; do
  PORT[$i]=$(free_port); if [ $i -lt 4 ]; then KIND[$i]=http; else KIND[$i]=socks5; fi
done
start_up() { local i=$1
  if [ "${KIND[$i]}" = http ]; then
    printf 'Port %s\nListen 127.0.0.1\nAllow 127.0.0.1\nMaxClients 64\nTimeout 10\n' "${PORT[$i]}" > "$D/tp$i.conf"
    tinyproxy -d -c "$D/tp$i.conf" >/dev/null 2>&1 & UP[$i]=$!
  else
    microsocks -i 127.0.0.1 -p "${PORT[$i]}" >/dev/null 2>&1 & UP[$i]=$!
  fi
  echo "${UP[$i]}" >> "$D/up.pids"; }
for i in 0 1 2 3 4 5 6 7; do start_up $i; done
URLS=(); for i in 0 1 2 3 4 5 6 7; do URLS+=("${KIND[$i]}://127.0.0.1:${PORT[$i]}"); done
"$BIN" add "${URLS[@]}" >/dev/null

RUST_LOG=warn "$BIN" serve 2> "$D/daemon.log" & DPID=$!
for _ in $(seq 300); do "$BIN" status >/dev/null 2>&1 && break; sleep 0.1; done
fds() { ls "/proc/$DPID/fd" | wc -l; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$DPID/status"; }
FD0=$(fds)
echo "soak: $MIN min, bin $BIN, load $(cut -d' ' -f1-3 /proc/loadavg), fds before clients $FD0"

( while true; do                        # the chaos: kill one upstream, bring it back
    i=$((RANDOM % 8)); kill "${UP[$i]}" 2>/dev/null || true; sleep 2; start_up $i; sleep 1
  done ) & KPID=$!

python3 - "$PROXYPOOL_SOCKET" "$((MIN * 60))" "$D/acks.json" <<'PY' &
import json, socket, sys, threading, time, random
sock, secs, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
stop = time.time() + secs
acks, errors, lock = [], {}, threading.Lock()
def client(n):
    s = socket.socket(socket.AF_UNIX); s.connect(sock); f = s.makefile("rwb")
    def req(o):
        f.write(json.dumps(o).encode() + b"\n"); f.flush(); return json.loads(f.readline())
    while time.time() < stop:
        r = req({"op": "lease", "wait": "1s", "ttl": "10s"})
        if not r["ok"]:
            with lock: errors[r["error"]["code"]] = errors.get(r["error"]["code"], 0) + 1
            continue
        host, port = r["proxy"].rsplit("@", 1)[-1].split("//")[-1].rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close(); ok = True
        except OSError:
            ok = False
        rep = {"op": "report", "lease": r["lease"], "outcome": "success" if ok else "failure"}
        if not ok:
            rep.update(reason="connect_refused", phase="connect")
        a = req(rep)
        with lock:
            if a["ok"]:
                acks.append((r["lease"], r["endpoint"], rep["outcome"], a["state"]))
            else:
                errors[a["error"]["code"]] = errors.get(a["error"]["code"], 0) + 1
        time.sleep(random.random() * 0.02)
ts = [threading.Thread(target=client, args=(i,)) for i in range(32)]
[t.start() for t in ts]; [t.join() for t in ts]
json.dump({"acks": acks, "errors": errors}, open(out, "w"))
PY
CPID=$!
# RSS samples every 10 s; warm-up is the first fifth of the run.
: > "$D/rss.txt"
while kill -0 $CPID 2>/dev/null; do echo "$(date +%s) $(rss)" >> "$D/rss.txt"; sleep 10; done
wait $CPID
kill $KPID 2>/dev/null || true
sleep 2
FD1=$(fds)
kill -TERM $DPID; wait $DPID || true; DPID=

python3 - "$D" "$FD0" "$FD1" <<'PY'
import json, sqlite3, sys
d, fd0, fd1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
res = json.load(open(f"{d}/acks.json")); acks = res["acks"]
db = sqlite3.connect(f"{d}/pp.db")
reported = {l for (l,) in db.execute("SELECT lease FROM events WHERE kind='report'")}
fails = [a for a in acks if a[2] == "failure"]
lost = [a for a in fails if a[0] not in reported]
rss = [int(l.split()[1]) for l in open(f"{d}/rss.txt") if len(l.split()) == 2]
warm = rss[max(1, len(rss) // 5) - 1] if rss else 0
peak_after = max(rss[len(rss) // 5:] or [0])
growth = (peak_after - warm) / warm * 100 if warm else 0
bad_state = []
for eid, state in db.execute("SELECT id, state FROM endpoints"):
    last = db.execute("SELECT to_state FROM events WHERE endpoint=? AND to_state IS NOT NULL "
                      "AND kind IN ('added','state_changed') ORDER BY id DESC LIMIT 1", (eid,)).fetchone()
    if not last or last[0] != state:
        bad_state.append((eid, state, last))
chain_gaps = 0
for (eid,) in db.execute("SELECT id FROM endpoints"):
    prev = None
    for fr, to in db.execute("SELECT from_state, to_state FROM events WHERE endpoint=? AND kind='state_changed' ORDER BY id", (eid,)):
        if prev is not None and fr != prev: chain_gaps += 1
        prev = to
print(f"acknowledged reports: {len(acks)} ({len(fails)} failures); errors: {res['errors']}")
print(f"acknowledged failure reports missing from events: {len(lost)}")
print(f"RSS after warm-up {warm} KiB, peak later {peak_after} KiB: growth {growth:.1f}% (samples {len(rss)})")
print(f"fds before clients {fd0}, after clients {fd1}")
print(f"endpoints whose state differs from their last event: {len(bad_state)}; state_changed chain gaps: {chain_gaps}")
ok = not lost and growth < 10 and fd1 <= fd0 + 2 and not bad_state and chain_gaps == 0 and len(acks) > 0
print("SOAK PASSED" if ok else "SOAK FAILED"); sys.exit(0 if ok else 1)
PY
