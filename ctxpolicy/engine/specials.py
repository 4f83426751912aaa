"""The engine's own messages in one conversation: its progress ledger and the pinned
special units (a handover, the ledger) every view shows.

The ledger is made new for a conversation (:func:`new_ledger`), kept in step with a
compaction that was taken (:func:`sync_ledger`), rendered again when it changed
(:func:`ledger_changed`) and started again when the history it described is gone
(:func:`history_changed`). :func:`special_units` gives the pinned system units of a
view, re-adopting a ledger or handover text of ours an agent fed back
(:func:`adopted`). What a ledger or handover message looks like is
:mod:`~ctxpolicy.engine.own`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.budget import effective_window
from ctxpolicy.conversation import Unit
from ctxpolicy.engine.ledger import ProgressLedger
from ctxpolicy.engine.ledger_parts import RECALL_TOOL, tool_names
from ctxpolicy.engine.own import HANDOVER_MARK, LEDGER_MARK, special_unit
from ctxpolicy.events.types import ContextReset
from ctxpolicy.policy.models import Policy
from ctxpolicy.policy.scalars import resolve_amount
from ctxpolicy.tokens import TokenCounter

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

__all__ = [
    "adopted",
    "history_changed",
    "ledger_changed",
    "new_ledger",
    "special_units",
    "sync_ledger",
]


def new_ledger(policy: Policy, counter: TokenCounter) -> ProgressLedger | None:
    """The empty ledger a new conversation of ``policy`` starts with."""
    if not policy.ledger.enabled:
        return None
    window = effective_window(policy)
    return ProgressLedger(
        max_tokens=max(64, resolve_amount(policy.ledger.max_tokens, window)),
        constraints=tuple(policy.constraints),
        count_text=counter.count_text,
    )


def sync_ledger(
    ctx: EngineContext,
    before: Sequence[Unit],
    after: Sequence[Unit],
    tools: Sequence[Mapping[str, Any]] | None,
) -> None:
    """After a compaction was taken: the ledger keeps the small results a layer
    shortened, leaves out what the rest of the prompt says, and names the recall
    tool only when ``tools`` (what the model is offered) has it."""
    ledger = ctx.state.ledger
    if ledger is not None and ledger.sync(before, after, recall=RECALL_TOOL in tool_names(tools)):
        ledger_changed(ctx)


def ledger_changed(ctx: EngineContext) -> None:
    """Record a change of the ledger (re-rendered, saved with the next commit)."""
    ledger = ctx.state.ledger
    if ledger is not None:
        ctx.derived.ledger_text = ledger.render()
        ctx.state.touch("ledger")


def history_changed(ctx: EngineContext) -> None:
    """Units a compaction decision was taken on are gone (earlier messages were edited
    or removed): the decisions are dropped (``context.reset``), and the ledger, which
    holds facts of the history that was compacted, starts again from what the new
    history holds."""
    st = ctx.state
    ctx.emit(ContextReset(reason="history changed: earlier messages were edited or removed"))
    st.set_decisions({})
    if st.ledger is not None:
        st.ledger = new_ledger(ctx.policy, ctx.counter)
        ledger_changed(ctx)


def adopted(ctx: EngineContext) -> tuple[str | None, str | None]:
    """Ledger and handover texts of ours found in the input that this conversation
    does not hold (the agent restarted with the prepared list as its history and no
    state to resume): re-adopted verbatim, so their facts and archive reference
    stay in the context instead of being stripped."""
    ledger = handover = None
    st, derived = ctx.state, ctx.derived
    for kind, text in derived.caches.own_messages:
        if kind == "ledger" and not st.ledger and text != derived.ledger_text:
            ledger = text
        elif kind == "handover" and st.handover_text is None:
            handover = text
    return ledger, handover


def special_units(ctx: EngineContext) -> list[Unit]:
    """The pinned handover and ledger messages (system role, marked)."""
    ledger, handover = adopted(ctx)
    derived = ctx.derived
    texts = (ctx.state.handover_text or handover, ledger or derived.ledger_text)
    made = derived.specials
    if made is None or made[0] != texts:  # the same texts: the same (frozen) units
        parts = (("handover", HANDOVER_MARK, texts[0]), ("ledger", LEDGER_MARK, texts[1]))
        units = [special_unit(key, mark, text) for key, mark, text in parts if text]
        made = derived.specials = (texts, units)
    return list(made[1])
