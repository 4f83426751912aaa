"""The conversation's ledger and the pinned messages of ours (engine/specials.py)."""

from __future__ import annotations

from typing import Any

from ctxpolicy.engine import LEDGER_MARK, Session
from ctxpolicy.engine.specials import history_changed, ledger_changed, new_ledger, special_units
from tests.engine_helpers import make_policy


def test_a_policy_without_a_ledger_starts_none() -> None:
    off = make_policy(ledger={"enabled": False})
    assert new_ledger(off, Session(off).counter) is None
    on = make_policy()
    ledger = new_ledger(on, Session(on).counter)
    assert ledger is not None and ledger.render() is None  # empty: nothing to show


def test_a_changed_ledger_is_shown_and_a_changed_history_starts_it_again() -> None:
    events: list[dict[str, Any]] = []
    s = Session(make_policy(), on_event=events.append)
    ctx = s.internals.context
    assert ctx.state.ledger is not None and special_units(ctx) == []
    ctx.state.ledger.set_goal("fix the parser")
    ledger_changed(ctx)
    (unit,) = special_units(ctx)
    assert unit.pinned and unit.messages[0]["content"].startswith(LEDGER_MARK)
    assert "fix the parser" in unit.messages[0]["content"]
    history_changed(ctx)
    assert [e["type"] for e in events][-1] == "context.reset"
    assert ctx.state.decisions == {} and special_units(ctx) == []
