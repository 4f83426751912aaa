"""Retention never leaves a live context citing what it took (issue 28 item 12).

Real stores on disk, real sessions: a reference in a conversation's prepared
context either resolves through ``ctx_recall``, or it was reported in a
``data.lost`` event and is no longer cited.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.engine.session import Session
from ctxpolicy.snapshots import LocalOptions, LocalStore, retention
from ctxpolicy.snapshots.archive import HistoryArchive
from ctxpolicy.snapshots.lost import GONE_LINE, LostRefs
from ctxpolicy.snapshots.recall import handle_tool_call
from ctxpolicy.snapshots.retention import TOMBSTONE, prune
from tests.engine_helpers import call, make_policy

_REF = re.compile(r"ctxsnap://[^\s)\]]+")
NO_LIMITS = LocalOptions(max_total_mb=None, max_age_days=None)


def _age(folder: Path, seconds: float) -> None:
    past = time.time() - seconds
    for p in folder.iterdir():
        os.utime(p, (past, past))


def test_idle_conversations_go_whole_before_a_live_one_loses_anything(tmp_path: Path) -> None:
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    idle = [store.write("idle", i, "read", {"observation": "i" * 20_000}) for i in range(5)]
    HistoryArchive(store, "idle").append([{"role": "user", "content": "old"}], step=1)
    _age(tmp_path / "idle", 2 * 3600)
    live = [store.write("live", i, "read", {"observation": "l" * 20_000}) for i in range(5)]
    rep = prune(tmp_path, max_total_mb=0.1)
    assert rep.evicted_conversations == [str(tmp_path / "idle")] and not rep.partly_evicted
    assert all(store.exists(r.uri) for r in live)
    assert not any(store.exists(r.uri) for r in idle)
    # the index stays (archive numbers never restart); the loss is marked
    assert (tmp_path / "idle" / "history.idx").exists()
    assert store.evicted("idle") > 0 and store.evicted("live") == 0


def test_live_conversations_over_the_limit_lose_oldest_files_with_a_mark(tmp_path: Path) -> None:
    # one file per result (segments: tests/snapshots/test_segment_retention.py)
    store = LocalStore(NO_LIMITS.model_copy(update={"layout": "files"}), root=str(tmp_path))
    refs = []
    for i in range(10):
        refs.append(store.write(f"c{i % 2}", i, "read", {"observation": "x" * 20_000}))
        time.sleep(0.02)  # distinct mtimes (coarser than 1 ms on ext4): oldest first
    rep = prune(tmp_path, max_total_mb=0.12)
    # the least recently written conversation loses its oldest files first
    assert rep.partly_evicted == [str(tmp_path / "c0")] and not rep.evicted_conversations
    assert not store.exists(refs[0].uri) and store.exists(refs[8].uri)
    assert all(store.exists(r.uri) for r in refs[1::2])
    mark = json.loads((tmp_path / "c0" / TOMBSTONE).read_text())
    assert mark["by"] == "retention" and mark["files"] >= 1
    # the tombstone is never followed through a symlink planted at its name
    (tmp_path / "c0" / TOMBSTONE).unlink()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.symlink(target, tmp_path / "c0" / TOMBSTONE)
    store.write("c1", 99, "read", {"observation": "y" * 200_000})
    prune(tmp_path, max_total_mb=0.1)
    assert target.read_text() == "keep"


def test_sessions_sharing_a_bounded_store_never_cite_a_lost_reference(tmp_path: Path) -> None:
    """The issue's run: conversations of one process write to one store over its size
    limit while masking cites older results; every cited reference must recall."""
    retention._sweepers.clear()
    policy = make_policy(
        tmp_path,
        snapshots={"max_total_mb": 0.25, "max_age_days": None},
        tools={"*": {"preprocess": "head_tail", "options": {"max_chars": 300}}},
    )
    convs = [f"agent-{k}" for k in range(3)]
    sessions = {c: Session(policy, conv_id=c) for c in convs}
    history: dict[str, list[dict[str, object]]] = {
        c: [{"role": "system", "content": "test"}, {"role": "user", "content": "Task: go"}]
        for c in convs
    }
    cited = lost_seen = 0
    for r in range(30):
        for c in convs:
            s, msgs = sessions[c], history[c]
            tc = call(f"{c}-{r}", path=f"f{r}.py")
            msgs.append({"role": "assistant", "content": None, "tool_calls": [tc]})
            text = s.add_tool_result(tc, f"{c} round {r}\n" + "data " * 3000)
            msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": text})
            out = s.prepare(msgs)
            lost = {ref for e in s.events if e["type"] == "data.lost" for ref in e.get("refs", ())}
            for m in out:
                for ref in _REF.findall(m.get("content") or ""):
                    assert ref not in lost, ref
                    answer = handle_tool_call(s.snapshots, c, "ctx_recall", {"ref": ref})
                    assert not answer.startswith("Error"), (ref, answer)
                    cited += 1
            lost_seen = max(lost_seen, len(lost))
    assert cited > 100
    assert lost_seen > 0  # the limit did take results these contexts had cited
    assert any(GONE_LINE in (m.get("content") or "") for m in out)


_TEXTS = st.lists(
    st.sampled_from(["a", " ", "\n", ".", ")", "[Full detail available at: ", "ctxsnap://c/"])
    | st.sampled_from(["step_001_read", "step_002_read", "history", "history#1-2", "x"]),
    max_size=30,
).map("".join)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(_TEXTS, min_size=1, max_size=4))
def test_lost_refs_are_never_cited_and_text_never_grows(tmp_path: Path, texts: list[str]) -> None:
    root = tmp_path / "s"
    # one file per result: the test removes one (segments lose whole segments)
    store = LocalStore(NO_LIMITS.model_copy(update={"layout": "files"}), root=str(root))
    if not root.exists():
        store.write("c", 1, "read", {"observation": "a"})  # step_001_read
        store.write("c", 2, "read", {"observation": "b"})  # step_002_read
        os.unlink(root / "c" / "step_001_read.json")  # what retention took
        (root / "c" / TOMBSTONE).write_text("{}")
    lost = LostRefs(store, "c")
    msgs = [{"role": "tool", "content": t} for t in texts]
    out, new = lost.apply(msgs)
    for before, after in zip(msgs, out, strict=True):
        text = after["content"]
        assert len(text) <= len(before["content"])
        if "ctxsnap://c/" not in before["content"]:
            assert text == before["content"]
        # whatever the context still cites of this conversation resolves
        for token in re.findall(r"ctxsnap://c/[A-Za-z0-9._#-]+", text):
            ref = lost._canonical(token)
            assert ref is None or lost._resolves(ref), (token, text)
    assert all(not lost._resolves(r) for r in new)
    assert "ctxsnap://c/step_002_read" not in new


def test_one_stat_per_call_while_nothing_was_lost(tmp_path: Path) -> None:
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    ref = store.write("c", 1, "read", {"observation": "a"}).uri
    lost = LostRefs(store, "c")
    msgs = [{"role": "tool", "content": f"x\n[Full detail available at: {ref}]"}]
    out, new = lost.apply(msgs)
    assert out is msgs and new == []
