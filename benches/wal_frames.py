#!/usr/bin/env python3
"""WAL frames (dirty pages) per commit of lease + failure-report pairs, with the schema of
migrations/*/up.sql and the statements src/store/sqlite/ runs for one pair, and without
the index named on the command line.

Each pair is what one endpoint cycling through the socket bench's report load writes: the
end of its cooldown (an endpoint update and a `state_changed` event), its trial's claim (a
`trial_admitted` event) and the failure (a `report` event, an endpoint update, a
`state_changed` event), each caller's writes in a savepoint as the store thread runs them.
The WAL is not checkpointed during the run, so its size counts the frames.

Run: python3 benches/wal_frames.py [PAIRS_PER_COMMIT] [INDEX_TO_DROP ...]; UPTO=07 applies
the migrations up to that number only (the schema before a later one).
"""
import glob
import os
import random
import sqlite3
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UPTO = os.environ.get("UPTO", "99")
SCHEMA = "\n".join(
    open(f).read()
    for f in sorted(glob.glob(os.path.join(ROOT, "migrations/*/up.sql")))
    if os.path.basename(os.path.dirname(f))[:2] <= UPTO
)
NOW = "2026-12-01T16:00:00.000Z"
EVENT = ("INSERT INTO events (at, endpoint, kind, from_state, to_state, reason, phase, detail, "
         "lease, destination, status, blame) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)")
UPDATE = ("UPDATE endpoints SET state=?2, reason=?3, phase=?4, detail=?5, streak=?6, "
          "reason_streak=?7, cooldown_ms=?8, cooldown_until=?9, state_changed_at=?10 WHERE id=?1")


def run(dir, drop, cycling, pairs, commits=300):
    path = os.path.join(dir, f"frames-{len(drop)}-{cycling}.db")
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=FULL")
    c.executescript(SCHEMA)
    for index in drop:
        c.execute(f"DROP INDEX IF EXISTS {index}")
    c.execute("BEGIN")
    for i in range(1, 10_001):
        c.execute(
            "INSERT INTO endpoints (id, pool, scheme, host, port, user, source, state, streak, "
            "state_changed_at, created_at) VALUES (?, 'default', 'socks5h', ?, 1080, '', "
            "'bench', 'available', 0, ?, ?)",
            (i, f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", NOW, NOW),
        )
        c.execute("INSERT INTO events (at, endpoint, kind, to_state) VALUES (?, ?, 'added', 'available')", (NOW, i))
    c.execute("COMMIT")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.execute("PRAGMA wal_autocheckpoint=0")
    lease, took = 0, []
    for _ in range(commits):
        t0 = time.perf_counter()
        c.execute("BEGIN IMMEDIATE")
        for e in random.sample(range(1, cycling + 1), pairs):
            lease += 1
            l = f"l-{lease}"
            c.execute("SAVEPOINT g")
            c.execute(UPDATE, (e, "probe_allowed", "connect_refused", "connect", None, 1, 1, 200, None, NOW))
            c.execute(EVENT, (NOW, e, "state_changed", "cooling", "probe_allowed", "connect_refused", "connect", None, None, None, None, None))
            c.execute("RELEASE g")
            c.execute("SAVEPOINT g")
            c.execute(EVENT, (NOW, e, "trial_admitted", "probe_allowed", "probe_allowed", None, None, None, l, None, None, None))
            c.execute("RELEASE g")
            c.execute("SAVEPOINT g")
            c.execute(EVENT, (NOW, e, "report", "probe_allowed", "cooling", "connect_refused", "connect", None, l, None, None, "endpoint"))
            c.execute(UPDATE, (e, "cooling", "connect_refused", "connect", None, 2, 2, 200, NOW, NOW))
            c.execute(EVENT, (NOW, e, "state_changed", "probe_allowed", "cooling", "connect_refused", "connect", None, l, None, None, "endpoint"))
            c.execute("RELEASE g")
        c.execute("COMMIT")
        took.append(time.perf_counter() - t0)
    frames = (os.path.getsize(path + "-wal") - 32) / (4096 + 24)
    took.sort()
    return frames / commits, took[len(took) // 2]


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    drops = sys.argv[2:]
    with tempfile.TemporaryDirectory() as dir:
        print(f"{'schema':<40} {'endpoints cycling':>18} {'frames/commit':>14} {'median commit':>14}")
        for drop in [[]] + [drops[: i + 1] for i in range(len(drops))]:
            for cycling in (500, 10_000):
                frames, took = run(dir, drop, cycling, pairs)
                name = "as migrated" if not drop else "without " + ", ".join(drop)
                print(f"{name:<40} {cycling:>18} {frames:>14.1f} {took * 1e6:>11.0f} µs")


if __name__ == "__main__":
    main()
