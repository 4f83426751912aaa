"""The state codec (public): checking ids and keys, and the JSON encoding every store shares.

Values are stored as canonical JSON text (sorted keys, no spaces, no NaN), so a
value reads back equal to what was written, whatever the store, and two equal
values are the same bytes. A value that would not round-trip exactly (a tuple, a
non-string dict key, NaN, an object) is refused before anything is written.

The engine (``ctxpolicy.engine.state``) encodes a call's changed entries with it, and a
state store plugin that keeps values as text may use it too (docs/state.md).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from ctxpolicy.components import StateStoreError
from ctxpolicy.policy.interp import interpolate

__all__ = [
    "IDENTIFIER_PATTERN",
    "MAX_ID_CHARS",
    "MAX_VERSION",
    "UNSTORABLE",
    "built_text",
    "canonical_text",
    "check_encoded",
    "check_expected",
    "check_key",
    "check_table",
    "decode",
    "encode",
    "encode_changes",
    "entry_text",
    "interpolate_option",
    "sql_table",
    "stored_version",
    "unstorable",
    "valid_conv_id",
]

#: Table names are written into SQL, so they are plain identifiers.
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,39}$"
MAX_ID_CHARS = 1024
#: The suffix :func:`sql_table` gives a name with capitals (reserved: refused in a name).
_CASE_SUFFIX = re.compile(r"_c[0-9a-f]{10}\Z")
#: Largest version a commit may expect: its successor still fits a signed 64-bit
#: integer (PostgreSQL ``bigint``, SQLite ``INTEGER``).
MAX_VERSION = 2**63 - 2


def check_table(name: str) -> str:
    """``name`` if it may be a ``table`` option: a lower-case name ending like the
    suffix :func:`sql_table` adds to a name with capitals is reserved (ValueError)."""
    if name == name.lower() and _CASE_SUFFIX.search(name):
        raise ValueError("a table name ending in `_c` and ten hex digits is reserved")
    return name


def sql_table(name: str) -> str:
    """The prefix of a store's SQL tables for the ``table`` option, injective after SQL
    case folding (PostgreSQL and SQLite fold unquoted names; SQLite compares even
    quoted ones without case): a lower-case name is itself (so existing tables keep
    their names), a name with capitals is its lower-case form plus ``_c`` and the
    positions of its capitals as ten hex digits (``tenantA`` → ``tenanta_c0000000040``),
    so ``tenantA`` and ``tenanta`` are two stores. At most 52 characters."""
    lower = name.lower()
    if lower == name:
        return name
    mask = sum(1 << i for i, c in enumerate(name) if c.isupper())
    return f"{lower}_c{mask:010x}"


def valid_conv_id(conv_id: object) -> str:
    """``conv_id`` if it is a usable id (non-empty text, bounded, no NUL), else ValueError."""
    if not isinstance(conv_id, str) or not conv_id:
        raise ValueError(f"conv_id must be a non-empty string, not {conv_id!r}")
    _check_text("conv_id", conv_id)
    return conv_id


def _check_text(what: str, text: str) -> None:
    if len(text) > MAX_ID_CHARS:
        raise ValueError(f"{what} is longer than {MAX_ID_CHARS} characters")
    if "\x00" in text:
        raise ValueError(f"{what} must not contain NUL characters")
    if text.isascii():  # a flag of the string: valid UTF-8, nothing to encode
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid Unicode text: {exc.reason}") from None


_canonical_ascii = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
# ``json.dumps`` builds its C encoder anew for every value; this one is built once.
# Without the markers of ``check_circular`` it keeps no state between values (so it
# may be shared by threads): a circular value is a RecursionError of the C encoder,
# reported as the ValueError ``json.dumps`` would raise.
_json_encoder = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)
_c_encoder = (
    c_make_encoder(
        None, _json_encoder.default, encode_basestring, None, ":", ",", True, False, False
    )
    if c_make_encoder is not None
    else None
)


def _canonical(value: Any) -> str:
    if _c_encoder is None:  # pragma: no cover - CPython always has the C encoder
        return _json_encoder.encode(value)
    try:
        return "".join(_c_encoder(value, 0))
    except RecursionError:
        raise ValueError("Circular reference detected or nested too deeply") from None


def canonical_text(value: Any) -> str:
    """The canonical JSON text of a value (sorted keys, no spaces, UTF-8 text; lone
    surrogates escaped): ``json.dumps``'s text. ValueError/TypeError for what JSON
    cannot hold."""
    text: str = _canonical(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escaped, so they round-trip
        text = _canonical_ascii(value)
    return text


#: What encoding raises for a value JSON cannot hold (its type, NaN, a cycle, depth).
UNSTORABLE = (TypeError, ValueError, RecursionError)


def unstorable(exc: BaseException) -> str:
    """Why a value could not be encoded, from the error ``json`` raised (never a
    piece of the value: a state value may hold anything a conversation held)."""
    text = str(exc)
    if isinstance(exc, TypeError):  # names a type ("keys must be str, ..., not tuple")
        return f"not storable as JSON: {text}"
    if isinstance(exc, RecursionError) or "nested too deeply" in text:
        return "not storable as JSON: it is circular or nested too deeply"
    if "Circular" in text:
        return "not storable as JSON: it holds a circular reference"
    if "float" in text:
        return "not storable as JSON: it holds NaN or Infinity"
    return f"not storable as JSON: {type(exc).__name__}"  # pragma: no cover - json raises no other


_LEAVES = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})


def _native(value: Any) -> bool:
    """Whether ``value`` is made of exact JSON types only (dicts with string keys,
    lists, strings, ints, floats, booleans, None): then its canonical text is that of
    what it reads back as (NaN and Infinity are refused by the encoder). The types
    of a container's items are collected at C speed; only nested containers are
    visited one by one."""
    stack = [value]
    seen: set[int] = set()  # a container met twice (a cycle, or shared): the slow path
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict or t is list:
            if id(v) in seen:
                return False
            seen.add(id(v))
        if t is dict:
            if not set(map(type, v)) <= _STR:
                return False
            items: Any = v.values()
        elif t is list:
            items = v
        else:
            return t in _LEAVES
        if not set(map(type, items)) <= _LEAVES:
            stack.extend(x for x in items if type(x) not in _LEAVES)
    return True


def entry_text(key: str, value: Any) -> str:
    """The canonical text of ``value`` as a state entry: what :func:`encode` gives for
    the value ``value`` reads back as from JSON (tuples become lists, other objects
    their ``str``), in one pass when ``value`` is already plain JSON. Raises
    ValueError for NaN or Infinity, like ``json.dumps(allow_nan=False)``."""
    if _native(value):
        return canonical_text(value)
    plain = json.loads(json.dumps(value, ensure_ascii=False, default=str, allow_nan=False))
    return encode(key, plain)


def built_text(key: str, value: Any) -> str:
    """:func:`entry_text` of a value the engine builds from typed fields, every dict
    of it keyed by text (the counters, the last status, the growth samples): its
    canonical text directly, without :func:`entry_text`'s walk over the value (about
    a third of its time) — for such a value the JSON encoder writes what it writes
    for the value's read-back (tuples as lists, subclasses of JSON types as their
    base type). A value JSON cannot hold (a TypeError) takes :func:`entry_text`."""
    try:
        return canonical_text(value)
    except TypeError:
        return entry_text(key, value)


def encode(key: str, value: Any) -> str:
    """Canonical JSON of one value; StateStoreError if it would not round-trip exactly."""
    try:
        text = canonical_text(value)
    except UNSTORABLE as exc:
        raise StateStoreError(f"state entry {key!r} is {unstorable(exc)}") from None
    if json.loads(text) != value:
        raise StateStoreError(
            f"state entry {key!r} would not read back equal (tuples, non-string keys "
            "or subclasses of JSON types are not storable; use lists, string keys)"
        )
    return text


def decode(text: str) -> Any:
    return json.loads(text)


def encode_changes(
    put: Mapping[str, Any], delete: Iterable[str]
) -> tuple[list[tuple[str, str]], list[str]]:
    """Check and encode one commit's changes: ``([(key, json)], [deleted keys])``."""
    rows = [(check_key(key), encode(key, value)) for key, value in put.items()]
    return rows, _dropped(put, delete)


def check_encoded(
    put: Mapping[str, str], delete: Iterable[str]
) -> tuple[list[tuple[str, str]], list[str]]:
    """Check one commit of entries already encoded by :func:`entry_text`."""
    rows = [(check_key(key), text) for key, text in put.items()]
    return rows, _dropped(put, delete)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"state keys must be non-empty strings, not {key!r}")
    _check_text("state key", key)
    return key


def _dropped(put: Mapping[str, Any], delete: Iterable[str]) -> list[str]:
    dropped = list(dict.fromkeys(delete))
    for key in dropped:
        if not isinstance(key, str) or not key:
            raise ValueError(f"state keys must be non-empty strings, not {key!r}")
        if key in put:
            raise ValueError(f"state key {key!r} is both put and deleted in one commit")
    return dropped


def check_expected(expected_version: object) -> int:
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise ValueError(f"expected_version must be an int, not {expected_version!r}")
    if not 0 <= expected_version <= MAX_VERSION:
        raise ValueError(f"expected_version must be in [0, 2**63-2], not {expected_version}")
    return expected_version


def stored_version(value: object) -> int:
    """A version as read from a store: an int in ``[1, MAX_VERSION]`` (a stored row
    always has a committed version), else StateStoreError — a damaged or crafted row
    is never compared against or incremented."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
        shown = repr(value)[:40] if isinstance(value, (int, str, float)) else type(value).__name__
        raise StateStoreError(
            f"the stored version of this conversation is invalid ({shown}); not loaded"
        )
    return value


def interpolate_option(value: str, env: Mapping[str, str] | None, what: str) -> str:
    """``${NAME}``/``${NAME:-default}``/``${env:NAME}`` of a store option, at open time.

    A missing variable is a StateStoreError naming the variable and the option,
    never the option's (possibly secret) value.
    """
    text, problems = interpolate(value, os.environ if env is None else env)
    for problem in problems:
        if problem.kind == "missing":
            raise StateStoreError(
                f"environment variable {problem.text} is not set (used in state.options.{what})"
            )
        raise StateStoreError(f"invalid ${{...}} interpolation in state.options.{what}")
    return text
