"""OpenHands' condenser as a peer: the loopback summary endpoint, and the real
``LLMSummarizingCondenser`` on one short real trace.

The endpoint test needs nothing but the standard library (a real HTTP round trip).
The condenser test runs ``openhands-sdk`` in its Python 3.12 virtualenv
(``python -m benchmarks.peers.openhands`` builds it); it is skipped when that
virtualenv is not there.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from benchmarks.peers.openhands import DigestServer, available
from benchmarks.peers.summary import HEADER
from ctxpolicy.sim.metrics import SummaryMeter
from tests.shared_data import TRACES, require

TRACE = "swe-agent__demo.ctf.crypto.katy.jsonl"  # 38 messages, ~8.5k tokens
WINDOW = 8192


def _count(text: str) -> int:
    return len(text.split())


def test_the_summary_endpoint_answers_with_the_digest_and_bills_it() -> None:
    meter = SummaryMeter(_count)
    server = DigestServer(_count, meter)
    try:
        body = {
            "model": "digest",
            "messages": [
                {"role": "system", "content": "Summarize the events."},
                {"role": "user", "content": "edited src/app/models.py; ValueError at line 42"},
            ],
        }
        req = urllib.request.Request(
            server.base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer = json.loads(resp.read())
    finally:
        server.close()
    text = answer["choices"][0]["message"]["content"]
    assert text.startswith(HEADER)
    assert "src/app/models.py" in text and "ValueError" in text
    assert "Summarize the events" not in text  # the digest is of the events only
    calls, prompt_tokens, reply_tokens = meter.totals()
    assert calls == 1 and prompt_tokens > 0 and reply_tokens > 0


def test_the_real_condenser_condenses_a_real_trace() -> None:
    # asked here, not at collection: the check imports the SDK in its own interpreter
    # (~15 s on 2 cores), which every xdist worker would pay while collecting
    if not available():
        pytest.skip("the OpenHands virtualenv is not built (python -m benchmarks.peers.openhands)")
    from benchmarks.peers.openhands import OpenHandsStrategy
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import load_policy_file, run_strategy, with_window

    policy = with_window(load_policy_file("policies/agents.yaml", "coding_agent"), WINDOW)
    strat = OpenHandsStrategy(policy)
    try:
        res: dict[str, Any] = run_strategy(
            load_trace(require(TRACES / TRACE)), strat, counter=strat.counter, trace=TRACE
        ).to_dict()
    finally:
        strat.close()
    assert strat.summaries and all(s.startswith(HEADER) for s in strat.summaries)
    assert strat.summarizer_tokens()[0] >= 1  # the summary LLM was called and billed
    assert res["pairing_violations"] == 0
    assert res["billing"]["total_cost"] > 0
    assert 0 < res["retention"]["in_context"] <= res["retention"]["facts"]
