"""Bounded state by default: idle conversations are pruned (every built-in store)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ctxpolicy import Session
from ctxpolicy.state import retention
from ctxpolicy.state.retention import PRUNE_INTERVAL_S, maybe_prune
from tests.engine_helpers import conversation, make_policy

from .conftest import OpenStore


def _commit(store: Any, conv: str) -> None:
    v = store.load(conv).version
    store.commit(conv, expected_version=v, put={"meta": {"n": v + 1}})


def test_prune_deletes_idle_conversations_only(open_store: OpenStore) -> None:
    store = open_store()
    for conv in ("old-a", "old-b"):
        _commit(store, conv)
    cut = time.time() + 0.001
    time.sleep(0.02)
    _commit(store, "fresh")
    assert store.prune(before=cut) == 2
    assert store.load("old-a").version == 0 and store.load("old-a").entries == {}
    assert store.load("fresh").version == 1
    assert store.prune(before=cut) == 0
    # a pruned conversation starts again at version 0 (its CAS does not resurrect rows)
    store.commit("old-a", expected_version=0, put={"meta": {"n": 1}})
    assert store.load("old-a").entries == {"meta": {"n": 1}}


def test_a_second_worker_sees_the_pruned_state(open_store: OpenStore) -> None:
    a, b = open_store(), open_store()
    _commit(a, "conv")
    assert b.prune(before=time.time() + 1) == 1
    assert a.load("conv").version == 0


def test_maybe_prune_runs_once_an_interval_per_location(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "_last", {})
    store = open_store()
    events: list[tuple[str, dict[str, Any]]] = []

    def emit(type_: str, **fields: Any) -> None:
        events.append((type_, fields))

    _commit(store, "idle")
    later = time.time() + 40 * 86400  # the conversation is now 40 days idle
    assert maybe_prune(store, 30, emit, now=later) == 1
    assert events == [
        ("state.pruned", {"store": store.name, "conversations": 1, "max_age_days": 30})
    ]
    _commit(store, "idle")
    assert maybe_prune(store, 30, emit, now=later + 60) is None  # not due yet
    assert store.load("idle").version == 2  # never a pruned version again (issue 28 item 8)
    assert maybe_prune(store, 30, emit, now=later + PRUNE_INTERVAL_S + 1) == 1
    assert maybe_prune(store, None, emit, now=later + 10 * PRUNE_INTERVAL_S) is None


def test_a_session_opening_the_store_prunes_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(retention, "_last", {})
    path = str(tmp_path / "state.sqlite3")
    pol = make_policy(state={"store": "sqlite", "options": {"path": path}, "max_age_days": 1})
    s = Session(pol, conv_id="old-conv")
    s.prepare(conversation(3, 200))
    s.close()
    assert not [e for e in s.events if e["type"] == "state.pruned"]
    # two days later a new worker opens the store: the idle conversation is deleted
    monkeypatch.setattr(retention, "_last", {})
    monkeypatch.setattr(retention, "_clock", lambda: time.time() + 2 * 86400)
    s2 = Session(pol, conv_id="another")
    pruned = [e for e in s2.events if e["type"] == "state.pruned"]
    assert pruned and pruned[0]["conversations"] == 1
    s2.close()
    s3 = Session(pol, conv_id="old-conv")
    assert not [e for e in s3.events if e["type"] == "state.resumed"]
    s3.close()


class _Broken:
    name = "broken"

    def prune(self, *, before: float) -> int:
        raise OSError("disk gone")


def test_a_failed_prune_is_an_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "_last", {})
    events: list[str] = []
    assert maybe_prune(_Broken(), 30, lambda t, **f: events.append(t)) is None  # type: ignore[arg-type]
    assert events == ["state.prune_failed"]


def test_a_store_without_prune_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "_last", {})
    events: list[str] = []
    assert maybe_prune(object(), 30, lambda t, **f: events.append(t)) is None  # type: ignore[arg-type]
    assert events == []
