#!/usr/bin/env python3
"""Fail when a dependency can only be used under a licence not on this project's list.

Reads `cargo metadata` for the whole dependency graph (build and dev dependencies, every
feature on) and parses each package's SPDX expression (`AND`, `OR`, `WITH`, brackets; the
old `/` as `OR`). At least one way of meeting the expression must use only licences on
ALLOWED: "MIT OR LGPL-2.1-or-later" passes (MIT is taken), "GPL-3.0" or "(MIT OR
Apache-2.0) AND GPL-2.0" fails, and so does an expression this parser cannot read or a
package with no licence field. Each failure is named.

    python3 scripts/licences.py        (run by .ci/run)
    python3 scripts/licences.py --test (the parser's own cases, no cargo)
"""

import json
import re
import subprocess
import sys

# Permissive licences only: no copyleft, weak or strong.
ALLOWED = {
    "MIT",
    "Apache-2.0",
    "Apache-2.0 WITH LLVM-exception",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "Zlib",
    "Unlicense",
    "BSL-1.0",
    "CC0-1.0",
    "CDLA-Permissive-2.0",
    "Unicode-3.0",
    "Unicode-DFS-2016",
}


class Unreadable(Exception):
    pass


def tokens(expr):
    out = re.findall(r"\(|\)|[^\s()]+", expr.replace("/", " OR "))
    return [t.upper() if t.upper() in ("AND", "OR", "WITH") else t for t in out]


def parse(expr):
    """The ways to meet `expr`: a list of sets of licences, any one set sufficing."""
    toks = tokens(expr)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take():
        nonlocal pos
        pos += 1
        return toks[pos - 1]

    def either():  # a OR b OR ...
        ways = both()
        while peek() == "OR":
            take()
            ways = ways + both()
        return ways

    def both():  # a AND b AND ...
        ways = one()
        while peek() == "AND":
            take()
            rhs = one()
            ways = [w | v for w in ways for v in rhs]
        return ways

    def one():
        t = peek()
        if t is None or t in ("AND", "OR", "WITH", ")"):
            raise Unreadable(f"unexpected {t or 'end'}")
        take()
        if t == "(":
            ways = either()
            if peek() != ")":
                raise Unreadable("unclosed bracket")
            take()
            return ways
        if peek() == "WITH":
            take()
            exc = peek()
            if exc is None or exc in ("AND", "OR", "WITH", "(", ")"):
                raise Unreadable("WITH without an exception")
            take()
            t = f"{t} WITH {exc}"
        return [frozenset([t])]

    ways = either()
    if pos != len(toks):
        raise Unreadable(f"unexpected {toks[pos]}")
    return ways


def acceptable(expr):
    try:
        return any(way <= ALLOWED for way in parse(expr))
    except Unreadable:
        return False


def self_test():
    cases = [
        ("MIT", True),
        ("MIT/Apache-2.0", True),
        ("(MIT OR Apache-2.0) AND Unicode-3.0", True),
        ("((MIT OR Apache-2.0) AND Unicode-3.0)", True),
        ("(MIT AND BSD-3-Clause) AND ISC", True),
        ("Apache-2.0 WITH LLVM-exception OR Apache-2.0 OR MIT", True),
        ("MIT OR Apache-2.0 OR LGPL-2.1-or-later", True),
        ("mit", False),  # identifiers are case-sensitive: "mit" is not on the list
        ("Apache-2.0 or MIT", True),
        ("GPL-3.0", False),
        ("GPL-2.0 AND MIT", False),
        ("(GPL-2.0 OR LGPL-2.1) AND MIT", False),
        ("(MIT OR Apache-2.0) AND (GPL-2.0-only OR GPL-3.0-only)", False),
        ("(Apache-2.0 OR MIT) AND BSD-3-Clause AND (GPL-3.0)", False),
        ("(A OR MIT) AND C OR ISC", True),
        ("MPL-2.0", False),
        ("(MIT", False),
        ("MIT AND", False),
        ("", False),
    ]
    bad = [(e, want) for e, want in cases if acceptable(e) != want]
    for e, want in bad:
        print(f"licences: {e!r} should be {'accepted' if want else 'refused'}")
    if bad:
        sys.exit(1)
    print(f"licences: {len(cases)} parser cases pass")


def main():
    if "--test" in sys.argv:
        self_test()
        return
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"],
        check=True,
        capture_output=True,
        text=True,
    )
    refused = []
    packages = json.loads(meta.stdout)["packages"]
    for p in packages:
        expr = p.get("license")
        if not expr or not acceptable(expr):
            refused.append(f"{p['name']} {p['version']}: {expr or 'no licence field'}")
    if refused:
        print("licences: these dependencies offer no licence on the list in scripts/licences.py:")
        for r in refused:
            print(f"  {r}")
        sys.exit(1)
    print(f"licences: {len(packages)} packages, each under a licence on the list")


if __name__ == "__main__":
    main()
