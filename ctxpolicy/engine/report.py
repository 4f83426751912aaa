"""What one ``prepare`` call reports: its ``context.status`` and the events around it.

After the pipeline has decided the view, :func:`report_call` updates the running
numbers (``SessionState.stats``, ``hold_until``, ``unfit``) and emits what the call
owes its observers: ``context.above_target`` (a compaction that ends above the target),
``context.window_unfit`` (once), ``context.overflow`` and, on every call,
``context.status``.

The status is every call's event: its payload is built in
:class:`~ctxpolicy.events.types.ContextStatus`'s declared order as one dict, without
the frozen dataclass (its ``__init__`` and ``fields()`` are most of an event's cost on
the per-call path); ``tests/engine/test_report.py`` checks the payload against the
definition.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ctxpolicy.budget import BudgetState
from ctxpolicy.engine.call import Call
from ctxpolicy.events.types import (
    ContextAboveTarget,
    ContextOverflow,
    ContextStatus,
    ContextWindowUnfit,
)

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

__all__ = ["report_call", "status_payload"]


def report_call(ctx: EngineContext, call: Call) -> None:
    """The bookkeeping and events of a ``prepare`` that sends ``call.view``
    (``call.used`` tokens, ``call.messages`` messages)."""
    st = ctx.state
    used, budget, changed = call.used, call.budget, call.changed
    if changed and not call.at_target():
        _short_of_target(ctx, call)
    elif (changed or call.at_target()) and st.hold_until is not None:
        st.hold_until = None  # the target was reached (or the context shrank)
    unfit = used > budget.trigger or (changed and used >= budget.critical_tokens)
    if unfit and st.learned_window is not None and st.unfit is None:
        _unfit(ctx, call)
    hard_limit = call.hard_limit
    if used > hard_limit or used > budget.trigger:
        st.stats.overflows += 1
        ctx.emit(
            ContextOverflow(
                used=used,
                trigger=budget.trigger,
                hard_limit=hard_limit,
                unavoidable=used > hard_limit,
                reason="pinned content and the most recent rounds alone exceed the budget",
            )
        )
    stats = st.stats
    stats.prepares += 1
    stats.tokens_in += call.tokens_in
    stats.tokens_sent += used
    payload = status_payload(
        ctx,
        used,
        budget,
        compact_layer=call.compact_layer,
        compacted_from=call.entry_used if changed else None,
        used_raw=call.used_raw,
        messages=call.messages,
        messages_in=call.messages_in,
        tokens_in=call.tokens_in,
        duration_ms=round((time.perf_counter() - call.started) * 1000, 3),
    )
    st.status = ctx.emit(ContextStatus.TYPE, **payload)
    st.touch("meta")


def status_payload(
    ctx: EngineContext,
    used: int,
    budget: BudgetState,
    *,
    compact_layer: str | None,
    compacted_from: int | None,
    used_raw: int,
    messages: int,
    messages_in: int,
    tokens_in: int,
    duration_ms: float,
) -> dict[str, Any]:
    """The ``context.status`` fields, in :class:`ContextStatus`'s declared order
    (``unfit`` only once it is known)."""
    st = ctx.state
    counter = ctx.counter
    payload: dict[str, Any] = {
        "used": used,
        "budget": budget.trigger,
        "ratio": round(budget.ratio(used), 4),
        "state": budget.state_for(used).value,
        "compact_layer": compact_layer,
        "compacted_from": compacted_from,
        "window": budget.window,
        "trigger": budget.trigger,
        "target": budget.target,
        "tokenizer": counter.name,
        "approximate": counter.approximate,
        "calibration": st.calibration,
        "used_raw": used_raw,
        "messages": messages,
        "messages_in": messages_in,
        "tokens_in": tokens_in,
        "duration_ms": duration_ms,
    }
    if st.unfit is not None:
        payload["unfit"] = st.unfit
    return payload


def _short_of_target(ctx: EngineContext, call: Call) -> None:
    """A compaction that ends above the target (pinned content and the rounds the
    layers keep exceed it): say why, with the numbers, and hold further compaction
    until the context has grown by the trigger − target gap
    (``SessionState.hold_until``), so the next calls do not compact again for a few
    tokens each."""
    view, used, budget, count = call.view, call.used, call.budget, call.count
    pinned = [u for u in view if u.pinned]
    resume_at = used + max(0, budget.trigger - budget.target)
    ctx.state.hold_until = resume_at
    ctx.emit(
        ContextAboveTarget(
            used=used,
            target=budget.target,
            pinned_tokens=count(pinned),
            rest_tokens=used - count(pinned),
            units=len(view),
            resume_at=resume_at,
        )
    )


def _unfit(ctx: EngineContext, call: Call) -> None:
    """The learned window cannot hold what this policy keeps (the context ends above
    the trigger, or a compaction ends in ``critical``): said once
    (``context.window_unfit``, ``unfit`` in every later ``context.status``); from
    then on the layers and ``on_overflow`` run only when the request would not fit
    (``window − reserve_output``), not on every call."""
    view, used, budget, count = call.view, call.used, call.budget, call.count
    pinned = count([u for u in view if u.pinned])
    st = ctx.state
    st.unfit = (
        f"the learned window {budget.window} leaves a trigger of {budget.trigger} "
        f"tokens; this policy's pinned content ({pinned}) and kept rounds need {used}"
    )
    ctx.emit(
        ContextWindowUnfit(
            window=budget.window,
            trigger=budget.trigger,
            used=used,
            pinned_tokens=pinned,
            reason=st.unfit,
        )
    )
