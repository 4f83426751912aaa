"""Issue 32 item 2: a commit is proportional to what changed. The scalars of the state
are three entries — ``meta`` (the format and the per-call counters), ``status`` (the
last ``context.status``) and ``scalars`` (what rarely changes) — each written only when
its value changed; a state written before (``meta`` holding all of them, as 0.1 wrote
it) resumes exactly and is moved with its next save."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.engine import Session
from ctxpolicy.engine.state import SessionState
from ctxpolicy.sim.replay import with_snapshots
from ctxpolicy.state.memory import MemoryStateStore
from tests.engine.test_state_texts import _store
from tests.engine_helpers import apply_changes, conversation, make_policy

_LEGACY = ("learned_window", "calibration", "usage_seen", "overflow_attempts", "hold_until")


def _policy(tmp: Path) -> Any:
    return with_snapshots(
        make_policy(model={"context_window": 1_000_000, "max_output_tokens": 1000}), tmp
    )


def test_each_call_writes_only_the_scalar_entries_it_changed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    s = Session(_policy(tmp_path), conv_id="c", state_store=store)
    msgs = conversation(4, 40)
    s.prepare(msgs)
    assert {"meta", "status", "scalars"} <= store.commits[-1].keys()  # the first save
    s.prepare(msgs)
    assert {"meta", "status"} <= store.commits[-1].keys()
    assert "scalars" not in store.commits[-1], "nothing rare changed"
    s.add_tool_result({"id": "t1", "function": {"name": "bash"}}, "line\n" * 400)
    tool = store.commits[-1]
    assert "meta" in tool and "status" not in tool and "scalars" not in tool
    assert tool["meta"] < 400, "the counters only"
    s.record_usage(1200, counted=1000)
    assert set(store.commits[-1]) == {"scalars"}, "calibration only"
    # what the incremental saves wrote is the full state
    assert store.load("c").entries == json.loads(json.dumps(s.state_entries()))
    store.close()


def _legacy(entries: dict[str, Any]) -> dict[str, Any]:
    """The same state in the layout before the split: every scalar in ``meta``."""
    old = {k: v for k, v in entries.items() if k not in ("scalars", "status")}
    old["meta"] = {**entries["meta"], **entries["scalars"], "status": entries["status"]}
    return old


def test_state_written_before_the_split_resumes_and_is_moved(tmp_path: Path) -> None:
    store = _store(tmp_path)
    policy = _policy(tmp_path)
    s = Session(policy, conv_id="c", state_store=store)
    msgs = conversation(6, 40)
    s.prepare(msgs[:-2])
    s.add_tool_result({"id": "t1", "function": {"name": "bash"}}, "out\n" * 300)
    s.record_usage(1300, counted=1000)
    entries = store.load("c").entries
    store.commit("old", expected_version=0, put=_legacy(entries))
    resumed = Session(policy, conv_id="old", state_store=store)
    for field in (*_LEGACY, "step", "status", "stats"):
        assert getattr(resumed.state, field) == getattr(s.state, field), field
    assert not resumed.state.problems
    assert json.dumps(resumed.prepare(msgs)) == json.dumps(s.prepare(msgs))
    moved = store.load("old").entries
    assert set(moved["meta"]) == {"format", "step", "stats"}
    assert moved["scalars"] == {f: getattr(s.state, f) for f in _LEGACY}
    assert moved["status"]["type"] == "context.status"
    store.close()


def test_a_resumed_session_does_not_rewrite_unchanged_entries(tmp_path: Path) -> None:
    store = _store(tmp_path)
    policy = _policy(tmp_path)
    Session(policy, conv_id="c", state_store=store).prepare(conversation(3, 40))
    resumed = Session(policy, conv_id="c", state_store=store)
    resumed.add_tool_result({"id": "t9", "function": {"name": "bash"}}, "x")
    assert "status" not in store.commits[-1] and "scalars" not in store.commits[-1]
    store.close()


_scalar = st.sampled_from(["step", "prepares", "calibration", "hold_until", "status", "none"])


@given(st.lists(st.tuples(_scalar, st.integers(0, 9), st.sampled_from(["", "save", "reload"]))))
@settings(max_examples=150, deadline=None)
def test_incremental_saves_of_the_scalars_equal_the_full_state(
    steps: list[tuple[str, int, str]],
) -> None:
    """Whatever changes between saves, and across reloads (the remembered values come
    from what was loaded), the incremental saves hold what a full save holds."""
    state = SessionState()
    stored: dict[str, Any] = {}

    apply_changes(state, stored)
    for what, n, then in steps:
        if what == "step":
            state.step += n
        elif what == "prepares":
            state.stats.prepares += n
        elif what == "calibration":
            state.calibration = 0.5 + n / 10
        elif what == "hold_until":
            state.hold_until = n or None
        elif what == "status":
            state.status = {"type": "context.status", "used": n}
        state.touch("meta")
        if then == "save":
            apply_changes(state, stored)
        elif then == "reload":
            apply_changes(state, stored)
            state = SessionState.from_entries(json.loads(json.dumps(stored)))
            assert not state.problems
    apply_changes(state, stored)
    assert stored == json.loads(json.dumps(state.to_entries()))


def test_an_invalid_status_entry_is_deleted_with_the_next_save() -> None:
    store = MemoryStateStore()
    s = Session(make_policy(), conv_id="c", state_store=store)
    s.prepare(conversation(2, 10))
    store.commit("c", expected_version=store.load("c").version, put={"status": "broken"})
    events: list[dict[str, Any]] = []
    again = Session(make_policy(), conv_id="c", state_store=store, on_event=events.append)
    assert [e["key"] for e in events if e["type"] == "state.invalid"] == ["status"]
    again.record_usage(100, counted=100)
    assert "status" not in store.load("c").entries
