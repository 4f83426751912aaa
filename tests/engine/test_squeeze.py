"""The last-resort squeeze: a request fits whenever the system prompt fits."""

from __future__ import annotations

from pathlib import Path

from ctxpolicy.engine import Session
from tests.engine_helpers import conversation, make_policy

WINDOW = 32768
RESERVE = 4096


def _policy(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_policy(
        tmp_path,
        model={"context_window": WINDOW, "max_output_tokens": 4096, "tokenizer": "cl100k_base"},
        budget={"reserve_output": RESERVE, "tool_growth": 0, "safety_margin": 0, "target": 0.5},
    )


def _events(s: Session, kind: str) -> list[dict]:  # type: ignore[type-arg]
    return [e for e in s.events if e["type"] == kind]


def test_a_runaway_assistant_message_is_cut_with_a_reference(tmp_path: Path) -> None:
    runaway = "".join(f"thought {i}: the model kept talking. " for i in range(6000))
    assert len(runaway) > 200_000
    msgs = [
        *conversation(3, 500),
        {"role": "assistant", "content": runaway},
        {"role": "user", "content": "Your reply was not in the expected format."},
    ]
    s = Session(_policy(tmp_path), conv_id="runaway")
    out = s.prepare(msgs)
    used = s.counter.count_messages(out)
    assert used <= WINDOW - RESERVE
    cut = next(m for m in out if m["role"] == "assistant" and "thought 0:" in str(m["content"]))
    assert "characters of this assistant message removed" in cut["content"]
    ref = cut["content"].rsplit("[Full detail available at: ", 1)[1].rstrip("]")
    assert runaway in s.recall(ref)  # nothing is lost
    assert not _events(s, "context.overflow")


def test_huge_tool_call_arguments_are_cut(tmp_path: Path) -> None:
    args = '{"content": "' + "x" * 300_000 + '"}'
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "write the file"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "w1", "type": "function", "function": {"name": "write", "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": "w1", "content": "ok"},
    ]
    s = Session(_policy(tmp_path), conv_id="args")
    out = s.prepare(msgs)
    assert s.counter.count_messages(out) <= WINDOW - RESERVE
    assert "tool-call argument removed" in out[2]["tool_calls"][0]["function"]["arguments"]


def test_a_pinned_task_is_cut_last_and_reported(tmp_path: Path) -> None:
    task = "Task: " + "describe the data. " * 40_000
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": task}]
    s = Session(_policy(tmp_path), conv_id="task")
    out = s.prepare(msgs)
    assert s.counter.count_messages(out) <= WINDOW - RESERVE
    assert _events(s, "context.truncated_pinned")
    assert out[0] == {"role": "system", "content": "sys"}


def test_only_a_system_prompt_above_the_limit_goes_out_over_it(tmp_path: Path) -> None:
    system = "rule. " * 60_000
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]
    s = Session(_policy(tmp_path), conv_id="sys")
    out = s.prepare(msgs)
    assert out[0]["content"] == system  # never cut
    over = _events(s, "context.overflow")
    assert over and over[-1]["unavoidable"] is True
