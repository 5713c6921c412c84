#!/usr/bin/env bash
# The lease-socket benchmark (benches/socket.rs) of two commits side by side: each is built
# in release from its own checkout (a temporary git worktree, the repository's target dir
# shared), then the two binaries run alternately, A B A B ..., ROUNDS times each. Prints
# every cell's median ops/s for A and B, B / A, and the load average before and after.
#
# Usage: benches/socket_ab.sh A B [ROUNDS]     e.g. benches/socket_ab.sh main house 4
# Needs: git, cargo, python3. A full run of one binary takes ~40 s.
set -euo pipefail

A=${1:?usage: socket_ab.sh A B [ROUNDS]}
B=${2:?usage: socket_ab.sh A B [ROUNDS]}
ROUNDS=${3:-4}
repo=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trees=()
cleanup() {
    for t in "${trees[@]}"; do git -C "$repo" worktree remove --force "$t" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# build REV NAME: the socket bench of REV, copied to $work/NAME.
build() {
    local tree="$work/src-$2"
    git -C "$repo" worktree add --detach -q "$tree" "$1"
    trees+=("$tree")
    local exe
    exe=$(cd "$tree" && CARGO_TARGET_DIR="$repo/target" cargo bench --bench socket --no-run \
        --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "socket" and m.get("executable"):
        print(m["executable"])')
    cp "$exe" "$work/$2"
    echo "$2 = $(git -C "$repo" rev-parse --short "$1") ($1)"
}

build "$A" a
build "$B" b
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$ROUNDS"); do
    for side in a b; do
        "$work/$side" --bench > "$work/$side.$i.txt"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$work" "$ROUNDS" <<'EOF'
import re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
cells = {}  # (load, conns) -> side -> [ops/s]
order = []
for side in "ab":
    for i in range(1, rounds + 1):
        for line in open(f"{work}/{side}.{i}.txt"):
            # LOAD  CONNS  OPS/S  US/OP  ERRORS  [pair = ...]
            t = line.split("   pair =")[0].split()
            if len(t) < 5 or not all(re.fullmatch(r"[\d.]+", x) for x in t[-4:]):
                continue
            key = (" ".join(t[:-4]), int(t[-4]))
            ops = float(t[-3])
            if key not in cells:
                cells[key] = {"a": [], "b": []}
                order.append(key)
            cells[key][side].append(ops)
print(f"\nmedian ops/s of {rounds} runs each, run alternately (and the range of the runs)")
print(f"{'load':<38} {'conns':>5} {'A':>10} {'B':>10} {'B/A':>6}   {'A runs':>17} {'B runs':>17}")
for key in order:
    a, b = (statistics.median(cells[key][s]) for s in "ab")
    span = lambda v: f"{min(v):.0f}-{max(v):.0f}"
    print(f"{key[0]:<38} {key[1]:>5} {a:>10.0f} {b:>10.0f} {b / a:>6.2f}"
          f"   {span(cells[key]['a']):>17} {span(cells[key]['b']):>17}")
EOF
echo "load average before $LOAD_BEFORE, after $LOAD_AFTER."
