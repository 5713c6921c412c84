"""Where a client talks to the daemon: a Unix socket path, or ``tcp://HOST:PORT``.

Over TCP the daemon wants a token on every request. Unless one is given, the token is
``PROXYPOOL_LEASE_TOKEN`` if set, else ``PROXYPOOL_TOKEN`` (the CLI's rule). A token is
never part of an address's text, its repr, or an error message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Union
from urllib.parse import urlsplit


@dataclass(frozen=True)
class UnixAddress:
    path: str

    def __str__(self) -> str:
        return self.path


@dataclass(frozen=True)
class TcpAddress:
    host: str
    port: int

    def __str__(self) -> str:
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "tcp://%s:%d" % (host, self.port)


Address = Union[UnixAddress, TcpAddress]
AddressLike = Union[str, "os.PathLike[str]", UnixAddress, TcpAddress]


def parse_address(value: AddressLike) -> Address:
    """``tcp://HOST:PORT`` (an IPv6 host in brackets), or else a socket path."""
    if isinstance(value, (UnixAddress, TcpAddress)):
        return value
    text = os.fspath(value)
    if not text:
        raise ValueError("empty daemon address: give a socket path or tcp://HOST:PORT")
    if "://" not in text:
        return UnixAddress(text)
    scheme = text.split("://", 1)[0].lower()
    if scheme == "unix":
        return UnixAddress(text.split("://", 1)[1])
    if scheme != "tcp":
        raise ValueError("daemon address %r: expected a socket path or tcp://HOST:PORT" % (text,))
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.username is not None or parts.password is not None:
        raise ValueError("daemon address %s: give the token with token= or PROXYPOOL_TOKEN, not in the address"
                         % _without_userinfo(text))
    if not parts.hostname or port is None or port == 0 or parts.path not in ("", "/"):
        raise ValueError("daemon address %r: expected tcp://HOST:PORT" % (text,))
    return TcpAddress(parts.hostname, port)


def _without_userinfo(text: str) -> str:
    scheme, rest = text.split("://", 1)
    return "%s://%s" % (scheme, rest.rsplit("@", 1)[-1])


def token_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``PROXYPOOL_LEASE_TOKEN`` if set and not empty, else ``PROXYPOOL_TOKEN``, else None."""
    env = os.environ if environ is None else environ
    return env.get("PROXYPOOL_LEASE_TOKEN") or env.get("PROXYPOOL_TOKEN") or None


def resolve_token(address: Address, token: Optional[str], environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The token to send: None on a Unix socket; over TCP the given one, else the
    environment's. A TCP address without any token is refused here, before anything is
    sent, since the daemon would refuse every request."""
    if isinstance(address, UnixAddress):
        return None
    token = token if token is not None else token_from_env(environ)
    if not token:
        raise ValueError(
            "%s needs a token: pass token=, or set PROXYPOOL_LEASE_TOKEN or PROXYPOOL_TOKEN" % (address,)
        )
    return token
