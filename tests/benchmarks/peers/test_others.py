"""The peers' per-call replays (benchmarks/peers/others.py: LangChain, deepagents,
langmem) on a real trace, with the real libraries: one positive time per model call.
No wall-clock thresholds."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks._inputs import load_agent
from benchmarks.peers.catalog import available_peers
from benchmarks.peers.others import PEER_REPLAYS, langchain_steps
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.tokens import get_counter
from tests.shared_data import TRACES, require

TRACE = "swe-agent__demo.ctf.crypto.katy.jsonl"


@pytest.fixture(scope="module")
def setup() -> tuple[Any, list[list[Any]], Any]:
    policy, _ = load_agent("coding_agent_16k")
    steps = langchain_steps(load_trace(require(TRACES / TRACE)))
    counter = get_counter(policy.model, model_name=policy.model_name)
    return policy, steps, counter.count_text


@pytest.mark.parametrize("peer", sorted(PEER_REPLAYS))
def test_a_peer_is_timed_once_per_model_call(peer: str, setup: Any) -> None:
    if peer != "langchain" and not available_peers((peer,))[0]:
        pytest.skip(f"{peer} is not installed (the `bench` extra)")
    policy, steps, count = setup
    times = PEER_REPLAYS[peer](policy, steps, count)
    assert len(times) == len(steps)
    assert all(t > 0 for t in times)
