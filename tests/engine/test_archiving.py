"""The history archive and redone calls (issue 28, item 5).

A call redone after a lost state race (or after a crash before its commit) archives
the messages its first attempt already archived: they are found and reused, so the
archive holds each compacted message once and ``history#<n>`` numbers are the ones
a sequential run gives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxpolicy import Session, load_policy
from ctxpolicy.engine.archiving import ARCHIVE_MEMORY
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.replay import with_snapshots, with_window
from ctxpolicy.snapshots import LocalStore
from ctxpolicy.snapshots.archive import HistoryArchive
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.shared_data import TRACES, require

ROOT = Path(__file__).resolve().parents[2]
TRACE = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-13297.jsonl"


def _convo(upto: int) -> list[dict[str, Any]]:
    return [dict(m) for m in load_trace(require(TRACES / TRACE))[:upto]]


def _run(tmp: Path, name: str, racing: bool) -> tuple[list[str], int, int]:
    policy = with_snapshots(
        with_window(load_policy(ROOT / "policies" / "agents.yaml", agent="coding_agent"), 16384),
        tmp / name,
    )
    state = SqliteStateStore(SqliteOptions(path=str(tmp / f"{name}.sqlite3")))
    events: list[dict[str, Any]] = []
    a = Session(policy, conv_id="c", state_store=state)
    b = Session(policy, conv_id="c", state_store=state, on_event=events.append)
    out = []
    for upto in (41, 81, 121):
        convo = _convo(upto)
        if racing:  # b is stale each time: its attempt compacts too, then redoes
            out.append(json.dumps(a.prepare(convo)))
            out.append(json.dumps(b.prepare(convo)))
        else:  # the same calls one after the other: b resumes a's commits first
            out.append(json.dumps(a.prepare(convo)))
            b.close()
            b = Session(policy, conv_id="c", state_store=state)
            out.append(json.dumps(b.prepare(convo)))
            a.close()
            a = Session(policy, conv_id="c", state_store=state)
    conflicts = sum(e["type"] == "state.conflict" for e in events)
    archived = len(HistoryArchive(LocalStore(root=str(tmp / name)), "c"))
    stored = state.load("c").entries["memory"][ARCHIVE_MEMORY]["count"]
    assert stored == archived
    for s in (a, b):
        s.close()
    state.close()
    return out, archived, conflicts


def test_a_redone_compaction_archives_each_message_once(tmp_path: Path) -> None:
    sequential, archived, _ = _run(tmp_path, "seq", racing=False)
    raced, archived_raced, conflicts = _run(tmp_path, "race", racing=True)
    assert conflicts >= 2 and archived > 20
    assert archived_raced == archived  # nothing appended twice
    assert raced == sequential  # history#n numbers and everything else
