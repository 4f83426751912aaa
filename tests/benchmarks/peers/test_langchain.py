"""LangChain peers and ctxpolicy on one short real trace: sane measurements.

Real components only: LangChain 1.x middleware (with a deterministic chat model),
ctxpolicy sessions, the exact cl100k counter, a shared trace from ../shared.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks._inputs import load_agent
from benchmarks.peers.catalog import LABELS, PACKAGES
from benchmarks.peers.runs import Contestant, PrefixWatch, ruler, run_contestant
from benchmarks.peers.summary import HEADER
from ctxpolicy.sim.importers import load_trace
from tests.shared_data import TRACES, require

from .short_trace import TRACE, texts

WINDOW = 8000  # small enough that every contestant compacts on it (trigger 5,120)
LC_INTRO = "Here is a summary of the conversation to date:"
PEERS = [kind for kind, package in PACKAGES.items() if package == "langchain"]


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    msgs = load_trace(require(TRACES / TRACE))
    policy, _ = load_agent("coding_agent")
    counter = ruler()
    out = {}
    for kind in ("ctxpolicy", *PEERS):
        c = Contestant(LABELS.get(kind, kind), kind, policy)
        out[kind] = run_contestant(msgs, c, WINDOW, trace=TRACE, counter=counter, record=True)
    # a window so large that nothing is ever compacted
    big = Contestant("langchain big", "langchain_summarize", policy)
    out["never"] = run_contestant(msgs, big, 1_000_000, trace=TRACE, counter=counter, record=True)
    return out


@pytest.mark.parametrize("kind", list(PEERS))
def test_langchain_actually_summarised(runs: dict[str, dict[str, Any]], kind: str) -> None:
    r = runs[kind]
    assert r["summaries_written"] >= 1
    assert r["compactions"].get("summarization", 0) == r["summaries_written"]
    assert all(HEADER in s for s in r["summaries"])  # our digest, written by the fake model
    # the summary LangChain wrote is what the model received afterwards
    last = r["summaries"][-1]
    sent_after = [req for req in r["requests"] if last in texts(req)]
    assert sent_after, "the last summary never reached a request"
    assert any(LC_INTRO in texts(req) for req in sent_after)
    assert r["prompt_tokens"] < r["prompt_tokens_none"]


def test_ctxpolicy_used_the_shared_summary(runs: dict[str, dict[str, Any]]) -> None:
    r = runs["ctxpolicy"]
    assert r["compactions"].get("summarize", 0) >= 1
    assert any(HEADER in texts(req) for req in r["requests"])


def test_the_same_policy_from_yaml_and_toml_measures_the_same() -> None:
    """agents.toml's coding_agent is agents.yaml's: the harness adds no difference."""
    msgs = load_trace(require(TRACES / TRACE))
    out = []
    for file in ("policies/agents.yaml", "policies/agents.toml"):
        policy, _ = load_agent("coding_agent", file)
        d = run_contestant(msgs, Contestant(file, "ctxpolicy", policy), WINDOW, trace=TRACE)
        out.append((d["series"]["used"], d["compaction_calls"], d["retention"]))
    assert out[0] == out[1]


def test_one_ruler_for_every_run(runs: dict[str, dict[str, Any]]) -> None:
    counter = ruler()
    assert not counter.approximate and "cl100k_base" in counter.name
    assert {r["counter"] for r in runs.values()} == {counter.name}
    # the uncompacted reference is the same number for everyone
    assert len({r["prompt_tokens_none"] for r in runs.values()}) == 1
    for r in runs.values():
        assert [counter.count_messages(req) for req in r["requests"]] == r["series"]["used"]
        assert r["prompt_tokens"] == sum(r["series"]["used"])


def test_rates_and_sanity(runs: dict[str, dict[str, Any]]) -> None:
    for r in runs.values():
        assert r["calls"] == r["steps"] == len(r["requests"]) > 0
        assert 0 <= r["compaction_calls"] <= r["calls"]
        assert r["pairing_violations"] == 0
        assert r["overflows"] == 0
        assert r["compactions_per_100"] == pytest.approx(100 * r["compaction_calls"] / r["calls"])
        facts = r["retention"]
        assert facts["facts"] > 0
        assert facts["in_context"] + facts["recoverable"] + facts["lost"] == facts["facts"]
    # compacting breaks the prompt prefix; LangChain's summary replaces the history
    assert runs["langchain_summarize"]["prefix_changes"] >= 1


def test_a_run_that_never_compacts_keeps_its_prefix(runs: dict[str, dict[str, Any]]) -> None:
    r = runs["never"]
    assert r["compaction_calls"] == 0 and r["summaries_written"] == 0
    assert r["prefix_changes"] == 0
    assert r["prompt_tokens"] == r["prompt_tokens_none"]


def test_prefix_watch_counts_requests_that_do_not_extend_the_previous() -> None:
    a, b, c = ({"role": "user", "content": x} for x in "abc")

    class Scripted:
        def __init__(self) -> None:
            self.out = [[a], [a, b], [a, b, c], [a, c], [a, c], [c]]

        def prepare(self, convo: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
            return self.out.pop(0), []

    w = PrefixWatch(Scripted())
    for _ in range(6):
        w.prepare([])
    assert (w.calls, w.prefix_changes) == (6, 2)


def test_recalled_texts_are_forgotten_after_a_compaction(tmp_path: Any) -> None:
    """A growing archive reference must be recalled afresh once something was archived."""
    from benchmarks.peers.runs import SharedSummaryPolicy
    from benchmarks.peers.summary import ctxpolicy_summary
    from ctxpolicy.sim.replay import _sim_store, with_window

    msgs = load_trace(require(TRACES / TRACE))
    policy, _ = load_agent("coding_agent")
    pol = with_window(policy, WINDOW)
    s = SharedSummaryPolicy(
        pol,
        conv_id="t",
        label="t",
        store=_sim_store(pol, tmp_path),
        summarizer=ctxpolicy_summary(ruler().count_text),
    )
    s._recalled["ctxsnap://t/history"] = "stale"
    _, layers = s.prepare([dict(m) for m in msgs[:2]])
    assert not layers and s._recalled == {"ctxsnap://t/history": "stale"}
    convo = [dict(m) for m in msgs if m["role"] != "assistant" or m is not msgs[-1]]
    _, layers = s.prepare(convo)
    assert layers and s._recalled == {}
