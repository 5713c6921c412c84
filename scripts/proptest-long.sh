#!/usr/bin/env bash
# Long property run: every property of tests/proptest_parsers.rs with 1,000,000 cases
# (override with PROPTEST_CASES), one property at a time, timing each.
#
#   scripts/proptest-long.sh                 # optimized build (recommended: much faster)
#   PROFILE=debug scripts/proptest-long.sh   # reuse the debug build
#   scripts/proptest-long.sh parse_line      # only properties whose name contains this
#
# Prints one line per property (name, cases, seconds, ok/FAILED) and exits non-zero if
# any property failed; the failing minimal input is in the log file it names.
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-1000000}"
profile="${PROFILE:-release}"
filter="${1:-}"
flags=()
[ "$profile" = release ] && flags+=(--release)
log="${LOG:-target/proptest-long.log}"
mkdir -p target
: >"$log"

# Build once, then run the test binary itself: cargo would hold the build lock for hours.
bin=$(cargo test "${flags[@]}" --test proptest_parsers --no-run --message-format=json 2>>"$log" |
    grep '"kind":\["test"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "could not build tests/proptest_parsers.rs (see $log)" >&2; exit 1; }
# A copy, so rebuilding the tests meanwhile neither fails nor swaps the binary mid-run.
cp "$bin" target/proptest-long-bin
bin=target/proptest-long-bin
names=$("$bin" --list 2>/dev/null | sed -n 's/: test$//p' | grep -F -- "$filter" || true)
[ -n "$names" ] || { echo "no property matches '$filter'" >&2; exit 2; }

failed=0
echo "cases per property: $PROPTEST_CASES, profile: $profile, log: $log"
for n in $names; do
    start=$(date +%s)
    if "$bin" --exact "$n" >>"$log" 2>&1; then
        r=ok
    else
        r=FAILED
        failed=1
    fi
    printf '%-58s %9s cases %6ss %s\n' "$n" "$PROPTEST_CASES" "$(($(date +%s) - start))" "$r"
done
exit $failed
