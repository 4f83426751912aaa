"""Snapshot names after a lost state race and after a crash, on both file stores (issue 28, item 6).

* ``add_tool_result`` redone after a lost compare-and-set takes the step of the
  reloaded state: the name and reference a sequential run gives, not the name its
  first attempt took from the stale counter;
* a call redone after a crash between its snapshot write and its state commit finds
  its own document and reuses the name, in the ``local`` and the ``fsspec`` store.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy import Session
from ctxpolicy.components import SnapshotStore
from ctxpolicy.policy.models import Policy
from ctxpolicy.snapshots import FsspecStore, LocalStore
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.engine_helpers import bare_policy

OUTPUT_1 = "\n".join(f"line {i} of a.py" for i in range(400))
OUTPUT_2 = "\n".join(f"line {i} of b.py" for i in range(400))


def _policy() -> Policy:
    return bare_policy(
        "coder",
        32000,
        tools={"*": {"preprocess": "head_tail", "options": {"max_chars": 600}}},
        snapshots={"reference": "always"},
    )


def _store(kind: str, tmp: Path, name: str = "snaps") -> SnapshotStore:
    if kind == "local":
        return LocalStore(root=str(tmp / name))
    return FsspecStore(root=f"file://{tmp / name}")


def _call(cid: str, path: str) -> dict[str, Any]:
    return {"id": cid, "function": {"name": "read_file", "arguments": f'{{"path": "{path}"}}'}}


@pytest.mark.parametrize("kind", ["local", "fsspec"])
def test_a_redo_after_a_lost_race_takes_the_sequential_name(kind: str, tmp_path: Path) -> None:
    state = SqliteStateStore(SqliteOptions(path=str(tmp_path / "state.sqlite3")))
    snaps = _store(kind, tmp_path)
    events: list[dict[str, Any]] = []
    a = Session(_policy(), conv_id="c", state_store=state, snapshot_store=snaps)
    b = Session(
        _policy(), conv_id="c", state_store=state, snapshot_store=snaps, on_event=events.append
    )
    a.add_tool_result(_call("c1", "a.py"), OUTPUT_1)  # a commits step 1; b is stale
    text = b.add_tool_result(_call("c2", "b.py"), OUTPUT_2)
    assert [e["call"] for e in events if e["type"] == "state.conflict"] == ["add_tool_result"]
    # what a sequential run gives the second result
    seq = Session(_policy(), conv_id="c", snapshot_store=_store(kind, tmp_path, "seq"))
    seq.add_tool_result(_call("c1", "a.py"), OUTPUT_1)
    expected = seq.add_tool_result(_call("c2", "b.py"), OUTPUT_2)
    assert text == expected
    assert text.endswith("[Full detail available at: ctxsnap://c/step_002_read_file]")
    assert b.state.refs["c2"] == "ctxsnap://c/step_002_read_file"
    assert b.state.step == 2
    doc = snaps.read("ctxsnap://c/step_002_read_file")
    assert doc["observation"] == OUTPUT_2 and doc["step"] == 2
    # the committed state says so too (a new session resumes it)
    c = Session(_policy(), conv_id="c", state_store=state, snapshot_store=snaps)
    assert c.state.refs == {
        "c1": "ctxsnap://c/step_001_read_file",
        "c2": "ctxsnap://c/step_002_read_file",
    }
    for s in (a, b, c):
        s.close()
    state.close()


@pytest.mark.parametrize("kind", ["local", "fsspec"])
def test_the_same_document_written_again_keeps_its_name(kind: str, tmp_path: Path) -> None:
    """A crash between a snapshot write and the state commit: the redone call writes the
    same document (but for its time) again, in a new process (a new store object)."""
    doc = {"step": 3, "action": "bash", "observation": OUTPUT_1, "timestamp": "t1"}
    first = _store(kind, tmp_path).write("c", 3, "bash", doc)
    time.sleep(0.01)
    again = _store(kind, tmp_path).write("c", 3, "bash", {**doc, "timestamp": "t2"})
    assert again.uri == first.uri == "ctxsnap://c/step_003_bash"
    # another document under the same step and tool gets the next name, never the first
    other = _store(kind, tmp_path).write("c", 3, "bash", {**doc, "observation": "other"})
    assert other.uri == "ctxsnap://c/step_003_bash_2"
    store = _store(kind, tmp_path)
    assert store.read(first.uri)["observation"] == OUTPUT_1
    assert store.read(other.uri)["observation"] == "other"
