"""Fault injection through the engine: history is never lost, nothing loops."""

from __future__ import annotations

import errno
import time
from collections.abc import Mapping
from typing import Any

import pytest

from ctxpolicy.components import SnapshotRef, SnapshotStore, Summarizer, SummaryRequest
from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import Session
from tests.engine_helpers import call, conversation, make_policy


class ScriptedSummarizer(Summarizer):
    name = "scripted_test"

    def __init__(self, behaviour: str) -> None:
        super().__init__()
        self.behaviour = behaviour
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> Any:
        self.calls += 1
        b = self.behaviour
        if b == "raise":
            raise RuntimeError("provider down")
        if b == "timeout":
            time.sleep(0.5)
            return "late"
        if b == "empty":
            return ""
        if b == "longer":
            return "word " * 50_000
        if b == "bytes":
            return b"\xff\xfe not text"
        if b == "ok":
            return "Summary: files src/app.py; id BUG-1234; next: run tests."
        raise AssertionError(b)


def _summarize_policy(**opts: Any) -> Any:
    return make_policy(
        pipeline=[
            {
                "layer": "summarize",
                "at": "warning",
                "options": {"keep_recent_rounds": 2, "max_failures": 2, **opts},
            }
        ],
        on_overflow={"layer": "emergency", "options": {"keep_recent_rounds": 2, "retries": 1}},
        model={"context_window": 12000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
    )


@pytest.mark.parametrize("behaviour", ["raise", "timeout", "empty", "longer", "bytes"])
def test_summarizer_failure_leaves_history_and_opens_breaker(
    behaviour: str, no_fact_price: None
) -> None:
    summ = ScriptedSummarizer(behaviour)
    # the results arrive whole (no tool rule): the history to compare is what was given
    s = Session(_summarize_policy(timeout_s=0.1), summarizer=summ, tool_rules_in_prepare=False)
    msgs = conversation(6, 3000)  # above warning, below the trigger: only summarize runs
    for _ in range(4):
        out = s.prepare(msgs)
        assert out == msgs, "a failed summary must leave history untouched"
    types = [e["type"] for e in s.events]
    assert types.count("summarizer.failed") == 2
    assert types.count("breaker.open") == 1
    # breaker open: no more calls; a timed-out call still running blocks a second one
    # (it fails fast instead of starting another thread: issue 19 item 15)
    assert summ.calls == (1 if behaviour == "timeout" else 2)


def test_breaker_closes_after_a_success(no_fact_price: None) -> None:
    summ = ScriptedSummarizer("raise")
    s = Session(_summarize_policy(retry_after=1), summarizer=summ, tool_rules_in_prepare=False)
    msgs = conversation(6, 3000)
    s.prepare(msgs)
    s.prepare(msgs)  # opens
    summ.behaviour = "ok"
    for _ in range(3):
        out = s.prepare(msgs)
    types = [e["type"] for e in s.events]
    assert "breaker.open" in types and "breaker.closed" in types
    assert any("Summary: files src/app.py" in str(m.get("content")) for m in out)
    assert check_messages(out) == []


class FullDisk(SnapshotStore):
    name = "full_disk_test"

    def write(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        raise OSError(errno.ENOSPC, "No space left on device")

    def read(self, ref: str) -> dict[str, Any]:
        raise FileNotFoundError(ref)

    def list(self, conv_id: str) -> list[SnapshotRef]:
        return []


def test_full_disk_returns_result_without_ref_and_an_event(tmp_path: Any) -> None:
    s = Session(make_policy(tmp_path), snapshot_store=FullDisk())
    text = s.add_tool_result(call("c1"), "hello " * 10)
    assert "hello" in text and "Full detail available" not in text
    assert any(e["type"] == "snapshot.failed" for e in s.events)


def test_read_only_snapshot_root(tmp_path: Any) -> None:
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        pol = make_policy(snapshots={"path": str(root / "snaps"), "enabled": True})
        s = Session(pol)
        text = s.add_tool_result(call("c1"), "data " * 10)
        assert "data" in text
        import os

        if os.geteuid() != 0:  # root ignores directory modes
            assert any(e["type"] in ("snapshot.failed", "snapshot.unavailable") for e in s.events)
    finally:
        root.chmod(0o700)


def test_missing_tokenizer_emits_fallback_once() -> None:
    pol = make_policy(
        model={
            "context_window": 8000,
            "max_output_tokens": 500,
            "tokenizer": ["tiktoken:no_such_encoding", "heuristic"],
        }
    )
    seen: list[dict[str, Any]] = []
    s = Session(pol, on_event=seen.append)
    s.prepare(conversation(1, 50))
    s.prepare(conversation(2, 50))
    fallbacks = [e for e in seen if e["type"] == "tokenizer.fallback"]
    assert len(fallbacks) == 1
    assert s.status is not None and s.status["approximate"] is True
