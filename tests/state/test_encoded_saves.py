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
from ctxpolicy.components import StateStoreError
from ctxpolicy.engine.state import _jsonable
from ctxpolicy.state._codec import encode, entry_text
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from ctxpolicy.state.sync import StateSync
from tests.state.test_session_state import _feed, _messages, _policy

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),  # lone surrogates included
    st.sets(st.integers(), max_size=3),  # not JSON: written as its str
)
_key = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.booleans())
_value = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(_key, inner, max_size=4)
    ),
    max_leaves=25,
)


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
    assert version == session._persist.version  # type: ignore[union-attr]
    assert store.load("c").entries == json.loads(json.dumps(session.state_entries()))
    store.close()
