"""``Session(..., record=PATH)``: recorded traces simulate to the numbers of the run."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from ctxpolicy import load_policy
from ctxpolicy.engine import Session
from ctxpolicy.engine import recorder as recorder_mod
from ctxpolicy.engine.recorder import RecordError
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.importers import load_trace, mark_warning
from ctxpolicy.sim.replay import call_for, replay_trace
from ctxpolicy.state.memory import MemoryStateStore
from tests.engine_helpers import call, make_policy

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted((ROOT / "examples" / "traces").glob("*.jsonl"))


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(str(ROOT / "policies" / "agents.yaml"), agent="coding_agent_16k")


def run_agent(
    session: Session, trace: Sequence[Mapping[str, Any]], *, keep_prepared: bool = False
) -> list[dict[str, Any]]:
    """An agent loop driven by a trace: prepare before each model answer, every tool
    result through ``add_tool_result``. ``keep_prepared``: the agent keeps what
    ``prepare`` returned as its history (as some frameworks do). Returns the history."""
    convo: list[dict[str, Any]] = []
    pending: dict[str, Mapping[str, Any]] = {}
    for m in trace:
        if m["role"] == "assistant" and convo:
            out = session.prepare(convo)
            if keep_prepared:
                convo = [dict(x) for x in out]
        if m["role"] == "assistant":
            pending = {tc["id"]: tc for tc in m.get("tool_calls") or []}
            convo.append(dict(m))
        elif m["role"] == "tool":
            text = session.add_tool_result(call_for(pending, m["tool_call_id"]), m["content"])
            convo.append({**m, "content": text})
        else:
            convo.append(dict(m))
    assert session.recorder is not None
    session.recorder.record(convo)  # the model's last answer, which no prepare saw
    return convo


def numbers(trace: Sequence[Mapping[str, Any]], policy: Policy) -> dict[str, Any]:
    out = replay_trace(trace, policy, trace="t").to_dict()
    out.pop("duration_ms", None)
    return out


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_recorded_trace_is_the_raw_trace_and_simulates_the_same(
    trace: Path, policy: Policy, tmp_path: Path
) -> None:
    raw = load_trace(trace)
    path = tmp_path / "run.jsonl"
    s = Session(policy, conv_id="run-1", record=path, state_store=MemoryStateStore())
    history = run_agent(s, raw)
    recorded = load_trace(path)
    assert recorded == raw
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert numbers(recorded, policy) == numbers(raw, policy)
    # the obvious export, the agent's history, holds preprocessed results: other numbers
    hist = tmp_path / "history.jsonl"
    hist.write_text("".join(json.dumps(m) + "\n" for m in history), encoding="utf-8")
    assert numbers(load_trace(hist), policy)["saving"] < numbers(raw, policy)["saving"]
    assert mark_warning(path) is None
    warning = mark_warning(hist)
    assert warning is not None and warning.startswith(f"{hist}:")


def test_agent_that_keeps_the_prepared_list(policy: Policy, tmp_path: Path) -> None:
    raw = load_trace(TRACES[0])
    path = tmp_path / "run.jsonl"
    s = Session(policy, conv_id="keep", record=path, state_store=MemoryStateStore())
    run_agent(s, raw, keep_prepared=True)
    assert load_trace(path) == raw


def test_resumed_conversation_writes_nothing_twice(policy: Policy, tmp_path: Path) -> None:
    raw = load_trace(TRACES[0])
    half = next(i for i in range(len(raw) // 2, len(raw)) if raw[i]["role"] == "assistant")
    path = tmp_path / "run.jsonl"
    first = Session(policy, conv_id="r", record=path, state_store=MemoryStateStore())
    run_agent(first, raw[:half])
    del first
    again = Session(policy, conv_id="r", record=path, state_store=MemoryStateStore())
    assert again.recorder is not None and again.recorder.written == half
    run_agent(again, raw)
    assert load_trace(path) == raw


def test_directory_gives_each_conversation_its_file(tmp_path: Path) -> None:
    pol = make_policy()
    d = tmp_path / "traces"
    a = Session(pol, conv_id="a", record=f"{d}/")
    b = Session(pol, conv_id="../../escape\n", record=d)
    a.prepare([{"role": "user", "content": "hi a"}])
    b.prepare([{"role": "user", "content": "hi b"}])
    files = sorted(p.name for p in d.iterdir())
    assert len(files) == 2 and all(p.parent == d for p in d.iterdir())
    assert not (tmp_path / "escape").exists()
    assert load_trace(d / "a.jsonl") == [{"role": "user", "content": "hi a"}]


def test_two_conversations_on_one_file_is_an_error(tmp_path: Path) -> None:
    pol = make_policy()
    path = tmp_path / "one.jsonl"
    keep = Session(pol, conv_id="a", record=path)
    with pytest.raises(RecordError, match=r"already recording.*pass a directory"):
        Session(pol, conv_id="b", record=path)
    assert keep.recorder is not None


def test_bad_paths_are_clear_errors(tmp_path: Path) -> None:
    pol = make_policy()
    with pytest.raises(RecordError, match="does not exist"):
        Session(pol, conv_id="x", record=tmp_path / "missing" / "t.jsonl")
    target = tmp_path / "target.jsonl"
    target.write_text("")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    with pytest.raises(RecordError, match="symbolic link"):
        Session(pol, conv_id="x", record=link)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    done = threading.Event()

    def open_fifo() -> None:
        with pytest.raises(RecordError):
            Session(pol, conv_id="x", record=fifo)
        done.set()

    t = threading.Thread(target=open_fifo, daemon=True)
    t.start()
    t.join(10)
    assert done.is_set(), "a FIFO as record= blocked"
    other = tmp_path / "notes.jsonl"
    other.write_text("not json\n")
    with pytest.raises(RecordError, match=r"notes\.jsonl:1: not a trace"):
        Session(pol, conv_id="x", record=other)


def test_write_failure_is_an_event_not_a_crash(tmp_path: Path) -> None:
    pol = make_policy()
    path = tmp_path / "t.jsonl"
    s = Session(pol, conv_id="x", record=path)
    path.unlink()
    path.mkdir()  # every later open for writing fails
    s.prepare([{"role": "user", "content": "hello"}])
    s.prepare([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "x"}])
    failed = [e for e in s.events if e["type"] == "record.failed"]
    assert len(failed) == 1 and failed[0]["path"] == str(path)


def test_own_messages_and_unlinked_results(tmp_path: Path) -> None:
    pol = make_policy()
    path = tmp_path / "t.jsonl"
    s = Session(pol, conv_id="x", record=path)
    text = s.add_tool_result("read_file", "plain output")  # a name: no id to link it by
    msgs = [
        {"role": "system", "content": "[ctxpolicy progress ledger]\ngoal: x"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "f")]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]
    s.prepare(msgs)
    assert load_trace(path) == msgs[1:]


def test_pending_results_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder_mod, "MAX_PENDING", 3)
    monkeypatch.setattr(recorder_mod, "MAX_PENDING_CHARS", 1000)
    s = Session(make_policy(), conv_id="x", record=tmp_path / "t.jsonl")
    for i in range(10):
        s.add_tool_result({"id": f"c{i}", "name": "f"}, "y" * 400)
    assert s.recorder is not None
    pending = s.recorder._pending
    assert len(pending) <= 3 and sum(map(len, pending.values())) <= 1000


TEXT = hst.text(
    alphabet=hst.characters(blacklist_categories=()),  # every code point, surrogates too
    max_size=40,
) | hst.sampled_from(["\u2028", "a\u2029b", "\x85", "\r\n", "\ud800", "\x00"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(user=TEXT, out=TEXT)
def test_any_text_reads_back_unchanged(tmp_path: Path, user: str, out: str) -> None:
    path = tmp_path / f"h{abs(hash((user, out)))}.jsonl"
    if path.exists():
        path.unlink()
    s = Session(make_policy(), conv_id=path.name, record=path)
    c1 = call("c1", "f")
    text = s.add_tool_result(c1, out)
    msgs = [
        {"role": "user", "content": user},
        {"role": "assistant", "content": None, "tool_calls": [c1]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]
    s.prepare(msgs)
    back = load_trace(path)
    assert back == [*msgs[:2], {**msgs[2], "content": out}]
