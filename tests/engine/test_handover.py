"""Handover between agents, tokenizer calibration from provider usage."""

from __future__ import annotations

import json

from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import HANDOVER_MARK, Session
from ctxpolicy.engine.handover import Handover
from tests.engine_helpers import conversation, make_policy

CONSTRAINTS = ["Never modify files under tests/", "Keep Python 3.9 compatibility"]


def _agent_a() -> Session:
    pol = make_policy(
        constraints=CONSTRAINTS,
        pipeline=[
            {
                "layer": "drop_rounds",
                "at": "warning",
                "options": {"keep_recent_rounds": 2, "min_keep_tokens": 500},
            }
        ],
    )
    s = Session(pol, conv_id="agent-a")
    msgs = conversation(4, 1500)
    for r in range(4, 16):  # the conversation grows; compaction runs several times
        msgs = [
            *msgs[:-1],
            {
                "role": "assistant",
                "content": f"round {r}: reading src/mod_{r}.py",
                "tool_calls": [
                    {
                        "id": f"x{r}",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"src/mod_{r}.py"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": f"x{r}",
                "content": f"contents of src/mod_{r}.py " * 120,
            },
            {"role": "assistant", "content": "Next: run the tests in tests/test_budget.py"},
            {"role": "user", "content": "continue"},
        ]
        s.prepare(msgs)
    assert sum(s.stats.compactions.values()) >= 2
    return s


def test_handover_round_trip_and_second_agent() -> None:
    a = _agent_a()
    h = a.handover()
    assert h.constraints == CONSTRAINTS
    assert h.next_steps and "tests/test_budget.py" in h.next_steps[0]
    assert h.agent == "test" and h.conv_id == "agent-a"
    again = Handover.model_validate_json(h.model_dump_json())
    assert again == h
    msg = again.as_message()
    assert all(c in msg["content"] for c in CONSTRAINTS)

    b = Session(make_policy(), conv_id="agent-b", handover=h.model_dump_json())
    first = b.prepare(
        [
            {"role": "system", "content": "You are agent B."},
            {"role": "user", "content": "Take over."},
        ]
    )
    text = "\n".join(m["content"] for m in first if isinstance(m.get("content"), str))
    assert HANDOVER_MARK in text
    for c in CONSTRAINTS:
        assert c in text
    assert "tests/test_budget.py" in text
    assert check_messages(first) == []


def test_constraints_survive_every_compaction() -> None:
    a = _agent_a()
    out = a.prepare(conversation(12, 2000))
    text = "\n".join(m["content"] for m in out if isinstance(m.get("content"), str))
    for c in CONSTRAINTS:
        assert c in text


def test_calibration_scales_approximate_counts() -> None:
    pol = make_policy(
        model={"context_window": 8000, "max_output_tokens": 1000, "tokenizer": "heuristic"}
    )
    s = Session(pol)
    msgs = conversation(2, 400)
    s.prepare(msgs)
    st = s.status
    assert st is not None and st["approximate"] is True
    ours = st["used_raw"]
    ratio = s.record_usage(int(ours * 1.5))
    assert ratio == 1.5
    s.prepare(msgs)
    st2 = s.status
    assert st2 is not None
    assert st2["used"] == int(ours * 1.5 + 0.999) and st2["calibration"] == 1.5
    assert s.record_usage(ours * 100) <= 2.0  # bounded


def test_calibration_reported_but_not_applied_when_exact() -> None:
    s = Session(make_policy())
    msgs = conversation(2, 400)
    s.prepare(msgs)
    st = s.status
    assert st is not None and st["approximate"] is False
    s.record_usage(int(st["used_raw"] * 1.2))
    s.prepare(msgs)
    st2 = s.status
    assert st2 is not None and st2["used"] == st["used"] and abs(st2["calibration"] - 1.2) < 1e-3
