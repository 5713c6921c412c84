"""Where the daemon's socket is, by the same rule as the `proxypool` CLI.

Precedence (src/cli.rs ``Context::resolve``): ``PROXYPOOL_SOCKET``; else the config
file's ``[server] socket``; else ``$XDG_RUNTIME_DIR/proxypool.sock``; else beside the
database (``proxypool.db`` -> ``proxypool.sock``). The database is ``PROXYPOOL_DB``, else
the config's ``[store] path``, else ``$XDG_DATA_HOME/proxypool/proxypool.db`` (or
``~/.local/share/...``). The config is ``PROXYPOOL_CONFIG``, else
``$XDG_CONFIG_HOME/proxypool/proxies.toml`` when it exists. Relative paths in the config
are relative to its folder.
"""

import os
import warnings


def _env(name, environ):
    value = environ.get(name)
    return value if value else None


def _xdg_dir(var, fallback, environ):
    value = _env(var, environ)
    if value:
        return value
    return os.path.join(environ.get("HOME") or ".", fallback)


def default_db_path(environ=None):
    environ = os.environ if environ is None else environ
    return os.path.join(_xdg_dir("XDG_DATA_HOME", ".local/share", environ), "proxypool", "proxypool.db")


def default_config_path(environ=None):
    environ = os.environ if environ is None else environ
    return os.path.join(_xdg_dir("XDG_CONFIG_HOME", ".config", environ), "proxypool", "proxies.toml")


def _with_extension(path, ext):
    # Rust's Path::with_extension: replace the last extension of the file name, where a
    # leading dot does not start one.
    head, name = os.path.split(path)
    stem, old = os.path.splitext(name)
    return os.path.join(head, (stem if old else name) + "." + ext)


def _load_toml(path):
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons
        try:
            import tomli as tomllib
        except ImportError:
            warnings.warn(
                "proxypool_client: cannot read %s (needs Python 3.11+ or the tomli package); "
                "its [server] socket and [store] path are ignored" % path
            )
            return {}
    with open(path, "rb") as f:
        return tomllib.load(f)


def _config_paths(environ):
    """(socket, db) from the config file, each resolved, or None."""
    path = _env("PROXYPOOL_CONFIG", environ)
    if path is None:
        path = default_config_path(environ)
        if not os.path.exists(path):
            return None, None
    doc = _load_toml(path)
    base = os.path.dirname(path)

    def resolve(p):
        if not isinstance(p, str) or not p:
            return None
        return p if os.path.isabs(p) else os.path.join(base, p)

    server = doc.get("server") or {}
    store = doc.get("store") or {}
    return resolve(server.get("socket")), resolve(store.get("path"))


def default_socket_path(environ=None):
    """The socket the CLI (and ``proxypool serve``) would use in this environment."""
    environ = os.environ if environ is None else environ
    explicit = _env("PROXYPOOL_SOCKET", environ)
    if explicit:
        return explicit
    cfg_socket, cfg_db = _config_paths(environ)
    if cfg_socket:
        return cfg_socket
    runtime = _env("XDG_RUNTIME_DIR", environ)
    if runtime:
        return os.path.join(runtime, "proxypool.sock")
    db = _env("PROXYPOOL_DB", environ) or cfg_db or default_db_path(environ)
    return _with_extension(db, "sock")
