"""``engine/repairs.py``: each repair of the input is one ``conversation.repaired``
event per (kind, message index) for the whole conversation; what a repair left out
is archived verbatim when there is a store; a field nested too deep is sent as its
JSON text (``deep_value``)."""

from __future__ import annotations

from pathlib import Path

from ctxpolicy.conversation import Repair
from ctxpolicy.engine import Session
from ctxpolicy.engine.repairs import flatten_message, report_repairs
from tests.engine_helpers import make_policy
from tests.helpers_conv import deep_value


def _repaired(s: Session) -> list[dict]:
    return [e for e in s.events if e["type"] == "conversation.repaired"]


def test_a_repair_is_reported_once_per_kind_and_message() -> None:
    s = Session(make_policy())
    found = [
        Repair("orphan_result", 3, "a"),
        Repair("orphan_result", 3, "b"),
        Repair("missing_result", 3, "c"),
    ]
    report_repairs(s.internals.context, found)
    report_repairs(s.internals.context, found)  # seen: not again
    events = _repaired(s)
    assert [(e["repair"], e["index"], e["detail"]) for e in events] == [
        ("orphan_result", 3, "a; b"),
        ("missing_result", 3, "c"),
    ]
    assert all(e["archived"] is None and e["removed"] == 0 for e in events)


def test_what_a_repair_removed_is_archived_verbatim(tmp_path: Path) -> None:
    s = Session(make_policy(tmp_path))
    report_repairs(
        s.internals.context, [Repair("bad_message", 1, "not an object", removed=("raw text",))]
    )
    (event,) = _repaired(s)
    assert event["removed"] == 1 and event["archived"]
    assert "raw text" in s.recall(event["archived"])


def test_a_field_nested_too_deep_is_sent_as_its_json_text() -> None:
    s = Session(make_policy())
    m = {"role": "tool", "tool_call_id": "c1", "content": deep_value(3)}
    assert flatten_message(s.internals.context, m, 4) == m  # shallow: as it is, nothing reported
    assert flatten_message(s.internals.context, "not a mapping", 5) == "not a mapping"
    deep = {"role": "tool", "tool_call_id": "c2", "content": deep_value(400)}
    flat = flatten_message(s.internals.context, deep, 6)
    assert isinstance(flat["content"], str) and flat["content"].startswith('{"a": {"a":')
    flatten_message(s.internals.context, deep, 6)  # reported once
    assert [(e["repair"], e["index"]) for e in _repaired(s)] == [("deep_value", 6)]
