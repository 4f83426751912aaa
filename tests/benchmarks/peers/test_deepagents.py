"""The deepagents peer on one short real trace: the real middleware, sane measurements.

Real components only: deepagents' SummarizationMiddleware and FilesystemMiddleware
(with the deterministic chat model), a FilesystemBackend in a temp directory, the
exact cl100k counter, a shared trace from ../shared. Skipped when deepagents is not
installed (it is in the ``bench`` extra, not in ``dev``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepagents", reason="deepagents not installed (pip install -e '.[bench]')")

from benchmarks._inputs import load_agent
from benchmarks.peers.catalog import build_peer
from benchmarks.peers.runs import Contestant, ruler, run_contestant
from benchmarks.peers.summary import HEADER
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.replay import with_window
from tests.shared_data import TRACES, require

from .short_trace import TRACE, recorded_run, texts

WINDOW = 12000  # small enough that the peer summarizes on it
INTRO = "You are in the middle of a conversation that has been summarized."


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    return recorded_run("deepagents", WINDOW)


def test_deepagents_summarised_with_the_shared_digest(run: dict[str, Any]) -> None:
    assert run["summaries_written"] >= 1
    assert run["compactions"].get("summarization", 0) == run["summaries_written"]
    assert all(HEADER in s for s in run["summaries"])
    last = run["summaries"][-1]
    sent_after = [req for req in run["requests"] if last in texts(req)]
    assert sent_after and all(INTRO in texts(req) for req in sent_after)
    assert run["prompt_tokens"] < run["prompt_tokens_none"]


def test_measured_by_the_ruler(run: dict[str, Any]) -> None:
    counter = ruler()
    assert [counter.count_messages(r) for r in run["requests"]] == run["series"]["used"]
    assert run["pairing_violations"] == 0 and run["overflows"] == 0
    assert run["calls"] == len(run["requests"]) > 0
    # the trace's system prompt is sent as the trace's own dict, first
    msgs = load_trace(require(TRACES / TRACE))
    assert all(req[0] == msgs[0] for req in run["requests"])


def test_same_trace_same_requests() -> None:
    """Deterministic: the session id of the history file is fixed per run."""
    msgs = load_trace(require(TRACES / TRACE))
    policy, _ = load_agent("coding_agent")
    c = Contestant("d", "deepagents", policy)
    a, b = (run_contestant(msgs, c, WINDOW, trace=TRACE, record=True) for _ in range(2))
    assert a["requests"] == b["requests"]


def test_a_huge_tool_result_is_evicted_to_the_backend() -> None:
    policy, _ = load_agent("coding_agent")
    counter = ruler()
    s = build_peer("deepagents", with_window(policy, WINDOW), count=counter.count_text)
    root = Path(s.root)
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    small = s.tool_result(call, "ok", 1)
    big_text = "line of output 0123456789\n" * 20_000  # ~500k chars, over 20k tokens
    big = s.tool_result(call, big_text, 2)
    assert small == "ok"
    assert len(big) < len(big_text) // 10 and s.evicted == 1
    assert any(root.rglob("*")), "the evicted result was written to the backend"
    s.close()
    assert not root.exists()
