"""The per-call object the pipeline, the squeeze and the report share."""

from __future__ import annotations

from collections.abc import Sequence

from ctxpolicy.conversation import Unit
from ctxpolicy.engine import Session
from ctxpolicy.engine.call import Call
from tests.engine_helpers import make_policy


def _count(units: Sequence[Unit]) -> int:
    return len(units)


def test_at_target_is_the_one_place_a_call_is_done() -> None:
    b = Session(make_policy()).budget()
    call = Call([], b.target, b, _count, forced=False, entry_used=b.target, started=0.0)
    assert call.at_target()
    call.used = b.target + 1
    assert not call.at_target()
    assert call.hard_limit == b.window - b.reserve_output
    assert (call.compact_layer, call.changed, call.messages, call.used_raw) == (None, False, 0, 0)


def test_a_prepare_reports_what_its_call_carried() -> None:
    s = Session(make_policy())
    s.prepare([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])
    status = s.status
    assert status is not None
    assert status["messages"] == status["messages_in"] == 2
    assert status["compact_layer"] is None and status["compacted_from"] is None
    assert status["used"] == status["used_raw"] <= status["target"]
