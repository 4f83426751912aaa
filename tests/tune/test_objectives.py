"""tune objectives: defaults."""

from __future__ import annotations


def test_default_objectives_are_total_cost_and_the_rulers_retention() -> None:
    from ctxpolicy.policy.models import TuneObjectives

    obj = TuneObjectives()
    assert (obj.cost, obj.retention) == ("total", "in_context")
