"""``engine/report.py``: the ``context.status`` payload is built without the event's
dataclass, in its declared order; the events of a call still fit their definitions."""

from __future__ import annotations

from ctxpolicy.engine import Session
from ctxpolicy.engine.report import status_payload
from ctxpolicy.events.types import ABSENT, ContextStatus, problems
from tests.engine_helpers import make_policy


def _session() -> Session:
    return Session(make_policy())


def test_the_status_payload_is_what_its_definition_gives() -> None:
    s = _session()
    s.prepare([{"role": "user", "content": "hi"}])
    ctx = s.internals.context
    kwargs = dict(
        compact_layer=None,
        compacted_from=None,
        used_raw=12,
        messages=1,
        messages_in=1,
        tokens_in=12,
        duration_ms=0.5,
    )
    budget = s.budget()
    for unfit in (None, "the learned window is too small"):
        ctx.state.unfit = unfit
        payload = status_payload(ctx, 12, budget, **kwargs)
        defined = ContextStatus(
            used=12,
            budget=budget.trigger,
            ratio=round(budget.ratio(12), 4),
            state=budget.state_for(12).value,
            window=budget.window,
            trigger=budget.trigger,
            target=budget.target,
            tokenizer=s.counter.name,
            approximate=s.counter.approximate,
            calibration=ctx.state.calibration,
            unfit=unfit if unfit is not None else ABSENT,
            **kwargs,
        )
        assert payload == defined.fields()
        assert list(payload) == list(defined.fields())  # the declared order


def test_every_status_of_a_session_fits_its_definition() -> None:
    seen: list[dict] = []
    s = Session(make_policy(), on_event=seen.append)
    msgs: list[dict] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for i in range(5):
        s.prepare(msgs)
        msgs += [{"role": "assistant", "content": f"step {i}"}, {"role": "user", "content": "ok"}]
    statuses = [e for e in seen if e["type"] == "context.status"]
    assert len(statuses) == 5
    assert [p for e in seen for p in problems(e)] == []
    names = [n for n in ContextStatus._NAMES if n != "unfit"]
    assert all(list(e)[3:] == names for e in statuses)
    assert s.status is statuses[-1] and s.stats.prepares == 5
