"""Linear-time checks by CPU time: an input against one 8x larger (a ratio, never a
wall-clock limit, so a busy machine slows both sides alike)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def best_cpu(
    fn: Callable[[], object], *, repeat: int = 3, before: Callable[[], object] | None = None
) -> float:
    """The least CPU time of ``repeat`` runs of ``fn``; ``before`` runs untimed ahead of
    each (to clear a cache, say)."""
    best = float("inf")
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def assert_linear(
    run: Callable[[T], object],
    small: T,
    large: T,
    *,
    floor: float,
    what: str,
    before: Callable[[], object] | None = None,
) -> None:
    """``run`` on ``large`` (8x ``small``) takes under 24x the time of ``small`` (linear
    is ~8x, quadratic ~64x); ``floor`` keeps a tiny small time from inflating the ratio."""
    ratio = best_cpu(lambda: run(large), before=before) / max(
        best_cpu(lambda: run(small), before=before), floor
    )
    assert ratio < 24, f"{what}: 8x the input took {ratio:.1f}x the time"
