"""A session's saves encode each changed entry once (canonical text) and store exactly
what the value path (``take_changes`` + the store's own encoding) would store."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy import Session
from ctxpolicy.components import StateStore, StateStoreError, StoredState
from ctxpolicy.engine.state import _jsonable
from ctxpolicy.state.codec import built_text, canonical_text, encode, entry_text
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from ctxpolicy.state.sync import StateSync
from tests.state.test_session_state import _feed, _messages, _policy
from tests.strategies import nested

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),  # lone surrogates included
    st.sets(st.integers(), max_size=3),  # not JSON: written as its str
)
_key = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans())
_value = nested(_leaf, _key, max_leaves=25, tuples=True)


@given(_value)
@settings(max_examples=400, deadline=None)
def test_entry_text_is_the_encoding_of_what_the_value_reads_back_as(value: Any) -> None:
    try:
        plain = _jsonable(value)
    except (TypeError, ValueError) as exc:  # e.g. keys 1 and True: both "1"... or NaN
        with pytest.raises(type(exc)):
            entry_text("k", value)
        return
    assert entry_text("k", value) == encode("k", plain)


_json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=25,
)


def _dumps(value: Any, **kw: Any) -> str:
    return json.dumps(value, allow_nan=False, sort_keys=True, separators=(",", ":"), **kw)


@given(_json_value)
@settings(max_examples=400, deadline=None)
def test_canonical_text_is_json_dumps_text(value: Any) -> None:
    """The encoder built once writes what ``json.dumps`` writes (big ints, every float,
    lone surrogates escaped), and refuses NaN and Infinity alike."""
    try:
        want = _dumps(value, ensure_ascii=False)
    except ValueError:
        with pytest.raises(ValueError):
            canonical_text(value)
        return
    try:
        want.encode("utf-8")
    except UnicodeEncodeError:
        want = _dumps(value)
    assert canonical_text(value) == want


def test_a_circular_value_is_a_value_error_not_a_hang() -> None:
    shared = {"x": 1}
    assert entry_text("k", {"a": shared, "b": [shared]}) == '{"a":{"x":1},"b":[{"x":1}]}'
    loop: dict[str, Any] = {"a": []}
    loop["a"].append(loop)
    for enc in (lambda v: entry_text("k", v), lambda v: built_text("k", v), canonical_text):
        with pytest.raises(ValueError, match="Circular"):
            enc(loop)
    with pytest.raises(StateStoreError, match="circular or nested too deeply"):
        encode("k", loop)


def test_a_value_of_another_type_is_json_dumps_type_error() -> None:
    with pytest.raises(TypeError, match=r"^Object of type set is not JSON serializable$"):
        canonical_text({"a": {1}})
    with pytest.raises(StateStoreError, match="Object of type object is not JSON serializable"):
        encode("k", [object()])


_text_keyed = nested(_leaf, st.text(max_size=4), max_leaves=25, tuples=True)


@given(_text_keyed)
@settings(max_examples=400, deadline=None)
def test_built_text_is_entry_text_for_values_keyed_by_text(value: Any) -> None:
    """The engine's own entries (every dict keyed by text) skip entry_text's walk; the
    bytes are the same (tuples, lone surrogates, and non-JSON leaves included)."""
    try:
        want = entry_text("k", value)
    except ValueError:
        with pytest.raises(ValueError):
            built_text("k", value)
        return
    assert built_text("k", value) == want


def test_nan_is_refused_as_before() -> None:
    for bad in (math.nan, {"a": [math.inf]}):
        with pytest.raises(ValueError):
            _jsonable(bad)
        with pytest.raises(ValueError):
            entry_text("k", bad)


def test_values_given_to_an_encoded_store_are_checked_as_by_commit() -> None:
    sync = StateSync(MemoryStateStore(), "c")
    assert sync.encoded
    with pytest.raises(StateStoreError):
        sync.save({"k": (1, 2)})  # a tuple would not read back equal: refused
    assert sync.save({"k": [1, 2]}) and sync.load() == {"k": [1, 2]}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_incremental_encoded_saves_store_the_full_state_byte_for_byte(
    tmp_path: Path, kind: str
) -> None:
    store = (
        MemoryStateStore()
        if kind == "memory"
        else SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.db")))
    )
    session = Session(_policy(tmp_path), conv_id="c", state_store=store)
    messages = _messages()
    for upto in range(4, len(messages), 7):  # tool results and prepares, compactions too
        session.prepare(_feed(session, messages, upto))
    assert session.stats.compactions, "the trace must compact"
    want = {k: encode(k, v) for k, v in session.state_entries().items()}
    version, rows = store._read("c")  # type: ignore[attr-defined]
    assert dict(rows) == want
    assert version == session.internals.persistence.version  # type: ignore[union-attr]
    assert store.load("c").entries == json.loads(json.dumps(session.state_entries()))
    store.close()


class _ValuesStore(StateStore):
    """A plugin store with only the public contract: it receives plain values."""

    name = "values_only"

    def __init__(self) -> None:
        super().__init__()
        self.version = 0
        self.entries: dict[str, Any] = {}
        self.puts: list[dict[str, Any]] = []

    def load(self, conv_id: str) -> StoredState:
        return StoredState(self.version, json.loads(json.dumps(self.entries)))

    def commit(self, conv_id: str, *, expected_version: int, put: Any, delete: Any = ()) -> int:
        assert expected_version == self.version
        self.puts.append(dict(put))
        self.entries.update(put)
        for key in delete:
            self.entries.pop(key, None)
        self.version += 1
        return self.version


def test_a_store_without_commit_encoded_gets_the_values_as_before(tmp_path: Path) -> None:
    plugin = _ValuesStore()
    builtin = MemoryStateStore()
    a = Session(_policy(tmp_path / "a"), conv_id="c", state_store=plugin)
    b = Session(_policy(tmp_path / "b"), conv_id="c", state_store=builtin)
    assert not a.internals.persistence.sync.encoded and b.internals.persistence.sync.encoded  # type: ignore[union-attr]
    messages = _messages()
    for session in (a, b):
        session.prepare(_feed(session, messages, 30))
    assert all(isinstance(v, (dict, list, str, bool)) for p in plugin.puts for v in p.values())
    assert plugin.entries["meta"]["stats"]["tool_results"] > 0
    stored = builtin.load("c").entries
    assert stored.keys() == plugin.entries.keys()
    for key, value in plugin.entries.items():
        if key != "status":  # the last context.status holds timings and timestamps
            assert stored[key] == value, key


@pytest.mark.parametrize("learned", [True, False])
def test_growth_is_saved_again_only_when_it_learns(tmp_path: Path, learned: bool) -> None:
    """A fixed ``tool_growth`` learns nothing from a tool result: its entry is written
    with the first save and not again; a learned one after every result."""
    from ctxpolicy.sim.replay import with_snapshots
    from tests.engine_helpers import make_policy

    budget = {"tool_growth": {"learn": {"quantile": 0.9, "window": 5}}} if learned else {}
    policy = with_snapshots(make_policy(budget={"tool_growth": 500, **budget}), tmp_path)
    session = Session(policy, conv_id="c", state_store=MemoryStateStore())
    saved: list[list[str]] = []
    sync = session.internals.persistence.sync  # type: ignore[union-attr]
    save = sync.save
    sync.save = lambda put, delete=(), **kw: (saved.append(sorted(put)), save(put, delete, **kw))[1]  # type: ignore[method-assign]
    for i in range(3):
        session.add_tool_result({"id": f"c{i}", "function": {"name": "bash"}}, "x " * 50)
    assert ["growth" in keys for keys in saved] == ([True] * 3 if learned else [True, False, False])
    want = {k: encode(k, v) for k, v in session.state_entries().items()}
    assert dict(session.internals.persistence.store._read("c")[1]) == want  # type: ignore[union-attr]
