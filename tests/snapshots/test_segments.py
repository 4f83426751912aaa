"""The local store's default layout: snapshots appended to segment files."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli import main
from ctxpolicy.snapshots import LocalOptions, LocalStore, SnapshotError, prune, records, segments
from ctxpolicy.snapshots.recall import handle_tool_call, search

NO_LIMITS = LocalOptions(max_total_mb=None, max_age_days=None)
SMALL = LocalOptions(max_total_mb=None, max_age_days=None, segment_mb=0.01)  # ~10 KB


def _segs(root: Path, folder: str) -> list[str]:
    return sorted(p.name for p in (root / folder).glob("snapshots_*.seg"))


def test_round_trip_list_and_a_new_process_reads_it(tmp_path: Path) -> None:
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    refs = [
        store.write("run/1", i, "bash", {"step": i, "observation": f"out {i}\n" * 20})
        for i in range(1, 6)
    ]
    assert [r.uri for r in refs] == [f"ctxsnap://run~2F1/step_{i:03d}_bash" for i in range(1, 6)]
    assert all(r.path == "" for r in refs) and _segs(tmp_path, "run~2F1") == [
        "snapshots_000001.seg"
    ]
    assert not list((tmp_path / "run~2F1").glob("*.json"))
    fresh = LocalStore(NO_LIMITS, root=str(tmp_path))  # what another process sees
    assert fresh.read(refs[2].uri)["observation"] == "out 3\n" * 20
    assert [r.name for r in fresh.list("run/1")] == [r.name for r in refs]
    assert fresh.exists(refs[0].uri) and not fresh.exists("ctxsnap://run~2F1/step_009_bash")
    # written by another store object after this one indexed the folder
    late = store.write("run/1", 9, "bash", {"observation": "late"})
    assert fresh.read(late.uri)["observation"] == "late"
    assert os.stat(tmp_path / "run~2F1" / "snapshots_000001.seg").st_mode & 0o777 == 0o600


def test_segments_roll_over_and_names_stay_unique(tmp_path: Path) -> None:
    store = LocalStore(SMALL, root=str(tmp_path))
    refs = [store.write("c", 3, "bash", {"observation": f"{i}:" + "x" * 3000}) for i in range(12)]
    assert len({r.uri for r in refs}) == 12
    assert len(_segs(tmp_path, "c")) >= 4
    fresh = LocalStore(SMALL, root=str(tmp_path))
    for i, r in enumerate(refs):
        assert fresh.read(r.uri)["observation"].startswith(f"{i}:")


def test_the_same_document_again_keeps_its_name(tmp_path: Path) -> None:
    first = LocalStore(root=str(tmp_path)).write(
        "c", 7, "bash", {"observation": "o", "timestamp": 1}
    )
    again = LocalStore(root=str(tmp_path)).write(
        "c", 7, "bash", {"observation": "o", "timestamp": 2}
    )
    other = LocalStore(root=str(tmp_path)).write(
        "c", 7, "bash", {"observation": "n", "timestamp": 3}
    )
    assert first.uri == again.uri != other.uri == "ctxsnap://c/step_007_bash_2"


def _proc(root: str, p: int, n: int) -> None:
    store = LocalStore(SMALL, root=root)
    for i in range(n):
        m = f"<{p}:{i}>"
        ref = store.write("shared", 1, "bash", {"marker": m, "observation": m * 300})
        with open(os.path.join(root, f"out{p}"), "a") as fh:
            fh.write(json.dumps([ref.uri, m]) + "\n")


def test_processes_and_threads_of_one_conversation(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_proc, args=(str(tmp_path), p, 25)) for p in range(4)]
    for pr in procs:
        pr.start()
    store = LocalStore(SMALL, root=str(tmp_path))
    got: list[tuple[str, str]] = []

    def worker(t: int) -> None:
        for i in range(25):
            m = f"<t{t}:{i}>"
            got.append((store.write("shared", 1, "bash", {"marker": m, "observation": m}).uri, m))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for pr in procs:
        pr.join()
        assert pr.exitcode == 0
    for p in range(4):
        got += [tuple(json.loads(x)) for x in (tmp_path / f"out{p}").read_text().splitlines()]
    assert len(got) == 175 and len({u for u, _ in got}) == 175  # every name handed out once
    fresh = LocalStore(SMALL, root=str(tmp_path))
    for uri, marker in got:  # each reference reads the document it was handed out for
        assert fresh.read(uri)["marker"] == marker
    assert len(fresh.list("shared")) == 175


def test_a_torn_record_is_skipped_and_older_ones_stay(tmp_path: Path) -> None:
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    old = store.write("c", 1, "a", {"observation": "old"})
    seg = tmp_path / "c" / "snapshots_000001.seg"
    nonce = bytes.fromhex(seg.read_bytes()[22:38].decode())
    whole = records.record(nonce, "step_002_a", *records.encode({"observation": "torn" * 50}))
    with open(seg, "ab") as fh:  # a crash in the middle of a write, then zeros
        fh.write(whole[: len(whole) // 2] + b"\0" * 100)
    store.close()
    after = LocalStore(NO_LIMITS, root=str(tmp_path)).write("c", 3, "a", {"observation": "new"})
    fresh = LocalStore(NO_LIMITS, root=str(tmp_path))
    assert fresh.read(old.uri)["observation"] == "old"
    assert fresh.read(after.uri)["observation"] == "new"
    assert [r.name for r in fresh.list("c")] == ["step_001_a", "step_003_a"]
    with pytest.raises(SnapshotError):
        fresh.read("ctxsnap://c/step_002_a")


def test_a_forged_record_in_an_observation_is_never_a_snapshot(tmp_path: Path) -> None:
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    fake = records.record(b"\0" * 8, "step_005_x", *records.encode({"observation": "forged"}))
    store.write("c", 1, "a", {"observation": fake.decode("latin-1")})
    seg = tmp_path / "c" / "snapshots_000001.seg"
    with open(seg, "ab") as fh:
        fh.write(b"garbage")  # a torn tail: readers resynchronise past it
    store.write("c", 2, "a", {"observation": "fine"})
    fresh = LocalStore(NO_LIMITS, root=str(tmp_path))
    assert [r.name for r in fresh.list("c")] == ["step_001_a", "step_002_a"]


def test_a_0_1_store_is_read_and_written_beside(tmp_path: Path) -> None:
    files = LocalStore(LocalOptions(layout="files"), root=str(tmp_path))
    a = files.write("c", 1, "read", {"observation": "from 0.1"})
    assert a.path.endswith("step_001_read.json")
    store = LocalStore(root=str(tmp_path))
    b = store.write("c", 1, "read", {"observation": "segments"})
    assert b.uri == "ctxsnap://c/step_001_read_2"  # the file's name stays taken
    assert store.read(a.uri)["observation"] == "from 0.1"
    assert store.read(a.path)["observation"] == "from 0.1"
    assert store.read(b.uri)["observation"] == "segments"
    assert [r.name for r in store.list("c")] == ["step_001_read", "step_001_read_2"]
    assert files.read(b.uri)["observation"] == "segments"  # and the other way round
    hits = search(store, "c", "segments")
    assert [h["ref"] for h in hits] == [b.uri]


def test_retention_takes_whole_segments_oldest_first(tmp_path: Path) -> None:
    store = LocalStore(SMALL, root=str(tmp_path))
    refs = [store.write("c", i, "r", {"observation": "x" * 4000}) for i in range(10)]
    before = _segs(tmp_path, "c")
    old = tmp_path / "c" / before[0]
    os.utime(old, (1, 1))
    rep = prune(tmp_path, max_age_days=1)
    assert rep.removed == [str(old)] and rep.partly_evicted == [str(tmp_path / "c")]
    assert not store.exists(refs[0].uri) and store.exists(refs[-1].uri)
    with pytest.raises(SnapshotError):
        store.read(refs[0].uri)
    # the size limit never takes the segment a live conversation appends to
    rep = prune(tmp_path, max_total_mb=0.001)
    assert _segs(tmp_path, "c") == [before[-1]] and store.exists(refs[-1].uri)
    r = CliRunner().invoke(
        main, ["snapshots", "prune", "--root", str(tmp_path), "--max-age-days", "1e-9"]
    )
    assert r.exit_code == 0 and "removed 1 files" in r.output and "emptied: 1" in r.output


def test_a_writer_whose_segment_went_starts_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segments, "REVALIDATE_S", 0.0)
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    store.write("c", 1, "r", {"observation": "a"})
    (tmp_path / "c" / "snapshots_000001.seg").unlink()  # another process's retention
    ref = store.write("c", 2, "r", {"observation": "b"})
    assert LocalStore(root=str(tmp_path)).read(ref.uri)["observation"] == "b"


def test_open_files_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "MAX_OPEN", 2)
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    for i in range(6):
        store.write(f"c{i}", 1, "r", {"observation": "x"})
    assert sum(f.fd is not None for f in store._segments.folders.values()) <= 3


@pytest.mark.parametrize(
    "ref",
    [
        "ctxsnap://victim/step_001_read",
        "ctxsnap://victim/../me/step_001_read",
        "ctxsnap://me/step_001_read#99999999999999999999",
        "ctxsnap://me/snapshots_000001.seg",
        "ctxsnap://me/step_" + "9" * 21 + "_read",
        "ctxsnap://me/step_001_read/../../victim/step_001_read",
        "/etc/passwd",
        "x" * 5000,
    ],
)
def test_hostile_references(tmp_path: Path, ref: str) -> None:
    store = LocalStore(root=str(tmp_path))
    store.write("me", 1, "read", {"observation": "mine"})
    store.write("victim", 1, "read", {"observation": "SECRET"})
    out = handle_tool_call(store, "me", "ctx_recall", {"ref": ref})
    assert out.startswith("Error:") and "SECRET" not in out


def test_a_segment_made_anew_is_never_written_with_the_old_nonce(tmp_path: Path) -> None:
    store = LocalStore(NO_LIMITS, root=str(tmp_path))
    store.write("c", 1, "r", {"observation": "a"})
    store._segments.close_files()  # as after a sweep
    (tmp_path / "c" / "snapshots_000001.seg").unlink()
    other = LocalStore(NO_LIMITS, root=str(tmp_path))
    first = other.write("c", 5, "r", {"observation": "by another process"})
    ref = store.write("c", 2, "r", {"observation": "b"})
    fresh = LocalStore(NO_LIMITS, root=str(tmp_path))
    assert fresh.read(ref.uri)["observation"] == "b"
    assert fresh.read(first.uri)["observation"] == "by another process"
