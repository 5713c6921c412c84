"""One figure of benches/node_client/run.sh: leases + releases a second through the
Python package's asyncio client, from one process, for SECONDS after a one-second
warm-up.

    python3 asyncio_bench.py SOCKET POOL SECONDS [CONCURRENCY]
"""

import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from proxypool_client import AsyncClient  # noqa: E402


async def loop(client, pool, until):
    n = 0
    while time.monotonic() < until:
        lease = await client.lease(pool=pool)
        await client.release(lease)
        n += 1
    return n


async def run(socket, pool, seconds, concurrency):
    client = AsyncClient(socket)
    until = time.monotonic() + seconds
    counts = await asyncio.gather(*(loop(client, pool, until) for _ in range(concurrency)))
    await client.close()
    return sum(counts)


def main():
    socket, pool, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    asyncio.run(run(socket, pool, 1.0, concurrency))
    start = time.monotonic()
    ops = asyncio.run(run(socket, pool, seconds, concurrency))
    elapsed = time.monotonic() - start
    print(json.dumps({"mode": "python-asyncio", "concurrency": concurrency, "ops": ops, "seconds": elapsed,
                      "rate": ops / elapsed}))


if __name__ == "__main__":
    main()
