"""Where the daemon is, by the same rule as the ``proxypool`` CLI.

``PROXYPOOL_CONNECT`` (``tcp://HOST:PORT``, with ``PROXYPOOL_LEASE_TOKEN`` or
``PROXYPOOL_TOKEN``) comes first when set. Otherwise the Unix socket:
``PROXYPOOL_SOCKET``; else the config file's ``[server] socket``; else
``$XDG_RUNTIME_DIR/proxypool.sock``; else beside the database (``proxypool.db`` ->
``proxypool.sock``). The database is ``PROXYPOOL_DB``, else the config's ``[store]
path``, else ``$XDG_DATA_HOME/proxypool/proxypool.db`` (or ``~/.local/share/...``). The
config is ``PROXYPOOL_CONFIG``, else ``$XDG_CONFIG_HOME/proxypool/proxies.toml`` when it
exists. Relative paths in the config are relative to its folder.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Mapping, Optional, Tuple

from .address import Address, UnixAddress, parse_address


def _env(name: str, environ: Mapping[str, str]) -> Optional[str]:
    value = environ.get(name)
    return value if value else None


def _xdg_dir(var: str, fallback: str, environ: Mapping[str, str]) -> str:
    value = _env(var, environ)
    if value:
        return value
    return os.path.join(environ.get("HOME") or ".", fallback)


def default_db_path(environ: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    return os.path.join(_xdg_dir("XDG_DATA_HOME", ".local/share", env), "proxypool", "proxypool.db")


def default_config_path(environ: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    return os.path.join(_xdg_dir("XDG_CONFIG_HOME", ".config", env), "proxypool", "proxies.toml")


def _with_extension(path: str, ext: str) -> str:
    # Rust's Path::with_extension: replace the last extension of the file name, where a
    # leading dot does not start one.
    head, name = os.path.split(path)
    stem, old = os.path.splitext(name)
    return os.path.join(head, (stem if old else name) + "." + ext)


def _load_toml(path: str) -> Dict[str, Any]:
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons
        try:
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        except ImportError:
            warnings.warn(
                "proxypool_client: cannot read %s (needs Python 3.11+ or the tomli package); "
                "its [server] socket and [store] path are ignored" % path,
                stacklevel=3,
            )
            return {}
    with open(path, "rb") as f:
        return tomllib.load(f)


def _config_paths(environ: Mapping[str, str]) -> Tuple[Optional[str], Optional[str]]:
    """(socket, db) from the config file, each resolved, or None."""
    path = _env("PROXYPOOL_CONFIG", environ)
    if path is None:
        path = default_config_path(environ)
        if not os.path.exists(path):
            return None, None
    doc = _load_toml(path)
    base = os.path.dirname(path)

    def resolve(p: Any) -> Optional[str]:
        if not isinstance(p, str) or not p:
            return None
        return p if os.path.isabs(p) else os.path.join(base, p)

    server = doc.get("server") or {}
    store = doc.get("store") or {}
    return resolve(server.get("socket")), resolve(store.get("path"))


def default_socket_path(environ: Optional[Mapping[str, str]] = None) -> str:
    """The Unix socket the CLI (and ``proxypool serve``) would use in this environment."""
    env = os.environ if environ is None else environ
    explicit = _env("PROXYPOOL_SOCKET", env)
    if explicit:
        return explicit
    cfg_socket, cfg_db = _config_paths(env)
    if cfg_socket:
        return cfg_socket
    runtime = _env("XDG_RUNTIME_DIR", env)
    if runtime:
        return os.path.join(runtime, "proxypool.sock")
    db = _env("PROXYPOOL_DB", env) or cfg_db or default_db_path(env)
    return _with_extension(db, "sock")


def default_address(environ: Optional[Mapping[str, str]] = None) -> Address:
    """``PROXYPOOL_CONNECT`` when set, else the Unix socket of ``default_socket_path``."""
    env = os.environ if environ is None else environ
    connect = _env("PROXYPOOL_CONNECT", env)
    if connect:
        try:
            return parse_address(connect)
        except ValueError as e:
            raise ValueError("PROXYPOOL_CONNECT: %s" % e) from None
    return UnixAddress(default_socket_path(env))
