"""How the scripts measure: variants in interleaved rounds, medians, a child's answer on
stdout, a policy with one section changed."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def rounds(
    variants: Mapping[str, Callable[[], T]], repeat: int, *, alternate: bool = False
) -> dict[str, list[T]]:
    """Every variant once per round, ``repeat`` rounds, so that load drift on the shared
    machine hits all alike; ``alternate``: the order reversed every other round."""
    out: dict[str, list[T]] = {k: [] for k in variants}
    for r in range(repeat):
        for k in list(variants)[:: -1 if alternate and r % 2 else 1]:
            out[k].append(variants[k]())
    return out


def medians(runs: Mapping[str, Sequence[float]], scale: float = 1.0) -> dict[str, float]:
    return {k: statistics.median(v) * scale for k, v in runs.items()}


def per_call_median(runs: Sequence[Sequence[float]], calls: Iterable[int] | None = None) -> Any:
    """The median over ``calls`` (default: every call) of each call's median over the
    repeats ``runs``; None without calls."""
    idx = range(len(runs[0])) if calls is None else list(calls)
    per_call = [statistics.median(r[i] for r in runs) for i in idx]
    return statistics.median(per_call) if per_call else None


def answer(value: Any) -> int:
    """A child's answer: the JSON line its parent reads (``_common.in_tree``)."""
    print(json.dumps(value))
    return 0


def changed(policy: Any, section: str, **update: Any) -> Any:
    """``policy`` with fields of one section (``snapshots``, ``model``, …) changed."""
    return policy.model_copy(update={section: getattr(policy, section).model_copy(update=update)})


def baseline_note(src: Any, commit: str | None) -> str:
    """The section's line naming the baseline tree (``commit`` None: not a git checkout)."""
    return f"Baseline: `{src}`" + (f" (commit {commit})." if commit else ".")
