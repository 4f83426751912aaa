"""Issue 28 item 13 (and issue 32 item 2): state writes stay bounded as the conversation grows.

``seen_repairs`` lived in ``meta``, which every call rewrites: 12.6 KB after 500
id-less tool calls, 100 KB after 4,000. Repairs now have their own ``repairs`` entry,
written only when a new repair is reported and bounded
(:data:`~ctxpolicy.engine.state.MAX_SEEN_REPAIRS` indices one by one, older ones as a
floor per kind), so ``meta`` is a fixed-size set of counters. Measured on a real
sqlite store: the bytes each call writes do not grow with the conversation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxpolicy.engine import Session
from ctxpolicy.engine.state import MAX_SEEN_REPAIRS
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.engine_helpers import make_policy

FN = {"name": "run", "arguments": "{}"}


class _Measured(SqliteStateStore):
    """A real sqlite store that records how many bytes each commit writes."""

    def _write(self, conv_id: str, expected: int, rows: Any, dropped: list[str]) -> int:
        self.writes.append(sum(len(k) + len(v) for k, v in rows))
        return super()._write(conv_id, expected, rows, dropped)


def _idless(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Task: run the checks."}]
    for i in range(n):
        msgs.append({"role": "assistant", "content": f"step {i}", "tool_calls": [{"function": FN}]})
        msgs.append({"role": "tool", "content": f"ok {i}"})
    return msgs


def _run(tmp: Path, n: int, *, every: int = 25) -> tuple[_Measured, Session, list[str]]:
    store = _Measured(SqliteOptions(path=str(tmp / f"s{n}.db")))
    store.writes = []
    policy = make_policy(model={"context_window": 1_000_000, "max_output_tokens": 1000})
    types: list[str] = []
    s = Session(policy, conv_id="c", state_store=store, on_event=lambda e: types.append(e["type"]))
    msgs = _idless(n)
    for upto in range(every, n + 1, every):
        s.prepare(msgs[: 1 + 2 * upto])
    return store, s, types


def test_meta_does_not_grow_with_the_conversation(tmp_path: Path) -> None:
    small, _, _ = _run(tmp_path, 200)
    large, _, types = _run(tmp_path, 2000, every=100)
    reported = types.count("conversation.repaired")
    assert reported == 2000, "every id-less call was repaired, each reported once"
    meta = [len(json.dumps(x.load("c").entries["meta"])) for x in (small, large)]
    assert meta[1] <= meta[0] * 1.2 and meta[1] < 2000, meta
    repairs = large.load("c").entries["repairs"]
    assert len(repairs["seen"]) <= MAX_SEEN_REPAIRS
    assert len(json.dumps(repairs)) < 12_000
    small.close(), large.close()


def test_a_repair_is_reported_once_even_past_the_bound(tmp_path: Path) -> None:
    store, s, _ = _run(tmp_path, 600)
    msgs = _idless(600)
    again = Session(s.policy, conv_id="c", state_store=store)
    again.prepare(msgs)
    assert not [e for e in again.events if e["type"] == "conversation.repaired"]
    store.close()


def test_per_call_writes_do_not_grow_with_the_conversation(tmp_path: Path) -> None:
    """The bytes a call writes once no new repair is reported: the same at call 20
    and call 400 (ratio, no wall clock)."""
    store = _Measured(SqliteOptions(path=str(tmp_path / "w.db")))
    store.writes = []
    policy = make_policy(model={"context_window": 1_000_000, "max_output_tokens": 1000})
    s = Session(policy, conv_id="c", state_store=store)
    msgs = _idless(400)
    s.prepare(msgs)  # every repair reported at once
    first = len(store.writes)
    for upto in (20, 400):
        s.prepare([*msgs, {"role": "user", "content": f"again {upto}"}])
    steady = store.writes[first:]
    assert len(steady) == 2, "one commit per prepare"
    assert max(steady) <= 1.2 * min(steady) and max(steady) < 2500, steady
    store.close()
