"""ctxpolicy/engine/economics.py: the chance a conversation goes on, and the price of
the facts an optional compaction takes out."""

from __future__ import annotations

import pytest

from ctxpolicy.engine import economics
from ctxpolicy.engine.economics import (
    MAX_PREDICTED_CALLS,
    OPTIONAL_SHARE,
    CachePrices,
    Rewrite,
    expected_bill,
    expected_calls,
)

ANTHROPIC = CachePrices("anthropic", read=0.1, write=1.25)
OPENAI = CachePrices("openai", read=0.5, write=1.0)


def test_expected_calls_weighs_each_call_by_the_chance_it_is_made() -> None:
    assert expected_calls(1, 1) == pytest.approx(0.5)  # one call made: as likely as not
    assert expected_calls(10, 10) == pytest.approx(sum(10 / (10 + k) for k in range(1, 11)))
    assert expected_calls(10, 0) == 0
    # an old conversation is expected to make more of the next calls than a young one
    assert expected_calls(2, 10) < expected_calls(20, 10) < expected_calls(200, 10) < 10


def test_expected_bill_reads_the_request_and_writes_its_growth() -> None:
    first = 1000 * 0.1 + 100 * 1.25  # this call
    later = sum(
        5 / (5 + k) * ((1000 + 100 * k) * 0.1 + 100 * 1.25)
        for k in range(1, MAX_PREDICTED_CALLS + 1)
    )
    assert expected_bill(5, 1000, 100, ANTHROPIC) == pytest.approx(first + later)
    assert expected_bill(50, 1000, 100, ANTHROPIC) > expected_bill(5, 1000, 100, ANTHROPIC)


def test_an_optional_compaction_must_pay_a_share_of_the_bill() -> None:
    """A rewrite that buys its cache back is not enough when the request still fits:
    what it saves beyond the rewrite must be a share of the bill expected without it."""
    bill = expected_bill(12, 4200, 225, OPENAI)
    small = Rewrite(1400, 2300, 10, OPENAI, age=12, bill=bill)
    assert small.saving > small.cost and not small.pays  # the cache alone would take it
    assert small.lacking > 0
    more = Rewrite(small.freed + small.lacking, 2300, 10, OPENAI, age=12, bill=bill)
    assert more.saving - more.cost >= OPTIONAL_SHARE * bill and more.pays
    assert more.lacking == 0
    # without the age (nothing asked beyond the cache) every predicted call counts
    assert Rewrite(1400, 2300, 10, OPENAI).pays
    assert Rewrite(1400, 2300, 10, OPENAI).saving > small.saving


def test_no_fact_price_leaves_the_cache_rule(no_fact_price: None) -> None:
    bill = expected_bill(12, 4200, 225, OPENAI)
    assert economics.OPTIONAL_SHARE == 0.0
    assert Rewrite(1400, 2300, 10, OPENAI, age=12, bill=bill).pays


def _grow(rounds: int) -> tuple[list[int], int, int]:
    """A conversation replayed call by call under an observation mask at warning:
    (the tokens sent on each call, the compactions, the trigger)."""
    from ctxpolicy.engine import Session
    from tests.engine_helpers import conversation, make_policy

    pol = make_policy(
        budget={"reserve_output": 1000, "tool_growth": 0, "safety_margin": 0, "target": 0.4},
        thresholds={"warning": 0.7, "error": 0.9, "critical": 0.95},
        pipeline=[
            {
                "layer": "observation_mask",
                "at": "warning",
                "options": {"max_age_rounds": 2, "max_chars": 100},
            }
        ],
    )
    s = Session(pol)
    full = conversation(rounds, 600)
    sent = []
    for n in range(3, len(full)):
        if full[n - 1]["role"] == "tool" and full[n]["role"] != "tool":
            s.prepare(full[:n])
            assert s.status is not None
            sent.append(s.status["used"])
    compactions = sum(1 for e in s.events if e["type"] == "context.compacted")
    return sent, compactions, s.budget().trigger


def test_a_conversation_that_fits_keeps_its_results_unless_compacting_pays() -> None:
    """Past warning but below the trigger, a mask that would buy its cache back is not
    taken while it saves less than the share of the bill; by the cache alone it is."""
    sent, compactions, trigger = _grow(20)
    assert compactions == 0 and max(sent) < trigger
    assert max(sent) >= 0.7 * trigger  # it was past warning: a step could run


def test_by_the_cache_alone_the_same_conversation_compacts(no_fact_price: None) -> None:
    _, compactions, _ = _grow(20)
    assert compactions >= 1
