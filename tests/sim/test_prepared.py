"""ctxpolicy.sim.prepared: the ruler's side of a trace, computed once, gives the same replay."""

from __future__ import annotations

import dataclasses

import pytest

from ctxpolicy.resolve.load import load_policy
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.prepared import PreparedTrace, prepare_trace, ruler_plan
from ctxpolicy.sim.replay import replay_trace
from ctxpolicy.sim.rulers import RetentionRuler

from .conftest import ROOT

POLICY = ROOT / "policies" / "agents.yaml"
DEMO = sorted(str(p) for p in (ROOT / "examples" / "traces").glob("*.jsonl"))


def _facts_by_loop(messages):
    """The ruler as the replay loop runs it, message by message."""
    ruler = RetentionRuler()
    out = {}
    for index, m in enumerate(messages):
        if index and m.get("role") == "assistant":
            out[index] = ruler.facts_of(m)
        ruler.add(m)
    return out


@pytest.mark.parametrize("path", DEMO)
def test_the_plan_is_what_the_loop_measures(path):
    messages = list(load_trace(path))
    plan = ruler_plan(messages)
    assert plan == _facts_by_loop(messages)
    assert any(plan.values())  # the demo traces reuse facts: the test checks something


@pytest.mark.parametrize("window", [8192, 16384])
def test_a_prepared_trace_replays_to_the_same_metrics(window):
    pol = load_policy(POLICY, "coding_agent")
    for path in DEMO:
        messages = list(load_trace(path))
        plain = replay_trace(messages, pol, window=window, trace="t").to_dict()
        prepared = replay_trace(prepare_trace(messages), pol, window=window, trace="t").to_dict()
        assert prepared == plain


def test_facts_travel_with_their_messages():
    a, b = (list(load_trace(p)) for p in DEMO[:2])
    pa, pb = prepare_trace(a), prepare_trace(b)
    assert pa.messages == a and pb.messages == b
    assert pa.ruler == ruler_plan(a) and pb.ruler == ruler_plan(b)
    assert pa.ruler != pb.ruler  # different traces, different facts
    with pytest.raises(dataclasses.FrozenInstanceError):
        pa.ruler = pb.ruler  # type: ignore[misc]
    assert isinstance(pa, PreparedTrace) and len(pa) == len(a)


def test_a_trace_reusing_nothing_has_an_empty_plan():
    messages = [
        {"role": "system", "content": "You edit /srv/app/config.yaml"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Editing /srv/app/config.yaml now"},
    ]
    # the only fact reused is in the system message: not counted by the ruler
    assert ruler_plan(messages) == {2: ()}
