"""The engine in worker processes: the same bytes as in threads (real traces), events
in order, errors that travel, a worker that dies, no process left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.calls import SessionPool
from ctxpolicy.calls.processes import (
    EngineProcesses,
    EngineWorkerError,
    PlacedSession,
    _carried,
    _image,
    engine_processes,
    heavy_limits,
    is_heavy,
)
from ctxpolicy.engine import ContextOverflowError
from ctxpolicy.engine.overflow import is_context_overflow, parse_limit
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.state import open_state_store
from tests.calls.test_pool import history, with_state
from tests.integrations.conftest import make_policy
from tests.shared_data import shared_traces

#: event fields that say when, not what
CLOCK = {"ts", "duration_ms", "elapsed_ms"}
EVERY = (0, 0)  # every conversation in an engine process from its first step


def lane_policy(root: Path, store: str = "sqlite") -> Policy:
    policy = make_policy(root, window=6000, ledger=True)
    return (
        with_state(policy, store, path=str(root / "state.db"))
        if store == "sqlite"
        else (with_state(policy, store))
    )


def calls_of(messages: list[dict[str, Any]], most: int = 60) -> list[list[dict[str, Any]]]:
    """The requests an agent loop sends: the history before each assistant turn."""
    cuts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    return [messages[:i] for i in cuts[:most]]


def drive(pool: SessionPool, conv: str, calls: list[list[dict[str, Any]]]) -> list[str]:
    """Each call prepared, its usage recorded (the prepared size), an overflow shown
    once: the prepared requests as JSON text."""
    s = pool.get(conv)
    out = []
    for n, msgs in enumerate(calls):
        prepared = s.prepare(msgs)
        out.append(json.dumps(prepared, sort_keys=True))
        s.record_usage(100 + len(json.dumps(prepared)) // 4)
        if n == len(calls) // 2:
            retry = s.on_error(
                ValueError("This model's maximum context length is 5000 tokens."), msgs
            )
            out.append(json.dumps(retry, sort_keys=True))
    return out


def clocked(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in CLOCK} for e in events]


def stored(policy: Policy, conv_id: str) -> dict[str, Any]:
    store = open_state_store(policy)
    try:
        entries = dict(store.load(conv_id).entries)
    finally:
        store.close()
    if isinstance(entries.get("status"), dict):  # the last status event, with its clock
        entries["status"] = clocked([entries["status"]])[0]
    return entries


@pytest.mark.parametrize("lane", ["processes", "moved"])
def test_real_traces_give_the_same_bytes_events_and_state_as_threads(
    tmp_path: Path, lane: str
) -> None:
    traces = shared_traces()
    picked = list(dict.fromkeys(sorted(traces, key=lambda p: -p.stat().st_size)[:3] + traces[:3]))
    results = {}
    for name, (n, heavy) in {
        "threads": (0, None),
        lane: (1, EVERY if lane == "processes" else (25, 10**9)),
    }.items():
        root = tmp_path / name
        policy = lane_policy(root)
        events: list[dict[str, Any]] = []
        pool = SessionPool(policy, engine_processes=n, heavy=heavy, on_event=events.append)
        try:
            prepared = {p.name: drive(pool, p.name, calls_of(load_trace(p))) for p in picked}
        finally:
            pool.close()
        state = {p.name: stored(policy, f"test_agent/{p.name}") for p in picked}
        results[name] = (prepared, clocked(events), state)
    threads, other = results["threads"], results[lane]
    for p in picked:
        assert other[0][p.name] == threads[0][p.name], p.name
        assert other[2][p.name] == threads[2][p.name], p.name
    events = other[1]
    if lane == "moved":  # a move is a resume: the session opened there says so, once
        resumed = [i for i, e in enumerate(events) if e["type"] == "state.resumed"]
        sizes = [[len(c) for c in calls_of(load_trace(p))] for p in picked]
        moved = sum(s[0] < 25 <= max(s) for s in sizes)  # had state here, then moved
        assert 0 < len(resumed) == moved
        opened = {i for r in resumed for i in (r - 1, r)}
        assert all(events[i - 1]["type"] == "tokenizer.fallback" for i in resumed)
        events = [e for i, e in enumerate(events) if i not in opened]
    assert events == threads[1]
    assert any(e["type"] == "context.compacted" for e in threads[1])


def test_a_conversation_moves_when_a_step_is_heavy_and_stays(tmp_path: Path) -> None:
    pool = SessionPool(lane_policy(tmp_path), engine_processes=1, heavy=(30, 10**9))
    try:
        s = pool.get("c")
        assert isinstance(s, PlacedSession)
        s.prepare(history(3))
        assert not s.moved and s.local is not None
        s.prepare(history(20))
        assert s.moved and s.local is None
        s.prepare(history(3))  # a light step of a moved conversation stays there
        assert s.moved
        assert pool.processes is not None and len(pool.processes.pids()) == 1
    finally:
        pool.close()


def test_a_memory_store_conversation_never_moves_once_it_has_state(tmp_path: Path) -> None:
    pool = SessionPool(lane_policy(tmp_path, "memory"), engine_processes=1, heavy=(30, 10**9))
    try:
        light = pool.get("light")
        light.prepare(history(3))
        light.prepare(history(20))
        assert isinstance(light, PlacedSession) and not light.moved
        heavy = pool.get("heavy")  # its first step is heavy: it runs there from the start
        heavy.prepare(history(20))
        assert isinstance(heavy, PlacedSession) and heavy.moved
    finally:
        pool.close()


def test_provider_errors_are_read_the_same_after_the_trip() -> None:
    httpx = pytest.importorskip("httpx")
    openai = pytest.importorskip("openai")
    req = httpx.Request("POST", "http://upstream/v1/chat/completions")
    body = {"error": {"message": "maximum context length is 8192 tokens", "code": "x"}}
    resp = httpx.Response(400, request=req, json=body)
    errors: list[BaseException] = [
        openai.BadRequestError("Error code: 400", response=resp, body=body["error"]),
        ValueError("This model's maximum context length is 4097 tokens"),
        RuntimeError("unrelated"),
    ]
    chained = KeyError("outer")
    chained.__cause__ = errors[0]
    errors.append(chained)
    for exc in errors:
        back = _carried(_image(exc))
        assert is_context_overflow(back) == is_context_overflow(exc)
        assert parse_limit(back) == parse_limit(exc)
        assert str(back) == str(exc)


def test_engine_errors_come_back_as_themselves(tmp_path: Path) -> None:
    pool = SessionPool(lane_policy(tmp_path), engine_processes=1, heavy=EVERY)
    try:
        s = pool.get("c")
        msgs = history(2)
        s.prepare(msgs)
        too_long = ValueError("This model's maximum context length is 5000 tokens.")
        assert s.on_error(too_long, msgs) is not None
        with pytest.raises(ContextOverflowError) as caught:
            s.on_error(too_long, msgs)
        assert caught.value.attempts == 2
        assert s.on_error(RuntimeError("not an overflow"), msgs) is None
        with pytest.raises(TypeError):
            s.prepare(None)  # type: ignore[arg-type]
        assert s.prepare(msgs)  # the session is still usable
    finally:
        pool.close()


def test_recall_runs_in_the_conversations_process(tmp_path: Path) -> None:
    pool = SessionPool(lane_policy(tmp_path), engine_processes=1, heavy=EVERY)
    try:
        s = pool.get("c")
        schemas, handler = s.recall_tool()
        assert {t["function"]["name"] for t in schemas} == {"ctx_recall", "ctx_search"}
        assert isinstance(handler("ctx_search", {"query": "nothing"}), str)
    finally:
        pool.close()


def test_a_dead_worker_fails_its_step_then_restarts_and_resumes(tmp_path: Path) -> None:
    policy = lane_policy(tmp_path)
    pool = SessionPool(policy, engine_processes=1, heavy=EVERY)
    assert pool.processes is not None
    try:
        s = pool.get("c")
        first = s.prepare(history(4))
        (pid,) = pool.processes.pids()
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        again = s.prepare(history(4))  # a new process resumes from the sqlite store
        assert again == first
        (new_pid,) = pool.processes.pids()
        assert new_pid != pid

        failed: list[BaseException] = []

        def long_step() -> None:
            try:
                s.prepare(history(1500))
            except BaseException as exc:
                failed.append(exc)

        t = threading.Thread(target=long_step)
        t.start()
        time.sleep(0.5)
        os.kill(new_pid, signal.SIGKILL)
        t.join(60)
        assert len(failed) == 1 and isinstance(failed[0], EngineWorkerError)
        assert "exited" in str(failed[0]) and "resume" in str(failed[0])
        assert s.prepare(history(4)) == first
    finally:
        pool.close()


def test_a_worker_gone_while_its_step_is_sent_says_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that dies before it has read the whole step (the pipe breaks under the
    writer) fails the step with the same error as one that dies while running it: it
    exited, and its conversations resume at the next call (it used to say only "is
    gone: [Errno 32] Broken pipe")."""
    from ctxpolicy.calls import processes

    pool = SessionPool(lane_policy(tmp_path), engine_processes=1, heavy=EVERY)
    try:
        s = pool.get("c")
        first = s.prepare(history(4))
        real = processes.write_frame

        def broken(*args: Any) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        monkeypatch.setattr(processes, "write_frame", broken)
        with pytest.raises(EngineWorkerError) as caught:
            s.prepare(history(4))
        assert "exited" in str(caught.value) and "resume" in str(caught.value)
        monkeypatch.setattr(processes, "write_frame", real)
        assert s.prepare(history(4)) == first
    finally:
        pool.close()


def test_close_stops_every_process(tmp_path: Path) -> None:
    pool = SessionPool(lane_policy(tmp_path), engine_processes=2, heavy=EVERY)
    assert pool.processes is not None
    pool.processes.start(wait=True)
    pids = pool.processes.pids()
    assert len(pids) == 2
    pool.close()
    assert pool.processes.pids() == []
    for pid in pids:
        assert not _alive(pid)
    with pytest.raises(EngineWorkerError):
        pool.processes.call(("a", "", "c"), False, "run", (len, ()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by a dead parent's init) counts as gone
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def test_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from ctxpolicy.calls import SessionPool\n"
        "from ctxpolicy import load_policy\n"
        "p = load_policy('policies/agents.yaml', agent='coding_agent')\n"
        "pool = SessionPool(p, engine_processes=2)\n"
        "pool.processes.start(wait=True)\n"
        "print(*pool.processes.pids(), flush=True)\n"
        "sys.stdin.read()\n"
    )
    root = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
    )
    assert parent.stdout is not None
    pids = [int(x) for x in parent.stdout.readline().split()]
    assert len(pids) == 2
    parent.kill()
    parent.wait(30)
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def test_configuration_is_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXPOLICY_ENGINE_PROCESSES", "3")
    assert engine_processes() == 3
    assert engine_processes(0) == 0
    monkeypatch.setenv("CTXPOLICY_ENGINE_PROCESSES", "many")
    with pytest.raises(ValueError, match="CTXPOLICY_ENGINE_PROCESSES"):
        engine_processes()
    with pytest.raises(ValueError, match="between 0 and 256"):
        engine_processes(-1)
    monkeypatch.setenv("CTXPOLICY_ENGINE_HEAVY", "10,20")
    assert heavy_limits() == (10, 20)
    with pytest.raises(ValueError, match="MESSAGES,CHARACTERS"):
        heavy_limits("ten")
    # session options that cannot reach another process are refused up front
    with pytest.raises(ValueError, match="picklable"):
        SessionPool(lane_policy(tmp_path), engine_processes=1, summarizer=lambda: None)
    with pytest.raises(ValueError, match="state_store"):
        SessionPool(lane_policy(tmp_path), engine_processes=1, state_store=object())


def test_heavy_is_bounded_by_its_limits() -> None:
    assert is_heavy([{"content": "x"}] * 5, (5, 10**9))
    assert not is_heavy([{"content": "x"}] * 4, (5, 10**9))
    assert is_heavy([{"content": [{"type": "text", "text": "y" * 50}]}], (5, 50))
    assert not is_heavy("not a list", (0, 0))


def test_a_request_over_the_frame_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxpolicy.calls import processes

    pool = SessionPool(lane_policy(tmp_path), engine_processes=1, heavy=EVERY)
    try:
        s = pool.get("c")
        s.prepare(history(1))
        monkeypatch.setattr(processes, "MAX_FRAME_BYTES", 10_000)
        with pytest.raises(ValueError, match="over the 10,000-byte limit"):
            s.prepare(history(20))
        monkeypatch.undo()
        assert s.prepare(history(1))
    finally:
        pool.close()


def test_engine_processes_reject_a_spec_that_cannot_travel() -> None:
    with pytest.raises(ValueError, match="picklable"):
        EngineProcesses(1, {"x": lambda: None})
