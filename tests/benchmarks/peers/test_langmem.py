"""The langmem peer on one short real trace: the real summarize_messages, sane numbers.

Real components only: ``langmem.short_term.summarize_messages`` with its running
summary (and the deterministic chat model), the exact cl100k counter, a shared trace
from ../shared. Skipped when langmem is not installed (``bench`` extra).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langmem", reason="langmem not installed (pip install -e '.[bench]')")

from benchmarks.peers.runs import ruler
from benchmarks.peers.summary import HEADER
from ctxpolicy.sim.importers import load_trace
from tests.shared_data import TRACES, require

from .short_trace import TRACE, recorded_run, texts

WINDOW = 8000  # coding_agent's trigger here (5,120) is below the trace's size: langmem summarizes
INTRO = "Summary of the conversation so far:"


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    return recorded_run("langmem", WINDOW)


def test_langmem_keeps_a_running_summary(run: dict[str, Any]) -> None:
    assert run["summaries_written"] >= 1
    assert all(HEADER in s for s in run["summaries"])
    last = run["summaries"][-1]
    sent_after = [req for req in run["requests"] if last in texts(req)]
    assert sent_after
    # the summary travels as a system message right after the trace's system prompt
    for req in sent_after:
        assert req[1]["role"] == "system" and req[1]["content"].startswith(INTRO)
    assert run["prompt_tokens"] < run["prompt_tokens_none"]


def test_measured_by_the_ruler(run: dict[str, Any]) -> None:
    counter = ruler()
    assert [counter.count_messages(r) for r in run["requests"]] == run["series"]["used"]
    assert run["pairing_violations"] == 0
    msgs = load_trace(require(TRACES / TRACE))
    assert all(req[0] == msgs[0] for req in run["requests"])
    facts = run["retention"]
    assert facts["in_context"] + facts["recoverable"] + facts["lost"] == facts["facts"]
