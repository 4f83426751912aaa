"""Every shortened message keeps a reference to its verbatim original.

Checked on the output of every layer (built-in or third-party) before it is taken: a
message (above all a tool result) whose content a layer changed must carry a
reference *the engine produced* — the result's snapshot (``add_tool_result`` or
:func:`~ctxpolicy.engine.archiving.ensure_snapshots`) or, when it has none (a short result that entered
through ``messages``), the history-archive entry of its original written now. A
reference line copied from the tool output itself does not count: a hostile output
could otherwise carry a fake one and leave the real original unreachable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctxpolicy.conversation import Message, Unit, content_text
from ctxpolicy.conversation.messages import result_id, with_text
from ctxpolicy.conversation.refs import ref_line
from ctxpolicy.engine.archiving import ref_for_message

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext


#: Units of the engine's own making (their originals are archived when they are made).
_OURS = ("summary", "ledger")


def _original(b: Unit, results: dict[str, Message], j: int, m: Message) -> Message | None:
    """The message of ``b`` that ``m`` (message ``j`` of the rewritten unit) stands for:
    a tool result by its call id, any other message by its position and role."""
    if m.get("role") == "tool":
        return results.get(result_id(m))
    if j < len(b.messages) and b.messages[j].get("role") == m.get("role"):
        return b.messages[j]
    return None


def ensure_refs(
    ctx: EngineContext, before: Sequence[Unit], after: list[Unit]
) -> tuple[list[Unit], list[str]]:
    """``after`` with a reference line added to every message a layer changed (a tool
    result, also a user or assistant message a third-party layer shortened) that does
    not name its original's reference (archived now when it has none), and the
    keys of the units whose original could not be archived (the store failed: the
    caller treats them like dropped units it could not archive)."""
    old = {u.key: u for u in before}
    out = after
    unarchived: list[str] = []
    # snapshots disabled by the policy: nothing can (or is meant to) be referenced
    required = ctx.policy.snapshots.enabled
    for ui, u in enumerate(after):
        b = old.get(u.key)
        if b is None or b is u or u.kind in _OURS or b.messages == u.messages:
            continue
        results = {result_id(m): m for m in b.tool_messages}
        msgs: list[Message] | None = None
        for j, m in enumerate(u.messages):
            original = _original(b, results, j, m)
            if original is None or original is m or original == m:
                continue
            text = content_text(m.get("content"))
            known = ctx.state.refs.get(result_id(m)) if results else None
            if known and known in text:
                continue
            ref = ref_for_message(ctx, original)
            if ref is None:
                if required and u.key not in unarchived:
                    unarchived.append(u.key)
                continue
            if ref in text:
                continue
            if msgs is None:
                msgs = list(u.messages)
            msgs[j] = with_text(m, f"{text}\n{ref_line(ref)}")
        if msgs is not None:
            if out is after:
                out = list(after)
            out[ui] = u.replace(messages=msgs)
    return out, unarchived
