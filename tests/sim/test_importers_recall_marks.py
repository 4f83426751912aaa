"""A recorded trace in which the model itself called ``ctx_recall``/``ctx_search``
is not "exported after compaction": the references are the model's own recall."""

from __future__ import annotations

import json
from pathlib import Path

from ctxpolicy.sim.importers import load_trace, mark_warning

REF = "ctxsnap://run-1/step_001_read_file"


def _call(cid: str, name: str, args: dict) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def _write(path: Path, messages: list[dict]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    return path


BASE = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug."},
    _call("c1", "read_file", {"path": "a.py"}),
    {"role": "tool", "tool_call_id": "c1", "content": "def f():\n    return 1\n" * 50},
]


def test_the_models_own_recall_is_not_a_compaction_mark(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [
            *BASE,
            _call("r1", "ctx_recall", {"ref": REF, "lines": "1-20"}),
            {"role": "tool", "tool_call_id": "r1", "content": f"[{REF}]\n1: def f():"},
            _call("s1", "ctx_search", {"pattern": "return"}),
            {"role": "tool", "tool_call_id": "s1", "content": f"{REF}:2: return 1"},
            {"role": "assistant", "content": "Done."},
        ],
    )
    assert len(load_trace(trace)) == 9
    assert mark_warning(trace) is None


def test_a_reference_outside_recall_still_warns(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "t.jsonl",
        [
            *BASE,
            _call("r1", "ctx_recall", {"ref": REF}),
            {"role": "tool", "tool_call_id": "r1", "content": "1: def f():"},
            _call("c2", "read_file", {"path": "b.py"}),
            {
                "role": "tool",
                "tool_call_id": "c2",
                "content": f"head ... [Full detail available at: {REF}]",
            },
        ],
    )
    warning = mark_warning(trace)
    assert warning is not None and f"{trace}:8:" in warning
    assert "exported after ctxpolicy compacted it" in warning
