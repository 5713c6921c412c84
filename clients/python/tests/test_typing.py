"""The package's promises about itself: its public API type-checks under ``mypy --strict``
(it ships ``py.typed``), and its code parses as the oldest Python it claims (3.8)."""

import ast
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from servers import need_module

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "proxypool_client")


def test_the_package_type_checks_strictly():
    need_module("mypy")
    need_module("scrapy")  # the middleware is checked against Scrapy's own types
    assert os.path.isfile(os.path.join(PACKAGE, "py.typed"))
    cache = tempfile.mkdtemp(prefix="pp-mypy")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--cache-dir", cache, "proxypool_client"],
            cwd=os.path.dirname(PACKAGE), capture_output=True, text=True, timeout=300,
        )
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_package_parses_as_python_3_8():
    files = glob.glob(os.path.join(PACKAGE, "*.py"))
    assert len(files) > 10
    for path in files:
        with open(path) as f:
            ast.parse(f.read(), path, feature_version=(3, 8))
