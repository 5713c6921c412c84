"""Fixtures: a real `proxypool serve` per test (its own temp home), local servers, and the
real proxies. The binary is $PROXYPOOL_BIN, else target/debug/proxypool of the checkout.

Under CI (``CI`` set) nothing may skip: a skipped test is reported as a failure, so a
missing tool or package cannot pass for a green run."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import servers  # noqa: E402

from proxypool_client import Client  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def proxypool_bin():
    path = os.environ.get("PROXYPOOL_BIN") or os.path.join(ROOT, "target", "debug", "proxypool")
    if not os.path.isfile(path):
        if os.environ.get("CI"):
            pytest.fail("no proxypool binary at %s (cargo build, or set PROXYPOOL_BIN)" % path)
        pytest.skip("no proxypool binary at %s (cargo build, or set PROXYPOOL_BIN)" % path)
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = "skipped under CI, where every test must run: %s" % (report.longrepr,)


class Daemon(object):
    """``proxypool serve`` in a temporary home. ``tcp_token`` also opens its TCP listener
    (``--listen-tcp``) on a free loopback port, ``self.tcp`` (``tcp://127.0.0.1:PORT``)."""

    def __init__(self, config=None, args=(), tcp_token=None):
        self.bin = proxypool_bin()
        self.args = list(args)
        self.tcp = None
        self.dir = tempfile.mkdtemp(prefix="pp-py")
        for sub in ("home", "data", "config", "run"):
            os.makedirs(os.path.join(self.dir, sub))
        self.db = os.path.join(self.dir, "data", "proxypool.db")
        self.socket = os.path.join(self.dir, "run", "pp.sock")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PROXYPOOL_") and k != "RUST_LOG"}
        self.env.update(
            HOME=os.path.join(self.dir, "home"),
            XDG_DATA_HOME=os.path.join(self.dir, "data"),
            XDG_CONFIG_HOME=os.path.join(self.dir, "config"),
            XDG_RUNTIME_DIR=os.path.join(self.dir, "run"),
            PROXYPOOL_DB=self.db,
            PROXYPOOL_SOCKET=self.socket,
        )
        if config:
            path = os.path.join(self.dir, "proxies.toml")
            with open(path, "w") as f:
                f.write(config)
            self.env["PROXYPOOL_CONFIG"] = path
        if tcp_token:
            port = servers.free_port()
            self.args += ["--listen-tcp", "127.0.0.1:%d" % port]
            self.env["PROXYPOOL_TOKEN"] = tcp_token
            self.tcp = "tcp://127.0.0.1:%d" % port
        self.log = os.path.join(self.dir, "daemon.log")
        self.proc = None

    def start(self):
        """Start the daemon and wait until it answers. If it does not, the error carries
        its log, and nothing of it is left behind: no process, no directory."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _start(self):
        env = dict(self.env, RUST_LOG="info")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([self.bin, "serve"] + self.args, env=env, stdout=subprocess.DEVNULL, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("proxypool serve exited (%s):\n%s" % (self.proc.returncode, self.log_text()))
            try:
                with Client(self.socket, timeout=2) as c:
                    c.ping()
                if self.tcp:
                    servers.wait_port(int(self.tcp.rsplit(":", 1)[1]), self.proc, self.log)
                return self
            except Exception:
                time.sleep(0.05)
        raise RuntimeError("proxypool serve did not answer within 15s:\n" + self.log_text())

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self):
        try:
            with open(self.log) as f:
                return f.read()
        except OSError:
            return ""

    def cli(self, *args, check=True):
        out = subprocess.run([self.bin] + list(args), env=self.env, capture_output=True, text=True, timeout=30)
        if check and out.returncode != 0:
            raise AssertionError("proxypool %s failed (%s): %s" % (" ".join(args), out.returncode, out.stderr))
        return out

    def add(self, *urls, pool=None):
        args = ["add"] + list(urls) + (["--pool", pool] if pool else [])
        return [int(x) for x in self.cli(*args).stdout.split()]

    def list(self):
        return json.loads(self.cli("list", "--json").stdout)

    def show(self, eid):
        return json.loads(self.cli("show", str(eid), "--json").stdout)

    def endpoint(self, eid):
        return next(e for e in self.list() if e["id"] == eid)

    def events(self):
        return [json.loads(line) for line in self.cli("events", "--json").stdout.splitlines() if line.strip()]

    def client(self, **kw):
        return Client(self.socket, **kw)


@pytest.fixture
def daemon():
    d = Daemon().start()
    yield d
    d.stop()
    shutil.rmtree(d.dir, ignore_errors=True)


@pytest.fixture
def site():
    s = servers.Site()
    yield s
    s.close()


def _closing(factory):
    @pytest.fixture
    def fixture():
        obj = factory()
        yield obj
        obj.close()

    return fixture


black_hole = _closing(servers.black_hole)
resetting = _closing(servers.resetting)
proxy_407 = _closing(servers.proxy_407)
unaccepting = _closing(servers.Unaccepting)


@pytest.fixture
def refusing_port():
    return servers.refusing_port()


@pytest.fixture
def tinyproxy():
    p = servers.tinyproxy()
    yield p
    p.close()


@pytest.fixture
def tinyproxy_auth():
    p = servers.tinyproxy("alice", "s3cret")
    yield p
    p.close()


@pytest.fixture
def tinyproxy_banning():
    p = servers.tinyproxy(deny_all=True)
    yield p
    p.close()


@pytest.fixture
def microsocks():
    p = servers.microsocks()
    yield p
    p.close()


@pytest.fixture
def microsocks_auth():
    p = servers.microsocks("alice", "s3cret")
    yield p
    p.close()
