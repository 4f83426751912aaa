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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.budget import BudgetState
from ctxpolicy.conversation import Unit
from ctxpolicy.events.types import (
    ContextAboveTarget,
    ContextOverflow,
    ContextStatus,
    ContextWindowUnfit,
)

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

__all__ = ["report_call", "status_payload"]

Count = Callable[[Sequence[Unit]], int]


def report_call(
    ctx: EngineContext,
    view: Sequence[Unit],
    used: int,
    budget: BudgetState,
    count: Count,
    *,
    changed: bool,
    compact_layer: str | None,
    entry_used: int,
    used_raw: int,
    messages: int,
    messages_in: int,
    tokens_in: int,
    started: float,
) -> None:
    """The bookkeeping and events of a ``prepare`` that sends ``view`` (``used``
    tokens, ``messages`` messages); ``started``: its ``time.perf_counter()``."""
    st = ctx.state
    if changed and used > budget.target:
        _short_of_target(ctx, view, used, budget, count)
    elif (changed or used <= budget.target) and st.hold_until is not None:
        st.hold_until = None  # the target was reached (or the context shrank)
    unfit = used > budget.trigger or (changed and used >= budget.critical_tokens)
    if unfit and st.learned_window is not None and st.unfit is None:
        _unfit(ctx, view, used, budget, count)
    hard_limit = budget.window - budget.reserve_output
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
    stats.tokens_in += tokens_in
    stats.tokens_sent += used
    payload = status_payload(
        ctx,
        used,
        budget,
        compact_layer=compact_layer,
        compacted_from=entry_used if changed else None,
        used_raw=used_raw,
        messages=messages,
        messages_in=messages_in,
        tokens_in=tokens_in,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
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


def _short_of_target(
    ctx: EngineContext, view: Sequence[Unit], used: int, budget: BudgetState, count: Count
) -> None:
    """A compaction that ends above the target (pinned content and the rounds the
    layers keep exceed it): say why, with the numbers, and hold further compaction
    until the context has grown by the trigger − target gap
    (``SessionState.hold_until``), so the next calls do not compact again for a few
    tokens each."""
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


def _unfit(
    ctx: EngineContext, view: Sequence[Unit], used: int, budget: BudgetState, count: Count
) -> None:
    """The learned window cannot hold what this policy keeps (the context ends above
    the trigger, or a compaction ends in ``critical``): said once
    (``context.window_unfit``, ``unfit`` in every later ``context.status``); from
    then on the layers and ``on_overflow`` run only when the request would not fit
    (``window − reserve_output``), not on every call."""
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
