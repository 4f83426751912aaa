"""``emergency`` — design A L4, the reactive layer run on a context-overflow error.

Keeps the system message, every pinned unit (first and last user turn, the ledger),
the newest summary (``keep_summary``) and the last ``keep_recent_rounds`` rounds;
everything else is dropped (and goes to the ledger through ``LayerResult.dropped``).
If the result still counts above the target, tool results of the kept rounds
longer than ``max_result_chars`` are head/tail-truncated (reference lines kept) —
a single huge tool result is the usual cause of an overflow (design B incident 1) —
and, while it is still above, one round fewer is kept, down to ``min_recent_rounds``.
``retries`` is read by the engine.

The overflow-error detector used by ``Session.on_error`` is host code, in
:mod:`ctxpolicy.engine.overflow`; its old names here still resolve for one release.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from ctxpolicy.components import CompactionContext, ComponentOptions, Layer, LayerResult
from ctxpolicy.conversation import Message, Unit
from ctxpolicy.conversation.cut import truncate_keep_refs
from ctxpolicy.conversation.messages import with_text
from ctxpolicy.layers._util import Tally, message_text, round_groups
from ctxpolicy.plugins import hookimpl

__all__ = ["Emergency", "EmergencyOptions"]


class EmergencyOptions(ComponentOptions):
    """Options of ``emergency``."""

    keep_recent_rounds: int = Field(default=2, ge=0, description="Newest rounds kept.")
    retries: int = Field(
        default=1,
        ge=0,
        le=10,
        description="How many times the engine retries the model call after this layer ran.",
    )
    min_recent_rounds: int | None = Field(
        default=None,
        ge=0,
        description="While the result is still above the target, keep one round fewer, "
        "down to this many (1: the newest round, whose results the model is about to "
        "read). null: never fewer than keep_recent_rounds.",
    )
    keep_summary: bool = Field(
        default=True, description="Also keep the newest summary unit, if there is one."
    )
    max_result_chars: int | None = Field(
        default=4000,
        ge=0,
        description="If still above the target, tool results of kept rounds longer than "
        "this are head/tail-truncated (reference lines kept). null: never truncate.",
    )


class Emergency(Layer):
    name = "emergency"
    description = (
        "On a context-overflow error keep only system, pinned, ledger and the last rounds."
    )
    Options = EmergencyOptions
    options: EmergencyOptions

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        opts = self.options
        groups = round_groups(units)
        always = always_kept(opts, units, groups)
        # keep_recent_rounds first; while the result is still above the target, one
        # round fewer, down to min_recent_rounds
        fewest = fewest_rounds(opts)
        plan = _Plan(ctx, units, groups, always, opts.max_result_chars)
        rounds, truncate = plan.choose(opts.keep_recent_rounds, fewest)
        kept, keep, truncated = plan.build(rounds, truncate)
        used = ctx.count(kept)
        if used > ctx.target and (rounds > fewest or (truncated is None and plan.can_truncate)):
            # the estimate was low (a counter that is not additive): the same search,
            # counted exactly, from where it stopped
            for r in range(rounds, fewest - 1, -1):
                kept, keep, truncated = plan.build(r, False)
                used = ctx.count(kept)
                if plan.can_truncate and used > ctx.target:
                    kept, keep, truncated = plan.build(r, True)
                    used = ctx.count(kept)
                if r == fewest or used <= ctx.target:
                    break
        dropped = [u for i, u in enumerate(units) if i not in keep]
        report: dict[str, object] = {
            "dropped_units": len(dropped),
            "kept_rounds": plan.kept_rounds,
        }
        if truncated is not None:
            report["truncated_results"] = truncated
        return LayerResult(units=kept, dropped=dropped, report=report)


def always_kept(
    opts: EmergencyOptions, units: Sequence[Unit], groups: list[list[int]]
) -> list[int]:
    """Indices of the units :class:`Emergency` keeps whatever the rounds: system,
    pinned and ledger units, those after the last round (``groups`` from
    :func:`~ctxpolicy.layers._util.round_groups`) and, with ``keep_summary``, the
    newest summary."""
    last_group_end = groups[-1][-1] if groups else -1
    newest_summary = max((i for i, u in enumerate(units) if u.kind == "summary"), default=None)
    return [
        i
        for i, u in enumerate(units)
        if u.pinned
        or u.kind in ("system", "ledger")
        or i > last_group_end
        or (opts.keep_summary and i == newest_summary)
    ]


def fewest_rounds(opts: EmergencyOptions) -> int:
    """The fewest rounds :class:`Emergency` keeps: ``min_recent_rounds``, never more
    than ``keep_recent_rounds`` (which it is when unset)."""
    if opts.min_recent_rounds is None:
        return opts.keep_recent_rounds
    return min(opts.min_recent_rounds, opts.keep_recent_rounds)


class _Plan:
    """The candidates of :class:`Emergency` (the always-kept units plus the newest
    ``r`` rounds, their tool results truncated or not), estimated with each unit
    counted once (:class:`~ctxpolicy.layers._util.Tally`): choosing ``r`` is
    linear in the number of units, whatever ``keep_recent_rounds`` is."""

    def __init__(
        self,
        ctx: CompactionContext,
        units: Sequence[Unit],
        groups: list[list[int]],
        always: list[int],
        max_chars: int | None,
    ) -> None:
        self.ctx, self.units, self.groups, self.always = ctx, units, groups, always
        self.max_chars = max_chars
        self.can_truncate = max_chars is not None
        self.kept_rounds = 0
        self.tally = Tally(ctx, units)
        #: unit index → (the unit with its results truncated, results cut, its tokens)
        self._short: dict[int, tuple[Unit, int, int]] = {}

    def _shortened(self, i: int) -> tuple[Unit, int, int]:
        if i not in self._short:
            u = self.units[i]
            if u.kind != "step" or u.pinned or self.max_chars is None:
                self._short[i] = (u, 0, self.tally.each[i])
            else:
                short, cut = _truncate_unit(u, self.max_chars)
                tokens = self.ctx.unit_counts([short])[0] if cut else self.tally.each[i]
                self._short[i] = (short, cut, tokens)
        return self._short[i]

    def choose(self, most: int, fewest: int) -> tuple[int, bool]:
        """Rounds to keep and whether to truncate, from the estimate."""
        target, tally = self.ctx.target, self.tally
        first = self._first(most)  # kept rounds: groups[first:]
        plain = tally.base + tally.of(self.always)
        plain += sum(tally.of(g) for g in self.groups[first:])
        shortened: int | None = None  # the same with results truncated, once needed
        rounds, truncate = most, False
        for rounds in range(most, fewest - 1, -1):
            while first < self._first(rounds):  # one round fewer: the oldest kept leaves
                plain -= tally.of(self.groups[first])
                if shortened is not None:
                    shortened -= sum(self._shortened(i)[2] for i in self.groups[first])
                first += 1
            truncate = self.can_truncate and plain > target
            est = plain
            if truncate:
                if shortened is None:
                    shortened = plain + sum(
                        self._shortened(i)[2] - tally.each[i]
                        for g in self.groups[first:]
                        for i in g
                    )
                est = shortened
            if rounds == fewest or est <= target:
                break
        return rounds, truncate

    def _first(self, rounds: int) -> int:
        """Index of the oldest group kept with ``rounds`` rounds."""
        return max(0, len(self.groups) - rounds) if rounds else len(self.groups)

    def build(self, rounds: int, truncate: bool) -> tuple[list[Unit], set[int], int | None]:
        """The kept units, their indices, and how many results were truncated (None:
        no truncation)."""
        kept_groups = self.groups[self._first(rounds) :]
        self.kept_rounds = len(kept_groups)
        keep = set(self.always).union(i for g in kept_groups for i in g)
        kept: list[Unit] = []
        cut = 0
        for i, u in enumerate(self.units):
            if i not in keep:
                continue
            if truncate:
                u, n, _ = self._shortened(i)
                cut += n
            kept.append(u)
        return kept, keep, cut if truncate else None


def _truncate_unit(u: Unit, max_chars: int) -> tuple[Unit, int]:
    """``u`` with its tool results longer than ``max_chars`` head/tail-truncated (the
    reference lines kept), and how many were."""
    msgs: list[Message] = []
    cut = 0
    for m in u.messages:
        new = truncate_keep_refs(message_text(m), max_chars) if m.get("role") == "tool" else None
        if new is None:
            msgs.append(m)
        else:
            msgs.append(with_text(m, new))
            cut += 1
    return (u.replace(messages=msgs, meta={**u.meta, "masked": True}) if cut else u), cut


@hookimpl
def ctxpolicy_register_layers(register):  # type: ignore[no-untyped-def]
    register(Emergency)
