#!/usr/bin/env bash
# Long property run: every property of tests/proptest_parsers.rs and the gateway's SOCKS5
# parser properties (src/gateway/socks5.rs) with 1,000,000 cases (override with
# PROPTEST_CASES), one property at a time, timing each.
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

# Build once, then run the test binaries themselves: cargo would hold the build lock for
# hours. Copies, so rebuilding the tests meanwhile neither fails nor swaps a binary mid-run.
build() { # CARGO-TARGET-ARGS... -> path of the test executable
    cargo test "${flags[@]}" "$@" --no-run --message-format=json 2>>"$log" |
        grep '"kind":\["\(test\|lib\)"\]' | grep '"test":true' |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}
parsers=$(build --test proptest_parsers)
lib=$(build --lib)
[ -x "$parsers" ] || { echo "could not build tests/proptest_parsers.rs (see $log)" >&2; exit 1; }
[ -x "$lib" ] || { echo "could not build the library's unit tests (see $log)" >&2; exit 1; }
cp "$parsers" target/proptest-long-parsers
cp "$lib" target/proptest-long-lib
# Every property of tests/proptest_parsers.rs, and the gateway's SOCKS5 parser properties
# that live next to the parser (src/gateway/socks5.rs).
list() { "$1" --list 2>/dev/null | sed -n 's/: test$//p' | grep -F -- "$filter" || true; }
runs=()
for n in $(list target/proptest-long-parsers); do runs+=("target/proptest-long-parsers $n"); done
for n in $(list target/proptest-long-lib | grep -E '^gateway::socks5::tests::(parsers_never_panic|requests_round_trip)'); do
    runs+=("target/proptest-long-lib $n")
done
[ ${#runs[@]} -gt 0 ] || { echo "no property matches '$filter'" >&2; exit 2; }

failed=0
echo "cases per property: $PROPTEST_CASES, profile: $profile, log: $log"
for r in "${runs[@]}"; do
    bin=${r%% *}
    n=${r#* }
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
