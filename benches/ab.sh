#!/usr/bin/env bash
# One benchmark (benches/BENCH.rs) of two commits side by side: each is built in release
# from its own checkout (a temporary git worktree, the repository's target dir shared), then
# the two binaries run alternately, A B A B ..., ROUNDS times each. Output lines are split
# into fields at runs of two or more spaces (the benches print aligned tables): a line
# whose first field is text and whose next fields are numbers (or ratios, "0.84x") is a
# row, and each numeric column gets its median per side and B / A (a trailing text field
# is ignored). Prints the load average before and after.
#
# Usage: benches/ab.sh BENCH A B [ROUNDS]   e.g. benches/ab.sh destinations main blame 4
# BENCH_ARGS: words passed to each bench run after `--bench` (e.g. BENCH_ARGS=floors for
# only the floors table of benches/socket.rs).
# Needs: git, cargo, python3.
set -euo pipefail

BENCH=${1:?usage: ab.sh BENCH A B [ROUNDS]}
A=${2:?usage: ab.sh BENCH A B [ROUNDS]}
B=${3:?usage: ab.sh BENCH A B [ROUNDS]}
ROUNDS=${4:-4}
repo=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trees=()
cleanup() {
    for t in "${trees[@]}"; do git -C "$repo" worktree remove --force "$t" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# build REV NAME: the bench of REV, copied to $work/NAME.
build() {
    local tree="$work/src-$2"
    git -C "$repo" worktree add --detach -q "$tree" "$1"
    trees+=("$tree")
    local exe
    exe=$(cd "$tree" && CARGO_TARGET_DIR="$repo/target" cargo bench --bench "$BENCH" --no-run \
        --message-format=json 2>/dev/null | python3 -c '
import json, sys
name = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == name and m.get("executable"):
        print(m["executable"])' "$BENCH")
    cp "$exe" "$work/$2"
    echo "$2 = $(git -C "$repo" rev-parse --short "$1") ($1)"
}

build "$A" a
build "$B" b
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$ROUNDS"); do
    for side in a b; do
        # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
        "$work/$side" --bench ${BENCH_ARGS:-} > "$work/$side.$i.txt"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
cat "$work/b.1.txt"

python3 - "$work" "$ROUNDS" <<'PY'
import re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
# A number, or a ratio the bench prints with a trailing "x" (its median is a ratio too).
num = re.compile(r"^[\d.]+x?$")
rows, order = {}, []
for side in "ab":
    for i in range(1, rounds + 1):
        seen = {}
        for line in open(f"{work}/{side}.{i}.txt"):
            f = re.split(r"\s{2,}", line.strip())
            k = 1
            while k < len(f) and num.match(f[k]):
                k += 1
            if k == 1 or num.match(f[0]):
                continue
            t = f[:1] + f[1:k]
            k = 1
            label = t[0]
            # A label seen twice in one run (two tables) keeps both rows apart.
            n = seen.get(label, 0)
            seen[label] = n + 1
            key = (label, n)
            if key not in rows:
                rows[key] = {"a": [], "b": []}
                order.append(key)
            rows[key][side].append([float(x.rstrip("x")) for x in t[k:]])
print(f"\nmedians of {rounds} runs each, run alternately: A | B | B/A per numeric column")
for key in order:
    a, b = rows[key]["a"], rows[key]["b"]
    if not a or not b or len({len(r) for r in a + b}) != 1:
        continue
    cols = []
    for c in range(len(a[0])):
        ma = statistics.median(r[c] for r in a)
        mb = statistics.median(r[c] for r in b)
        ratio = f"{mb / ma:.2f}" if ma else "-"
        cols.append(f"{ma:g} | {mb:g} | {ratio}")
    print(f"{key[0]:<48} " + "   ".join(cols))
PY
echo "load average before $LOAD_BEFORE, after $LOAD_AFTER."
