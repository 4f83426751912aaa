"""ctxpolicy's replay loop of the per-call measurements: ``prepare`` before every
assistant message, ``add_tool_result`` per tool result, each timed (a leaf: the timing,
parts and worker modules all use it)."""

from __future__ import annotations

import cProfile
import gc
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers.summary import ctxpolicy_summary

__all__ = ["STATE", "replay_ctxpolicy"]

Message = dict[str, Any]

#: The state store of the timed replays: the shipped policies' default (``sqlite``, a
#: file in the snapshot root), what the per-call goal is stated for (issue 32).
STATE = "sqlite"


def replay_ctxpolicy(
    policy: Any,
    msgs: Sequence[Mapping[str, Any]],
    profiler: cProfile.Profile | None = None,
    state: str = STATE,
) -> tuple[list[float], list[float]]:
    """Seconds of ``prepare`` per call and of ``add_tool_result`` booked per call.
    ``state``: ``sqlite`` (a fresh file per replay, the policy's default store) or
    ``memory``."""
    from ctxpolicy import Session
    from ctxpolicy.sim.replay import _sim_store, call_for
    from ctxpolicy.state.memory import MemoryStateStore
    from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
    from ctxpolicy.tokens import get_counter

    tmp = Path(tempfile.mkdtemp(prefix="ctxpolicy-percall-"))
    store = (
        SqliteStateStore(SqliteOptions(path=str(tmp / "state.sqlite3")))
        if state == "sqlite"
        else MemoryStateStore()
    )
    try:
        counter = get_counter(policy.model, model_name=policy.model_name)
        session = Session(
            policy,
            conv_id="percall",
            snapshot_store=_sim_store(policy, tmp),
            summarizer=ctxpolicy_summary(counter.count_text),
            state_store=store,  # every repeat starts fresh
        )
        clock = time.perf_counter
        on = profiler.enable if profiler else (lambda: None)
        off = profiler.disable if profiler else (lambda: None)
        prep: list[float] = []
        tools: list[float] = []
        pending: dict[str, Mapping[str, Any]] = {}
        convo: list[Message] = []
        booked = 0.0
        gc.collect()
        for m in msgs:
            role = m.get("role")
            if role == "assistant" and convo:
                on()
                t0 = clock()
                session.prepare(convo)
                dt = clock() - t0
                off()
                prep.append(dt)
                tools.append(booked)
                booked = 0.0
            if role == "tool":
                tid = str(m.get("tool_call_id", ""))
                call = call_for(pending, tid)
                on()
                t0 = clock()
                text = session.add_tool_result(call, m.get("content"))
                booked += clock() - t0
                off()
                convo.append({**m, "content": text})
                continue
            if role == "assistant":
                pending = {str(tc.get("id", "")): tc for tc in m.get("tool_calls") or []}
            convo.append(dict(m))
        return prep, tools
    finally:
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)
