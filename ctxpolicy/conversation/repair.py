"""Repairs of malformed assistant ``tool_calls`` and of non-dict messages.

Used by :func:`ctxpolicy.conversation.group_units`. Nothing is lost without a trace:
what can be repaired is repaired, what cannot is removed from the context and
returned as ``Repair.removed`` (the engine archives it verbatim in the history
archive), and every repair is reported (``conversation.repaired``).

=====================  =====================================================  ==========
kind                   input                                                  outcome
=====================  =====================================================  ==========
``tool_calls_wrapped``  ``tool_calls`` is one call object (a dict)             ``[call]``
``tool_calls_invalid``  ``tool_calls`` is a string or another non-list         parsed when it is JSON
                                                                              of calls, else removed
``bad_tool_call``       an entry is not an object, or has no function name     removed
``bad_arguments``       ``arguments`` is not a string (a dict, a number)       JSON-encoded
``missing_call_id``     a call has no id (or not a string)                     ``ctxpolicy_call_<i>_<j>``
``duplicate_call``      a call id already used (this message or an earlier)    ``<id>~<i>.<j>``
``deep_value``          a field nested deeper than the interpreter can recurse  its exact JSON text
=====================  =====================================================  ==========

A message nested thousands of levels deep (a tool output put into ``content`` as a
parsed object) would make every recursive step of the engine raise
``RecursionError``; :func:`flatten_deep` replaces each such field by its exact JSON
text (an iterative encoder), so the context and the snapshot carry the original.

Synthesized ids depend only on the message index and the call's position, so a
cached (incremental) and an uncached grouping agree. Results are matched to renamed
or synthesized ids in order: the k-th result written with id X (or with no id) answers
the k-th call that had id X (or no id).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.conversation.jsontext import to_json

__all__ = ["MAX_DEPTH", "CallRepair", "call_key", "flatten_deep", "repair_calls"]

#: Values of a message nested deeper than this are replaced by their JSON text.
MAX_DEPTH = 100


@dataclass
class CallRepair:
    """What :func:`repair_calls` made of one assistant message."""

    message: dict[str, Any]
    calls: list[dict[str, Any]]
    #: result ``tool_call_id`` as written (:func:`call_key`) -> final ids, in order
    aliases: dict[str, list[str]]
    #: (kind, detail, removed): what left the context (empty when nothing did)
    repairs: list[tuple[str, str, tuple[Any, ...]]] = field(default_factory=list)


def call_key(tid: Any) -> str:
    """A call or result id as a lookup key ("" for a missing one)."""
    if tid is None or tid == "":
        return ""
    return tid if isinstance(tid, str) else str(tid)


def _plain(calls: Any, seen: Mapping[str, int]) -> bool:
    """The common case: a list of well-formed calls with new, unique ids."""
    if type(calls) is not list:
        return False
    ids = set()
    for tc in calls:
        if type(tc) is not dict:
            return False
        tid, fn = tc.get("id"), tc.get("function")
        if (
            type(tid) is not str
            or not tid
            or tid in ids
            or tid in seen
            or type(fn) is not dict
            or type(fn.get("arguments")) is not str
            or not isinstance(fn.get("name"), str)
        ):
            return False
        ids.add(tid)
    return True


def repair_calls(m: dict[str, Any], index: int, seen: dict[str, int]) -> CallRepair:
    """Repair the ``tool_calls`` of the assistant message ``m`` (message ``index`` of
    the conversation). ``seen`` maps the call ids used by earlier messages to their
    message index; the final ids of ``m`` are added to it."""
    raw = m.get("tool_calls")
    if not raw:
        if "tool_calls" in m:  # an empty list: providers reject it
            m = dict(m)
            m.pop("tool_calls")
        return CallRepair(m, [], {})
    if _plain(raw, seen):
        aliases: dict[str, list[str]] = {}
        for tc in raw:
            seen[tc["id"]] = index
            aliases[tc["id"]] = [tc["id"]]
        return CallRepair(m, list(raw), aliases)
    return _repair(m, raw, index, seen)


def _repair(m: dict[str, Any], raw: Any, index: int, seen: dict[str, int]) -> CallRepair:
    out = CallRepair(dict(m), [], {})
    entries: list[Any]
    if isinstance(raw, Mapping):
        out.repairs.append(("tool_calls_wrapped", "tool_calls was one object, not a list", ()))
        entries = [raw]
    elif isinstance(raw, list | tuple):
        entries = list(raw)
    else:
        parsed: Any = None
        if isinstance(raw, str | bytes):
            try:
                parsed = json.loads(raw)
            except (ValueError, RecursionError):
                parsed = None
        if isinstance(parsed, Mapping):
            parsed = [parsed]
        if isinstance(parsed, list):
            out.repairs.append(("tool_calls_invalid", "tool_calls was JSON text; parsed", ()))
            entries = parsed
        else:
            out.repairs.append(
                ("tool_calls_invalid", f"tool_calls is a {type(raw).__name__}; removed", (raw,))
            )
            entries = []
    for pos, tc in enumerate(entries):
        call = _repair_call(out, tc, index, pos, seen)
        if call is not None:
            out.calls.append(call)
    if out.calls:
        out.message["tool_calls"] = out.calls
    else:
        out.message.pop("tool_calls", None)
    return out


def _repair_call(
    out: CallRepair, tc: Any, index: int, pos: int, seen: dict[str, int]
) -> dict[str, Any] | None:
    if not isinstance(tc, Mapping):
        out.repairs.append(
            ("bad_tool_call", f"call {pos} is a {type(tc).__name__}, not an object; removed", (tc,))
        )
        return None
    call = dict(tc)
    fn = call.get("function")
    if not isinstance(fn, Mapping) and isinstance(call.get("name"), str):
        fn = {"name": call.pop("name"), "arguments": call.pop("arguments", "{}")}
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
        out.repairs.append(("bad_tool_call", f"call {pos} has no function name; removed", (tc,)))
        return None
    fn = dict(fn)
    args = fn.get("arguments")
    if not isinstance(args, str):
        fn["arguments"] = "{}" if args is None else to_json(args)[0]
        out.repairs.append(
            ("bad_arguments", f"call {pos}: arguments were a {type(args).__name__}; encoded", ())
        )
    call["function"] = fn
    call.setdefault("type", "function")
    key = call_key(call.get("id"))
    tid = key
    if not key or not isinstance(call.get("id"), str):
        tid = key or f"ctxpolicy_call_{index}_{pos}"
        out.repairs.append(("missing_call_id", f"call {pos} had no string id; now {tid!r}", ()))
    if tid in seen:
        first = seen[tid]
        tid = f"{tid}~{index}.{pos}"
        while tid in seen:
            tid += "~"
        out.repairs.append(
            (
                "duplicate_call",
                f"call {pos}: id {key!r} already used by message {first}; now {tid!r}",
                (),
            )
        )
    call["id"] = tid
    seen[tid] = index
    out.aliases.setdefault(key, []).append(tid)
    return call


def _depth_over(v: Any, limit: int) -> bool:
    """Whether ``v`` nests containers deeper than ``limit`` (iterative)."""
    stack: list[tuple[Any, int]] = [(v, 0)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, Mapping):
            children: Any = x.values()
        elif isinstance(x, list | tuple):
            children = x
        else:
            continue
        if d >= limit:
            return True
        stack.extend((c, d + 1) for c in children)
    return False


def flatten_deep(m: Mapping[str, Any], limit: int = MAX_DEPTH) -> tuple[dict[str, Any], list[str]]:
    """``m`` with every field nested deeper than ``limit`` replaced by its exact JSON
    text, and the names of those fields."""
    out = dict(m)
    fields = []
    for k, v in m.items():
        if isinstance(v, Mapping | list | tuple) and _depth_over(v, limit):
            out[k] = to_json(v)[0]
            fields.append(str(k))
    return out, fields
