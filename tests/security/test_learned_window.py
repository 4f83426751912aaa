"""Issue 19 item 16: a provider error cannot cripple the session's window.

A garbled or hostile overflow error ("maximum context length is 10 tokens", huge or
non-ASCII numbers, a limit below the pinned content) is ignored with a
``context.window_ignored`` event; a credible stated limit is learned; no sequence of
errors takes the window below the documented floor
(:data:`ctxpolicy.engine.window.MIN_LEARNED_FRACTION` of the configured window).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import Session
from ctxpolicy.engine.window import MIN_LEARNED_FRACTION
from tests.engine_helpers import conversation, make_policy

WINDOW = 8000


def _session() -> Session:
    policy = make_policy(
        model={"context_window": WINDOW, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
        on_overflow={"layer": "emergency", "options": {"keep_recent_rounds": 2, "retries": 1000}},
    )
    return Session(policy, conv_id="window")


def _error(limit: str) -> str:
    return f"This model's maximum context length is {limit} tokens. Please reduce the length."


@pytest.mark.parametrize("stated", ["10", "0", "1", "٣٠", "999"])
def test_an_implausible_limit_is_ignored_with_an_event(stated: str) -> None:
    s = _session()
    msgs = conversation(4, 1500)
    s.prepare(msgs)
    out = s.on_error(_error(stated), msgs)
    assert out is not None and not check_messages(out)
    assert s.budget().window == WINDOW
    assert s.state.learned_window is None
    if stated not in ("0",):  # "0" does not parse as a limit at all
        ignored = [e for e in s.events if e["type"] == "context.window_ignored"]
        assert ignored and ignored[0]["floor"] >= int(WINDOW * MIN_LEARNED_FRACTION)
    again = s.prepare(msgs)
    assert again == msgs, "the next call is not crushed by the ignored limit"


def test_a_limit_below_the_pinned_content_is_ignored() -> None:
    s = _session()
    task = "Task: " + "keep every requirement of this long task in mind. " * 250  # ~2.5k tokens
    msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": task}]
    s.prepare(msgs)
    pinned = s.counter.count_messages(msgs)
    assert pinned > WINDOW * MIN_LEARNED_FRACTION
    s.on_error(_error(str(pinned - 100)), msgs)
    assert s.budget().window == WINDOW
    assert any(e["type"] == "context.window_ignored" for e in s.events)


def test_a_huge_limit_changes_nothing() -> None:
    s = _session()
    msgs = conversation(2, 500)
    s.on_error(_error("9" * 30), msgs)
    s.on_error(_error("9" * 5000), msgs)  # does not even parse: no limit
    assert s.budget().window == WINDOW


def test_a_credible_limit_is_learned() -> None:
    s = _session()
    msgs = conversation(6, 1500)
    s.prepare(msgs)
    s.on_error(_error("6000"), msgs)
    assert s.budget().window == 6000
    assert any(e["type"] == "context.window_learned" for e in s.events)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=-(10**6), max_value=10**7), min_size=1, max_size=30))
def test_no_error_sequence_goes_below_the_floor(limits: list[int]) -> None:
    s = _session()
    msgs = conversation(3, 800)
    s.prepare(msgs)
    for limit in limits:
        out: Any = s.on_error(_error(str(limit)), msgs)
        assert out is not None and not check_messages(out)
        assert s.budget().window >= int(WINDOW * MIN_LEARNED_FRACTION)
        assert s.budget().window <= WINDOW
