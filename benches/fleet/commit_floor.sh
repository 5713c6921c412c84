#!/bin/bash
# What one group commit costs PostgreSQL, against the cheapest durable write there is.
#
# usage: benches/fleet/commit_floor.sh [PROXYPOOL_BIN] [ROUNDS]
#
# A private cluster (Debian's postgresql 15; as `nobody` when run as root) gets the schema
# from PROXYPOOL_BIN (`import` migrates it) and 2,000 endpoints. One pgbench client then
# runs, ROUNDS times in turn, for 5,000 transactions each:
#   commit-1, commit-8  a daemon's group commit of 1 or 8 transitions (with their events):
#                       one call of proxypool_commit, then the flush transaction behind it
#   update-sync         the floor: one single-row UPDATE in its own transaction, committed
#                       with synchronous_commit on (it waits for its own WAL flush)
#   update-async        the same without waiting for the flush
# and prints PostgreSQL's CPU per transaction (every server process, the finished
# connection's included, from /proc) and pgbench's rate. Statements are prepared, as the
# daemon's are.
#
# Then the database's side of three daemons against one, for 3 s a cell: transitions kept
# a second and PostgreSQL's CPU per transition, one client committing 8 transitions a
# commit (one daemon with 8 clients) against three clients committing 3 each (three
# daemons sharing 8 clients), each commit sent in one round trip (pipelined, as a daemon
# sends it):
#   bare   the 8 or 3 UPDATEs and their events' INSERT in one transaction of their own
#   call   proxypool_commit with the flush transaction behind it, as a daemon commits
#   whole  proxypool_commit waiting for its own flush (no flush transaction), holding
#          the events' lock through the flush
set -euo pipefail
BIN=${1:-target/release/proxypool}
ROUNDS=${2:-3}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
DIR=$(mktemp -d /tmp/pp-commit-floor.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PGPASSWORD=floor-pw
as_server() { if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown nobody "$DIR"
echo "$PGPASSWORD" > "$DIR/pw"; [ "$(id -u)" = 0 ] && chown nobody "$DIR/pw"
as_server "$PGBIN/initdb" -D "$DIR/data" -U pp --pwfile="$DIR/pw" --auth=scram-sha-256 \
    -E UTF8 --no-sync --no-instructions >/dev/null
as_server "$PGBIN/pg_ctl" -D "$DIR/data" -w -l "$DIR/log" \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1" start >/dev/null
trap 'as_server "$PGBIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null; rm -rf "$DIR"' EXIT
psql -h 127.0.0.1 -p "$PORT" -U pp -d postgres -qc "CREATE DATABASE floor"
for i in $(seq 1 2000); do echo "http://10.$((i / 250)).$((i % 250)).1:3128"; done > "$DIR/list.txt"
PROXYPOOL_DB="postgresql://pp:$PGPASSWORD@127.0.0.1:$PORT/floor" "$BIN" import "$DIR/list.txt" >/dev/null

# The scripts: K consecutive endpoints from a random one (in id order, as a daemon sends
# them), each written available -> available (it applies: the row is available and its
# rev below the new change number).
python3 - "$DIR" <<'PY'
import sys
d = sys.argv[1]
def call(k):
    ids = ",".join(f":id{i}" for i in range(k))
    arr = lambda v, t: "ARRAY[" + ",".join([v] * k) + f"]::{t}[]"
    av, sc = "'available'", "'state_changed'"
    args = ["true", "'proxypool_changes'", f"ARRAY[{ids}]::bigint[]", arr(av, "text"),
            arr("NULL", "text"), arr("NULL", "text"), arr("NULL", "text"), arr("0", "int"),
            arr("0", "int"), arr("NULL", "bigint"), arr("NULL", "bigint"), arr(av, "text"),
            arr("NULL", "bigint"), "ARRAY[" + ",".join(str(i + 1) for i in range(k)) + "]::int[]",
            f"ARRAY[{ids}]::bigint[]", arr(sc, "text"), arr(av, "text"), arr(av, "text")] + \
           [arr("NULL", "text")] * 5 + [arr("NULL", "int"), arr("NULL", "text")]
    sets = "\\set id0 random(1, 1992)\n" + "\n".join(f"\\set id{i} :id0 + {i}" for i in range(1, k))
    return (sets + "\nSELECT proxypool_commit(" + ", ".join(args) + ");\n"
            "SELECT pg_logical_emit_message(true, 'proxypool', '');\n")
for k in (1, 8):
    open(f"{d}/commit-{k}.sql", "w").write(call(k))
# The same call for the concurrency cells, sent in one round trip; `whole` without the
# flush transaction (the call then commits waiting for its flush).
for k in (3, 8):
    sets, body = call(k).split("\nSELECT proxypool_commit(", 1)
    called = "SELECT proxypool_commit(" + body.split(";\n", 1)[0] + ";\n"
    flush = "SELECT pg_logical_emit_message(true, 'proxypool', '');\n"
    open(f"{d}/call-{k}.sql", "w").write(
        sets + "\n\\startpipeline\n" + called + flush + "\\endpipeline\n")
    whole = called.replace("SELECT proxypool_commit(true,", "SELECT proxypool_commit(false,")
    open(f"{d}/whole-{k}.sql", "w").write(sets + "\n\\startpipeline\n" + whole + "\\endpipeline\n")
    ups = "".join(f"UPDATE endpoints SET state = 'available', streak = 0, state_changed_at = now() "
                  f"WHERE id = :id{i};\n" for i in range(k))
    ev = (f"INSERT INTO events (endpoint, kind) SELECT g, 'state_changed' "
          f"FROM generate_series(:id0, :id0 + {k - 1}) g;\n")
    open(f"{d}/bare-{k}.sql", "w").write(
        sets + "\n\\startpipeline\nBEGIN;\n" + ups + ev + "COMMIT;\n\\endpipeline\n")
update = ("\\set id0 random(1, 2000)\nUPDATE endpoints SET state = 'available', streak = 0, "
          "rev = nextval('fleet_change_seq'), state_changed_at = now() WHERE id = :id0;\n")
open(f"{d}/update-sync.sql", "w").write(update)
open(f"{d}/update-async.sql", "w").write(update)
PY

server_ticks() {
    local t=0 f
    for p in $(pgrep -f "$DIR/data" -o) $(pgrep -P "$(pgrep -f "$DIR/data" -o)"); do
        read -ra f < "/proc/$p/stat" 2>/dev/null || continue
        t=$((t + f[13] + f[14] + f[15] + f[16]))
    done
    echo "$t"
}
N=5000
TCK=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
    for s in commit-1 commit-8 update-sync update-async; do
        opts=""
        [ "$s" = update-async ] && opts="-c synchronous_commit=off"
        a=$(server_ticks)
        out=$(PGOPTIONS="$opts" "$PGBIN/pgbench" -h 127.0.0.1 -p "$PORT" -U pp -n -M prepared \
            -f "$DIR/$s.sql" -c 1 -t "$N" floor 2>&1)
        b=$(server_ticks)
        tps=$(echo "$out" | grep -oP 'tps = \K[0-9]+')
        printf 'round %s  %-13s %5d µs PostgreSQL CPU a transaction  %6s a second\n' \
            "$r" "$s" $(((b - a) * 1000000 / TCK / N)) "$tps"
    done
done
for r in $(seq "$ROUNDS"); do
    for s in bare call whole; do
        for kc in "8 1" "3 3"; do
            read -r k c <<< "$kc"
            a=$(server_ticks)
            out=$("$PGBIN/pgbench" -h 127.0.0.1 -p "$PORT" -U pp -n -M prepared \
                -f "$DIR/$s-$k.sql" -c "$c" -j "$c" -T 3 floor 2>&1)
            b=$(server_ticks)
            tps=$(echo "$out" | grep -oP 'tps = \K[0-9]+')
            n=$(echo "$out" | grep -oP 'processed: \K[0-9]+')
            printf 'round %s  %-5s %d writer(s) x %d a commit  %6d transitions/s  %4d µs PostgreSQL CPU a transition\n' \
                "$r" "$s" "$c" "$k" $((tps * k)) $(((b - a) * 1000000 / TCK / (n * k)))
        done
    done
done
