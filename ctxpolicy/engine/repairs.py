"""What the engine does with the repairs the grouping made of malformed input.

:func:`~ctxpolicy.conversation.group_units` repairs what it can and returns a
:class:`~ctxpolicy.conversation.Repair` for each repair; here each new (kind, message
index) becomes one ``conversation.repaired`` event, and what a repair left out of
the context is archived verbatim first (docs/engine.md, step 1). A message nested
too deep for the engine's recursive steps is flattened here (``deep_value``).
Reported once per conversation: ``SessionState.repair_seen``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation import Repair
from ctxpolicy.conversation.jsontext import to_json
from ctxpolicy.conversation.repair import flatten_deep
from ctxpolicy.engine.archiving import archive_messages
from ctxpolicy.events.types import ConversationRepaired

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

__all__ = ["flatten_message", "report_repairs"]


def flatten_message(ctx: EngineContext, m: Any, index: int) -> Any:
    """A message too deep for the engine's recursive steps, with its deep fields
    as their exact JSON text (:func:`ctxpolicy.conversation.repair.flatten_deep`); reported
    once as a ``deep_value`` repair."""
    if not isinstance(m, Mapping):
        return m
    flat, fields = flatten_deep(m)
    st = ctx.state
    if fields and not st.repair_seen("deep_value", index):
        st.see_repair("deep_value", index)
        ctx.emit(
            ConversationRepaired(
                repair="deep_value",
                index=index,
                detail=f"fields {fields} nested too deep; sent as their JSON text",
                removed=0,
                archived=None,
            )
        )
    return flat


def report_repairs(ctx: EngineContext, repairs: list[Repair]) -> None:
    """One ``conversation.repaired`` event per new (kind, message index); what a
    repair left out of the context is archived verbatim first (``archived``: its
    reference, None without a store or when the write failed)."""
    fresh: dict[tuple[str, int], list[Repair]] = {}
    for r in repairs:
        if not ctx.state.repair_seen(r.kind, r.index):
            fresh.setdefault((r.kind, r.index), []).append(r)
    for (kind, index), found in fresh.items():
        ctx.state.see_repair(kind, index)
        removed = [x for r in found for x in r.removed]
        archived = None
        if removed and ctx.snapshots is not None:
            # a string verbatim, anything else as its exact JSON text
            text = removed[0] if len(removed) == 1 and isinstance(removed[0], str) else None
            doc = {
                "role": f"ctxpolicy.removed ({kind}, message {index})",
                "content": text if text is not None else to_json(removed)[0],
            }
            if archive_messages(ctx, [doc], ctx.emit) is not None:
                assert ctx.derived.history is not None
                archived = ctx.derived.history.last_ref
        ctx.emit(
            ConversationRepaired(
                repair=kind,
                index=index,
                detail="; ".join(r.detail for r in found)[:1000],
                removed=len(removed),
                archived=archived,
            )
        )
