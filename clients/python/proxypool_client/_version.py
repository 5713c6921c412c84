"""The package's version: the one place it is written (pyproject.toml reads it from here).

It is the daemon's version too (``Cargo.toml``); a test fails when they differ.
"""

__version__ = "0.2.0"
