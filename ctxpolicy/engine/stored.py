"""Stored entries are checked against the state's model before a session obeys them.

A state store holds what an earlier process wrote, but also whatever a damaged disk,
a bad migration or someone with write access to the database put there. Every entry
of :class:`~ctxpolicy.engine.state.SessionState` is checked here on load: its type,
its keys, and its numbers against the policy's own bounds (a learned window is never
below the floor :func:`~ctxpolicy.engine.window.learn_window` would accept, a
calibration stays in ``[0.5, 2.0]``, counters are non-negative integers). What is
invalid is reported (:class:`Problem`, a ``state.invalid`` event) and replaced by
what a new conversation starts with — per ``meta`` field, or per entry — never
raised and never obeyed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, get_args

from ctxpolicy.conversation.units import UnitKind

__all__ = [
    "MAX_COUNT",
    "Invalid",
    "Problem",
    "WindowBounds",
    "bounded_problems",
    "check_decision",
    "check_growth",
    "check_ledger",
    "check_memory",
    "check_meta_field",
    "check_ref",
    "check_repairs",
    "check_seen_repairs",
    "check_stats",
    "check_tool_key",
    "check_tool_text",
]

#: Largest integer a stored counter may hold (exact in every JSON reader).
MAX_COUNT = 2**53
_KINDS = frozenset(get_args(UnitKind))
_LEDGER_LISTS = ("done", "files", "ids", "errors")
_STATS_INTS = (
    "prepares",
    "overflows",
    "reactive",
    "tool_results",
    "tool_tokens_before",
    "tool_tokens_after",
    "tokens_in",
    "tokens_sent",
)
#: the layer-memory slot the pipeline keeps its no-gain keys in (pipeline.NO_GAIN)
_NO_GAIN = "~no_gain"


class Invalid(ValueError):
    """A stored value that does not fit the state's model (the reason, no value)."""


@dataclass(frozen=True)
class Problem:
    """One stored entry (or ``meta`` field) that was not obeyed."""

    key: str
    reason: str


@dataclass(frozen=True)
class WindowBounds:
    """What a learned window may be: ``floor <= learned < configured``."""

    floor: int
    configured: int


def _count(value: Any, what: str, *, low: int = 0) -> int:
    if type(value) is not int:
        raise Invalid(f"{what} is {type(value).__name__}, not an integer")
    if not low <= value <= MAX_COUNT:
        raise Invalid(f"{what} is outside [{low}, 2**53]")
    return value


def _text(value: Any, what: str) -> str:
    if type(value) is not str:
        raise Invalid(f"{what} is {type(value).__name__}, not text")
    return value


def _optional_text(value: Any, what: str) -> str | None:
    return None if value is None else _text(value, what)


def _texts(value: Any, what: str) -> list[str]:
    if type(value) is not list or not all(type(x) is str for x in value):
        raise Invalid(f"{what} is not a list of text")
    return list(value)


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise Invalid(f"{what} is {type(value).__name__}, not an object")
    return value


def check_meta_field(name: str, value: Any, bounds: WindowBounds | None) -> Any:
    """The value of one ``meta`` field as the session may use it, or :class:`Invalid`."""
    if name in ("step", "overflow_attempts"):
        return _count(value, name)
    if name == "hold_until":
        return None if value is None else _count(value, name)
    if name == "usage_seen":
        if type(value) is not bool:
            raise Invalid("usage_seen is not a boolean")
        return value
    if name == "calibration":
        if type(value) not in (int, float) or not math.isfinite(value):
            raise Invalid("calibration is not a finite number")
        if not 0.5 <= value <= 2.0:
            raise Invalid("calibration is outside [0.5, 2.0]")
        return value
    if name == "learned_window":
        if value is None:
            return None
        window = _count(value, name, low=1)
        if bounds is not None and not bounds.floor <= window < bounds.configured:
            raise Invalid(
                f"learned_window {window} is outside the policy's bounds "
                f"[{bounds.floor}, {bounds.configured})"
            )
        return window
    if name in ("handover_text", "unfit"):
        return _optional_text(value, name)
    if name == "status":
        if value is None:
            return None
        status = _mapping(value, name)
        raw = status.get("used_raw")
        if raw is not None:
            _count(raw, "status.used_raw")
        return status
    raise Invalid(f"unknown field {name}")  # pragma: no cover - callers pass known names


def check_seen_repairs(value: Any) -> set[tuple[str, int]]:
    if type(value) is not list:
        raise Invalid("seen_repairs is not a list")
    out: set[tuple[str, int]] = set()
    for item in value:
        if type(item) is not list or len(item) != 2:
            raise Invalid("seen_repairs holds an item that is not [kind, index]")
        out.add((_text(item[0], "seen_repairs kind"), _count(item[1], "seen_repairs index")))
    return out


def check_repairs(value: Any) -> tuple[set[tuple[str, int]], dict[str, int]]:
    """The ``repairs`` entry: ``{"seen": [[kind, index]], "floor": {kind: index}}``."""
    repairs = _mapping(value, "repairs")
    floor = _mapping(repairs.get("floor", {}), "repairs.floor")
    return check_seen_repairs(repairs.get("seen", [])), {
        _text(k, "repair kind"): _count(v, "repairs.floor") for k, v in floor.items()
    }


def check_stats(value: Any) -> dict[str, Any]:
    stats = _mapping(value, "stats")
    out: dict[str, Any] = {}
    for name in _STATS_INTS:
        if name in stats:
            out[name] = _count(stats[name], f"stats.{name}")
    for name in ("compactions", "layer_failures"):
        counts = _mapping(stats.get(name, {}), f"stats.{name}")
        out[name] = {_text(k, name): _count(v, f"stats.{name}") for k, v in counts.items()}
    return out


def check_ledger(value: Any) -> dict[str, Any]:
    """A stored ledger's lists and texts (its size limit and constraints are the policy's).
    A version 2 ledger (the typed task state) is checked by its own module; an older
    one is read as it was written and migrated when loaded."""
    led = _mapping(value, "ledger")
    if led.get("v") == 2:
        from ctxpolicy.engine.ledger import check_stored

        try:
            return check_stored(led)
        except ValueError as exc:
            raise Invalid(str(exc)) from None
    out: dict[str, Any] = {}
    for name in ("goal", "next_step", "archive"):
        out[name] = _optional_text(led.get(name), f"ledger.{name}")
    for name in _LEDGER_LISTS:
        out[name] = _texts(led.get(name, []), f"ledger.{name}")
    return out


def check_growth(value: Any) -> dict[str, Any]:
    growth = _mapping(value, "growth")
    recent = growth.get("recent") or []
    if type(recent) is not list:
        raise Invalid("growth.recent is not a list")
    per_tool = _mapping(growth.get("per_tool") or {}, "growth.per_tool")
    for samples in [recent, *per_tool.values()]:
        if type(samples) is not list:
            raise Invalid("growth samples are not a list")
        for x in samples:
            _count(x, "growth sample")
    return growth


def check_memory(value: Any) -> dict[str, dict[str, Any]]:
    """Layer memory: one object per layer slot; the pipeline's no-gain slot holds lists
    of unit keys (what a layer keeps in its own object is the layer's to check)."""
    memory = _mapping(value, "memory")
    for slot, content in memory.items():
        _mapping(content, f"memory slot {slot!r}"[:80])
    for keys in memory.get(_NO_GAIN, {}).values():
        _texts(keys, "memory no-gain keys")
    return memory


def check_decision(value: Any) -> list[dict[str, Any]]:
    """A ``decision/<key>`` entry: a list of units whose messages are objects with a role."""
    if type(value) is not list:
        raise Invalid("a decision is not a list of units")
    for u in value:
        unit = _mapping(u, "a decided unit")
        if unit.get("kind") not in _KINDS:
            raise Invalid("a decided unit has an unknown kind")
        _text(unit.get("key"), "a decided unit's key")
        if not unit["key"]:
            raise Invalid("a decided unit has an empty key")
        messages = unit.get("messages")
        if type(messages) is not list:
            raise Invalid("a decided unit's messages are not a list")
        for m in messages:
            if type(m) is not dict or type(m.get("role")) is not str:
                raise Invalid("a decided unit holds a message that is not an object with a role")
        _texts(unit.get("origin") or [], "a decided unit's origin")
        if unit.get("round") is not None:
            _count(unit["round"], "a decided unit's round")
        if type(unit.get("pinned", False)) is not bool:
            raise Invalid("a decided unit's pinned flag is not a boolean")
        _mapping(unit.get("meta") or {}, "a decided unit's meta")
    return value


def check_ref(value: Any) -> tuple[str | None, str]:
    """A ``ref/<id>`` entry (the snapshot URI) or a ``refh/<digest>`` one (``{id, uri}``):
    ``(call id or None when the key names it, uri)``."""
    if type(value) is str:
        return None, value
    ref = _mapping(value, "a snapshot reference")
    return _text(ref.get("id"), "a reference's call id"), _text(ref.get("uri"), "a reference")


_TOOL_KEY = re.compile(r"[0-9a-f]{32}")


def check_tool_key(name: str) -> str:
    """The name of a ``tool/<digest>`` entry: 32 lowercase hex digits."""
    if not _TOOL_KEY.fullmatch(name):
        raise Invalid("not a tool result digest")
    return name


def check_tool_text(value: Any) -> str | None:
    """A ``tool/<digest>`` entry: the text a tool result enters the context as, or
    ``true`` when it enters as it arrives."""
    if value is True:
        return None
    return _text(value, "a tool result's text")


def bounded_problems(problems: list[Problem], limit: int = 20) -> list[Problem]:
    """At most ``limit`` problems, the rest counted in one more."""
    if len(problems) <= limit:
        return problems
    rest = len(problems) - limit
    return [*problems[:limit], Problem("…", f"{rest} more invalid entries")]
