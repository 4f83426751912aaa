"""A changed entry no store can hold (a layer's NaN or circular value in its ``memory``)
is left out of the save with ``state.entry_refused`` (of the ``memory`` entry, that
layer's memory only): the call succeeds, the other changes are saved, and nothing
hangs or raises."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.components import CompactionContext, Layer, LayerResult
from ctxpolicy.conversation import Unit
from ctxpolicy.engine import Session
from ctxpolicy.engine.state import SessionState
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.engine_helpers import conversation, make_policy, plugin_module


def _circular() -> dict[str, Any]:
    value: dict[str, Any] = {"items": []}
    value["items"].append(value)
    return value


class Remembers(Layer):
    """Keeps ``Remembers.value`` in its memory and changes nothing (test layer)."""

    name = "t_remembers"
    value: Any = None

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        ctx.memory["value"] = type(self).value
        return LayerResult(list(units))


@pytest.fixture
def remembers(register_plugin: Callable[[object, str], str]) -> type[Remembers]:
    register_plugin(plugin_module("refused_test_layers", Remembers), "refused_test_layers")
    return Remembers


def _store(tmp_path: Path) -> SqliteStateStore:
    return SqliteStateStore(SqliteOptions(path=str(tmp_path / "state.sqlite3")))


def _session(tmp_path: Path) -> Session:
    pol = make_policy(pipeline=[{"layer": "t_remembers", "at": "warning"}], budget={"min_gain": 0})
    return Session(pol, conv_id="refused", state_store=_store(tmp_path))


def _refused(s: Session) -> list[dict[str, Any]]:
    return [e for e in s.events if e["type"] == "state.entry_refused"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (math.nan, "NaN or Infinity"),
        ({"deep": [math.inf]}, "NaN or Infinity"),
        (_circular(), "circular"),
    ],
)
def test_a_layer_memory_json_cannot_hold_is_refused_and_the_call_goes_on(
    remembers: type[Remembers], tmp_path: Path, value: Any, reason: str, no_fact_price: None
) -> None:
    remembers.value = value
    s = _session(tmp_path)
    first = s.prepare(conversation(5, 2000))  # above warning: the layer runs
    assert first
    (event,) = _refused(s)
    assert event["key"] == "'memory/t_remembers#0'" and reason in event["reason"]
    assert repr(value)[:20] not in event["reason"]  # what it is, never the value
    stored = _store(tmp_path).load("refused")  # the other changes were saved …
    assert stored.version == 1 and "meta" in stored.entries
    # … and of the memory, all but that layer's (the engine keeps its own there)
    memory = stored.entries["memory"]
    assert "t_remembers#0" not in memory and memory == {
        k: v for k, v in s.state.memory.items() if k != "t_remembers#0"
    }
    # the next call does not meet the refused change again …
    s.prepare(conversation(5, 2000))
    assert len(_refused(s)) == 2  # … until the layer writes it again (it runs every call)
    # once the value is storable, it is saved and a resumed session reads it
    remembers.value = {"failures": 2}
    s.prepare(conversation(5, 2000))
    assert len(_refused(s)) == 2
    resumed = _session(tmp_path)
    assert resumed.state.memory["t_remembers#0"] == {"value": {"failures": 2}}


def test_take_state_changes_leaves_out_what_json_cannot_hold(
    remembers: type[Remembers],
    no_fact_price: None,
) -> None:
    remembers.value = math.nan
    s = Session(make_policy(pipeline=[{"layer": "t_remembers", "at": "warning"}]))
    s.prepare(conversation(5, 2000))
    put, _ = s.take_state_changes()
    assert "t_remembers#0" not in put["memory"] and "meta" in put
    assert [e["key"] for e in _refused(s)] == ["'memory/t_remembers#0'"]


def test_without_a_refuse_callback_the_change_is_a_clear_error_taken_once() -> None:
    st = SessionState()
    st.memory["x"] = {"c": _circular()}
    st.touch("memory", "meta")
    with pytest.raises(ValueError, match="state entry 'memory' is not storable as JSON"):
        st.take_encoded_changes()
    assert st.take_encoded_changes() == ({}, [])  # forgotten, not raised by every save
