"""The reference line, one home: ``[Full detail available at: <path> (<uri>)]``.

A tool result whose full text went to the snapshot store ends with this line; the
ledger, the layers and the summarizers find it with :data:`REF_LINE` (a substring
test on :data:`REF_MARK` first), and :func:`unit_refs` collects a unit's references
from its lines and from ``meta["refs"]``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxpolicy.conversation.messages import content_text
from ctxpolicy.conversation.units import Unit

__all__ = ["REF_LINE", "REF_MARK", "meta_ref_for", "ref_line", "split_refs", "unit_refs"]

#: How every reference line starts (a substring test before any regex pass).
REF_MARK = "[Full detail available at: "
#: ``[Full detail available at: <path>]`` or ``[Full detail available at: <path> (<uri>)]``
REF_LINE = re.compile(
    r"^\[Full detail available at: (?P<path>.+?)(?: \((?P<uri>ctxsnap://[^)\s]+)\))?\]\s*$",
    re.MULTILINE,
)


def ref_line(ref: str) -> str:
    """The reference line naming ``ref`` (a ``ctxsnap://`` URI or a path)."""
    return f"{REF_MARK}{ref}]"


def split_refs(text: str) -> tuple[str, list[str]]:
    """``text`` without its reference lines, and those lines (in order)."""
    if REF_MARK not in text:  # a C substring scan, not a regex pass
        return text, []
    refs = [m.group(0).strip() for m in REF_LINE.finditer(text)]
    if not refs:
        return text, []
    body = REF_LINE.sub("", text).rstrip("\n")
    return body, refs


def _ref_str(ref: Any) -> str | None:
    if isinstance(ref, str):
        return ref
    if isinstance(ref, Mapping):
        v = ref.get("uri") or ref.get("path")
        return str(v) if v else None
    uri = getattr(ref, "uri", None) or getattr(ref, "path", None)
    return str(uri) if uri else None


def unit_refs(unit: Unit) -> list[str]:
    """Snapshot refs of a unit: ``ctxsnap://`` URIs (or paths) from reference lines
    and from ``meta["refs"]`` (a list, or a mapping tool_call_id → ref)."""
    out: list[str] = []
    for m in unit.messages:
        for match in REF_LINE.finditer(content_text(m.get("content"))):
            out.append(match.group("uri") or match.group("path"))
    raw = unit.meta.get("refs") if isinstance(unit.meta, Mapping) else None
    items: list[Any] = []
    if isinstance(raw, Mapping):
        items = list(raw.values())
    elif isinstance(raw, list | tuple):
        items = list(raw)
    elif raw is not None:
        items = [raw]
    for r in items:
        s = _ref_str(r)
        if s:
            out.append(s)
    return list(dict.fromkeys(out))  # first occurrence of each, in order


def meta_ref_for(unit: Unit, tool_call_id: str) -> str | None:
    """The ref ``meta["refs"]`` records for one tool result, when it says so."""
    raw = unit.meta.get("refs") if isinstance(unit.meta, Mapping) else None
    if isinstance(raw, Mapping) and tool_call_id in raw:
        return _ref_str(raw[tool_call_id])
    if isinstance(raw, list | tuple) and len(raw) == 1 and len(unit.tool_messages) == 1:
        return _ref_str(raw[0])
    return None
