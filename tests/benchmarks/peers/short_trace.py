"""The short real trace the peer tests replay, and what they read of a run."""

from __future__ import annotations

from typing import Any

from benchmarks._inputs import load_agent
from benchmarks.peers.catalog import LABELS
from benchmarks.peers.runs import Contestant, ruler, run_contestant
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.replay import message_text
from tests.shared_data import TRACES, require

TRACE = "swe-agent__demo.ctf.crypto.katy.jsonl"  # 38 messages, ~8.5k tokens


def recorded_run(kind: str, window: int) -> dict[str, Any]:
    """Peer ``kind`` (its catalogue label) under ``coding_agent`` at ``window`` on
    :data:`TRACE`, measured by the ruler, every request recorded."""
    msgs = load_trace(require(TRACES / TRACE))
    policy, _ = load_agent("coding_agent")
    c = Contestant(LABELS[kind], kind, policy)
    return run_contestant(msgs, c, window, trace=TRACE, counter=ruler(), record=True)


def texts(request: list[dict[str, Any]]) -> str:
    """The text of every message of one request, a line apart."""
    return "\n".join(message_text(m) for m in request)
