"""The last resort: make a request fit ``window − reserve_output``.

Reached only when every layer is done and the context still exceeds the hard limit
(one giant tool result in the newest round, a runaway assistant message, a huge
pasted task). In order:

1. shorten the largest *unpinned* message content or tool-call argument, head and tail
   kept, with a reference to the verbatim original (its snapshot, or the history
   archive), until the request fits. A tool call's ``arguments`` stays JSON that
   servers parse (:func:`ctxpolicy.conversation.jsoncut.cut_json`: shortened inside
   a string, containers closed and reopened); arguments that were not JSON to
   begin with become ``{"_raw": "<head … tail>"}``;
2. trim the progress ledger (oldest entries first; the archive reference stays);
3. shorten pinned user messages (the task) the same way, with a
   ``context.truncated_pinned`` event.

System messages are never cut: when the system prompt alone exceeds the limit the
request goes out over it and the session reports ``context.overflow`` (unavoidable).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation import Unit
from ctxpolicy.conversation.jsoncut import cut_json
from ctxpolicy.conversation.messages import call_arguments
from ctxpolicy.conversation.refs import ref_line
from ctxpolicy.engine.archiving import ref_for_message
from ctxpolicy.engine.call import Call
from ctxpolicy.engine.own import LEDGER_MARK, special_unit
from ctxpolicy.events.types import ContextTruncatedPinned, DataLost

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

SQUEEZE_MARK = "[ctxpolicy: {n} characters of this {what} removed to fit the window]"
_MIN_KEEP = 200  # characters kept of any shortened text (head + tail)
_MIN_SIZE = 400  # texts shorter than this are not worth cutting

#: Where a text lives in a unit: (message index, field, part) — field "content" with
#: part None (a string) or the index of a text part; field "arguments" with the index
#: of the tool call.
Slot = tuple[int, str, int | None]


def _slots(m: Mapping[str, Any], mi: int) -> list[tuple[int, Slot]]:
    out: list[tuple[int, Slot]] = []
    content = m.get("content")
    if isinstance(content, str):
        out.append((len(content), (mi, "content", None)))
    elif isinstance(content, list):
        for pi, part in enumerate(content):
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                out.append((len(part["text"]), (mi, "content", pi)))
    calls = m.get("tool_calls")
    for ci, tc in enumerate(calls if isinstance(calls, list) else ()):
        args = call_arguments(tc) if isinstance(tc, Mapping) else None
        if isinstance(args, str):
            out.append((len(args), (mi, "arguments", ci)))
    return out


def _get(m: Mapping[str, Any], slot: Slot) -> str:
    _, field, part = slot
    if field == "content":
        return str(m["content"] if part is None else m["content"][part]["text"])
    return str(call_arguments(m["tool_calls"][part]))


def _set(m: Mapping[str, Any], slot: Slot, text: str) -> dict[str, Any]:
    _, field, part = slot
    new = dict(m)
    if field == "content":
        if part is None:
            new["content"] = text
        else:
            parts = list(m["content"])
            parts[part] = {**parts[part], "text": text}
            new["content"] = parts
    else:
        assert part is not None
        calls = list(m["tool_calls"])
        tc = calls[part]
        calls[part] = {**tc, "function": {**tc["function"], "arguments": text}}
        new["tool_calls"] = calls
    return new


def _cut(text: str, keep: int, what: str, ref: str | None) -> str:
    head, tail = text[: keep // 2], text[len(text) - keep // 2 :]
    mark = SQUEEZE_MARK.format(n=len(text) - len(head) - len(tail), what=what)
    out = f"{head}\n{mark}\n{tail}"
    if ref and ref not in out:
        out += "\n" + ref_line(ref)
    return out


def _cut_arguments(text: str, keep: int, ref: str | None) -> str:
    """``arguments`` shortened to about ``keep`` characters, still JSON."""
    what = "tool-call argument"
    see = " " + ref_line(ref) if ref and ref not in text else ""
    out = cut_json(text, keep, lambda n: SQUEEZE_MARK.format(n=n, what=what) + see)
    if out is not None:
        return out
    # not JSON to begin with (cut off, NaN, a raw newline): a JSON object servers
    # accept, the model's text in it (what adapters make of such arguments too)
    out = text
    for _ in range(3):
        out = json.dumps({"_raw": _cut(text, keep, what, ref)}, ensure_ascii=False)
        over = len(out) - (keep + len(SQUEEZE_MARK) + len(see) + 40)
        if over <= 0 or keep <= 2:
            break
        keep = max(2, keep - over)  # escapes made it longer: keep less
    return out


def _what(m: Mapping[str, Any], slot: Slot) -> str:
    if slot[1] == "arguments":
        return "tool-call argument"
    return {"tool": "tool result", "assistant": "assistant message", "user": "user message"}.get(
        str(m.get("role")), "message"
    )


def squeeze(ctx: EngineContext, call: Call) -> None:
    """Make ``call.view`` fit ``call.hard_limit`` when it does not (see the module
    docstring); a view it shortened is taken (``compact_layer`` ``"squeeze"`` unless a
    layer changed it first)."""
    if call.used <= call.hard_limit:
        return
    squeezed, used = _squeeze(ctx, call.view, call.used, call.hard_limit, call.count)
    if used < call.used:
        call.view, call.used, call.changed = squeezed, used, True
        call.compact_layer = call.compact_layer or "squeeze"


def _squeeze(
    ctx: EngineContext,
    view: list[Unit],
    used: int,
    limit: int,
    count: Callable[[Sequence[Unit]], int],
) -> tuple[list[Unit], int]:
    """Shorten messages until ``count(view) <= limit``."""
    units = list(view)
    units, used = _shorten(ctx, units, used, limit, count, pinned=False)
    if used > limit:
        units, used = _trim_ledger(ctx, units, used, limit, count)
    if used > limit:
        before = used
        units, used = _shorten(ctx, units, used, limit, count, pinned=True)
        if used < before:
            ctx.emit(ContextTruncatedPinned(before=before, after=used, limit=limit))
    return units, used


def _shorten(
    ctx: EngineContext,
    units: list[Unit],
    used: int,
    limit: int,
    count: Callable[[Sequence[Unit]], int],
    *,
    pinned: bool,
) -> tuple[list[Unit], int]:
    stuck: set[tuple[int, Slot]] = set()  # arguments that cannot get shorter
    for _ in range(64):
        if used <= limit:
            break
        best: tuple[int, int, Slot] | None = None  # (size, unit index, slot)
        for ui, u in enumerate(units):
            if u.kind in ("system", "ledger") or u.pinned != pinned:
                continue
            if pinned and u.kind != "user":
                continue
            for mi, m in enumerate(u.messages):
                if m.get("role") == "system":
                    continue
                for size, slot in _slots(m, mi):
                    if (ui, slot) in stuck:
                        continue
                    if size > _MIN_SIZE and (best is None or size > best[0]):
                        best = (size, ui, slot)
        if best is None:
            break
        size, ui, slot = best
        msgs = list(units[ui].messages)
        m = msgs[slot[0]]
        text = _get(m, slot)
        # chars per token of this text, to turn the excess into characters to cut
        per_token = max(1.0, size / max(1, ctx.counter.count_text(text)))
        goal = size - int((used - limit) * per_token * 1.1) - 1  # characters left at most
        keep = max(_MIN_KEEP, goal - 200)
        if keep >= size:
            break
        ref = ref_for_message(ctx, m)
        if ref is None and ctx.policy.snapshots.enabled:
            ctx.emit(
                DataLost(
                    units=[units[ui].key],
                    messages=1,
                    chars=size - keep,
                    reason="archive write failed and the request would not fit otherwise",
                )
            )
        for _ in range(2):  # the marker and reference took back more than 200: cut more
            if slot[1] == "arguments":
                new = _cut_arguments(text, keep, ref)
            else:
                new = _cut(text, keep, _what(m, slot), ref)
            if len(new) <= goal or keep <= _MIN_KEEP:
                break
            keep = max(_MIN_KEEP, keep - (len(new) - goal))
        if len(new) >= size:  # the marker costs more than the cut saves: the next text
            stuck.add((ui, slot))
            continue
        msgs[slot[0]] = _set(m, slot, new)
        units[ui] = units[ui].replace(messages=msgs)
        used = count(units)
    return units, used


def _trim_ledger(
    ctx: EngineContext,
    units: list[Unit],
    used: int,
    limit: int,
    count: Callable[[Sequence[Unit]], int],
) -> tuple[list[Unit], int]:
    """The ledger, our own text: its oldest entries go (the archive reference stays,
    so every fact remains recoverable)."""
    at = next((i for i, u in enumerate(units) if u.key == "ledger"), None)
    if ctx.state.ledger is None or at is None:
        return units, used
    bound = ctx.counter.count_messages(units[at].messages)
    for _ in range(3):  # framing makes a bound inexact
        bound -= used - limit
        text = ctx.state.ledger.render(max_tokens=max(0, bound))
        if text is None:
            break
        shrunk = [*units[:at], special_unit("ledger", LEDGER_MARK, text), *units[at + 1 :]]
        if (n := count(shrunk)) >= used:
            break
        units, used = shrunk, n
        if used <= limit:
            break
    return units, used
