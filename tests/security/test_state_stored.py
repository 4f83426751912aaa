"""Issue 28 item 9: damaged or crafted stored state fails safe.

Every stored entry is checked against the state's model on load: a wrong type, a
missing key, an out-of-range number, a value that is not JSON is a ``state.invalid``
event and a fresh start for that entry — never an exception out of ``Session(...)``
or ``prepare``, and never obeyed beyond the policy's own bounds (a stored
``learned_window=300`` does not truncate the pinned task). A stored version outside
``[1, 2**63-2]`` cannot be compared against safely: that conversation is
``state.unavailable`` (the session works in memory), like a future format.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.engine import Session
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.engine_helpers import conversation, make_policy

TASK = "Task: " + "keep every requirement of this long task in mind. " * 60


def _policy() -> Any:
    return make_policy(
        model={"context_window": 8000, "max_output_tokens": 1000, "tokenizer": "cl100k_base"},
        budget={"reserve_output": 500, "tool_growth": 0, "safety_margin": 0, "target": 0.5},
    )


def _messages() -> list[dict[str, Any]]:
    msgs = conversation(12, 1200)
    msgs[1] = {"role": "user", "content": TASK}
    return msgs


def _stored(store: Any, conv: str = "c") -> dict[str, Any]:
    """A real stored state of a conversation that compacted."""
    s = Session(_policy(), conv_id=conv, state_store=store)
    s.prepare(_messages())
    assert s.stats.compactions
    return dict(store.load(conv).entries)


def _resume(store: Any, conv: str = "c") -> tuple[Session, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    s = Session(_policy(), conv_id=conv, state_store=store, on_event=events.append)
    out = s.prepare(_messages())
    assert out, "prepare returned a context"
    return s, events


def _types(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


def _sqlite_rows(path: Path, sql: str, *args: Any) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, args)
    conn.close()


def test_a_crafted_learned_window_is_not_obeyed(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SqliteStateStore(SqliteOptions(path=str(db)))
    meta = _stored(store)["meta"]
    meta["learned_window"] = 300
    _sqlite_rows(
        db,
        "UPDATE ctxpolicy_state_entries SET value = ? WHERE key = 'meta'",
        json.dumps(meta),
    )
    s, events = _resume(store)
    assert s.state.learned_window is None and s.budget().window == 8000
    [bad] = _types(events, "state.invalid")
    assert bad["key"] == "meta.learned_window" and "300" in bad["reason"]
    assert TASK in json.dumps(s.prepare(_messages())), "the pinned task is whole"
    assert s.state.stats.prepares >= 2, "the rest of meta is kept"
    # the next save rewrote the entry: a third session loads it without a problem
    _, again = _resume(store)
    assert not _types(again, "state.invalid")
    store.close()


BAD_META: list[tuple[str, Any]] = [
    ("step", "7"),
    ("step", -1),
    ("step", 2**63 - 1),
    ("step", 1.5),
    ("calibration", "x"),
    ("calibration", 1e308),
    ("calibration", 0),
    ("usage_seen", "yes"),
    ("overflow_attempts", None),
    ("hold_until", [1]),
    ("status", "broken"),
    ("status", {"used_raw": "lots"}),
    ("seen_repairs", [["x"]]),
    ("seen_repairs", {"a": 1}),
    ("stats", {"prepares": "many"}),
    ("stats", {"compactions": [1, 2]}),
    ("stats", {"unknown_counter": 3}),
    ("learned_window", 8000),
    ("learned_window", -1),
    ("handover_text", {"a": 1}),
]


@pytest.mark.parametrize(("field", "value"), BAD_META)
def test_a_bad_meta_field_is_an_event_and_a_fresh_value(field: str, value: Any) -> None:
    store = MemoryStateStore()
    entries = _stored(store)
    meta = dict(entries["meta"])
    meta[field] = value
    store.commit("c", expected_version=store.load("c").version, put={"meta": meta})
    _s, events = _resume(store)
    invalid = _types(events, "state.invalid")
    if field == "stats" and value == {"unknown_counter": 3}:
        assert not invalid  # an unknown counter is ignored, not obeyed
    else:
        assert [e["key"] for e in invalid] == [f"meta.{field}"]
        reason = invalid[0]["reason"]
        assert len(reason) <= 200 and not (isinstance(value, str) and value in reason)


BAD_ENTRIES: list[tuple[str, Any]] = [
    ("meta", [1, 2]),
    ("ledger", "text"),
    ("ledger", {"done": "not a list"}),
    ("ledger", {"goal": 5}),
    ("growth", {"recent": ["x"]}),
    ("growth", {"per_tool": {"t": [-5]}}),
    ("memory", {"summarize#0": 5}),
    ("memory", {"~no_gain": {"mask#0": 5}}),
    ("decision/u1", {"kind": "step"}),
    ("decision/u1", [{"kind": "nope", "key": "k", "messages": []}]),
    ("decision/u1", [{"kind": "step", "key": "k", "messages": [5]}]),
    ("ref/call_1", 7),
    ("ref/call_1", {"id": "call_1", "uri": "x"}),
    ("refh/00", {"id": "other", "uri": "ctxsnap://x"}),
    ("archived/u1", "yes"),
]


@pytest.mark.parametrize(("key", "value"), BAD_ENTRIES)
def test_a_bad_entry_is_an_event_and_a_fresh_start_for_that_entry(key: str, value: Any) -> None:
    store = MemoryStateStore()
    good = _stored(store)
    store.commit("c", expected_version=store.load("c").version, put={key: value})
    s, events = _resume(store)
    assert [e["key"] for e in _types(events, "state.invalid")] == [key]
    if key.startswith(("decision/", "ref", "archived/")):
        assert key not in store.load("c").entries, "the invalid entry was deleted"
    else:
        assert store.load("c").entries[key] != value, "the invalid entry was rewritten"
    assert s.state.decisions.keys() >= {k[9:] for k in good if k.startswith("decision/")}


def test_a_value_that_is_not_json_is_an_invalid_entry(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = SqliteStateStore(SqliteOptions(path=str(db)))
    _stored(store)
    _sqlite_rows(
        db, "UPDATE ctxpolicy_state_entries SET value = '{\"goal\": ' WHERE key = 'ledger'"
    )
    _s, events = _resume(store)
    assert [e["key"] for e in _types(events, "state.invalid")] == ["ledger"]
    assert not _types(events, "state.unavailable")
    store.close()


@pytest.mark.parametrize("version", [2**63 - 1, -1, 0, "seven", 1.5])
def test_a_crafted_version_makes_the_conversation_unavailable_not_a_crash(
    tmp_path: Path, version: Any
) -> None:
    db = tmp_path / "s.db"
    store = SqliteStateStore(SqliteOptions(path=str(db)))
    _stored(store)
    _sqlite_rows(db, "UPDATE ctxpolicy_state_versions SET version = ?", version)
    s, events = _resume(store)
    [ev] = _types(events, "state.unavailable")
    assert "stored version" in ev["error"]
    s.add_tool_result({"id": "z", "function": {"name": "f", "arguments": "{}"}}, "ok")
    store.close()


def test_a_crafted_version_in_postgres_is_unavailable(postgres_server: Any) -> None:
    from ctxpolicy.state.postgres import PostgresOptions, PostgresStateStore

    store = PostgresStateStore(PostgresOptions(dsn=postgres_server.dsn, table="crafted_version"))
    _stored(store)
    conn = store._connection()
    conn.execute("UPDATE crafted_version_versions SET version = %s", (2**63 - 1,))
    _s, events = _resume(store)
    assert _types(events, "state.unavailable")
    conn.execute("UPDATE crafted_version_versions SET version = -1")
    _s, events = _resume(store)
    assert _types(events, "state.unavailable")
    store.close()


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_FIELDS = [
    "step",
    "learned_window",
    "calibration",
    "usage_seen",
    "overflow_attempts",
    "handover_text",
    "status",
    "hold_until",
    "unfit",
    "seen_repairs",
    "stats",
    "format",
]
_BASE = MemoryStateStore()
_GOOD = _stored(_BASE)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    meta=st.dictionaries(st.sampled_from(_FIELDS), _json, max_size=4),
    entries=st.dictionaries(
        st.sampled_from(
            ["ledger", "growth", "memory", "decision/x", "ref/y", "refh/z", "archived/w"]
        )
        | st.sampled_from(sorted(_GOOD)),
        _json,
        max_size=3,
    ),
)
def test_any_stored_entries_resume_or_fail_safe(
    meta: dict[str, Any], entries: dict[str, Any]
) -> None:
    """Hypothesis over stored entries: whatever they hold, opening the session and
    preparing never raises, and a learned window is never obeyed outside its bounds."""
    store = MemoryStateStore()
    crafted = {**_GOOD, **entries}
    if isinstance(crafted.get("meta"), dict):
        crafted["meta"] = {**crafted["meta"], **meta}
    store.commit("c", expected_version=0, put=crafted)
    events: list[dict[str, Any]] = []
    s = Session(_policy(), conv_id="c", state_store=store, on_event=events.append)
    out = s.prepare(_messages())
    assert TASK in json.dumps(out)
    learned = s.state.learned_window
    assert learned is None or 1000 <= learned < 8000
    if meta.get("format", 1) != 1 and isinstance(crafted.get("meta"), dict):
        assert _types(events, "state.unavailable")


@pytest.mark.parametrize("learned", [1000, 2000])
def test_a_stored_window_below_the_pinned_task_is_not_obeyed(learned: int) -> None:
    """Within the fraction floor but below the pinned content of the first request
    after the load: the other half of learn_window's rule, so the task stays whole."""
    big = "Task: " + "keep every requirement of this long task in mind. " * 300  # ~3k tokens
    msgs = _messages()
    msgs[1] = {"role": "user", "content": big}
    store = MemoryStateStore()
    good = _stored(store)
    meta = {**good["meta"], "learned_window": learned}
    crafted = MemoryStateStore()
    crafted.commit("c", expected_version=0, put={**good, "meta": meta})
    events: list[dict[str, Any]] = []
    s = Session(_policy(), conv_id="c", state_store=crafted, on_event=events.append)
    out = s.prepare(msgs)
    assert big in json.dumps(out) and not _types(events, "context.truncated_pinned")
    [bad] = _types(events, "state.invalid")
    assert bad["key"] == "meta.learned_window" and "pinned" in bad["reason"]
    assert s.state.learned_window is None
    stored = crafted.load("c").entries  # moved out of meta (the layout before 0.2)
    assert "learned_window" not in stored["meta"] and stored["scalars"]["learned_window"] is None
