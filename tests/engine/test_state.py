"""SessionState: a session resumed from its entries prepares exactly what the original does."""

from __future__ import annotations

import json

from ctxpolicy.engine import Session
from tests.engine_helpers import conversation, make_policy


def _policy():  # a small window so the pipeline compacts
    return make_policy(
        model={"context_window": 6000, "max_output_tokens": 500, "tokenizer": "cl100k_base"},
        budget={"reserve_output": 500, "tool_growth": 0, "safety_margin": 0, "target": 0.5},
    )


def test_resumed_session_prepares_byte_identical_messages() -> None:
    msgs = conversation(30, 400)
    pol = _policy()
    a = Session(pol, conv_id="resume")
    for n in range(4, len(msgs) + 1, 3):
        a.prepare(msgs[:n])
    assert a.stats.compactions, "the scenario must compact"
    entries = json.loads(json.dumps(a.state_entries()))
    b = Session(pol, conv_id="resume")
    b.load_state(entries)
    more = [*msgs, {"role": "user", "content": "and now?"}]
    assert json.dumps(b.prepare(more)) == json.dumps(a.prepare(more))


def test_incremental_changes_cover_the_full_state() -> None:
    msgs = conversation(30, 400)
    s = Session(_policy())  # no conv_id: nothing else takes the changes
    stored: dict[str, object] = {}
    for n in range(4, len(msgs) + 1, 3):
        s.prepare(msgs[:n])
        put, deleted = s.take_state_changes()
        stored.update(put)
        for k in deleted:
            stored.pop(k, None)
    assert json.loads(json.dumps(stored)) == json.loads(json.dumps(s.state_entries()))
    put, deleted = s.take_state_changes()
    assert put == {} and deleted == []
