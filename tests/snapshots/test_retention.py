"""Retention applied while sessions write (ctxpolicy/snapshots/retention.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ctxpolicy.snapshots import LocalOptions, LocalStore, retention
from ctxpolicy.snapshots.archive import HistoryArchive
from ctxpolicy.snapshots.retention import MARKER, TOMBSTONE, TOMBSTONE_KEEP_S, prune


def _new_process() -> None:
    """What a new process starts with: no sweeper state."""
    retention._sweepers.clear()


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name != MARKER)


def test_defaults_bound_the_store() -> None:
    opts = LocalOptions()
    assert opts.max_total_mb == 1024 and opts.max_age_days == 30
    schema = LocalOptions.model_json_schema()["properties"]
    assert schema["max_total_mb"]["default"] == 1024 and schema["durability"]["default"] == "flush"


def test_size_limit_applies_while_writing(tmp_path: Path) -> None:
    limit_mb = 0.5
    opts = LocalOptions(max_total_mb=limit_mb)
    # many sessions of one process, each with its own store object, share the counters
    stores = [LocalStore(opts, root=str(tmp_path)) for _ in range(3)]
    store = stores[0]
    assert all(s.retention is store.retention for s in stores)
    body = "x" * 10_000
    for i in range(300):  # 3 MB written, 6× the limit
        stores[i % 3].write(f"conv-{i % 3}", i, "read_file", {"observation": body})
        assert _size(tmp_path) <= limit_mb * 1024 * 1024 * 1.05 + 20_000
    assert store.retention.sweeps >= 5
    assert store.retention.sweeps <= 300 // 2  # amortised: not a sweep per write
    newest = store.list("conv-2")[-1]
    assert store.read(newest.uri)["observation"] == body


def test_age_limit_applies_on_the_first_write_of_a_process(tmp_path: Path) -> None:
    old_store = LocalStore(root=str(tmp_path))
    old = old_store.write("c", 1, "x", {"observation": "old"})
    HistoryArchive(old_store, "c").append([{"role": "user", "content": "old"}], step=1)
    past = time.time() - 40 * 86400
    folder = tmp_path / old.conv_id
    for p in folder.iterdir():
        os.utime(p, (past, past))
    (tmp_path / MARKER).unlink(missing_ok=True)
    _new_process()
    fresh = LocalStore(root=str(tmp_path))
    new = fresh.write("d", 1, "x", {"observation": "new"})
    assert not fresh.exists(old.uri) and fresh.exists(new.uri)
    # the emptied folder keeps only the mark of its loss (for the engine's data.lost)
    assert os.listdir(folder) == [TOMBSTONE]
    assert prune(tmp_path, max_age_days=30, now=time.time() + TOMBSTONE_KEEP_S).removed != []
    assert not folder.exists()  # the mark expires, then the folder goes
    # within the hour after a sweep, another process does not sweep again
    _new_process()
    again = LocalStore(root=str(tmp_path))
    again.write("e", 1, "x", {"observation": "x"})
    assert again.retention.sweeps == 0


def test_no_retention_when_disabled(tmp_path: Path) -> None:
    store = LocalStore(LocalOptions(max_total_mb=None, max_age_days=None), root=str(tmp_path))
    for i in range(70):
        store.write("c", i, "x", {"observation": "x"})
    assert store.retention.sweeps == 0 and not (tmp_path / MARKER).exists()


def test_prune_handles_history_segments_and_keeps_a_live_index(tmp_path: Path) -> None:
    store = LocalStore(LocalOptions(max_total_mb=None, max_age_days=None), root=str(tmp_path))
    arch = HistoryArchive(store, "c", max_bytes=5000)
    for step in range(20):
        arch.append([{"role": "tool", "content": "z" * 2000}], step=step)
    folder = tmp_path / "c"
    segs = sorted(folder.glob("history_*.jsonl"))
    assert len(segs) >= 8
    rep = prune(tmp_path, max_total_mb=0.01)
    assert (folder / "history.idx").exists()
    assert any(p.endswith(segs[0].name) for p in rep.removed)
    # recall of an expired message says so, recent ones still read
    assert arch.message(20)[1]["content"] == "z" * 2000
    kinds = {m.get("ctxpolicy_damaged") is not None for _, _, m in arch.messages()}
    assert kinds == {True, False}


def test_a_sweep_that_removed_nothing_leaves_the_segments_open(tmp_path: Path) -> None:
    _new_process()
    store = LocalStore(LocalOptions(max_total_mb=100, max_age_days=30), root=str(tmp_path))
    for i in range(3):
        store.write("c", i, "x", {"observation": "x"})
    (f,) = store._segments.folders.values()
    fd = f.fd
    assert fd is not None
    sweeps = store.retention.sweeps
    for i in range(3, 70):  # a sweep runs after 64 writes; nothing is due for removal
        store.write("c", i, "x", {"observation": "x"})
    assert store.retention.sweeps > sweeps and store.retention.removals == 0
    assert f.fd == fd  # still the same open segment: nothing to reopen
    # a sweep that removes files closes them (a writer reopens, or starts anew)
    old = store.write("old", 1, "x", {"observation": "old"})
    past = time.time() - 40 * 86400
    for p in (tmp_path / old.conv_id).iterdir():
        os.utime(p, (past, past))
    for i in range(70, 140):
        store.write("c", i, "x", {"observation": "x"})
    assert store.retention.removals >= 1 and not store.exists(old.uri)
    assert store.read(store.list("c")[-1].uri)["observation"] == "x"
