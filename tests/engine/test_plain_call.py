"""Issue 32 item 3: a ``prepare`` that compacts nothing does no compaction work, and its
Python-level work does not grow with the conversation (counted, never timed)."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

import pytest

from ctxpolicy.engine import Session
from ctxpolicy.engine import pipeline as pipeline_module
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.tokens import TokenCounter
from tests.engine_helpers import conversation, make_policy


def _policy() -> Any:  # nothing this file sends comes near the trigger
    return make_policy(model={"context_window": 1_000_000, "max_output_tokens": 1000})


def _replay(session: Session, msgs: list[dict[str, Any]], at: set[int]) -> dict[int, int]:
    """Prepare before every assistant message; Python calls of the prepares at ``at``
    (conversation lengths), each profiled on its own."""
    calls: dict[int, int] = {}
    for n, m in enumerate(msgs):
        if m["role"] != "assistant" or n == 0:
            continue
        prof = cProfile.Profile() if n in at else None
        if prof is not None:
            prof.enable()
        session.prepare(msgs[:n])
        if prof is not None:
            prof.disable()
            calls[n] = sum(v[1] for v in pstats.Stats(prof).stats.values())  # type: ignore[attr-defined]
    return calls


def test_a_call_without_an_eligible_step_weighs_no_rewrite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compaction economics (``_weigher``: prices, the ledger's place, the typical
    tool result) are built only when a step may run."""
    built: list[int] = []
    real = pipeline_module._weigher

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline_module, "_weigher", counted)
    s = Session(_policy(), conv_id="plain", state_store=MemoryStateStore())
    _replay(s, conversation(20, 300), set())
    assert s.stats.prepares == 20 and not s.stats.compactions
    assert built == []


def test_python_work_per_plain_call_does_not_grow_with_the_conversation() -> None:
    """Python function calls of one ``prepare`` that compacts nothing, state commit
    included: the same at 40 and at 400 messages (C-level comparisons of the input
    with the previous call's are linear in it; their Python calls are not)."""
    msgs = conversation(200, 300)
    policy = _policy()
    # a counter of its own: messages other tests counted would be cache hits here
    counter = TokenCounter(policy.model, model_name=policy.model_name)
    s = Session(policy, conv_id="plain", state_store=MemoryStateStore(), counter=counter)
    early, late = 40, 400  # conversation lengths before an assistant message
    assert msgs[early]["role"] == msgs[late]["role"] == "assistant"
    calls = _replay(s, msgs, {early, late})
    assert not s.stats.compactions
    assert calls[late] <= calls[early] * 1.05, calls
