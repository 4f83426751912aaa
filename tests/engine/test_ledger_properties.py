"""The task state's invariants, over random conversations compacted by a real Session.

After every compaction of any conversation: every user turn is in the prompt verbatim
(or counted among the older turns the bound leaves out), the ledger and the summary
share no line, the next action is never a step the plan records as done, and the
ledger stays within its bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy import Session
from ctxpolicy.conversation.facts import INSTRUCTION_CUT, instruction_text, is_user_turn
from ctxpolicy.engine.own import LEDGER_MARK
from tests.engine.test_ledger_scenarios import OMITTED, _lines
from tests.engine_helpers import make_policy

PIPELINE = [
    {"layer": "observation_mask", "at": "warning", "options": {"max_age_rounds": 2}},
    {
        "layer": "summarize",
        "at": "warning",
        "options": {"summarizer": "extractive", "keep_recent_rounds": 2},
    },
    {"layer": "drop_rounds", "at": "error", "options": {"keep_recent_rounds": 2}},
]
WORDS = ["alpha", "src/app.py", "BUG-7", "ORD_2024_001", "retry", "config.yaml", "12 ms", "ok"]


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Task: " + " ".join(draw(st.lists(st.sampled_from(WORDS))))},
    ]
    n = 0
    for _ in range(draw(st.integers(4, 28))):
        kind = draw(st.sampled_from(["tool", "tool", "tool", "user", "todo", "table"]))
        if kind == "user":
            text = draw(st.text(min_size=1, max_size=200).filter(lambda t: t.strip()))
            msgs.append({"role": "user", "content": text})
            msgs.append({"role": "assistant", "content": "Understood."})
            continue
        n += 1
        cid = f"call_{n}"
        if kind == "todo":
            states = draw(st.lists(st.sampled_from(["pending", "in_progress", "completed"]), min_size=1, max_size=4))  # fmt: skip
            name, args = "TodoWrite", {"todos": [{"content": f"item {k}", "status": s} for k, s in enumerate(states)]}  # fmt: skip
            out = "ok"
        elif kind == "table":
            rows = draw(st.integers(2, 30))
            name, args = "sql_query", {"sql": f"SELECT m, v FROM t{n}"}
            out = "m,v\n" + "\n".join(f"{i},{i * 7}" for i in range(rows))
        else:
            size = draw(st.sampled_from([20, 400, 3000]))
            name, args = "bash", {"command": f"cat f{n}.txt"}
            out = (" ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1))) + "\n") * (
                size // 20
            )
            if draw(st.booleans()):
                out += "ValueError: broken thing\n"
        msgs.append(
            {
                "role": "assistant",
                "content": draw(st.sampled_from(["", "Next, I will check it.", "I decided to use t."])),
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                ],
            }
        )  # fmt: skip
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
    msgs.append({"role": "user", "content": "Finish."})
    return msgs


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(convo=conversations(), window=st.sampled_from([3000, 5000]))
def test_invariants_after_every_compaction(
    convo: list[dict[str, Any]], window: int, tmp_path: Path
) -> None:
    policy = make_policy(
        tmp_path,
        model={"context_window": window, "max_output_tokens": 300, "tokenizer": "cl100k_base"},
        budget={"reserve_output": 300, "tool_growth": 200, "safety_margin": 100},
        pipeline=PIPELINE,
        ledger={"max_tokens": 600},
    )
    s = Session(policy)
    seen: list[dict[str, Any]] = []
    turns: list[str] = []
    for m in convo:
        if m["role"] == "assistant":
            before = sum(s.stats.compactions.values())
            out = s.prepare(seen)
            if sum(s.stats.compactions.values()) > before:
                _invariants(s, out, turns[1:])
        if is_user_turn(m):
            turns.append(instruction_text(m["content"]))
        seen.append(m)


def _invariants(s: Session, out: list[dict[str, Any]], turns: list[str]) -> None:
    texts = [m["content"] for m in out if isinstance(m.get("content"), str)]
    whole = "\n".join(texts)
    ledger = next((t for t in texts if t.startswith(LEDGER_MARK)), "")
    summaries = [t for t in texts if t.startswith("[Summary of earlier conversation")]
    own = "\n".join([ledger, *summaries])
    # every user turn verbatim, or counted among those the bound leaves out
    missing = [t for t in turns if t.removesuffix(INSTRUCTION_CUT) not in whole]
    assert len(missing) <= sum(int(n) for n in OMITTED.findall(own)), missing[:3]
    # nothing said twice
    if ledger and summaries:
        assert not _lines(ledger) & _lines("\n".join(summaries))
    # the next action is never a completed step
    led = s.ledger
    assert led is not None
    done = {t.text for t in led.todos if t.status == "completed"}
    assert led.next_step is None or led.next_step not in done
    # bounded: within the configured size, or only what is never trimmed is left
    if ledger:
        text = led.render()
        assert text is not None
        assert s.counter.count_text(text) <= 600 or "Done:" not in text
