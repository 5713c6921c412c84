#!/usr/bin/env python3
"""Scrape cost of a real daemon holding 100,000 endpoints (issue 12's goal: a /metrics
scrape under 50 ms that does not stall leases).

    cargo build --release --bin proxypool
    python3 benches/observability/scrape_100k.py [target/release/proxypool]

One pool, 100,000 static-no-ping endpoints (no probes), `serve --http`. Measures, each
over N sequential requests on a fresh connection: GET /metrics, GET /api/endpoints,
GET /; then lease+report round trips over the socket, quiet and while a client GETs one
of those paths in a loop (p50 / p99 / max)."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/proxypool"
N_ENDPOINTS = 100_000
SCRAPES = 30
LEASES = int(os.environ.get("LEASES", "3000"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def ms(x):
    return f"{x * 1000:.2f} ms"


def timed_get(url, n):
    out, size = [], 0
    for _ in range(n):
        t = time.perf_counter()
        with urllib.request.urlopen(url) as r:
            size = len(r.read())
        out.append(time.perf_counter() - t)
    return out, size


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.f = self.s.makefile("rb")

    def req(self, v):
        self.s.sendall((json.dumps(v) + "\n").encode())
        r = json.loads(self.f.readline())
        if not r.get("ok", True) or "error" in r:
            raise RuntimeError(r)
        return r


def lease_loop(path, n):
    """Lease + success report: the report commits through the store thread, which the
    page and /api/endpoints also read through."""
    c = Conn(path)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        g = c.req({"op": "lease"})
        c.req({"op": "report", "lease": g["lease"], "outcome": "success"})
        out.append(time.perf_counter() - t)
    return out


def under_load(base, sock, path):
    stop = threading.Event()
    scraped = []

    def scraper():
        while not stop.is_set():
            scraped.append(timed_get(base + path, 1)[0][0])

    th = threading.Thread(target=scraper)
    th.start()
    busy = lease_loop(sock, LEASES)
    stop.set()
    th.join()
    return busy, scraped


def main():
    d = tempfile.mkdtemp(prefix="pp-scrape-")
    env = dict(os.environ)
    env.update(
        PROXYPOOL_DB=f"{d}/pp.db",
        PROXYPOOL_SOCKET=f"{d}/pp.sock",
        PROXYPOOL_CONFIG=f"{d}/proxies.toml",
    )
    with open(f"{d}/proxies.toml", "w") as f:
        f.write('[[pool]]\nname = "default"\nmode = "static-no-ping"\n')
    with open(f"{d}/urls.txt", "w") as f:
        for i in range(N_ENDPOINTS):
            f.write(f"http://10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:8080\n")
    t = time.perf_counter()
    subprocess.run([BIN, "import", f"{d}/urls.txt"], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"import {N_ENDPOINTS} endpoints: {time.perf_counter() - t:.1f} s")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(f"{d}/serve.log", "w")
    daemon = subprocess.Popen([BIN, "serve", "--http", f"127.0.0.1:{port}"], env=env, stderr=log)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/healthz").read()
                break
            except OSError:
                time.sleep(0.1)
        for path, n in [("/metrics", SCRAPES), ("/api/endpoints", 5), ("/", SCRAPES)]:
            xs, size = timed_get(base + path, n)
            print(f"GET {path:15} {size / 1000:9.0f} KB  median {ms(pct(xs, 0.5))}  max {ms(max(xs))}  (n={n})")
        sock = env["PROXYPOOL_SOCKET"]
        quiet = lease_loop(sock, LEASES)
        print(f"lease+report, quiet              p50 {ms(pct(quiet, 0.5))}  p99 {ms(pct(quiet, 0.99))}  max {ms(max(quiet))}")
        for path in ["/metrics", "/", "/api/endpoints"]:
            xs, scraped = under_load(base, sock, path)
            print(f"lease+report, GET {path:15} p50 {ms(pct(xs, 0.5))}  p99 {ms(pct(xs, 0.99))}  max {ms(max(xs))}"
                  f"  ({len(scraped)} GETs meanwhile)")
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
