"""Prompts are the same bytes on every worker and machine (issue 28, item 7).

A shared trace replayed by two sessions whose snapshot stores live under two
different home directories: with the default ``snapshots.reference_form: uri`` every
prepared list is byte-identical and no path of either machine is in it; design A's
``path`` form (an option) carries each machine's path, so the two differ.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy import Session, load_policy
from ctxpolicy.components import ToolCall
from ctxpolicy.engine.tool_results import ToolResultProcessor, format_reference, parse_reference
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.replay import with_snapshots, with_window
from ctxpolicy.snapshots import LocalStore
from tests.engine_helpers import bare_policy
from tests.shared_data import TRACES, require

ROOT = Path(__file__).resolve().parents[2]
TRACE = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-13297.jsonl"


def _policy(root: Path, form: str) -> Policy:
    base = with_window(load_policy(ROOT / "policies" / "agents.yaml", agent="coding_agent"), 16384)
    policy = with_snapshots(base, root)
    snaps = policy.snapshots.model_copy(update={"reference": "always", "reference_form": form})
    return policy.model_copy(update={"snapshots": snaps})


def _replay(root: Path, form: str, via: str) -> list[str]:
    """The JSON text of every prepared list of the trace."""
    session = Session(_policy(root, form), conv_id="fleet")
    convo: list[dict[str, Any]] = []
    calls: dict[str, Any] = {}
    out: list[str] = []
    for m in load_trace(require(TRACES / TRACE)):
        if m.get("role") == "assistant":
            out.append(json.dumps(session.prepare(convo), ensure_ascii=False))
            calls = {str(tc.get("id")): tc for tc in m.get("tool_calls") or []}
        if m.get("role") == "tool" and via == "add_tool_result":
            call = calls.get(str(m.get("tool_call_id")), {"id": m.get("tool_call_id")})
            m = {**m, "content": session.add_tool_result(call, m.get("content"))}
        convo.append(dict(m))
    return out


@pytest.mark.parametrize("via", ["add_tool_result", "messages"])
def test_two_homes_send_identical_bytes(tmp_path: Path, via: str) -> None:
    a = _replay(tmp_path / "home-a" / "snapshots", "uri", via)
    b = _replay(tmp_path / "home-bb" / "snapshots", "uri", via)
    assert len(a) > 50
    assert a == b
    text = "".join(a)
    assert "ctxsnap://fleet/" in text  # references are there, portable ones
    assert str(tmp_path) not in text and "snapshots/fleet" not in text


def test_the_path_form_is_machine_specific(tmp_path: Path) -> None:
    a = _replay(tmp_path / "home-a" / "snapshots", "path", "add_tool_result")
    b = _replay(tmp_path / "home-bb" / "snapshots", "path", "add_tool_result")
    assert str(tmp_path / "home-a") in "".join(a)  # design A: the path, for file tools
    assert str(tmp_path / "home-a") not in "".join(b)
    differ = sum(x != y for x, y in zip(a, b, strict=True))
    assert differ > len(a) // 2, differ


@settings(max_examples=60, deadline=None)
@given(
    conv=st.text(min_size=0, max_size=40),
    tool=st.text(min_size=0, max_size=60),
    step=st.integers(min_value=0, max_value=10**6),
)
def test_the_reference_line_is_the_same_for_any_root(conv: str, tool: str, step: int) -> None:
    """Any conversation id and tool name: the line two stores with different roots
    write is the same, names no root, and parses back to the URI."""
    policy = bare_policy("a", 32000, snapshots={"reference": "always"})
    lines = []
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        for root in (one, two):
            proc = ToolResultProcessor(policy, store=LocalStore(root=root))
            out = proc.process(ToolCall(tool, {}), "output", conv_id=conv, step=step)
            assert out.ref is not None
            line = out.text.rsplit("\n", 1)[1]
            assert root not in line and line == format_reference(out.ref)
            assert parse_reference(out.text) == [out.ref.uri]
            lines.append(line)
    assert lines[0] == lines[1]
