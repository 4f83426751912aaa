"""Issue 28 item 10: a tool-call id chosen by the model never poisons the stored state.

The snapshot reference of a result is the state entry ``ref/<id>`` when that is a
valid key (what 0.1 stored, so its state still resumes) and ``refh/<digest>`` (value
``{id, uri}``) for any other id: over 1,024 characters, a NUL, a lone surrogate.
Every such id is saved, resumed exactly, and never leaves a refused change pending.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.engine import Session
from ctxpolicy.engine.state import ref_key
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from ctxpolicy.state.sync import StateSync
from tests.engine_helpers import make_policy

BIG = "result line with some detail\n" * 400  # large enough to be snapshotted
HOSTILE = ["x" * 1025, "x" * 5000, "a\x00b", "\ud800", "ok\udfffok", "\x00", "é" * 1021]


def _call(cid: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _run(tmp: Path, ids: list[str]) -> tuple[Session, SqliteStateStore, list[dict[str, Any]]]:
    policy = make_policy(tmp)
    store = SqliteStateStore(SqliteOptions(path=str(tmp / "s.db")))
    events: list[dict[str, Any]] = []
    s = Session(policy, conv_id="ids", state_store=store, on_event=events.append)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Task: read the files."}]
    for cid in ids:
        msgs.append({"role": "assistant", "content": None, "tool_calls": [_call(cid)]})
        msgs.append(
            {"role": "tool", "tool_call_id": cid, "content": s.add_tool_result(_call(cid), BIG)}
        )
        s.prepare(msgs)
    return s, store, events


def _failures(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    bad = ("state.save_failed", "state.entry_refused", "state.invalid", "state.unavailable")
    return [e for e in events if e["type"] in bad]


def test_plain_ids_keep_their_old_keys() -> None:
    assert ref_key("call_1") == "ref/call_1"
    assert ref_key("x" * 1020) == "ref/" + "x" * 1020
    for cid in HOSTILE:
        key = ref_key(cid)
        assert key.startswith("refh/") and len(key) == 5 + 32, cid[:10]
    assert len({ref_key(c) for c in HOSTILE}) == len(HOSTILE)


def test_hostile_ids_are_saved_and_resumed(tmp_path: Path) -> None:
    s, store, events = _run(tmp_path, ["call_ok", *HOSTILE])
    assert not _failures(events), _failures(events)
    assert set(s.state.refs) == {"call_ok", *HOSTILE}
    stored = store.load("ids").entries
    assert stored["ref/call_ok"] == s.state.refs["call_ok"]
    again = Session(make_policy(tmp_path), conv_id="ids", state_store=store)
    assert again.state.refs == s.state.refs
    assert again.state.to_entries() == s.state.to_entries()
    store.close()


def test_a_crafted_hashed_ref_for_another_id_is_dropped(tmp_path: Path) -> None:
    _s, store, _ = _run(tmp_path, ["\x00"])
    key = ref_key("\x00")
    version = store.load("ids").version
    store.commit("ids", expected_version=version, put={key: {"id": "\x01", "uri": "ctxsnap://x"}})
    events: list[dict[str, Any]] = []
    again = Session(make_policy(tmp_path), conv_id="ids", state_store=store, on_event=events.append)
    assert "\x01" not in again.state.refs
    assert [e["key"] for e in events if e["type"] == "state.invalid"] == [key]
    store.close()


@pytest.mark.parametrize("bad", ["ref/" + "x" * 2000, "a\x00", "\ud800", 5, ""])
def test_an_invalid_key_never_stays_pending(bad: Any) -> None:
    """Defence in depth: a key no store can hold is refused with an event instead of
    becoming a pending change every later save fails on."""
    from ctxpolicy.state.memory import MemoryStateStore

    events: list[str] = []
    sync = StateSync(MemoryStateStore(), "c", emit=lambda t, **f: events.append(t))
    assert sync.save({bad: 1, "good": 2}) is True
    assert events == ["state.entry_refused"] and not sync.pending
    assert sync.store.load("c").entries == {"good": 2}
    assert sync.save({"good": 3}) is True


_ids = st.one_of(
    st.text(st.characters(blacklist_categories=()), min_size=1, max_size=40),
    st.text(st.characters(blacklist_categories=()), min_size=1020, max_size=1100),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(_ids, min_size=1, max_size=3, unique=True))
def test_any_tool_call_id_resumes_exactly(ids: list[str]) -> None:
    """Hypothesis over ids (any code point, surrogates and NUL included, around the key
    length limit): every call succeeds, no change is refused, a new process's session
    resumes the same references."""
    with tempfile.TemporaryDirectory() as tmp:
        s, store, events = _run(Path(tmp), ids)
        assert not _failures(events)
        assert set(s.state.refs) == set(ids)
        again = Session(make_policy(Path(tmp)), conv_id="ids", state_store=store)
        assert again.state.refs == s.state.refs
        assert json.dumps(again.state.to_entries(), sort_keys=True) == json.dumps(
            s.state.to_entries(), sort_keys=True
        )
        store.close()
