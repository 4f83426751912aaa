"""Compaction economics of the pipeline (issue 27): an unreachable target holds further
compaction, a result that grew is not offered again, a minimum gain per rewrite."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from ctxpolicy.components import CompactionContext, Layer, LayerResult
from ctxpolicy.conversation import Unit
from ctxpolicy.engine import Session
from tests.engine_helpers import conversation, make_policy, pad_first_step, plugin_module


class GrowsFirst(Layer):
    """Pads the first step (the same unit every call): never smaller (test layer)."""

    name = "t_econ_grows"
    calls = 0

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        type(self).calls += 1
        return LayerResult(pad_first_step(units, 50))


class TrimsNewest(Layer):
    """Cuts 40 characters off the newest tool result: a tiny gain (test layer)."""

    name = "t_econ_trims"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        out = list(units)
        i = max(i for i, u in enumerate(out) if u.kind == "step")
        msgs = list(out[i].messages)
        last = dict(msgs[-1])
        last["content"] = str(last["content"])[:-40]
        msgs[-1] = last
        out[i] = out[i].replace(messages=tuple(msgs))
        return LayerResult(out)


@pytest.fixture
def econ_layers(register_plugin: Callable[[object, str], str]) -> None:
    register_plugin(plugin_module("econ_test_layers", GrowsFirst, TrimsNewest), "econ_test_layers")
    GrowsFirst.calls = 0


def _events(s: Session, type_: str) -> list[dict[str, Any]]:
    return [e for e in s.events if e["type"] == type_]


def _unreachable() -> Any:
    # six kept rounds of ~780 tokens exceed the target (2100 of a 7000 trigger)
    return make_policy(
        pipeline=[
            {
                "layer": "drop_rounds",
                "at": "warning",
                "options": {"keep_recent_rounds": 6, "min_keep_tokens": 0},
            }
        ],
        budget={"target": 0.3},
    )


def test_unreachable_target_compacts_once_then_waits_for_the_gap() -> None:
    s = Session(_unreachable())
    b = s.budget()
    compacting: list[tuple[int, int]] = []  # (entry tokens, resume_at before the call)
    for r in range(4, 30):
        hold = s.state.hold_until
        s.prepare(conversation(r, 1500))
        st = s.status
        assert st is not None and st["used"] <= b.window - b.reserve_output
        if st["compacted_from"] is not None:
            compacting.append((st["compacted_from"], hold or 0))
    assert len(compacting) >= 3
    # one context.above_target per compaction, never one per call
    assert len(_events(s, "context.above_target")) == len(compacting)
    for entry, resume_at in compacting[1:]:
        # only once the gap has been grown, or when the context is critical
        assert entry >= min(resume_at, b.critical_tokens)
    assert s.state.hold_until is not None


def test_hold_is_persisted_so_a_resumed_session_prepares_the_same() -> None:
    pol = _unreachable()
    whole, first = Session(pol), Session(pol)
    expected = [whole.prepare(conversation(r, 1500)) for r in range(4, 20)]
    got = [first.prepare(conversation(r, 1500)) for r in range(4, 12)]
    entries = first.state_entries()
    assert entries["scalars"]["hold_until"] is not None
    resumed = Session(pol)
    resumed.load_state(entries)
    got += [resumed.prepare(conversation(r, 1500)) for r in range(12, 20)]
    assert got == expected


def test_a_result_that_grew_is_not_offered_again_for_the_same_units(
    econ_layers: None, no_fact_price: None
) -> None:
    pol = make_policy(
        pipeline=[{"layer": "t_econ_grows", "at": "warning"}],
        budget={"min_gain": 0},
    )
    s = Session(pol)
    for r in (5, 5, 6, 6):  # above warning, below the trigger: the same first step
        s.prepare(conversation(r, 2000))
    assert GrowsFirst.calls >= 3  # it ran on every compacting call …
    rejected = _events(s, "layer.rejected")
    assert len(rejected) == 1  # … but its growth on the same unit was reported once
    assert s.state.stats.layer_failures["t_econ_grows"] == 1
    assert s.state.memory["~no_gain"]["t_econ_grows#0"]


def test_a_gain_below_min_gain_is_not_taken_until_critical(
    econ_layers: None, no_fact_price: None
) -> None:
    def run(min_gain: int | str) -> Session:
        pol = make_policy(
            pipeline=[{"layer": "t_econ_trims", "at": "warning"}],
            budget={"min_gain": min_gain},
        )
        s = Session(pol)
        s.prepare(conversation(5, 2000))  # warning, below critical
        return s

    s = run("3%")
    assert s.budget().min_gain == 240
    assert s.status is not None and s.status["compact_layer"] is None
    deferred = _events(s, "layer.deferred")
    assert deferred and deferred[0]["min_gain_tokens"] == 240
    taken = run(0)
    assert taken.status is not None and taken.status["compact_layer"] == "t_econ_trims"


def test_a_call_no_step_may_run_returns_its_view_untouched() -> None:
    """No eligible step and ``on_overflow`` not due: the view comes back as it went in
    (no layer built, no snapshot pass); forced, ``on_overflow`` still runs."""
    from ctxpolicy.engine.call import Call
    from ctxpolicy.engine.pipeline import run_pipeline

    step = {"layer": "drop_rounds", "at": "warning", "options": {"keep_recent_rounds": 2}}
    s = Session(make_policy(pipeline=[step], budget={"target": 0.5}))
    s.prepare(conversation(3, 200))
    ctx, b = s.internals.context, s.budget()
    view = list(ctx.derived.last_units)
    used = b.target - 1

    def count(units: Sequence[Unit]) -> int:
        return used

    call = Call(view, used, b, count, forced=False, entry_used=used, started=0.0)
    by = run_pipeline(ctx, call)
    assert call.view is view and call.used == used and by is None
    assert not ctx.derived.components.layers  # nothing was built for this call
    # between the target and the trigger, below the first step's state: the same
    assert ctx.policy.pipeline and b.target < b.warning_tokens - 1
    assert all(st.at != "normal" for st in ctx.policy.pipeline)
    used = b.warning_tokens - 1
    call = Call(view, used, b, count, forced=False, entry_used=used, started=0.0)
    by = run_pipeline(ctx, call)
    assert call.view is view and by is None and not ctx.derived.components.layers
    run_pipeline(ctx, Call(view, used, b, count, forced=True, entry_used=used, started=0.0))
    assert (-1) in {i for _, i in ctx.derived.components.layers}  # on_overflow ran
