"""Semantic checks of a resolved policy, and the budget arithmetic they need.

Each check yields a :class:`Finding` (code, path inside the agent's policy,
message, hint); :mod:`ctxpolicy.resolve.load` turns it into a positioned
:class:`~ctxpolicy.policy.diagnostics.Diagnostic`. Codes are documented in
``docs/diagnostics.md``.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

from ctxpolicy.budget import BudgetNumbers
from ctxpolicy.policy.models import Policy
from ctxpolicy.policy.source import PathT

__all__ = ["BudgetNumbers", "Finding", "budget_numbers", "check_policy"]


@dataclass(frozen=True)
class Finding:
    code: str
    path: PathT
    message: str
    hint: str | None = None
    #: the other values the problem is about (reported as related locations; the
    #: diagnostic points at whichever of them the agent itself sets)
    related: tuple[PathT, ...] = ()


def budget_numbers(policy: Policy) -> BudgetNumbers:
    """The budget of ``policy`` in tokens (the engine's arithmetic, without raising)."""
    from ctxpolicy.budget import budget_parts

    window, reserve, growth, margin = budget_parts(policy)
    trigger = window - reserve - growth - margin
    t = policy.budget.target
    target = math.floor(t * trigger + 1e-9) if isinstance(t, float) else int(t)
    return BudgetNumbers(window, reserve, growth, margin, trigger, target)


def check_policy(policy: Policy) -> list[Finding]:
    """Every semantic finding for one resolved policy."""
    out: list[Finding] = []
    nums = budget_numbers(policy)
    if nums.trigger <= 0:
        out.append(
            Finding(
                "CTX201",
                ("budget",),
                f"effective budget is not positive: window − reserve_output − tool_growth − "
                f"safety_margin = {nums.formula()} tokens",
                "lower reserve_output, tool_growth or safety_margin, or use a model with a "
                "larger window",
            )
        )
    t = policy.thresholds
    if not (t.warning < t.error < t.critical):
        bad, other = ("error", "warning") if t.warning >= t.error else ("critical", "error")
        out.append(
            Finding(
                "CTX202",
                ("thresholds", bad),
                f"thresholds must increase strictly: warning ({t.warning}) < error ({t.error}) "
                f"< critical ({t.critical})",
                related=(("thresholds", other),),
            )
        )
    if (
        nums.trigger > 0
        and not isinstance(policy.budget.target, float)
        and nums.target >= nums.trigger
    ):
        out.append(
            Finding(
                "CTX203",
                ("budget", "target"),
                f"target ({nums.target} tokens) must be below the trigger ({nums.trigger} tokens)",
                "use a fraction like 0.7 (of the trigger), or fewer tokens",
            )
        )
    out.extend(_target_findings(policy, nums))
    if nums.trigger > 0:
        for i, step in enumerate(policy.pipeline):
            keep = step.options.get("min_keep_tokens")
            if isinstance(keep, int) and not isinstance(keep, bool) and keep >= nums.trigger:
                out.append(
                    Finding(
                        "CTX204",
                        ("pipeline", i, "options", "min_keep_tokens"),
                        f"{step.layer} keeps at least {keep} tokens, which cannot fit the "
                        f"trigger of {nums.trigger} tokens ({nums.formula()})",
                        "lower min_keep_tokens below the trigger (and ideally below the target)",
                    )
                )
    seen: dict[str, int] = {}
    for i, step in enumerate(policy.pipeline):
        if step.layer in seen:
            out.append(
                Finding(
                    "CTX205",
                    ("pipeline", i, "layer"),
                    f"layer {step.layer!r} appears twice in the pipeline (first at pipeline[{seen[step.layer]}])",
                    "remove one, or set `enabled: false` on the one you keep for later",
                )
            )
        else:
            seen[step.layer] = i
    globs = list(policy.tools)
    for i, glob in enumerate(globs):
        for earlier in globs[:i]:
            if earlier == "*" or fnmatch.fnmatchcase(glob, earlier):
                out.append(
                    Finding(
                        "CTX206",
                        ("tools", glob),
                        f"tool rule {glob!r} is never used: the earlier rule {earlier!r} "
                        "matches every tool it matches (first match wins)",
                        "move the broader rule (and `*`) after the specific ones",
                    )
                )
                break
    return out


#: An absolute target at or below this many tokens is almost surely a percentage
#: written without its ``%`` (``target: 60``): an error, CTX209 (an int target that
#: small cannot be meant: it leaves no room for even the last user message).
SMALL_TARGET_TOKENS = 100


def _target_findings(policy: Policy, nums: BudgetNumbers) -> list[Finding]:
    """CTX209 (``target: 60`` is 60 tokens) and CTX210 (a target above the lowest
    threshold a layer starts at: compaction stops where it starts again, and fires on
    every call — the thrashing design B warns about)."""
    out: list[Finding] = []
    t = policy.budget.target
    if isinstance(t, int) and not isinstance(t, bool) and t <= SMALL_TARGET_TOKENS:
        out.append(
            Finding(
                "CTX209",
                ("budget", "target"),
                f"target {t} is read as {t} tokens (an integer is tokens), which leaves "
                "almost nothing after compaction",
                f'for {t}% of the trigger write {t / 100:g} or "{t}%"; for tokens, '
                f"use more than {SMALL_TARGET_TOKENS}",
            )
        )
        return out
    if nums.trigger <= 0 or nums.target >= nums.trigger:
        return out  # CTX201 / CTX203 say it already
    thresholds = policy.thresholds
    ratios = {
        "warning": thresholds.warning,
        "error": thresholds.error,
        "critical": thresholds.critical,
    }
    starts = [
        (ratios[str(step.at)], str(step.at)) for step in policy.pipeline if str(step.at) in ratios
    ]
    if not starts:
        return out
    ratio, state = min(starts)
    start_tokens = math.floor(ratio * nums.trigger + 1e-9)
    if nums.target > start_tokens:
        shown = f"{t:g} × {nums.trigger} = {nums.target}" if isinstance(t, float) else str(t)
        out.append(
            Finding(
                "CTX210",
                ("budget", "target"),
                f"target ({shown} tokens) is above {state} ({ratio:g} × {nums.trigger} = "
                f"{start_tokens} tokens), where the first layer starts: compaction stops in "
                "the state it starts in, so it runs again on every call (thrashing)",
                f"lower target to {ratio:g} or below (ideally 20–30 % below it), or raise "
                f"thresholds.{state}",
                related=(("thresholds", state),),
            )
        )
    return out
