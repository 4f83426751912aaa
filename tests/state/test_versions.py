"""Issue 28 item 8: versions never repeat for a conversation id (every built-in store).

Retention deletes a conversation's rows; its next first commit used to restart at
version 1, so a stale worker that had loaded version *v* before the deletion could
commit once the new conversation reached *v* again — without a conflict. Every store
now remembers the highest version it pruned (``<table>_floor``): a first commit
starts above it, so the stale worker's compare-and-set can never match.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.components import StateConflict

from .conftest import OpenStore


def _advance(store, conv: str, n: int) -> int:  # type: ignore[no-untyped-def]
    for _ in range(n):
        v = store.load(conv).version
        store.commit(conv, expected_version=v, put={"meta": {"v": v}})
    return int(store.load(conv).version)


def test_a_stale_worker_conflicts_after_retention_deleted_the_row(
    open_store: OpenStore,
) -> None:
    live, stale = open_store(), open_store()  # two workers, two connections
    assert _advance(live, "conv", 3) == 3
    expected = stale.load("conv").version  # the stale worker read version 3
    assert live.prune(before=time.time() + 1) == 1
    assert live.load("conv").version == 0
    versions = [_advance(live, "conv", 1) for _ in range(4)]
    assert versions == [4, 5, 6, 7], "never a version the pruned conversation had"
    with pytest.raises(StateConflict):
        stale.commit("conv", expected_version=expected, put={"meta": {"stale": True}})
    assert live.load("conv").entries == {"meta": {"v": 6}}


def test_the_floor_only_grows(open_store: OpenStore) -> None:
    store = open_store()
    _advance(store, "big", 5)
    _advance(store, "small", 1)
    store.prune(before=time.time() + 1)
    _advance(store, "small", 1)  # starts above 5
    assert store.load("small").version == 6
    store.prune(before=time.time() + 1)
    assert _advance(store, "other", 1) == 7  # a later, lower prune keeps the floor
    assert _advance(store, "brand-new", 1) == 7  # per conversation: 7 is new for it


@settings(max_examples=15, deadline=None)
@given(rounds=st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_versions_of_one_conversation_never_repeat(rounds: list[int]) -> None:
    """Hypothesis over commit/prune sequences (memory store: same codec and contract)."""
    from ctxpolicy.state.memory import MemoryStateStore

    store = MemoryStateStore()
    seen: list[int] = []
    for n in rounds:
        for _ in range(n):
            v = store.load("c").version
            seen.append(store.commit("c", expected_version=v, put={"x": v}))
        store.prune(before=time.time() + 1)
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
