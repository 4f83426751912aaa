"""``drop_rounds`` — design A L2 (session-memory compaction).

Drops whole oldest rounds (an assistant step with its tool results, and the
non-pinned user/other/orphan units between it and the previous step), keeping the
``keep_recent_rounds`` newest rounds and at least ``min_keep_tokens`` of recent
content, and stopping as soon as the remaining context counts ≤ the target. The
dropped units are returned in :attr:`LayerResult.dropped`, from which the engine
updates the progress ledger (design A's task-progress summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from ctxpolicy.components import CompactionContext, ComponentOptions, Layer, LayerResult
from ctxpolicy.conversation import Unit
from ctxpolicy.layers._util import ROUNDS_TUNE_SPACE, plan_rounds
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import TuneRange


class DropRoundsOptions(ComponentOptions):
    """Options of ``drop_rounds``."""

    keep_recent_rounds: int = Field(
        default=3,
        ge=0,
        description="Newest rounds never dropped (`min_keep_recent_rounds` in a DB-GPT config).",
    )
    min_keep_tokens: int = Field(
        default=10000,
        ge=0,
        description="A round is only dropped if at least this many tokens of newer "
        "content remain after it (`min_keep_tokens` in a DB-GPT config).",
    )


class DropRounds(Layer):
    name = "drop_rounds"
    description = "Drop whole oldest rounds until the target is met (facts go to the ledger)."
    Options = DropRoundsOptions
    tune_space: ClassVar[dict[str, TuneRange]] = dict(ROUNDS_TUNE_SPACE)
    options: DropRoundsOptions

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        drop, n, reason = plan_rounds(ctx, units, self.options)
        kept = [u for i, u in enumerate(units) if i not in drop]
        dropped = [u for i, u in enumerate(units) if i in drop]
        return LayerResult(
            units=kept,
            dropped=dropped,
            report={"dropped_rounds": n, "dropped_units": len(dropped), "stopped_by": reason},
        )


@hookimpl
def ctxpolicy_register_layers(register):  # type: ignore[no-untyped-def]
    register(DropRounds)
