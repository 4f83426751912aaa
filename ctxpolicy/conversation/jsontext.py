"""JSON text of anything, at any depth, without raising.

``json.dumps`` recurses (a tool output nested 5,000 levels deep raises
``RecursionError``), refuses cycles and integers over 4,300 digits. :func:`to_json`
tries it first and falls back to :func:`iter_dumps`, an iterative encoder that
writes the same text ``json.dumps(..., ensure_ascii=False, default=str)`` would for
data it accepts, and for the rest: integers of any size in full, values JSON has no
type for as ``str(value)``, a cycle as the string ``"<cycle>"`` (the only lossy case,
reported by the second return value).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as json_encoder_module
from json.encoder import encode_basestring, py_encode_basestring, py_encode_basestring_ascii
from typing import Any

__all__ = ["dumps_bytes", "fast_dumps", "iter_dumps", "to_json"]

_CHUNK = 10**1000


def fast_dumps(
    *,
    sort_keys: bool = False,
    separators: tuple[str, str] = (", ", ": "),
    default: Callable[[Any], Any] | None = str,
) -> Callable[[Any], str]:
    """``json.dumps(v, ensure_ascii=False, check_circular=False, default=...,
    sort_keys=..., separators=...)`` as one reused C encoder: ``json.dumps`` with
    options builds an encoder on every call, which costs more than encoding a small
    message. Same text for every value ``json.dumps`` encodes; a cycle raises
    ``RecursionError``. ``default=None``: a value JSON has no type for raises
    ``TypeError``, as plain ``json.dumps``."""
    item_sep, key_sep = separators
    py = json.JSONEncoder(
        ensure_ascii=False,
        check_circular=False,
        default=default,
        sort_keys=sort_keys,
        separators=separators,
    )
    c_make_encoder = getattr(json_encoder_module, "c_make_encoder", None)
    if c_make_encoder is None:  # pragma: no cover - CPython always has _json
        return py.encode
    c = c_make_encoder(
        None, py.default, encode_basestring, None, key_sep, item_sep, sort_keys, False, True
    )

    def dumps(v: Any) -> str:
        if type(v) is str:
            return py.encode(v)
        return "".join(c(v, 0))

    return dumps


_dumps = fast_dumps()
_dumps_compact = fast_dumps(separators=(",", ":"))


def _int_text(n: int) -> str:
    try:
        return int.__repr__(n)
    except ValueError:  # more digits than str() allows: build them in chunks
        sign = "-" if n < 0 else ""
        n = abs(n)
        parts: list[str] = []
        while n:
            n, r = divmod(n, _CHUNK)
            parts.append(f"{r:01000d}" if n else str(r))
        return sign + "".join(reversed(parts))


def _scalar(v: Any, enc: Any) -> str | None:
    if isinstance(v, str):
        return str(enc(v))
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return _int_text(v)
    if isinstance(v, float):
        return json.dumps(v)
    return None


def iter_dumps(
    obj: Any, *, ensure_ascii: bool = False, separators: tuple[str, str] = (", ", ": ")
) -> tuple[str, bool]:
    """JSON text of ``obj`` (``json.dumps``'s default separators unless given) and
    whether it is exact (False when a cycle was cut). Never recurses."""
    item_sep, key_sep = separators
    enc = py_encode_basestring_ascii if ensure_ascii else py_encode_basestring
    out: list[str] = []
    exact = True
    active: set[int] = set()
    # stack items: a value to write, or a str token, or ("end", id) to leave a container
    stack: list[Any] = [("v", obj)]
    while stack:
        kind, v = stack.pop()
        if kind == "t":
            out.append(v)
            continue
        if kind == "end":
            active.discard(v)
            continue
        s = _scalar(v, enc)
        if s is not None:
            out.append(s)
            continue
        if isinstance(v, (dict, list, tuple)):
            if id(v) in active:
                out.append('"<cycle>"')
                exact = False
                continue
            active.add(id(v))
            items: list[Any] = [("end", id(v))]
            if isinstance(v, dict):
                out.append("{")
                items.append(("t", "}"))
                pairs = list(v.items())
                for i in range(len(pairs) - 1, -1, -1):
                    k, val = pairs[i]
                    key = k if isinstance(k, str) else _scalar(k, str) or str(k)
                    items.append(("v", val))
                    items.append(("t", ("" if i == 0 else item_sep) + str(enc(key)) + key_sep))
            else:
                out.append("[")
                items.append(("t", "]"))
                for i in range(len(v) - 1, -1, -1):
                    items.append(("v", v[i]))
                    if i:
                        items.append(("t", item_sep))
            stack.extend(items)
            continue
        try:
            out.append(str(enc(str(v))))
        except Exception as exc:  # a __str__ that raises
            out.append(str(enc(f"<{type(v).__name__}: {type(exc).__name__}>")))
            exact = False
    return "".join(out), exact


def to_json(obj: Any) -> tuple[str, bool]:
    """``json.dumps(obj, ensure_ascii=False, default=str)``, or :func:`iter_dumps`
    when that raises (depth, cycles, huge integers)."""
    try:
        return _dumps(obj), True
    except Exception:  # depth, cycles, huge integers, a default=str that raises
        return iter_dumps(obj)


def dumps_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON of a value for a log line; lone surrogates are written as
    ``\\udcxx`` escapes (valid JSON that ``json.loads`` returns exactly)."""
    compact = (",", ":")
    try:
        text = _dumps_compact(obj)
    except Exception:
        text = iter_dumps(obj, separators=compact)[0]
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return json.dumps(obj, ensure_ascii=True, separators=compact, default=str).encode()
        except Exception:
            return iter_dumps(obj, ensure_ascii=True, separators=compact)[0].encode()
