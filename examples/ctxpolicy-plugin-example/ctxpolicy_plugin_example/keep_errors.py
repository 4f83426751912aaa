"""``keep_errors`` — drop the rounds that went fine, keep every round that failed.

When an agent is debugging, the failures are the facts it needs: the traceback,
the failing test, the refused connection. This layer drops whole rounds (an
assistant step with all its tool results, never a part of one) whose tool results
match none of ``error_patterns``, oldest first, until the context fits
``ctx.target``. Rounds with an error, the ``keep_recent_rounds`` newest rounds and
pinned units are never dropped. If the target cannot be met that way it stops and
leaves the rest to the next layer of the pipeline.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cached_property

from pydantic import Field, field_validator

from ctxpolicy import CompactionContext, ComponentOptions, Layer, LayerResult, Unit
from ctxpolicy.conversation import content_text

DEFAULT_PATTERNS = [
    r"\b(error|exception|traceback|fatal|panic)\b",
    r"\bfail(ed|ure|ing)?\b",
    r"\bERR!",
    r"\bexit (code|status) [1-9]\d*",
]


class KeepErrorsOptions(ComponentOptions):
    """Options of ``keep_errors``."""

    error_patterns: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PATTERNS),
        min_length=1,
        description="Regular expressions (Python syntax); a round whose tool result "
        "matches one of them is kept.",
    )
    case_sensitive: bool = Field(
        default=False, description="Match `error_patterns` case-sensitively."
    )
    keep_recent_rounds: int = Field(
        default=2, ge=0, description="Newest rounds never dropped, error or not."
    )

    @field_validator("error_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {p!r}: {exc}") from None
        return patterns


class KeepErrors(Layer):
    name = "keep_errors"
    description = "Drop old rounds without errors first; keep every round whose tool result failed."
    Options = KeepErrorsOptions
    options: KeepErrorsOptions

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        flags = 0 if self.options.case_sensitive else re.IGNORECASE
        return re.compile("|".join(f"(?:{p})" for p in self.options.error_patterns), flags)

    def has_error(self, unit: Unit) -> bool:
        """True when one of the unit's tool results matches an error pattern."""
        return any(self._pattern.search(content_text(m.get("content"))) for m in unit.tool_messages)

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        steps = [i for i, u in enumerate(units) if u.kind == "step" and not u.pinned]
        keep = self.options.keep_recent_rounds
        old = steps[: max(0, len(steps) - keep)]
        errors = {i for i in old if self.has_error(units[i])}
        candidates = [i for i in old if i not in errors]
        # plan with per-unit counts (each unit counted once: linear in the
        # conversation), then check the result with one exact count
        sizes = ctx.unit_counts(units)
        dropped: set[int] = set()
        used = ctx.used
        for i in candidates:  # oldest first
            if used <= ctx.target:
                break
            dropped.add(i)
            used -= sizes[i]
        if dropped:
            used = ctx.count([u for j, u in enumerate(units) if j not in dropped])
        return LayerResult(
            units=[u for j, u in enumerate(units) if j not in dropped],
            dropped=[units[j] for j in sorted(dropped)],
            report={
                "dropped_rounds": len(dropped),
                "kept_error_rounds": len(errors),
                "reached_target": used <= ctx.target,
            },
        )
