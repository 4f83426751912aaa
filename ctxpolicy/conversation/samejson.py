"""Exact identity of JSON values, cheaply: a content key equal exactly when two messages'
fingerprints are, and a small memo of results computed from JSON values (a request's
tool definitions: their conversion, their JSON text, their token count), which a client
sends unchanged on every call of a conversation.

Python's ``==`` is C-speed but says ``1 == 1.0 == True``, ``0.0 == -0.0`` and
``{"a": 1, "b": 2} == {"b": 2, "a": 1}``, which JSON text tells apart: the content key
tags every number with its type, and the memo is keyed by bytes that keep key order
and types, so a hit is exact: the result a fresh computation would give.
"""

from __future__ import annotations

import marshal
from typing import Any

from ctxpolicy.conversation.lru import Lru

__all__ = ["MISS", "JsonMemo", "KeyedList", "content_key", "memo_key"]

#: What :meth:`JsonMemo.get` returns when it holds no result for a value.
MISS: Any = object()


class _NotJson(Exception):
    pass


def _key(v: Any) -> Any:
    t = type(v)
    if t is str:
        return v
    if t is dict:
        items = []
        for k, x in v.items():
            if type(k) is not str:
                raise _NotJson
            items.append((k, _key(x)))
        items.sort(key=_first)
        return ("d", *items)
    if t is list or t is tuple:
        return ("l", *map(_key, v))
    if t is bool:
        return ("b", v)
    if t is int:
        return ("i", v)
    if t is float:
        return ("f", repr(v))
    if v is None:
        return None
    raise _NotJson


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def content_key(msg: Any) -> Any:
    """A hashable key of one message, equal for two messages exactly when their
    :func:`~ctxpolicy.conversation.message_fingerprint` is (the same JSON text, key order
    aside): a walk of its few containers instead of encoding and hashing its text.
    Anything but JSON types in it: the fingerprint itself."""
    try:
        return _key(msg)
    except (_NotJson, RecursionError):
        from ctxpolicy.conversation.messages import message_fingerprint

        return ("fp", message_fingerprint(msg))


def memo_key(value: Any) -> bytes | None:
    """Bytes equal for two values only when they are the same JSON, key order, the
    types of numbers and the sign of zero included: their ``marshal`` (version 2, which
    writes no back-references, so sharing inside a value does not change it); C-speed.
    Equal values may, rarely, get different keys (a string interned in one and not the
    other): a memo then misses, never answers wrongly. None for anything ``marshal``
    cannot write."""
    try:
        return marshal.dumps(value, 2)
    except (ValueError, TypeError, RecursionError):
        return None


class KeyedList(list[Any]):
    """A list computed from a JSON value and kept by a memo, with the key its own results
    are kept under (``memo_key``: a token counter counts it without encoding it). It is
    shared by every caller: never change it (a copy, ``list(x)`` or ``x + y``, is a
    plain list)."""

    memo_key: bytes


class JsonMemo:
    """Results computed from JSON values, for the last ``size`` distinct values, found
    by :func:`memo_key` (a fresh parse of the same request hits). Thread-safe; a result
    is shared between callers and must not be changed."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._values: Lru[bytes, dict[str, Any]] = Lru(size)

    def get(self, key: bytes | None, name: str) -> Any:
        """The result ``name`` kept for the value of ``key``, or :data:`MISS`."""
        results = None if key is None else self._values.get(key)
        return MISS if results is None else results.get(name, MISS)

    def put(self, key: bytes | None, name: str, result: Any) -> None:
        if key is None:
            return
        results = self._values.get(key)
        if results is None:  # another thread may keep its own: this result is lost then
            results = {}
            self._values.put(key, results)
        results[name] = result
