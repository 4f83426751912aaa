"""The window and budget in force: a window learned from the provider, and the budget
of a conversation now (:func:`budget_in_force`).

A context-overflow error that states a limit below the window in force makes that
limit the session's window (persisted in ``SessionState.learned_window``), unless it
is not credible; a learned window loaded from a store is held to the same rule
(:func:`window_bounds`, :func:`verify_learned_window`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxpolicy.budget import BudgetState, compute_budget
from ctxpolicy.engine.stored import WindowBounds
from ctxpolicy.events.types import ContextWindowIgnored, ContextWindowLearned, StateInvalid
from ctxpolicy.policy.models import Policy

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext

__all__ = [
    "FAR_BELOW",
    "MIN_LEARNED_FRACTION",
    "budget_in_force",
    "learn_window",
    "policy_with_window",
    "scaled_growth",
    "verify_learned_window",
    "window_bounds",
]

#: A learned window at or below this fraction of the configured one scales the fixed
#: budget terms (reserve_output, safety_margin, and the tool-growth reserve) with it.
FAR_BELOW = 0.5

#: A provider-stated limit below this fraction of the configured window is ignored
#: (``context.window_ignored``): a garbled error must not cripple the ctx.
MIN_LEARNED_FRACTION = 0.125


def policy_with_window(policy: Policy, window: int, full: BudgetState) -> Policy:
    """``policy`` with a learned (smaller) window.

    A learned window at or below :data:`FAR_BELOW` of the configured one scales the
    fixed terms (reserve, margin) by learned ÷ configured; above it they are kept when
    they fit. When the learned window is still too small for them they are cut further
    (reserve ≤ 25 %, margin ≤ 5 % of the window) so the agent keeps working instead of
    failing on its own budget.
    """
    reserve, margin = full.reserve_output, full.safety_margin
    if window <= full.window * FAR_BELOW:  # the fixed terms shrink with the window
        reserve = max(1, reserve * window // full.window)
        margin = margin * window // full.window
    if window - reserve - margin < window // 4:
        reserve = min(reserve, window // 4)
        margin = min(margin, window // 20)
    budget = policy.budget.model_copy(
        update={"window": window, "reserve_output": reserve, "safety_margin": margin}
    )
    return policy.model_copy(update={"budget": budget})


def scaled_growth(growth: int, window: int, configured: int) -> int:
    """The tool-growth reserve under a learned ``window``: scaled like the fixed terms
    when the window is far below the ``configured`` one (its bounds are shares of it)."""
    if window <= configured * FAR_BELOW:
        return growth * window // configured
    return growth


def budget_in_force(ctx: EngineContext) -> BudgetState:
    """The budget in force now (learned tool growth and learned window included)."""
    if ctx.state.window_unverified:
        verify_learned_window(ctx)
    growth = ctx.state.growth.estimate() if ctx.state.growth is not None else 0
    learned = ctx.state.learned_window
    key = (growth, learned)
    budgets = ctx.derived.budgets
    b = budgets.get(key)
    if b is None:
        b = compute_budget(ctx.policy, tool_growth=growth)
        if learned is not None and learned < b.window:
            g = scaled_growth(growth, learned, b.window)
            b = compute_budget(policy_with_window(ctx.policy, learned, b), tool_growth=g)
        if len(budgets) > 64:
            budgets.clear()
        budgets[key] = b
    return b


def window_bounds(policy: Policy) -> WindowBounds:
    """The bounds :func:`learn_window` keeps a learned window in."""
    configured = compute_budget(policy, tool_growth=0).window
    return WindowBounds(max(1, int(configured * MIN_LEARNED_FRACTION)), configured)


def verify_learned_window(ctx: EngineContext) -> None:
    """Hold a learned window loaded from the store to the other half of
    :func:`~ctxpolicy.engine.window.learn_window`'s rule once the first request's units
    are known: a window below that request's pinned content is dropped
    (``state.invalid``), never obeyed by truncating the pinned task."""
    pins = ctx.derived.caches.pins
    st = ctx.state
    if pins is None:  # no request grouped since the load yet
        return
    st.window_unverified = False
    learned = st.learned_window
    if learned is None:
        return
    count = ctx.counter.count_messages
    pinned = sum(count(list(u.messages)) for u in pins.units if u.pinned)
    if learned < pinned:
        st.learned_window = None
        st.unfit = None
        st.touch("meta")
        ctx.emit(
            StateInvalid(
                key=st.window_key,
                reason=f"learned_window {learned} is below the pinned content ({pinned} tokens)",
            )
        )


def learn_window(ctx: EngineContext, limit: int) -> None:
    """Adopt a provider-stated limit below the window in force, unless it is not
    credible: below :data:`MIN_LEARNED_FRACTION` of the configured window, or
    below the pinned content of the last request (then ``context.window_ignored``)."""
    current = budget_in_force(ctx).window
    configured = compute_budget(ctx.policy, tool_growth=0).window
    pinned = sum(
        ctx.counter.count_messages(list(u.messages)) for u in ctx.derived.last_units if u.pinned
    )
    floor = max(int(configured * MIN_LEARNED_FRACTION), pinned)
    if limit < floor:
        ctx.emit(ContextWindowIgnored(stated=limit, floor=floor, window=current))
        return
    if limit < current:
        ctx.state.learned_window = limit
        ctx.state.unfit = None  # a new window: judged again
        ctx.state.touch("meta")
        ctx.emit(ContextWindowLearned(window=limit, previous=current))
