"""The wire format of the lease socket, without I/O: request lines out, replies in.

One JSON object per line (UTF-8, ``\\n``), at most 64 KiB a request line. Every request
carries an ``id`` the reply echoes; a reply whose ``id`` is not the request's is never
taken for its answer. Over TCP every request also carries the ``token``.

A ``Call`` is one request and how to read its reply. The sync and the asyncio client run
the same Calls (built in ``calls``), so they send the same lines and read the same
answers; only the transport differs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, Mapping, Optional, TypeVar

from .exceptions import BadRequest, ProtocolError, TooLarge, error_for
from .models import Duration, Reply

#: Longest request line the daemon reads, without its newline.
MAX_LINE = 64 * 1024

#: Longest reply line read. Replies are not bounded by the daemon (``endpoints`` of a
#: large pool is one long line); this only stops a runaway peer.
MAX_REPLY = 64 * 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request: its ``op`` and fields (None values are not sent), how to read a
    successful reply, how long the daemon may take before answering beyond the client's
    timeout (a lease's ``wait``), and, for a call that grants something, the call that
    gives it back when its caller is gone before the reply arrives."""

    op: str
    fields: Mapping[str, Any]
    parse: Callable[[Reply], T]
    wait: float = 0.0
    undo: Optional[Callable[[Reply], Call[None]]] = None


def duration(value: Optional[Duration]) -> Optional[Any]:
    """A duration field as sent: seconds (int/float), a string the daemon reads, or a
    timedelta turned into seconds."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("a duration is seconds or a string like '30s', not %r" % (value,))
    if isinstance(value, (int, float)):
        return value
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    raise TypeError("a duration is seconds or a string like '30s', not %r" % (value,))


_UNITS = {
    "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0,
    "mins": 60.0, "h": 3600.0, "hr": 3600.0, "hrs": 3600.0,
}  # fmt: skip


def seconds(value: Any) -> float:
    """Seconds in a duration field, for a client's own read deadline (0 when unknown)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        total = 0.0
        for num, unit in re.findall(r"([0-9.]+)\s*([a-z]*)", value):
            try:
                total += float(num) * _UNITS.get(unit, 0.0)
            except ValueError:
                continue
        return total
    if hasattr(value, "total_seconds"):
        return float(value.total_seconds())
    return 0.0


def encode(call: Call[Any], request_id: int, token: Optional[str] = None) -> bytes:
    """The request line of ``call``. Fields that are None are not sent at all."""
    req: Dict[str, Any] = {"op": call.op}
    req.update((k, v) for k, v in call.fields.items() if v is not None)
    req["id"] = request_id
    if token is not None:
        req["token"] = token
    try:
        text = json.dumps(req, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise BadRequest("bad_request", "cannot encode the %s request: %s" % (call.op, e)) from None
    line = text.encode("utf-8") + b"\n"
    if len(line) > MAX_LINE + 1:
        raise TooLarge("too_large", "%s request of %d bytes; the daemon reads at most %d" % (call.op, len(line), MAX_LINE))
    return line


def decode(raw: bytes, request_id: int) -> Reply:
    """The reply object of one line to request ``request_id``; raises the error it
    carries, or ProtocolError when it cannot be read or answers another request."""
    try:
        reply = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        raise ProtocolError("io", "unreadable reply: %s" % e) from None
    if not isinstance(reply, dict):
        raise ProtocolError("io", "reply is not a JSON object: %.200r" % (reply,))
    ok = reply.get("ok")
    rid = reply.get("id")
    if not (type(rid) is int and rid == request_id):
        # The daemon answers a line it could not read without an id (an over-long one):
        # an error, so nobody can take it for a success.
        if not (rid is None and ok is False):
            raise ProtocolError(
                "io", "reply to request %r arrived for request %r: the connection is out of step" % (rid, request_id)
            )
    if ok is True:
        return reply
    if ok is not False:
        raise ProtocolError("io", "reply without \"ok\": %.200r" % (reply,))
    err = reply.get("error")
    err = err if isinstance(err, dict) else {}
    code = err.get("code")
    message = err.get("message")
    retry = err.get("retry_after_ms", reply.get("retry_after_ms"))
    raise error_for(
        code if isinstance(code, str) else "internal",
        message if isinstance(message, str) else "daemon error",
        retry if type(retry) is int else None,
    )


def field(reply: Reply, name: str, kind: type, op: str) -> Any:
    """``reply[name]``, checked to be a ``kind``; ProtocolError otherwise."""
    value = reply.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ProtocolError("io", "reply to %s lacks %s %r: %.200r" % (op, kind.__name__, name, reply))
    return value
