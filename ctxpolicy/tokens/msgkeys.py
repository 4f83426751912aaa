"""Keys and snapshots of messages for the token counter's caches (and the engine's
incremental path): value keys, container snapshots, content digests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _freeze(v: Any) -> Any:
    t = type(v)
    if t is str or t is int or v is None or t is float or t is bool:
        return v
    if t is dict:
        return tuple((k, _freeze(x)) for k, x in v.items())
    if t is list or t is tuple:
        return (list, *map(_freeze, v))
    return (t, repr(v))


class _Container:
    """Marks a JSON-encoded container inside a value key. Its repr is the same in every
    process: unit keys hashed from ``repr`` of value keys are persisted
    (:func:`ctxpolicy.engine.caches.content_key`), so no memory address may leak in."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<json>"


_CONTAINER = _Container()


def _value_key(msg: dict[str, Any]) -> Any:
    """Hashable key equal for equal messages: leaf values as themselves (their hashes
    are cached by Python), nested JSON-shaped values (``tool_calls``, content parts) as
    their JSON text (C encoder, key order kept); anything else frozen by :func:`_freeze`."""
    items: list[Any] = []
    for k, v in msg.items():
        t = type(v)
        if t is str or v is None or t is int or t is bool or t is float:
            items.append((k, v))
        elif t is list or t is dict:
            try:
                items.append(
                    (k, _CONTAINER, json.dumps(v, ensure_ascii=False, check_circular=False))
                )
            except (TypeError, ValueError):
                items.append((k, _freeze(v)))
        else:
            items.append((k, _freeze(v)))
    return tuple(items)


_NO_SNAPSHOT: Any = object()
_LEAVES = (str, int, float, bool, type(None))


def _snapshot(v: Any) -> Any:
    """Copy of the containers of ``v`` sharing its (immutable) leaves; ``_NO_SNAPSHOT``
    when ``v`` holds anything else (that could change without the copy noticing)."""
    t = type(v)
    if t is dict:
        out = {}
        for k, x in v.items():
            c = _snapshot(x)
            if c is _NO_SNAPSHOT:
                return _NO_SNAPSHOT
            out[k] = c
        return out
    if t is list or t is tuple:
        items = [_snapshot(x) for x in v]
        if _NO_SNAPSHOT in items:
            return _NO_SNAPSHOT
        return items if t is list else tuple(items)
    if t in _LEAVES:
        return v
    return _NO_SNAPSHOT


def _digest_into(h: Any, v: Any) -> None:
    t = type(v)
    if t is str:
        h.update(b"s%d:" % len(v))
        h.update(v.encode("utf-8", "surrogatepass"))
    elif t is dict:
        h.update(b"d%d:" % len(v))
        for k in sorted(v, key=str):
            _digest_into(h, str(k))
            _digest_into(h, v[k])
    elif t is list or t is tuple:
        h.update(b"l%d:" % len(v))
        for x in v:
            _digest_into(h, x)
    elif isinstance(v, Mapping):
        _digest_into(h, dict(v))
    else:
        r = repr(v).encode("utf-8", "surrogatepass")
        h.update(b"r%d:" % len(r))
        h.update(r)


def _digest(value: Any) -> bytes:
    """Content hash of a (frozen) message; cheaper than
    :func:`~ctxpolicy.conversation.message_fingerprint` (no JSON rendering)."""
    h = hashlib.blake2b(digest_size=16)
    _digest_into(h, value)
    return h.digest()


@dataclass
class _Seq:
    """A message list counted before: snapshots of its messages and running totals."""

    snaps: list[Any]
    cums: list[int]


def _seq_key(first: Any) -> Any:
    """Hint to find the list memo of a conversation by its first message (the ids of
    its values, so shallow copies find it too). Only a hint: the memo is used only if
    the messages compare equal to its snapshots."""
    if type(first) is not dict:
        return None
    return (tuple(first), tuple(map(id, first.values())))
