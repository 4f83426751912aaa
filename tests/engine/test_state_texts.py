"""Issue 32 item 2: the texts that rarely change (a handover text, the reason a learned
window is unfit) live in their own ``texts`` entry, written on the save after they
changed; ``meta``, rewritten by every call, holds counters and small scalars only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.engine import Session
from ctxpolicy.engine.handover import Handover
from ctxpolicy.engine.state import SessionState
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.engine_helpers import apply_changes, conversation, make_policy


class _Recorded(SqliteStateStore):
    """A real sqlite store that records the keys and bytes of every commit."""

    commits: list[dict[str, int]]

    def _write(self, conv_id: str, expected: int, rows: Any, dropped: list[str]) -> int:
        self.commits.append({k: len(v) for k, v in rows})
        return super()._write(conv_id, expected, rows, dropped)


def _store(tmp: Path) -> _Recorded:
    store = _Recorded(SqliteOptions(path=str(tmp / "s.db")))
    store.commits = []
    return store


def _handover() -> Handover:
    done = [f"step {i}: moved module_{i} and its tests to the new service" for i in range(400)]
    return Handover(goal="port the billing service", progress=done)


def test_a_long_handover_is_written_once_not_by_every_call(tmp_path: Path) -> None:
    store = _store(tmp_path)
    policy = make_policy(model={"context_window": 1_000_000, "max_output_tokens": 1000})
    s = Session(policy, conv_id="c", state_store=store, handover=_handover())
    msgs = conversation(12, 40)
    for n in range(2, len(msgs) + 1, 2):
        s.prepare(msgs[:n])
    first, *later = store.commits
    assert first["texts"] > 20_000
    assert later and all("texts" not in c for c in later)
    assert all(c["meta"] < 2_000 for c in store.commits)
    # the handover is part of the stored state all the same: a new process resumes it
    again = Session(policy, conv_id="c", state_store=store)
    assert again.state.handover_text == s.state.handover_text
    assert json.dumps(again.prepare(msgs)) == json.dumps(s.prepare(msgs))
    store.close()


def test_state_written_before_the_texts_entry_resumes_and_moves_them(tmp_path: Path) -> None:
    """A state whose ``meta`` holds the texts (0.1's layout) resumes with them; the next
    save writes ``texts`` and a ``meta`` without them."""
    store = _store(tmp_path)
    policy = make_policy(model={"context_window": 1_000_000, "max_output_tokens": 1000})
    s = Session(policy, conv_id="c", state_store=store, handover=_handover())
    msgs = conversation(6, 40)
    s.prepare(msgs)
    entries = store.load("c").entries
    old = {k: v for k, v in entries.items() if k != "texts"}
    old["meta"] = {**old["meta"], "handover_text": s.state.handover_text, "unfit": None}
    store.commit("old", expected_version=0, put=old)
    resumed = Session(policy, conv_id="old", state_store=store)
    assert resumed.state.handover_text == s.state.handover_text
    assert json.dumps(resumed.prepare(msgs)) == json.dumps(s.prepare(msgs))
    moved = store.load("old").entries
    assert moved["texts"] == {"handover_text": s.state.handover_text, "unfit": None}
    assert "handover_text" not in moved["meta"] and "unfit" not in moved["meta"]
    store.close()


_text = st.one_of(st.none(), st.text(max_size=30))


@given(st.lists(st.tuples(_text, _text, st.booleans()), max_size=12))
@settings(max_examples=150, deadline=None)
def test_incremental_saves_of_the_texts_equal_the_full_state(
    steps: list[tuple[str | None, str | None, bool]],
) -> None:
    """Whatever the texts are set to between saves, the incremental saves applied in
    order hold what a full save holds (the ``texts`` entry written, rewritten or deleted)."""
    state = SessionState()
    stored: dict[str, Any] = {}

    apply_changes(state, stored)
    for handover, unfit, saved in steps:
        state.handover_text, state.unfit = handover, unfit
        if saved:
            apply_changes(state, stored)
    apply_changes(state, stored)
    assert stored == state.to_entries()
    assert "handover_text" not in stored["meta"] and "unfit" not in stored["meta"]
    back = SessionState.from_entries(stored)
    assert (back.handover_text, back.unfit) == (state.handover_text, None)  # unfit: no window
    assert not back.problems
