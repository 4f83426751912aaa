"""Keys and snapshots of messages for the token counter's caches (and the engine's
incremental path): value keys, container snapshots, content digests."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ctxpolicy.conversation.jsontext import fast_dumps

#: JSON text of a value, exactly as ``json.dumps(v, ensure_ascii=False, check_circular=False)``.
json_text = fast_dumps(default=None)


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
    (:func:`ctxpolicy.engine.derived.content_key`), so no memory address may leak in."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<json>"


_CONTAINER = _Container()


def value_key(msg: dict[str, Any]) -> Any:
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
                items.append((k, _CONTAINER, json_text(v)))
            except (TypeError, ValueError):
                items.append((k, _freeze(v)))
        else:
            items.append((k, _freeze(v)))
    return tuple(items)


NO_SNAPSHOT: Any = object()
_LEAVES = (str, int, float, bool, type(None))


def snapshot(v: Any) -> Any:
    """Copy of the containers of ``v`` sharing its (immutable) leaves; ``NO_SNAPSHOT``
    when ``v`` holds anything else (that could change without the copy noticing).

    Leaves are tested inline (no call per string): a message is mostly leaves."""
    t = type(v)
    if t is dict:
        out = {}
        for k, x in v.items():
            tx = type(x)
            if tx is str or x is None or tx is int or tx is bool or tx is float:
                out[k] = x
                continue
            c = snapshot(x)
            if c is NO_SNAPSHOT:
                return NO_SNAPSHOT
            out[k] = c
        return out
    if t is list or t is tuple:
        items = []
        for x in v:
            tx = type(x)
            if not (tx is str or x is None or tx is int or tx is bool or tx is float):
                x = snapshot(x)
                if x is NO_SNAPSHOT:
                    return NO_SNAPSHOT
            items.append(x)
        return items if t is list else tuple(items)
    if t in _LEAVES:
        return v
    return NO_SNAPSHOT


def _digest(value: Any) -> bytes:
    """Content hash of a value key (:func:`value_key`, or :func:`_freeze` of a
    non-dict message): blake2b of its ``repr``, which is C-speed for the tuples of
    strings, numbers and JSON texts a key is made of (no memory address in it, see
    :class:`_Container`)."""
    return hashlib.blake2b(repr(value).encode("utf-8", "surrogatepass"), digest_size=16).digest()


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
