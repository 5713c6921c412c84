"""What the package copies from the daemon, checked against the daemon built from the
same checkout: its version, the reasons and phases a report may name, the error codes it
answers, and the statuses its gateway treats as bans. Each test fails when one side
changes without the other."""

import glob
import os
import re

import pytest
from conftest import ROOT
from servers import Site, need_module

import proxypool_client
from proxypool_client import DEFAULT_BAN_STATUSES, PHASES, REASONS, BadRequest
from proxypool_client.exceptions import ERRORS


def cargo_version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        text = f.read()
    package = text.split("[package]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version\s*=\s*"([^"]+)"', package, re.M)
    assert m, "no version in Cargo.toml's [package]"
    return m.group(1)


def rust_sources():
    files = glob.glob(os.path.join(ROOT, "src", "**", "*.rs"), recursive=True)
    assert files, "no Rust sources under %s" % ROOT
    for path in files:
        with open(path) as f:
            yield path, f.read()


def rust_string_enum(name):
    """The names of ``string_enum! { ... Name { Variant => "name", ... } }``."""
    pattern = re.compile(r"string_enum!\s*\{[^{]*?\b%s\s*\{(.*?)\n\s*\}" % name, re.S)
    for path, text in rust_sources():
        m = pattern.search(text)
        if m:
            return re.findall(r'=>\s*"([a-z_]+)"', m.group(1))
    pytest.fail("no `string_enum!` named %s under src/: update this test to where the list lives" % name)


def test_the_package_version_is_the_daemons(daemon):
    """One version for both: Cargo.toml's, the package's (pyproject.toml reads it from
    ``_version.py``), and what the running daemon answers to ``ping``."""
    with open(os.path.join(ROOT, "clients", "python", "pyproject.toml")) as f:
        pyproject = f.read()
    assert 'dynamic = ["version"]' in pyproject and "proxypool_client._version.__version__" in pyproject
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r'^version\s*=', project, re.M), "pyproject.toml must not write the version itself"
    with daemon.client(timeout=5) as c:
        running = c.ping()
    assert (proxypool_client.__version__, running) == (cargo_version(), cargo_version()), (
        "proxypool_client %s, Cargo.toml %s, daemon %s: keep them in step"
        % (proxypool_client.__version__, cargo_version(), running)
    )


def test_reasons_are_the_daemons(daemon):
    """The daemon names every reason it takes when it refuses one."""
    daemon.add("http://127.0.0.1:3128")
    with daemon.client(timeout=5) as c:
        lease = c.lease()
        with pytest.raises(BadRequest) as e:
            c.report(lease.id, "failure", reason="no_such_reason")
        c.release(lease)
    m = re.search(r"expected one of: ([a-z_, ]+)$", e.value.message)
    assert m, e.value.message
    daemon_reasons = [r.strip() for r in m.group(1).split(",")]
    assert sorted(daemon_reasons) == sorted(REASONS)
    assert rust_string_enum("Reason") == daemon_reasons


def test_phases_are_the_daemons(daemon):
    """Every phase of the package is stored as sent (the daemon stores an unknown one as
    null), and the daemon's list has no phase the package lacks."""
    phases = sorted(PHASES) + ["no_such_phase"]
    ids = daemon.add(*["http://127.0.0.1:%d" % (23000 + i) for i in range(len(phases))])
    with daemon.client(timeout=5) as c:
        for phase in phases:
            lease = c.lease()
            c.report(lease.id, "failure", reason="connect_refused", phase=phase, detail="drift:" + phase)
    stored = {e["detail"].split(":", 1)[1]: e["phase"] for e in daemon.events()
              if e["kind"] == "report" and (e.get("detail") or "").startswith("drift:")}
    assert stored == dict({p: p for p in PHASES}, no_such_phase=None), stored
    assert len(ids) == len(phases)
    assert sorted(rust_string_enum("Phase")) == sorted(PHASES)


def test_every_error_code_of_the_daemon_has_its_exception():
    for path, text in rust_sources():
        m = re.search(r"pub enum ErrorCode\s*\{(.*?)\n\}", text, re.S)
        if m:
            break
    else:
        pytest.fail("no `pub enum ErrorCode` under src/: update this test to where the codes live")
    variants = re.findall(r"^\s*([A-Z][A-Za-z0-9]*),", m.group(1), re.M)
    codes = {re.sub(r"(?<!^)([A-Z])", r"_\1", v).lower() for v in variants}
    assert {"bad_request", "pool_exhausted", "internal"} <= codes, codes  # the parse found them
    missing = codes - set(ERRORS)
    assert not missing, "error codes without an exception class in proxypool_client.exceptions: %s" % missing


def test_default_ban_statuses_are_the_gateways(tinyproxy):
    """A gateway with its defaults reports exactly DEFAULT_BAN_STATUSES as bans."""
    from test_gateway import TOKEN, start_gateway, stop

    requests = need_module("requests")
    site = Site()
    d, port = start_gateway()
    try:
        d.add(*["http://u%d@127.0.0.1:%d" % (i, tinyproxy.port) for i in range(4)])
        proxy = "http://pool-default:%s@127.0.0.1:%d" % (TOKEN, port)
        tried = [401, 403, 404, 429, 500, 502, 503]
        for status in tried:
            r = requests.get("%s/status/%d" % (site.url, status), proxies={"http": proxy}, timeout=20)
            assert r.status_code == status, (status, r.status_code, r.text)
        banned = set()
        for e in d.events():
            if e.get("reason") == "destination_status" and e["kind"] == "report":
                m = re.search(r":\s*(\d{3})\b", e.get("detail") or "")
                banned.add(e.get("status") or int(m.group(1)))
        assert banned == set(DEFAULT_BAN_STATUSES) & set(tried), banned
    finally:
        stop(d)
        site.close()
