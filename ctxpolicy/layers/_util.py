"""Helpers shared by the built-in layers (no third-party imports).

* rounds as droppable groups (:func:`round_groups`);
* token counts with each unit counted once (:class:`Tally`) and the drop plan built
  on them (:func:`plan_drop`; :func:`plan_rounds` with a layer's round options and
  :data:`ROUNDS_TUNE_SPACE` for the layers that remove whole rounds).

The reference line, the cutters and :func:`with_text` are host vocabulary now
(:mod:`ctxpolicy.conversation.refs`, :mod:`~ctxpolicy.conversation.cut`,
:mod:`~ctxpolicy.conversation.messages`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ctxpolicy.conversation import Unit, content_text
from ctxpolicy.policy.models import TuneRange

if TYPE_CHECKING:
    from ctxpolicy.components import CompactionContext

__all__ = [
    "GROUPABLE",
    "MAX_RECOUNTS",
    "ROUNDS_TUNE_SPACE",
    "RoundOptions",
    "Tally",
    "message_text",
    "plan_drop",
    "plan_rounds",
    "round_groups",
    "step_label",
]

#: Kinds a round group may contain besides its step.
GROUPABLE = ("user", "other", "orphan")
_ROUND_KINDS = frozenset(("step", *GROUPABLE))


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


def message_text(msg: Mapping[str, Any]) -> str:
    return content_text(msg.get("content"))


def step_label(unit: Unit, fallback: int) -> int:
    return unit.round if unit.round is not None else fallback


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


class RoundOptions(Protocol):
    """The options of a layer that removes whole oldest rounds."""

    @property
    def keep_recent_rounds(self) -> int: ...

    @property
    def min_keep_tokens(self) -> int: ...


#: The tune space of a layer that removes whole oldest rounds (a copy per layer).
ROUNDS_TUNE_SPACE: dict[str, TuneRange] = {
    "keep_recent_rounds": TuneRange(low=1, high=8),
    "min_keep_tokens": TuneRange(low=0, high=40, step=2.5, percent=True),
}


def plan_rounds(
    ctx: CompactionContext, units: Sequence[Unit], opts: RoundOptions
) -> tuple[set[int], int, str]:
    """:func:`plan_drop` down to the context's target with a layer's round options."""
    return plan_drop(
        ctx,
        units,
        keep_recent_rounds=opts.keep_recent_rounds,
        min_keep_tokens=opts.min_keep_tokens,
        target=ctx.target,
    )
