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
