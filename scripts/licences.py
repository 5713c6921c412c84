#!/usr/bin/env python3
"""Fail when a dependency can only be used under a licence this project does not take.

Reads `cargo metadata` for the whole dependency graph (build, dev and optional crates
included) and checks each package's SPDX expression: at least one of its `OR`
alternatives must be made only of the permissive licences below. A dual licence such as
"MIT OR LGPL-2.1-or-later" passes (MIT is taken); "GPL-3.0" alone, or a package with no
licence field, fails and is named.

    python3 scripts/licences.py        (run by .ci/run)
"""

import json
import re
import subprocess
import sys

PERMISSIVE = {
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
    "MPL-2.0",
}


def alternatives(expr):
    """The OR alternatives of an SPDX expression, each a list of licences ANDed together.
    Parentheses only group here (the crates' expressions nest no deeper than one level)."""
    expr = expr.replace("/", " OR ")
    flat = re.sub(r"[()]", " ", expr)
    # "(A OR B) AND C" is (A AND C) OR (B AND C): expand one level of grouping.
    groups = re.findall(r"\(([^()]*)\)", expr)
    rest = re.sub(r"\([^()]*\)", " ", expr)
    if groups and " AND " in rest:
        extra = [t.strip() for t in rest.split(" AND ") if t.strip()]
        out = []
        for g in groups:
            for alt in g.split(" OR "):
                out.append([alt.strip()] + extra)
        return out
    return [[t.strip() for t in alt.split(" AND ")] for alt in flat.split(" OR ")]


def acceptable(expr):
    return any(all(t in PERMISSIVE for t in alt) for alt in alternatives(expr))


def main():
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
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
        print("licences: these dependencies are not under a licence this project takes:")
        for r in refused:
            print(f"  {r}")
        sys.exit(1)
    print(f"licences: {len(packages)} packages, every one permissive")


if __name__ == "__main__":
    main()
