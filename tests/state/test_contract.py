"""The StateStore contract, for every built-in store (memory, sqlite, real PostgreSQL)."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.components import StateConflict, StateStoreError, StoredState
from tests.state.conftest import OpenStore
from tests.strategies import nested

CONV = "conv-1"


def test_absent_conversation_is_version_zero(open_store: OpenStore) -> None:
    assert open_store().load("never-written") == StoredState(0, {})


def test_round_trip_and_versions(open_store: OpenStore) -> None:
    store = open_store()
    value = {"b": [1, 2.5, None, True, "ü ☃ 𝄞"], "a": {"nested": {"deep": -3}}, "": ""}
    assert store.commit(CONV, expected_version=0, put={"meta": value, "ledger": "x"}) == 1
    assert store.commit(CONV, expected_version=1, put={"decision/u1": [1]}) == 2
    loaded = store.load(CONV)
    assert loaded.version == 2
    assert loaded.entries == {"meta": value, "ledger": "x", "decision/u1": [1]}
    # another instance (another worker) reads the same thing
    assert open_store().load(CONV) == loaded


def test_loaded_values_are_copies(open_store: OpenStore) -> None:
    store = open_store()
    store.commit(CONV, expected_version=0, put={"k": {"list": [1]}})
    first = store.load(CONV)
    first.entries["k"]["list"].append(2)
    assert store.load(CONV).entries == {"k": {"list": [1]}}


def test_incremental_put_and_delete(open_store: OpenStore) -> None:
    store = open_store()
    store.commit(CONV, expected_version=0, put={f"summary/{i}": i for i in range(5)})
    v = store.commit(
        CONV, expected_version=1, put={"summary/1": "new", "meta": {}}, delete=["summary/3", "gone"]
    )
    assert v == 2
    assert store.load(CONV).entries == {
        "summary/0": 0,
        "summary/1": "new",
        "summary/2": 2,
        "summary/4": 4,
        "meta": {},
    }
    # a commit with no change still moves the version (a save point)
    assert store.commit(CONV, expected_version=2, put={}) == 3
    assert store.load(CONV).version == 3


def test_compare_and_set_conflict_changes_nothing(open_store: OpenStore) -> None:
    a, b = open_store(), open_store()
    a.commit(CONV, expected_version=0, put={"counter": 1})
    seen = b.load(CONV)
    a.commit(CONV, expected_version=1, put={"counter": 2})
    with pytest.raises(StateConflict) as info:
        b.commit(CONV, expected_version=seen.version, put={"counter": 99}, delete=["extra"])
    assert info.value.conv_id == CONV and info.value.expected == 1
    assert a.load(CONV) == StoredState(2, {"counter": 2})
    # a first commit against an existing conversation conflicts too
    with pytest.raises(StateConflict):
        b.commit(CONV, expected_version=0, put={"x": 1})
    # and so does a version from the future
    with pytest.raises(StateConflict):
        b.commit(CONV, expected_version=7, put={"x": 1})
    with pytest.raises(StateConflict):
        b.commit("other", expected_version=1, put={"x": 1})
    assert b.load("other") == StoredState(0, {})


def test_conversations_are_independent(open_store: OpenStore) -> None:
    store = open_store()
    store.commit("a", expected_version=0, put={"k": "a"})
    store.commit("b", expected_version=0, put={"k": "b"})
    store.commit("b", expected_version=1, put={}, delete=["k"])
    assert store.load("a") == StoredState(1, {"k": "a"})
    assert store.load("b") == StoredState(2, {})


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (math.nan, "NaN"),
        (math.inf, "NaN or Infinity"),
        ((1, 2), "read back equal"),
        ({1: "int key"}, "read back equal"),
        (object(), "not storable"),
        ({"deep": [float("nan")]}, "NaN"),
    ],
)
def test_values_that_would_not_round_trip_are_refused(
    open_store: OpenStore, value: Any, why: str
) -> None:
    store = open_store()
    store.commit(CONV, expected_version=0, put={"ok": 1})
    with pytest.raises(StateStoreError, match=why) as info:
        store.commit(CONV, expected_version=1, put={"fine": 2, "bad": value})
    assert "'bad'" in str(info.value)
    assert store.load(CONV) == StoredState(1, {"ok": 1})  # nothing written


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"put": {"": 1}}, "non-empty"),
        ({"put": {"a\x00b": 1}}, "NUL"),
        ({"put": {"k": 1}, "delete": ["k"]}, "both put and deleted"),
        ({"put": {}, "delete": [5]}, "non-empty strings"),
    ],
)
def test_bad_keys_are_refused(open_store: OpenStore, kwargs: dict[str, Any], match: str) -> None:
    store = open_store()
    with pytest.raises(ValueError, match=match):
        store.commit(CONV, expected_version=0, **kwargs)
    assert store.load(CONV) == StoredState(0, {})


@pytest.mark.parametrize("conv_id", ["", None, "x\x00y", "z" * 2000])
def test_bad_conv_ids_are_refused(open_store: OpenStore, conv_id: Any) -> None:
    with pytest.raises(ValueError, match="conv_id"):
        open_store().load(conv_id)


def test_odd_but_valid_ids_and_keys(open_store: OpenStore) -> None:
    store = open_store()
    conv = "../../etc/passwd'; DROP TABLE x; --"
    key = "decision/ünit 'quoted' \"double\" %s ?"
    store.commit(conv, expected_version=0, put={key: "\u2028\ud800 lone surrogate"})
    assert store.load(conv).entries == {key: "\u2028\ud800 lone surrogate"}


def test_a_store_opened_before_fork_reconnects_in_the_child(open_store: OpenStore) -> None:
    store = open_store()
    if type(store).name == "memory":
        pytest.skip("a forked child has its own copy of an in-memory store")
    store.commit(CONV, expected_version=0, put={"n": 0})
    pid = os.fork()
    if pid == 0:  # child: its own connection; the parent's is never used nor closed
        code = 0
        try:
            s = store.load(CONV)
            store.commit(CONV, expected_version=s.version, put={"n": 1})
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.load(CONV) == StoredState(2, {"n": 1})  # the parent's connection still works


def test_closed_store_refuses_work(open_store: OpenStore) -> None:
    store = open_store()
    store.close()
    store.close()  # idempotent
    if type(store).name == "memory":
        return
    with pytest.raises(StateStoreError, match="closed"):
        store.load(CONV)


_json = nested(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    st.text(max_size=8),
    max_leaves=12,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from("abcdef"), _json, max_size=3),
            st.sets(st.sampled_from("abcdef"), max_size=2),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_sequence_of_commits_equals_a_dict_model(
    open_store: OpenStore, steps: list[tuple[dict[str, Any], set[str]]]
) -> None:
    """Invariant: the store behaves like a dict updated commit by commit."""
    store = open_store()
    conv = f"prop-{id(steps)}-{len(steps)}"
    start = store.load(conv)
    model: dict[str, Any] = dict(start.entries)
    version = start.version
    for put, delete in steps:
        delete = delete - put.keys()
        version = store.commit(conv, expected_version=version, put=put, delete=delete)
        model.update(put)
        for k in delete:
            model.pop(k, None)
        assert store.load(conv) == StoredState(version, model)
