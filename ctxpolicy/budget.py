"""Budget arithmetic, context states, and the learned tool-growth reserve.

::

    window  = min(budget.window, model.context_window)
    reserve = budget.reserve_output | model.max_output_tokens | 4096
    trigger = window − reserve − tool_growth − safety_margin
    target  = budget.target × trigger   (fraction)   or   min(budget.target, trigger)   (tokens)
    min_gain = budget.min_gain  (tokens, or a share of the window; at most the trigger)
    ratio   = used / trigger
    state   = normal < warning ≤ ratio < error ≤ … < critical ≤ ratio < 1.0 ≤ overflow

Percentages (``"25%"``) are of the window, floored. A learned ``tool_growth``'s
``initial`` reserve is at most what the catch-all tool rule lets one result bring
(:func:`rule_bound`). With ``tool_growth`` and
``safety_margin`` 0, ``trigger`` is design A's ``effective_budget``; with all four terms it
is design B's dynamic threshold (32000 − 4000 − 6000 − 2000 = 20000).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxpolicy.policy.models import Policy, Thresholds, ToolGrowth
from ctxpolicy.policy.scalars import State, resolve_amount

__all__ = [
    "DEFAULT_RESERVE_OUTPUT",
    "BudgetNumbers",
    "BudgetState",
    "ToolGrowthEstimator",
    "compute_budget",
    "effective_window",
    "quantile",
    "rule_bound",
]

DEFAULT_RESERVE_OUTPUT = 4096


def _first_at_least(fraction: float, trigger: int) -> int:
    """Smallest ``used`` with ``used / trigger >= fraction`` (as the float ratio says)."""
    u = max(0, math.ceil(fraction * trigger))
    while u > 0 and (u - 1) / trigger >= fraction:
        u -= 1
    while u / trigger < fraction:
        u += 1
    return u


@dataclass(frozen=True)
class BudgetNumbers:
    """``trigger = window − reserve_output − tool_growth − safety_margin``; target in tokens.

    ``tool_growth`` is the fixed amount, or the ``initial`` value of a learned one.
    """

    window: int
    reserve_output: int
    tool_growth: int
    safety_margin: int
    trigger: int
    target: int

    def formula(self) -> str:
        return (
            f"{self.window} − {self.reserve_output} − {self.tool_growth} − "
            f"{self.safety_margin} = {self.trigger}"
        )


@dataclass(frozen=True)
class BudgetState(BudgetNumbers):
    """The resolved budget of a policy at one moment (tool growth may be learned)."""

    warning_tokens: int
    error_tokens: int
    critical_tokens: int
    thresholds: Thresholds
    #: ``budget.min_gain`` in tokens: the smallest gain worth a prefix rewrite
    min_gain: int = 0

    @property
    def budget(self) -> int:
        """Design A's ``effective_budget`` (the denominator of ``ratio``)."""
        return self.trigger

    def ratio(self, used: int) -> float:
        """``used / trigger``."""
        return used / self.trigger

    def state_for(self, used: int) -> State:
        """State of a context of ``used`` tokens (boundaries belong to the higher state)."""
        if used >= self.trigger:
            return State.overflow
        if used >= self.critical_tokens:
            return State.critical
        if used >= self.error_tokens:
            return State.error
        if used >= self.warning_tokens:
            return State.warning
        return State.normal

    def state_for_ratio(self, ratio: float) -> State:
        """State of a ratio (same boundaries as :meth:`state_for`)."""
        t = self.thresholds
        if ratio >= 1.0:
            return State.overflow
        if ratio >= t.critical:
            return State.critical
        if ratio >= t.error:
            return State.error
        if ratio >= t.warning:
            return State.warning
        return State.normal

    def tokens_for(self, state: State | str) -> int:
        """Fewest tokens at which the context is in ``state`` (0 for ``normal``)."""
        s = State(state)
        return {
            State.normal: 0,
            State.warning: self.warning_tokens,
            State.error: self.error_tokens,
            State.critical: self.critical_tokens,
            State.overflow: self.trigger,
        }[s]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["thresholds"] = self.thresholds.model_dump()
        return d


def effective_window(policy: Policy) -> int:
    """``min(budget.window, model.context_window)``."""
    w = policy.model.context_window
    if policy.budget.window is not None:
        w = min(w, policy.budget.window)
    return w


def _reserve(policy: Policy, window: int) -> tuple[int, str]:
    b = policy.budget
    if b.reserve_output is not None:
        return resolve_amount(b.reserve_output, window), f"budget.reserve_output={b.reserve_output}"
    if policy.model.max_output_tokens is not None:
        return policy.model.max_output_tokens, "model.max_output_tokens"
    return DEFAULT_RESERVE_OUTPUT, "default"


#: Tokens a reference line to a snapshot adds to a cut result, at most.
_REFERENCE_TOKENS = 64


def rule_bound(policy: Policy) -> int | None:
    """Tokens a result of a tool no other rule names can bring at most, by the
    policy's catch-all rule (``"*"``): a ``head_tail`` of ``max_chars`` characters
    (at most one token per 2 characters, plus its outline lines and the reference
    line) or of ``max_tokens`` — the rule's own ``max_tokens`` (a share of the
    window) bounds any chain. None when there is no such rule or it does not bound
    the size."""
    rule = policy.tools.get("*")
    if rule is None:
        return None
    head_tail = rule.preprocess == "head_tail"
    opts = rule.options if head_tail else {}
    outline = opts.get("outline", 0)
    extra = (outline if type(outline) is int and outline > 0 else 0) * 16 + _REFERENCE_TOKENS
    bounds: list[int] = []
    if rule.max_tokens is not None:
        bounds.append(resolve_amount(rule.max_tokens, effective_window(policy)) + extra)
    max_tokens = opts.get("max_tokens")
    max_chars = opts.get("max_chars", 3000)
    if type(max_tokens) is int and max_tokens >= 0:
        bounds.append(max_tokens + extra)
    elif head_tail and rule.max_tokens is None and type(max_chars) is int and max_chars >= 0:
        # (a rule's max_tokens replaces the step's max_chars)
        bounds.append(max_chars // 2 + extra)
    return min(bounds) if bounds else None


def _growth_bounds(spec: ToolGrowth, window: int, cap: int | None = None) -> tuple[int, int, int]:
    """``(initial, min, max)`` of a learned reserve, in tokens (max default 50 % of window).

    ``cap`` (:func:`rule_bound`): the initial reserve — used before a single result
    was seen — is no larger than what the catch-all tool rule lets a result bring
    (never below ``min``); what the rules do not bound, the learned quantile and the
    reactive layer cover."""
    lo = resolve_amount(spec.min, window)
    hi = resolve_amount(spec.max, window) if spec.max is not None else window // 2
    hi = max(hi, lo)
    initial = min(max(resolve_amount(spec.initial, window), lo), hi)
    if cap is not None:
        initial = max(lo, min(initial, cap))
    return initial, lo, hi


def _static_growth(policy: Policy, window: int) -> int:
    g = policy.budget.tool_growth
    if isinstance(g, ToolGrowth):
        return _growth_bounds(g, window, rule_bound(policy))[0]
    return resolve_amount(g, window)


def budget_parts(policy: Policy) -> tuple[int, int, int, int]:
    """``(window, reserve_output, tool_growth, safety_margin)`` in tokens, before any
    learning (growth = the fixed amount or the learned reserve's ``initial``)."""
    window = effective_window(policy)
    reserve, _ = _reserve(policy, window)
    margin = resolve_amount(policy.budget.safety_margin, window)
    return window, reserve, _static_growth(policy, window), margin


def compute_budget(policy: Policy, *, tool_growth: int | None = None) -> BudgetState:
    """Resolve a policy's budget; ``tool_growth`` (e.g. learned) overrides the policy's.

    Raises ``ValueError`` when the policy's own numbers leave no room (trigger ≤ 0). A
    learned ``tool_growth`` that would do so is cut so the trigger stays ≥ 1.
    """
    window, reserve, static_growth, margin = budget_parts(policy)
    growth = static_growth if tool_growth is None else max(0, int(tool_growth))
    trigger = window - reserve - growth - margin
    if trigger <= 0:
        if tool_growth is None:
            raise ValueError(
                f"budget leaves no room: {window} − {reserve} − {growth} − {margin} = {trigger} "
                f"(agent {policy.agent!r})"
            )
        growth = max(0, window - reserve - margin - 1)
        trigger = window - reserve - growth - margin
        if trigger <= 0:
            raise ValueError(f"budget leaves no room: {window} − {reserve} − {margin} ≤ 0")
    t = policy.budget.target
    target = math.floor(t * trigger + 1e-9) if isinstance(t, float) else min(int(t), trigger)
    th = policy.thresholds
    return BudgetState(
        window=window,
        reserve_output=reserve,
        tool_growth=growth,
        safety_margin=margin,
        trigger=trigger,
        target=target,
        warning_tokens=_first_at_least(th.warning, trigger),
        error_tokens=_first_at_least(th.error, trigger),
        critical_tokens=_first_at_least(th.critical, trigger),
        thresholds=th,
        min_gain=min(resolve_amount(policy.budget.min_gain, window), trigger),
    )


# --------------------------------------------------------------------------- learned growth


def quantile(values: Sequence[int], q: float) -> int:
    """Nearest-rank quantile: the ``ceil(q·n)``-th smallest value (never interpolates
    below an observed size, so ``q=1`` is the maximum)."""
    if not values:
        raise ValueError("quantile of no values")
    s = sorted(values)
    k = max(1, math.ceil(q * len(s)))
    return s[min(k, len(s)) - 1]


class ToolGrowthEstimator:
    """Expected growth of the context before the next check (design B), per session.

    A fixed ``budget.tool_growth`` is returned unchanged. A learned one
    (``{learn: {quantile, window}, initial, min, max}``) is the ``quantile`` of the sizes
    (tokens) of the last ``window`` tool results of the session — ``initial`` until the
    first result — and, for each tool named as pending, of that tool's own last ``window``
    results; the largest of these, clamped to ``[min, max]`` (``max`` default: 50 % of
    the window). Thread-safe.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.window = effective_window(policy)
        spec = policy.budget.tool_growth
        self._lock = threading.Lock()
        if isinstance(spec, ToolGrowth):
            self.learned = True
            self.q = spec.learn.quantile
            self.n = spec.learn.window
            self.initial, self.min, self.max = _growth_bounds(spec, self.window, rule_bound(policy))
        else:
            self.learned = False
            self.q, self.n = 1.0, 1
            self.initial = self.min = self.max = resolve_amount(spec, self.window)
        self._recent: deque[int] = deque(maxlen=self.n)
        self._per_tool: dict[str, deque[int]] = {}
        self._overall: int | None = None  # quantile of _recent, until the next observe

    def observe(self, tool: str, tokens: int) -> None:
        """Record the size of one tool result (tokens as it entered the context)."""
        if not self.learned:
            return
        tokens = max(0, int(tokens))
        with self._lock:
            self._recent.append(tokens)
            self._overall = None
            d = self._per_tool.get(tool)
            if d is None:
                d = self._per_tool[tool] = deque(maxlen=self.n)
            d.append(tokens)

    def estimate(self, pending_tools: Sequence[str] = ()) -> int:
        """Tokens to reserve for the next tool results."""
        if not self.learned:
            return self.initial
        with self._lock:
            if not self._recent:
                return self.initial
            if self._overall is None:  # every prepare asks; results arrive less often
                self._overall = quantile(self._recent, self.q)
            est = self._overall
            for tool in pending_tools:
                d = self._per_tool.get(tool)
                if d:
                    est = max(est, quantile(d, self.q))
        return min(max(est, self.min), self.max)

    def typical(self) -> int:
        """The typical size of one tool result: the median of the learned samples
        (``initial`` until the first; the fixed amount when not learned). The
        compaction economics predict the calls until the next compaction with it."""
        if not self.learned:
            return self.initial
        with self._lock:
            if not self._recent:
                return self.initial
            return quantile(self._recent, 0.5)

    def to_dict(self) -> dict[str, Any]:
        """The learned samples (persisted with the session state)."""
        with self._lock:
            return {
                "recent": list(self._recent),
                "per_tool": {k: list(v) for k, v in self._per_tool.items()},
            }

    def load_dict(self, data: Mapping[str, Any]) -> None:
        """Restore what :meth:`to_dict` returned."""
        with self._lock:
            self._recent = deque((int(x) for x in data.get("recent") or []), maxlen=self.n)
            self._overall = None
            self._per_tool = {
                str(k): deque((int(x) for x in v), maxlen=self.n)
                for k, v in (data.get("per_tool") or {}).items()
            }

    @property
    def observations(self) -> int:
        return len(self._recent)

    def describe(self) -> str:
        if not self.learned:
            return f"fixed {self.initial}"
        return (
            f"learned: q{self.q:g} of the last {self.n} tool results (and of a pending "
            f"tool's own), initial {self.initial}, clamped to [{self.min}, {self.max}]"
        )
