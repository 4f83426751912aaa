"""Helpers shared by the built-in layers (no third-party imports).

* rounds as droppable groups (:func:`round_groups`);
* head/tail truncation that keeps snapshot reference lines (:func:`truncate_keep_refs`);
* rewriting a message's text without mutating it (:func:`with_text`);
* snapshot refs carried by a unit (:func:`unit_refs`);
* token counts with each unit counted once (:class:`Tally`) and the drop plan built
  on them (:func:`plan_drop`).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation import Message, Unit, content_text

if TYPE_CHECKING:
    from ctxpolicy.components import CompactionContext

#: How every reference line starts (a substring test before any regex pass).
REF_MARK = "[Full detail available at: "
#: ``[Full detail available at: <path>]`` or ``[Full detail available at: <path> (<uri>)]``
REF_LINE = re.compile(
    r"^\[Full detail available at: (?P<path>.+?)(?: \((?P<uri>ctxsnap://[^)\s]+)\))?\]\s*$",
    re.MULTILINE,
)
#: The marker :func:`head_tail` puts where it removed text.
ELISION = re.compile(r"\[… (\d+) chars elided …\]")

#: Kinds a round group may contain besides its step.
GROUPABLE = ("user", "other", "orphan")
_ROUND_KINDS = frozenset(("step", *GROUPABLE))


def approx_tokens(text: str) -> int:
    """Fallback token estimate (len/4, rounded up)."""
    return math.ceil(len(text) / 4)


def text_counter(count_text: Callable[[str], int] | None) -> Callable[[str], int]:
    return count_text if count_text is not None else approx_tokens


def round_groups(units: Sequence[Unit]) -> list[list[int]]:
    """Indices of the droppable rounds, oldest first.

    A round is one ``step`` unit together with the non-pinned ``user``/``other``/
    ``orphan`` units between it and the previous step. Pinned units, system,
    summary and ledger units belong to no round. Units after the last step are in
    no round either (they are the newest content).
    """
    groups: list[list[int]] = []
    pending: list[int] = []
    for i, u in enumerate(units):
        if u.pinned or u.kind not in _ROUND_KINDS:
            continue
        if u.kind == "step":
            groups.append([*pending, i])
            pending = []
        else:
            pending.append(i)
    return groups


def split_refs(text: str) -> tuple[str, list[str]]:
    """``text`` without its reference lines, and those lines (in order)."""
    if REF_MARK not in text:  # a C substring scan, not a regex pass
        return text, []
    refs = [m.group(0).strip() for m in REF_LINE.finditer(text)]
    if not refs:
        return text, []
    body = REF_LINE.sub("", text).rstrip("\n")
    return body, refs


def head_tail(text: str, max_chars: int) -> str:
    """Keep the head and tail of ``text`` (≈ 2/3 head), with an elision marker."""
    if len(text) <= max_chars:
        return text
    head = max(0, (max_chars * 2) // 3)
    tail = max(0, max_chars - head)
    removed = len(text) - head - tail
    tail_s = text[len(text) - tail :] if tail else ""
    return f"{text[:head]}\n[… {removed} chars elided …]\n{tail_s}"


def truncate_keep_refs(text: str, max_chars: int) -> str | None:
    """Head/tail-truncate ``text`` to ``max_chars`` keeping reference lines.

    Returns None when nothing would be saved (already short, already truncated, or
    the result would not be shorter).
    """
    body, refs = split_refs(text)
    if len(body) <= max_chars or ELISION.search(body):
        return None
    out = head_tail(body, max_chars)
    if refs:
        out = out + "\n" + "\n".join(refs)
    return out if len(out) < len(text) else None


def with_text(msg: Message, text: str) -> Message:
    """A copy of ``msg`` whose text is ``text``.

    A list content keeps every non-text part (images, audio, files) in place: the
    text parts are replaced by one text part where the first of them was.
    """
    new = dict(msg)
    content = msg.get("content")
    if not isinstance(content, list):
        new["content"] = text
        return new
    parts: list[Any] = []
    placed = False
    for part in content:
        is_text = isinstance(part, str) or (
            isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
        if not is_text:
            parts.append(part)
        elif not placed:
            parts.append({"type": "text", "text": text})
            placed = True
    if not placed:
        parts.insert(0, {"type": "text", "text": text})
    new["content"] = parts
    return new


def message_text(msg: Mapping[str, Any]) -> str:
    return content_text(msg.get("content"))


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
        for match in REF_LINE.finditer(message_text(m)):
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


def short(text: str, n: int) -> str:
    """One line, at most ``n`` characters (with an ellipsis)."""
    line = " ".join(text.split())
    return line if len(line) <= n else line[: max(0, n - 1)] + "…"


def step_label(unit: Unit, fallback: int) -> int:
    return unit.round if unit.round is not None else fallback


def describe_call(tc: Mapping[str, Any], n: int = 120) -> str:
    """``name(arguments)`` of a tool call, shortened."""
    fn = tc.get("function") or {}
    name = str(fn.get("name", "?"))
    args = fn.get("arguments", "")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False, sort_keys=True)
    try:
        parsed = json.loads(args) if args else {}
        if isinstance(parsed, dict):
            args = ", ".join(f"{k}={v}" for k, v in parsed.items())
    except ValueError:
        pass
    return short(f"{name}({args})", n)


def first_meaningful_line(text: str, n: int = 120) -> str:
    body, _ = split_refs(text)
    for line in body.splitlines():
        if line.strip():
            return short(line, n)
    return ""


class Tally:
    """Token counts of a unit list with each unit counted once (prefix sums).

    ``base`` is what an empty list costs (reply priming, tool schemas); the tokens
    of any sub-list are ``base`` plus the sum of its units (exact for an additive
    counter such as the engine's, an estimate otherwise — check with one
    ``ctx.count`` at the end).
    """

    def __init__(self, ctx: CompactionContext, units: Sequence[Unit]) -> None:
        self.base = ctx.count(())
        self.each = ctx.unit_counts(units)
        self.cum = [0, *itertools.accumulate(self.each)]

    def span(self, start: int, stop: int) -> int:
        """Tokens of ``units[start:stop]`` (without ``base``)."""
        return self.cum[stop] - self.cum[start]

    def of(self, indices: Iterable[int]) -> int:
        """Tokens of the units at ``indices`` (without ``base``)."""
        return sum(self.each[i] for i in indices)


#: Exact recounts :func:`plan_drop` spends correcting its estimate (one suffices
#: with an additive counter; a few with one that is not).
MAX_RECOUNTS = 4


def plan_drop(
    ctx: CompactionContext,
    units: Sequence[Unit],
    *,
    keep_recent_rounds: int,
    min_keep_tokens: int = 0,
    target: int | None = None,
) -> tuple[set[int], int, str]:
    """Which oldest rounds to drop: ``(unit indices, rounds dropped, stop reason)``.

    Rounds are dropped oldest first, never one of the ``keep_recent_rounds`` newest,
    never one after which less than ``min_keep_tokens`` of content would remain,
    and (when ``target`` is given) no more once the remaining list counts ≤ target.

    Linear in the number of units: each unit is counted once (:class:`Tally`), the
    remaining tokens follow by subtraction, and the list is recounted exactly
    (``ctx.count``) only when the estimate reaches the target — if framing made
    the estimate low, dropping goes on from the exact count. After
    :data:`MAX_RECOUNTS` the estimate decides and the reason is ``"estimate"`` when
    the last exact count is still above the target.
    """
    groups = round_groups(units)
    candidates = groups[: max(0, len(groups) - keep_recent_rounds)]
    drop: set[int] = set()
    remaining = ctx.count(units) if target is not None else 0
    if target is not None and remaining <= target:
        return drop, 0, "target"
    if not candidates:
        return drop, 0, "keep_recent_rounds"
    tally = Tally(ctx, units)
    n = 0
    reason = "keep_recent_rounds"
    recounts = 0
    for g in candidates:
        if min_keep_tokens > 0 and tally.base + tally.span(g[-1] + 1, len(units)) < min_keep_tokens:
            reason = "min_keep_tokens"
            break
        drop.update(g)
        n += 1
        if target is None:
            continue
        remaining -= tally.of(g)
        if remaining > target:
            continue
        if recounts < MAX_RECOUNTS:
            recounts += 1
            remaining = ctx.count([u for i, u in enumerate(units) if i not in drop])
            if remaining > target:
                continue  # the estimate was low: go on from the exact count
        else:  # out of recounts: the estimate decides, one last count tells
            exact = ctx.count([u for i, u in enumerate(units) if i not in drop])
            reason = "target" if exact <= target else "estimate"
            break
        reason = "target"
        break
    return drop, n, reason
