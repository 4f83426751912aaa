"""Invariants of prepare on generated conversations and policies (hypothesis)."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import LEDGER_MARK, Session
from tests.engine_helpers import make_policy
from tests.helpers_conv import DEEP, hostile_messages

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x2FFFF), max_size=40
)


@st.composite
def conversations(draw: Any) -> list[Any]:
    msgs: list[Any] = [{"role": "system", "content": "sys " + draw(_text)}]
    msgs.append({"role": "user", "content": "task " + draw(_text)})
    n = draw(st.integers(0, 25))
    cid = 0
    for _ in range(n):
        kind = draw(st.sampled_from(["step", "step", "step", "user", "text", "hostile"]))
        if kind == "hostile":  # issue 19 items 8, 9, 11
            msgs.extend(hostile_messages(draw(_text), draw(st.integers(0, 99)), cid, msgs))
        elif kind == "user":
            msgs.append({"role": "user", "content": draw(_text)})
        elif kind == "text":
            msgs.append({"role": "assistant", "content": draw(_text)})
        else:
            k = draw(st.integers(1, 8))
            calls = []
            for _ in range(k):
                cid += 1
                calls.append(
                    {
                        "id": f"id{cid}",
                        "type": "function",
                        "function": {"name": "t", "arguments": json.dumps({"q": cid})},
                    }
                )
            msgs.append(
                {
                    "role": "assistant",
                    "content": draw(st.one_of(st.none(), _text)),
                    "tool_calls": calls,
                }
            )
            for c in calls:
                size = draw(st.sampled_from([10, 200, 3000, 20000]))
                body = (draw(_text) + " data ") * (size // 10)
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": body[:size]})
    msgs.append({"role": "user", "content": "last " + draw(_text)})
    return msgs


@st.composite
def policies(draw: Any) -> Any:
    window = draw(st.sampled_from([4000, 8000, 16000, 32000]))
    layers = draw(
        st.lists(
            st.sampled_from(["observation_mask", "drop_rounds", "summarize"]),
            min_size=0,
            max_size=3,
            unique=True,
        )
    )
    pipeline = [
        {"layer": name, "at": draw(st.sampled_from(["normal", "warning", "error"])), "options": {}}
        for name in layers
    ]
    return make_policy(
        model={
            "context_window": window,
            "max_output_tokens": window // 8,
            "tokenizer": "cl100k_base",
        },
        budget={
            "target": draw(st.sampled_from([0.4, 0.6, 0.8])),
            "safety_margin": draw(st.sampled_from([0, 200])),
        },
        pipeline=pipeline,
    )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations(), policies())
def test_prepare_invariants(msgs: list[Any], policy: Any) -> None:
    s = Session(policy)
    before = copy.deepcopy(msgs, {id(v): v for v in DEEP.values()})
    out = s.prepare(msgs)
    assert msgs == before, "input mutated"
    assert check_messages(out) == []
    # pinned: system, first user, last user are present unchanged
    assert out[0] == msgs[0]
    assert msgs[1] in out and msgs[-1] in out
    status = s.status
    assert status is not None
    overflow_events = [e for e in s.events if e["type"] == "context.overflow"]
    assert status["used"] <= status["trigger"] or overflow_events
    # idempotent on its own output (a fresh session)
    s2 = Session(policy)
    out2 = s2.prepare(out)
    assert check_messages(out2) == []
    ledgers = [
        m
        for m in out2
        if isinstance(m.get("content"), str) and m["content"].startswith(LEDGER_MARK)
    ]
    assert len(ledgers) <= 1
