"""deepagents' and langmem's per-call replays (benchmarks/peers/others.py) on a real
trace, with the real libraries: one positive time per model call. No wall-clock
thresholds."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks._inputs import load_agent
from benchmarks.peers import others
from benchmarks.peers.timing import _lc_steps
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.tokens import get_counter
from tests.shared_data import TRACES, require

TRACE = "swe-agent__demo.ctf.crypto.katy.jsonl"


@pytest.fixture(scope="module")
def setup() -> tuple[Any, list[list[Any]], Any]:
    policy, _ = load_agent("coding_agent_16k")
    steps = _lc_steps(load_trace(require(TRACES / TRACE)))
    counter = get_counter(policy.model, model_name=policy.model_name)
    return policy, steps, counter.count_text


@pytest.mark.parametrize("peer", sorted(others.PEERS))
def test_a_peer_is_timed_once_per_model_call(peer: str, setup: Any) -> None:
    if peer not in others.available():
        pytest.skip(f"{peer} is not installed (the `peers` extra)")
    policy, steps, count = setup
    replay = {"deepagents": others.replay_deepagents, "langmem": others.replay_langmem}[peer]
    times = replay(policy, steps, count)
    assert len(times) == len(steps)
    assert all(t > 0 for t in times)


def test_available_lists_installed_peers_only() -> None:
    import importlib.util

    got = others.available()
    assert set(got) <= set(others.PEERS)
    for name, module in others.PEERS.items():
        assert (name in got) == (importlib.util.find_spec(module) is not None)
