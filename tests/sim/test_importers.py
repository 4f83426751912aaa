"""Trace importers: formats and errors naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxpolicy.sim.importers import TraceError, load_trace


def test_jsonl_and_json_array(tmp_path: Path) -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    a = tmp_path / "a.jsonl"
    a.write_text("\n".join(json.dumps(m) for m in msgs) + "\n\n")
    b = tmp_path / "b.json"
    b.write_text(json.dumps(msgs, indent=2))
    assert load_trace(a) == msgs == load_trace(b)


def test_anthropic_blocks(tmp_path: Path) -> None:
    body = {
        "system": "be brief",
        "messages": [
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "tu1", "name": "bash", "input": {"cmd": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu1",
                        "content": [{"type": "text", "text": "a.py"}],
                    }
                ],
            },
        ],
    }
    p = tmp_path / "c.json"
    p.write_text(json.dumps(body))
    out = load_trace(p)
    assert out[0] == {"role": "system", "content": "be brief"}
    assert out[2]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd": "ls"}'}
    assert out[3] == {"role": "tool", "tool_call_id": "tu1", "content": "a.py"}


def test_swe_agent_traj(tmp_path: Path) -> None:
    traj = {
        "history": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "look", "action": "ls -la"},
            {"role": "user", "content": "a.py b.py"},
        ]
    }
    p = tmp_path / "x.traj"
    p.write_text(json.dumps(traj))
    out = load_trace(p)
    assert out[2]["tool_calls"][0]["function"]["arguments"] == '{"command": "ls -la"}'
    assert out[3] == {"role": "tool", "tool_call_id": "call_0001", "content": "a.py b.py"}


def test_openhands_events(tmp_path: Path) -> None:
    events = [
        {"source": "user", "action": "message", "message": "fix"},
        {"source": "agent", "action": "run", "args": {"command": "ls", "thought": "look"}},
        {"source": "agent", "observation": "run", "content": "a.py"},
    ]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(events))
    out = load_trace(p)
    assert [m["role"] for m in out] == ["user", "assistant", "tool"]
    assert out[1]["content"] == "look"


@pytest.mark.parametrize(
    ("name", "text", "line", "words"),
    [
        ("t.jsonl", '{"role": "user", "content": "a"}\n\n{"role": "bogus"}\n', 3, "valid role"),
        ("t.jsonl", '{"role": "user"}\n{"role": "tool", "content": "x"}\n', 2, "tool_call_id"),
        ("t.jsonl", '{"role": "user"}\nnot json\n', 2, "invalid JSON"),
        ("t.json", '[\n  {"role": "user"},\n  {"role": "nope"}\n]', 3, "valid role"),
        ("t.json", '[\n  {"role": "user"},\n  {"role": \n', 4, "invalid JSON"),
    ],
)
def test_errors_name_file_and_line(
    tmp_path: Path, name: str, text: str, line: int, words: str
) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TraceError) as exc:
        load_trace(p)
    assert exc.value.line == line
    assert str(exc.value).startswith(f"{p}:{line}: ")
    assert words in str(exc.value)


def test_real_traces_load() -> None:
    from .conftest import shared_traces

    for p in shared_traces():
        msgs = load_trace(p)
        assert msgs and all("role" in m for m in msgs)
