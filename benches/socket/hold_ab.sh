#!/usr/bin/env bash
# The lease path of two builds side by side: the `hold` loads of benches/socket.rs
# (lease+release, and lease + failure report with `synchronous = full`, 8 connections,
# a pool of 10,000) run by two socket bench executables in turn, A B A B ..., ROUNDS
# times each, SECS seconds a cell; prints every cell, then the medians and B / A.
#
#   benches/socket/hold_ab.sh A_EXE B_EXE [ROUNDS] [SECS]
#
# Each executable comes from `cargo bench --bench socket --no-run` in a checkout of its
# commit (e.g. target/release/deps/socket-<hash>). Short cells, many rounds: on a machine
# others share, the turns spread their noise over both sides alike.
set -euo pipefail

A=${1:?usage: hold_ab.sh A_EXE B_EXE [ROUNDS] [SECS]}
B=${2:?usage: hold_ab.sh A_EXE B_EXE [ROUNDS] [SECS]}
ROUNDS=${3:-8}
SECS=${4:-3}
for exe in "$A" "$B"; do
    [[ -x $exe ]] || { echo "hold_ab.sh: $exe is not an executable" >&2; exit 2; }
done

out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "A = $A"
echo "B = $B"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= ROUNDS; i++)); do
    for what in release report; do
        for side in A B; do
            exe=${!side}
            rate=$("$exe" --bench hold "$what" "$SECS" | sed -n 's/ pairs\/s$//p')
            [[ -n $rate ]] || { echo "hold_ab.sh: $exe printed no rate" >&2; exit 1; }
            echo "$i $what $side $rate" | tee -a "$out"
        done
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    _, what, side, rate = line.split()
    cells.setdefault((what, side), []).append(float(rate))
print("\n| load (8 connections, pool of 10,000) | A pairs/s (median) | B pairs/s (median) | B / A |")
print("|---|---:|---:|---:|")
names = {"release": "lease+release", "report": "lease + failure report (synchronous = full)"}
for what in ("release", "report"):
    a = statistics.median(cells[(what, "A")])
    b = statistics.median(cells[(what, "B")])
    print(f"| {names[what]} | {a:,.0f} | {b:,.0f} | {b / a:.2f}× |")
PY
