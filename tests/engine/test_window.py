"""A learned window (issue 27): far below the configured one it scales the fixed budget
terms, and a policy that cannot fit it says so once instead of looping in emergency."""

from __future__ import annotations

from typing import Any

from ctxpolicy.engine import Session
from ctxpolicy.engine.window import FAR_BELOW, scaled_growth
from tests.engine_helpers import conversation, make_policy


def _events(s: Session, type_: str) -> list[dict[str, Any]]:
    return [e for e in s.events if e["type"] == type_]


def test_a_window_far_below_the_configured_scales_reserve_margin_and_growth() -> None:
    pol = make_policy(
        model={"context_window": 32768, "max_output_tokens": 4096, "tokenizer": "cl100k_base"},
        budget={"safety_margin": 2000, "tool_growth": 5898},
    )
    s = Session(pol)
    msgs = conversation(3, 300)
    s.prepare(msgs)
    s.on_error("This model's maximum context length is 6000 tokens.", msgs)
    b = s.budget()
    assert b.window == 6000
    assert b.reserve_output == 4096 * 6000 // 32768  # 750
    assert b.safety_margin == 2000 * 6000 // 32768  # 366
    assert b.tool_growth == 5898 * 6000 // 32768  # 1079
    assert b.trigger == 6000 - 750 - 366 - 1079


def test_a_window_slightly_below_keeps_the_fixed_terms() -> None:
    assert scaled_growth(3000, 30000, 32768) == 3000
    assert scaled_growth(3000, int(32768 * FAR_BELOW), 32768) == 1500
    pol = make_policy(
        model={"context_window": 32768, "max_output_tokens": 4096, "tokenizer": "cl100k_base"}
    )
    s = Session(pol)
    msgs = conversation(3, 300)
    s.prepare(msgs)
    s.on_error("maximum context length is 30000 tokens", msgs)
    assert s.budget().window == 30000 and s.budget().reserve_output == 4096


def test_a_policy_that_cannot_fit_the_learned_window_says_so_once() -> None:
    pol = make_policy(
        model={"context_window": 16000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
        ledger={"enabled": False},
        on_overflow={"layer": "emergency", "options": {"keep_recent_rounds": 2, "retries": 1}},
    )
    s = Session(pol)
    task = {"role": "user", "content": "Task: " + "fix the parser module carefully " * 445}

    def convo(rounds: int) -> list[dict[str, Any]]:
        msgs = conversation(rounds, 50)
        return [msgs[0], task, *msgs[2:]]

    s.prepare(convo(2))
    s.on_error("maximum context length is 2600 tokens", convo(2))
    assert s.budget().window == 2600
    emergencies_before = len(
        [e for e in _events(s, "context.compacted") if e["layer"] == "emergency"]
    )
    # the task and the two kept rounds end a compaction in `critical`: unfit
    for r in range(3, 17):
        out = s.prepare(convo(r))
        b = s.budget()
        assert s.counter.count_messages(out) <= b.window - b.reserve_output
    unfit = _events(s, "context.window_unfit")
    assert len(unfit) == 1 and unfit[0]["window"] == 2600
    status = s.status
    assert status is not None and "2600" in status["unfit"]
    assert s.state.unfit is not None
    emergencies = [e for e in _events(s, "context.compacted") if e["layer"] == "emergency"]
    # emergency runs only when the request would not fit, not on every call
    assert len(emergencies) - emergencies_before <= 7
