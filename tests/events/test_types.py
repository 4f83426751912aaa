"""One definition per event type (ctxpolicy/events/types.py): the registry, the payload
it builds, real sessions' events against it, and the generated docs table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ctxpolicy import plugins
from ctxpolicy.events.sinks import STATUS_FIELDS
from ctxpolicy.events.types import (
    ABSENT,
    EVENTS,
    ContextStatus,
    DataLost,
    SnapshotFailed,
    problems,
    span_fields,
)
from ctxpolicy.plugins import hookimpl
from ctxpolicy.testing import eventdocs
from tests.shared_data import TRACES, require

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engine.md"


def test_every_type_is_registered_once_by_its_class():
    assert len(EVENTS) == len({cls.__name__ for cls in EVENTS.values()})
    for type_, cls in EVENTS.items():
        assert type_ == cls.TYPE and cls.WHEN
        assert cls.SCOPE in ("", "layer", "either")
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_fields_keep_none_and_leave_absent_out_in_declared_order():
    ev = SnapshotFailed(tool="grep", store="local", root=None, errno=None, error="E")
    assert list(ev.fields()) == ["tool", "store", "root", "errno", "error"]
    assert ev.fields()["root"] is None
    assert SnapshotFailed(error="E", action="history").as_dict() == {
        "type": "snapshot.failed",
        "error": "E",
        "action": "history",
    }
    lost = DataLost(refs=["a"], count=1, reason="r")
    assert list(lost.fields()) == ["refs", "count", "reason"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        lost.reason = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        DataLost(units=["k"])  # type: ignore[call-arg]  # reason is required


def test_status_fields_and_span_attributes_come_from_the_definition():
    declared = [f.name for f in dataclasses.fields(ContextStatus)]
    assert ("type", *[n for n in declared if n != "unfit"]) == STATUS_FIELDS
    assert STATUS_FIELDS[:6] == ("type", "used", "budget", "ratio", "state", "compact_layer")
    # the OTel span keeps the attributes it always had
    assert span_fields(ContextStatus) == (
        *STATUS_FIELDS[1:6],
        *("window", "trigger", "target", "tokenizer", "approximate"),
        *("messages", "messages_in", "tokens_in", "duration_ms"),
    )
    assert ContextStatus.__dataclass_fields__["unfit"].default is ABSENT


def test_problems_name_what_does_not_fit():
    assert problems({"type": "nope"}) == ["unknown event type 'nope'"]
    assert problems({"type": "state.resumed", "conv_id": "c", "ts": 1.0, "version": 2}) == []
    assert problems({"type": "state.resumed"}) == ["state.resumed: no version"]
    bad = {"type": "context.reset", "reason": "r", "extra": 1}
    assert problems(bad) and "in order" in problems(bad)[0]
    assert problems({"type": "layer.failed", "error": "e"}) == ["layer.failed: no layer, plugin"]


class _Capture:
    def __init__(self) -> None:
        self.events: list[dict] = []

    @hookimpl
    def ctxpolicy_event(self, event: dict) -> None:
        self.events.append(event)


@pytest.mark.parametrize("agent", ["coding_agent_16k", "data_analysis_agent"])
def test_a_replays_events_all_fit_their_definitions(tmp_path, agent):
    """Every event of a real replay (compactions, squeezes, deferrals, overflows,
    tokenizer fallbacks, tool results) is what its definition says."""
    from ctxpolicy.sim import replay
    from ctxpolicy.sim.importers import load_trace

    trace = require(TRACES / "swe-agent__demo.function_calling_simple.jsonl")
    root = Path(__file__).resolve().parents[2]
    policy = replay.load_policy_file(str(root / "policies" / "agents.yaml"), agent)
    cap = _Capture()
    plugins.register_plugin(cap, "capture-events")
    try:
        replay.replay_trace(load_trace(trace), policy, window=16384, snapshots_dir=tmp_path)
    finally:
        plugins.unregister_plugin("capture-events")
    assert any(e["type"] == "context.status" for e in cap.events)
    assert [p for e in cap.events for p in problems(e)] == []


def test_a_sessions_other_events_fit_their_definitions(tmp_path):
    """Usage, overflow errors, learned windows, repairs and a store that fails."""
    from ctxpolicy import Session
    from ctxpolicy.resolve.load import load_policy

    root = Path(__file__).resolve().parents[2]
    policy = load_policy(str(root / "policies" / "agents.yaml"), agent="coding_agent")
    seen: list[dict] = []
    s = Session(policy, conv_id="c1", on_event=seen.append)
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "orphan", "content": "x"},  # repaired
    ]
    s.prepare(msgs)
    s.record_usage(100)
    s.on_error("maximum context length is 20000 tokens, requested 30000", msgs)
    s.add_tool_result("bash", "ok " * 10)
    kinds = {e["type"] for e in seen}
    assert {"context.status", "context.usage", "context.overflow_error"} <= kinds
    assert "conversation.repaired" in kinds
    assert [p for e in seen for p in problems(e)] == []


def test_the_docs_table_is_generated_from_the_definitions(tmp_path):
    text = DOCS.read_text(encoding="utf-8")
    assert eventdocs.table() in text, "regenerate: python -m ctxpolicy.testing.eventdocs --write"
    assert eventdocs.main(["--check"]) == 0
    for type_ in EVENTS:
        assert f"| `{type_}` |" in text
    stale = tmp_path / "engine.md"
    stale.write_text(f"# x\n\n{eventdocs.START}\nold\n{eventdocs.END}\n")
    assert eventdocs.main(["--check", "--docs", str(stale)]) == 1
    assert eventdocs.main(["--write", "--docs", str(stale)]) == 0
    assert eventdocs.main(["--check", "--docs", str(stale)]) == 0
