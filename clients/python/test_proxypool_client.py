"""Tests of proxypool_client against a REAL daemon.

Environment:
  PROXYPOOL_SOCKET  the running daemon's socket (required)
  PROXYPOOL_BIN     the proxypool binary, used to add endpoints (required)
  plus whatever that binary needs to reach the same daemon (PROXYPOOL_DB, ...).

Each test takes every endpoint of the `default` pool out of service, then adds its own,
so the tests do not see each other's endpoints. Use a throwaway daemon.

    PROXYPOOL_SOCKET=... PROXYPOOL_BIN=... python3 -m unittest -v test_proxypool_client
"""

import itertools
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from proxypool_client import (  # noqa: E402
    Client,
    Lease,
    ProxyPoolError,
    ReportableError,
    default_socket_path,
)

SOCKET = os.environ.get("PROXYPOOL_SOCKET")
BIN = os.environ.get("PROXYPOOL_BIN")
_hosts = itertools.count(1)


def _unique_host():
    n = next(_hosts) + 1000 * (os.getpid() % 200)
    return "10.%d.%d.%d" % (200 + (n >> 16) % 50, (n >> 8) & 255, n & 255)


@unittest.skipUnless(SOCKET and BIN, "needs PROXYPOOL_SOCKET and PROXYPOOL_BIN")
class DaemonTest(unittest.TestCase):
    def setUp(self):
        self.client = Client(SOCKET, timeout=10)
        # Only this test's endpoints are in service.
        for ep in self.client.endpoints(pool="default"):
            if ep["state"] != "disabled":
                self.client.request("disable", endpoint=ep["id"], reason="python test isolation")

    def tearDown(self):
        self.client.close()

    def add(self, url):
        out = subprocess.run(
            [BIN, "add", url], capture_output=True, text=True, timeout=20, check=False
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        return int(out.stdout.strip())

    def state_of(self, endpoint_id):
        for ep in self.client.endpoints():
            if ep["id"] == endpoint_id:
                return ep
        self.fail("endpoint %s not listed" % endpoint_id)

    def outstanding_leases(self):
        return sum(p["leases"] for p in self.client.status())

    # -- ops -----------------------------------------------------------------------
    def test_ping(self):
        v = self.client.ping()
        self.assertIsInstance(v, str)
        self.assertTrue(v)

    def test_lease_fields_report_and_release(self):
        url = "http://py:s3cret@%s:3128" % _unique_host()
        eid = self.add(url)
        lease = self.client.lease()
        self.assertIsInstance(lease, Lease)
        self.assertEqual(lease.proxy, url)
        self.assertEqual(lease.endpoint, eid)
        self.assertIs(lease.trial, False)
        self.assertEqual(lease.expires_in_ms, 60000)
        self.assertIsInstance(lease.id, str)
        self.assertEqual(self.client.report(lease.id, "success"), "available")

        lease = self.client.lease(pool="default", ttl="30s", wait=0)
        self.assertEqual(lease.expires_in_ms, 30000)
        self.client.release(lease.id)
        with self.assertRaises(ProxyPoolError) as cm:
            self.client.release(lease.id)
        self.assertEqual(cm.exception.code, "unknown_lease")

        lease = self.client.lease(ttl=12.5)
        self.assertEqual(lease.expires_in_ms, 12500)
        state = self.client.report(
            lease, "failure", reason="destination_status", phase="response_head",
            status=403, detail="banned",
        )
        self.assertEqual(state, "cooling")
        ep = self.state_of(eid)
        self.assertEqual(ep["reason"], "destination_status")
        self.assertEqual(ep["phase"], "response_head")
        self.assertNotIn("s3cret", ep["url"])

    def test_status_counts(self):
        self.add("http://%s:8080" % _unique_host())
        pools = self.client.status()
        default = [p for p in pools if p["pool"] == "default"][0]
        for key in ("available", "cooling", "probe_allowed", "disabled", "leases"):
            self.assertIsInstance(default[key], int, key)
        self.assertEqual(default["available"], 1)
        lease = self.client.lease()
        self.assertEqual(self.client.status(pool="default")[0]["leases"], default["leases"] + 1)
        lease.release()

    def test_errors(self):
        with self.assertRaises(ProxyPoolError) as cm:
            self.client.report("nope", "success")
        self.assertEqual(cm.exception.code, "unknown_lease")
        with self.assertRaises(ProxyPoolError) as cm:
            self.client.lease(pool="no-such-pool")
        self.assertEqual(cm.exception.code, "unknown_pool")
        # Nothing in service and nothing cooling: exhausted, retry_after_ms None.
        with self.assertRaises(ProxyPoolError) as cm:
            self.client.lease()
        self.assertEqual(cm.exception.code, "pool_exhausted")
        self.assertIsNone(cm.exception.retry_after_ms)

        self.add("http://%s:8080" % _unique_host())
        lease = self.client.lease()
        with self.assertRaises(ProxyPoolError) as cm:
            self.client.report(lease.id, "failure")
        self.assertEqual(cm.exception.code, "bad_request")
        # The lease is still live after the refused report.
        self.assertEqual(lease.failure("connect_refused", phase="connect"), "cooling")
        with self.assertRaises(ProxyPoolError) as cm:
            self.client.lease()
        self.assertEqual(cm.exception.code, "pool_exhausted")
        self.assertIsInstance(cm.exception.retry_after_ms, int)
        self.assertGreater(cm.exception.retry_after_ms, 0)
        # The connection is still usable after errors.
        self.assertTrue(self.client.ping())

    def test_lease_expired(self):
        self.add("http://%s:8080" % _unique_host())
        lease = self.client.lease(ttl="200ms")
        import time

        time.sleep(0.4)
        with self.assertRaises(ProxyPoolError) as cm:
            lease.success()
        self.assertEqual(cm.exception.code, "lease_expired")

    # -- the context manager -------------------------------------------------------
    def test_leased_reports_success_on_normal_exit(self):
        eid = self.add("http://%s:8080" % _unique_host())
        before = self.outstanding_leases()
        with self.client.leased() as lease:
            self.assertEqual(lease.endpoint, eid)
            self.assertEqual(self.outstanding_leases(), before + 1)
        self.assertEqual(lease.outcome, "success")
        self.assertEqual(self.outstanding_leases(), before)
        with self.assertRaises(ProxyPoolError) as cm:
            self.client.report(lease.id, "success")
        self.assertEqual(cm.exception.code, "unknown_lease")
        self.assertEqual(self.state_of(eid)["state"], "available")

    def test_leased_reports_failure_when_exception_has_reason(self):
        eid = self.add("http://%s:8080" % _unique_host())
        with self.assertRaises(ReportableError):
            with self.client.leased() as lease:
                raise ReportableError("connect_refused", phase="connect", detail="refused")
        self.assertEqual(lease.outcome, "failure")
        ep = self.state_of(eid)
        self.assertEqual(ep["state"], "cooling")
        self.assertEqual(ep["reason"], "connect_refused")
        self.assertEqual(ep["phase"], "connect")
        self.assertEqual(ep["streak"], 1)

        # Any exception with a `reason` attribute works too.
        class Banned(Exception):
            reason = "destination_status"
            status = 429
            retry_after = 120

        eid2 = self.add("http://%s:8080" % _unique_host())
        with self.assertRaises(Banned):
            with self.client.leased() as lease:
                self.assertEqual(lease.endpoint, eid2)
                raise Banned()
        ep = self.state_of(eid2)
        self.assertEqual(ep["state"], "cooling")
        self.assertEqual(ep["reason"], "destination_status")
        self.assertGreaterEqual(ep["cooldown_ms"], 120000)

    def test_leased_releases_on_other_exceptions(self):
        eid = self.add("http://%s:8080" % _unique_host())
        before = self.outstanding_leases()
        with self.assertRaises(ValueError):
            with self.client.leased() as lease:
                raise ValueError("parsing failed, not the proxy's fault")
        self.assertEqual(lease.outcome, "released")
        self.assertEqual(self.outstanding_leases(), before)
        ep = self.state_of(eid)
        self.assertEqual(ep["state"], "available")
        self.assertEqual(ep["streak"], 0)

    def test_leased_does_not_report_twice(self):
        eid = self.add("http://%s:8080" % _unique_host())
        with self.client.leased() as lease:
            lease.failure("connection_reset", phase="response_body")
        self.assertEqual(lease.outcome, "failure")
        self.assertEqual(self.state_of(eid)["state"], "cooling")

    def test_leased_propagates_lease_errors(self):
        with self.assertRaises(ProxyPoolError) as cm:
            with self.client.leased():
                self.fail("body must not run when nothing can be leased")
        self.assertEqual(cm.exception.code, "pool_exhausted")


class OfflineTest(unittest.TestCase):
    def test_default_socket_path(self):
        saved = {k: os.environ.get(k) for k in ("PROXYPOOL_SOCKET", "XDG_RUNTIME_DIR")}
        try:
            os.environ["PROXYPOOL_SOCKET"] = "/x/pp.sock"
            os.environ["XDG_RUNTIME_DIR"] = "/run/user/1"
            self.assertEqual(default_socket_path(), "/x/pp.sock")
            del os.environ["PROXYPOOL_SOCKET"]
            self.assertEqual(default_socket_path(), "/run/user/1/proxypool.sock")
            self.assertEqual(Client().path, "/run/user/1/proxypool.sock")
            del os.environ["XDG_RUNTIME_DIR"]
            with self.assertRaises(ProxyPoolError):
                default_socket_path()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_no_daemon_is_an_io_error(self):
        c = Client("/nonexistent/proxypool-test.sock")
        with self.assertRaises(ProxyPoolError) as cm:
            c.ping()
        self.assertEqual(cm.exception.code, "io")


if __name__ == "__main__":
    unittest.main()
