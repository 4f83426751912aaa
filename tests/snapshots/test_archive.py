"""The append-only history archive (ctxpolicy/snapshots/archive.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.components import SnapshotRef, SnapshotStore
from ctxpolicy.snapshots import FsspecStore, LocalStore
from ctxpolicy.snapshots.archive import HistoryArchive
from ctxpolicy.snapshots.names import SnapshotError, conv_folder
from ctxpolicy.snapshots.recall import handle_tool_call, recall, search

REPO = Path(__file__).resolve().parents[2]


def _msgs(k: int, size: int = 400, tag: str = "") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(k):
        if i % 2 == 0:
            out.append(
                {
                    "role": "assistant",
                    "content": f"step {tag}{i}: I will read the file",
                    "tool_calls": [
                        {
                            "id": f"c{tag}{i}",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                        }
                    ],
                }
            )
        else:
            out.append({"role": "tool", "tool_call_id": f"c{tag}{i - 1}", "content": "x" * size})
    return out


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SnapshotStore:
    if request.param == "local":
        return LocalStore(root=str(tmp_path))
    return FsspecStore(root=f"memory://archive-{uuid.uuid4().hex}")


def test_append_and_recall(store: SnapshotStore) -> None:
    arch = HistoryArchive(store, "run-1")
    batches = [_msgs(4, tag=f"b{b}-") for b in range(5)]
    for step, batch in enumerate(batches, 1):
        ref = arch.append(batch, step=step * 10)
        assert ref == f"ctxsnap://{conv_folder('run-1')}/history"
        assert arch.last_range == ((step - 1) * 4 + 1, step * 4)
        assert arch.last_ref == f"{ref}#{(step - 1) * 4 + 1}-{step * 4}"
        assert recall(store, arch.last_ref).startswith(f"#{(step - 1) * 4 + 1} (step {step * 10})")
    flat = [m for b in batches for m in b]
    assert len(arch) == 20
    for n, m in enumerate(flat, 1):
        step, got = arch.message(n)
        assert got == m and step == ((n - 1) // 4 + 1) * 10
    assert [m for _, _, m in arch.messages()] == flat
    text = recall(store, arch.ref)
    assert "#1 (step 10) assistant: step b0-0" in text and "→ call read_file" in text
    one = recall(store, f"{arch.ref}#6")
    assert one.startswith("#6 (step 20) tool [cb1-0]: xxx")
    assert recall(store, f"{arch.ref}#5-6").count("#") == 2
    with pytest.raises(SnapshotError):
        arch.message(21)
    assert arch.append([], step=99) == arch.ref and len(arch) == 20


def test_recall_of_one_message_reads_only_its_bytes(tmp_path: Path) -> None:
    store = LocalStore(root=str(tmp_path))
    arch = HistoryArchive(store, "c")
    for step in range(50):
        arch.append(_msgs(10, size=5000, tag=f"{step}-"), step=step)
    reads: list[int] = []
    real = store.read_range

    def counting(folder: str, name: str, offset: int, length: int) -> bytes:
        data = real(folder, name, offset, length)
        reads.append(len(data))
        return data

    store.read_range = counting  # type: ignore[method-assign]
    fresh = HistoryArchive(store, "c")
    reads.clear()
    _, m = fresh.message(500)
    assert m["content"] == "x" * 5000
    line = len(json.dumps(m, separators=(",", ":"))) + 1
    # the index entry, the message itself (and at most 8 entries to find the segment on open)
    assert sum(reads) <= 16 * 9 + line


def test_state_is_recovered_by_a_new_process(tmp_path: Path) -> None:
    store = LocalStore(root=str(tmp_path))
    HistoryArchive(store, "c").append(_msgs(3, tag="a"), step=1)
    code = (
        "import sys; from ctxpolicy.snapshots import LocalStore;"
        "from ctxpolicy.snapshots.archive import HistoryArchive;"
        "a = HistoryArchive(LocalStore(root=sys.argv[1]), 'c');"
        "assert len(a) == 3, len(a);"
        "a.append([{'role': 'user', 'content': 'from the child'}], step=7);"
        "print(a.message(4)[1]['content'], a.message(1)[1]['role'])"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["from", "the", "child", "assistant"]
    again = HistoryArchive(LocalStore(root=str(tmp_path)), "c")
    assert len(again) == 4 and again.message(4) == (
        7,
        {"role": "user", "content": "from the child"},
    )


def test_segments_at_the_size_limit(store: SnapshotStore) -> None:
    arch = HistoryArchive(store, "c", max_bytes=2000)
    for step in range(30):
        arch.append(_msgs(3, size=300, tag=f"{step}-"), step=step)
    folder = arch.folder
    segs = [n for n in range(1, 100) if store.size(folder, f"history_{n:06d}.jsonl")]
    assert len(segs) > 5 and segs == list(range(1, len(segs) + 1))
    assert all(store.size(folder, f"history_{n:06d}.jsonl") <= 2000 for n in segs)
    assert [m["content"] for _, _, m in arch.messages(88, 89)][1] == "x" * 300


def test_a_message_over_the_limit_is_cut_with_a_marker(store: SnapshotStore) -> None:
    arch = HistoryArchive(store, "c", max_bytes=1000)
    arch.append(
        [{"role": "tool", "content": "y" * 5000}, {"role": "user", "content": "ok"}], step=2
    )
    assert arch.last_truncated and arch.last_truncated[0]["bytes"] > 5000
    _, m = arch.message(1)
    assert m["ctxpolicy_truncated"]["bytes"] > 5000 and m["prefix"].startswith('{"role":"tool"')
    assert "[truncated in the archive" in recall(store, f"{arch.ref}#1")
    assert arch.message(2)[1] == {"role": "user", "content": "ok"}


def test_bytes_stay_within_1_2x_of_the_content(tmp_path: Path) -> None:
    store = LocalStore(root=str(tmp_path))
    arch = HistoryArchive(store, "c")
    content = 0
    for step in range(300):
        batch = _msgs(4, size=250 + step % 7 * 100, tag=f"{step}-")
        content += sum(len(json.dumps(m, separators=(",", ":")).encode()) for m in batch)
        arch.append(batch, step=step)
    on_disk = sum(p.stat().st_size for p in (tmp_path / "c").iterdir())
    assert on_disk <= 1.2 * content, on_disk / content


def test_write_failure_raises(tmp_path: Path) -> None:
    store = LocalStore(root=str(tmp_path))
    arch = HistoryArchive(store, "c")
    (tmp_path / "c").mkdir(parents=True)
    (tmp_path / "c" / "history_000001.jsonl").mkdir()  # the log cannot be opened
    with pytest.raises(OSError):
        arch.append(_msgs(2), step=1)
    assert len(HistoryArchive(store, "c")) == 0  # nothing indexed that is not there


def test_torn_index_and_orphan_data_are_survived(tmp_path: Path) -> None:
    store = LocalStore(root=str(tmp_path))
    HistoryArchive(store, "c").append(_msgs(2, tag="a"), step=1)
    folder = conv_folder("c")
    store.append(folder, "history_000001.jsonl", b'{"role":"user","content":"orph')  # crash
    store.append(folder, "history.idx", b"\x01\x00\x00")  # torn entry
    arch = HistoryArchive(store, "c")
    assert len(arch) == 3
    with pytest.raises(SnapshotError):
        arch.message(3)
    arch.append([{"role": "user", "content": "after the crash"}], step=2)
    assert arch.message(4)[1]["content"] == "after the crash"
    assert [m.get("role") for _, _, m in arch.messages()][:2] == ["assistant", "tool"]


def test_holds_finds_exactly_what_an_uncommitted_attempt_appended(tmp_path: Path) -> None:
    """``holds`` (a redo after a crash) reads the index in chunks and each segment's
    run of messages at once; every byte, the step and the length must match."""
    from ctxpolicy.snapshots import archive as archive_mod

    store = LocalStore(root=str(tmp_path))
    arch = HistoryArchive(store, "c", max_bytes=3000)
    first = _msgs(5, tag="a")
    arch.append(first, step=1)
    redo = _msgs(archive_mod.INDEX_CHUNK + 37, size=40, tag="b")  # > one index chunk
    arch.append(redo, step=2)
    assert len({p.name for p in (tmp_path / conv_folder("c")).glob("history_*")}) > 2
    again = HistoryArchive(store, "c", max_bytes=3000)  # a new process after the crash
    assert again.holds(6, redo, step=2)
    assert again.last_range == (6, 5 + len(redo))
    assert again.holds(1, first, step=1)
    assert not again.holds(6, redo, step=3)  # another step
    assert not again.holds(6, [*redo, redo[0]], step=2)  # more than the archive has
    changed = [*redo[:-1], {**redo[-1], "content": redo[-1]["content"] + "!"}]
    assert not again.holds(6, changed, step=2)  # one byte more at the very end
    same_len = [*redo[:-1], {**redo[-1], "content": redo[-1]["content"][:-1] + "?"}]
    assert not again.holds(6, same_len, step=2)  # same length, other bytes
    assert not again.holds(0, redo, step=2) and not again.holds(6, [], step=2)


class DictStore(SnapshotStore):
    """A third-party store with only write/read/list (no append)."""

    name = "dict"

    def __init__(self) -> None:
        super().__init__(root="mem")
        self.docs: dict[str, dict[str, Any]] = {}

    def write(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        folder = self.folder(conv_id)
        name = f"step_{step:03d}_{action}_{len(self.docs) + 1}"
        uri = f"ctxsnap://{folder}/{name}"
        self.docs[uri] = json.loads(json.dumps(document))
        return SnapshotRef(uri=uri, path=uri, conv_id=folder, name=name)

    def read(self, ref: str) -> dict[str, Any]:
        loc = self.locate(ref)
        if loc.uri not in self.docs:
            raise SnapshotError(2, "missing")
        return self.docs[loc.uri]

    def list(self, conv_id: str) -> list[SnapshotRef]:
        folder = self.folder(conv_id)
        return [self.locate(u) for u in self.docs if u.startswith(f"ctxsnap://{folder}/")]


def test_store_without_append_gets_one_document_per_record() -> None:
    store = DictStore()
    arch = HistoryArchive(store, "c")
    r1 = arch.append(_msgs(2, tag="a"), step=1)
    r2 = arch.append([{"role": "user", "content": "needle here"}], step=2)
    assert r1 != r2 and len(store.docs) == 2 and arch.last_ref == r2
    assert "needle here" in recall(store, r2)
    assert search(store, "c", "needle")[0]["ref"] == r2
    assert "needle here" in handle_tool_call(store, "c", "ctx_recall", {"ref": r2})
