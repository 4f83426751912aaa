"""The JSON document of a snapshot: the bytes a store writes, and what it reads back.

:func:`dump_document` writes design A's document (``indent=1``, UTF-8) for any
content, :func:`load_document` reads one back (a :class:`SnapshotError` for a file
that is not a JSON object). Shared by every snapshot store (:mod:`ctxpolicy.snapshots`,
:mod:`ctxpolicy.snapshots.fsspec_store`).
"""

from __future__ import annotations

import errno
import json
import math
from collections.abc import Mapping
from typing import Any

from ctxpolicy.conversation.jsontext import iter_dumps
from ctxpolicy.snapshots.names import SnapshotError

__all__ = ["dump_document", "load_document"]


def dump_document(document: Mapping[str, Any]) -> bytes:
    """JSON bytes of a snapshot document, whatever it holds.

    UTF-8; lone surrogates are kept as ``\\udcxx`` escapes (``json.loads`` returns
    the exact original). A field JSON cannot hold as a value that reads back
    (nested deeper than the parser's recursion limit, a cycle, a 5,000-digit
    integer, a ``__str__`` that raises) is stored as its JSON *text* written by the
    iterative encoder (:mod:`ctxpolicy.conversation.jsontext`), and its name is listed under
    ``"as_text"``: nothing is replaced by a placeholder.
    """
    try:
        text = _dumps_indented(document)
    except Exception:
        fixed: dict[str, Any] = {}
        as_text: list[str] = []
        for k, v in document.items():
            try:
                json.dumps(v, default=str)
                fixed[str(k)] = v
            except Exception:
                fixed[str(k)] = iter_dumps(v)[0]
                as_text.append(str(k))
        fixed["as_text"] = as_text
        text = json.dumps(fixed, ensure_ascii=False, default=str, indent=1)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them so they round-trip
        return _ascii_json(text)


_encode_str = json.encoder.encode_basestring  # the C encoder of ensure_ascii=False
_CONSTANTS = {None: "null", True: "true", False: "false"}


def _scalar(v: Any) -> str | None:
    """JSON text of an exact scalar, as ``json.dumps`` writes it (None otherwise):
    without building an encoder per value."""
    t = type(v)
    if t is str:
        return str(_encode_str(v))
    if t is int:
        return int.__repr__(v)
    if t is float:
        if v != v:
            return "NaN"
        if v in (math.inf, -math.inf):
            return "Infinity" if v > 0 else "-Infinity"
        return float.__repr__(v)
    if v is None or t is bool:
        return _CONSTANTS[v]
    return None


def _dumps_indented(document: Mapping[str, Any]) -> str:
    """``json.dumps(document, ensure_ascii=False, default=str, indent=1)``, the same
    text, with the top level written here (Python's indenting encoder is pure Python):
    scalars directly, a nested container dumped with ``indent=1`` and shifted one
    level (raw newlines only occur between items: JSON escapes them inside strings)."""
    if not isinstance(document, dict) or not document:
        return json.dumps(document, ensure_ascii=False, default=str, indent=1)
    items = []
    for k, v in document.items():
        if type(k) is not str:
            return json.dumps(document, ensure_ascii=False, default=str, indent=1)
        value = _scalar(v)
        if value is None:
            value = json.dumps(v, ensure_ascii=False, default=str, indent=1).replace("\n", "\n ")
        items.append(f"{_encode_str(k)}: {value}")
    return "{\n " + ",\n ".join(items) + "\n}"


def _ascii_json(text: str) -> bytes:
    """JSON text with every non-ASCII character as a ``\\uXXXX`` escape (valid JSON:
    escapes inside strings only, since JSON syntax outside strings is ASCII)."""
    out: list[str] = []
    for ch in text:
        o = ord(ch)
        if o < 0x80:
            out.append(ch)
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            o -= 0x10000
            out.append(f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}")
    return "".join(out).encode("ascii")


def load_document(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SnapshotError(errno.EIO, f"snapshot {where} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SnapshotError(errno.EIO, f"snapshot {where} is not a JSON object")
    return doc
