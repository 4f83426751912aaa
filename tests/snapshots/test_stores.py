"""Snapshot stores: layout, containment of hostile names, modes, atomicity, retention.

The local store's tests here run with ``layout: files`` (one JSON file per result,
ctxpolicy 0.1's layout, which they inspect on disk); the default ``segments``
layout has its own in tests/snapshots/test_segments.py."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.snapshots import (
    FsspecStore,
    LocalOptions,
    LocalStore,
    SnapshotError,
    parse_uri,
    prune,
)
from ctxpolicy.snapshots.document import _ascii_json, dump_document
from ctxpolicy.snapshots.names import conv_folder
from tests.strategies import JSON_SCALARS, nested

HOSTILE = [
    "../../etc",
    "../..",
    "..",
    ".",
    "",
    "/etc/passwd",
    "/",
    "C:\\Windows\\System32",
    "a/../../b",
    "a\x00b",
    "\x00",
    "x" * 10_000,
    "．．／．．／etc",  # full-width look-alikes, NFKC → ../../etc
    "\u2024\u2024/etc",  # one-dot leaders
    "..\u2215..\u2215etc",  # division slash
    "run\n42\r\t",
    "~root",
    "$(rm -rf /)",
    "${HOME}/../..",
    "😀" * 50,
    "CON",
]


def Files(root: str) -> LocalStore:
    return LocalStore(LocalOptions(layout="files"), root=root)


def doc(obs: str = "hello") -> dict:
    return {"step": 3, "action": "read_file", "observation": obs}


def test_layout_and_reference(tmp_path: Path) -> None:
    store = Files(root=str(tmp_path))
    ref = store.write("run-42", 3, "sql_query", doc())
    assert ref.uri == "ctxsnap://run-42/step_003_sql_query"
    assert ref.path == str(tmp_path / "run-42" / "step_003_sql_query.json")
    assert ref.conv_id == "run-42" and ref.name == "step_003_sql_query"
    assert json.loads(Path(ref.path).read_text("utf-8")) == doc()
    assert store.read(ref.uri) == doc() == store.read(ref.path)


def test_collision_adds_suffix(tmp_path: Path) -> None:
    store = Files(root=str(tmp_path))
    names = [store.write("c", 3, "bash", doc(str(i))).name for i in range(3)]
    assert names == ["step_003_bash", "step_003_bash_2", "step_003_bash_3"]
    assert [r.name for r in store.list("c")] == names
    assert store.read("ctxsnap://c/step_003_bash_3")["observation"] == "2"


def test_modes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = Files(root=str(root))
    ref = store.write("c", 1, "x", doc())
    assert stat.S_IMODE(os.stat(ref.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(ref.path).parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    assert not [p for p in Path(ref.path).parent.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("conv_id", HOSTILE)
@pytest.mark.parametrize("action", ["read_file", "../../etc/passwd", "/abs", "a\x00b", "．．／x"])
def test_hostile_names_stay_under_root(tmp_path: Path, conv_id: str, action: str) -> None:
    root = tmp_path / "root"
    store = Files(root=str(root))
    ref = store.write(conv_id, 7, action, doc())
    real = Path(os.path.realpath(ref.path))
    assert real.parent.parent == Path(os.path.realpath(root))
    assert len(real.parent.name) <= 150 and len(real.name) <= 80
    assert not real.parent.name.startswith(".") and not real.name.startswith(".")
    assert store.read(ref.uri) == doc()
    assert [r.uri for r in store.list(conv_id)] == [ref.uri]
    # nothing anywhere else in tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_distinct_hostile_ids_do_not_share_a_directory() -> None:
    names = {conv_folder(c) for c in HOSTILE}
    assert len(names) == len(HOSTILE)


def test_read_refuses_paths_outside_root(tmp_path: Path) -> None:
    store = Files(root=str(tmp_path / "root"))
    store.write("c", 1, "x", doc())
    outside = tmp_path / "secret.json"
    outside.write_text('{"observation": "secret"}')
    for ref in [str(outside), str(tmp_path / "root" / ".." / "secret.json"), "ctxsnap://../secret"]:
        with pytest.raises(SnapshotError):
            store.read(ref)
    assert parse_uri("ctxsnap://../x") is None
    assert parse_uri("ctxsnap://c/step_001_x") == ("c", "step_001_x")


def test_symlinked_conv_dir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "evil")
    store = Files(root=str(root))
    with pytest.raises(SnapshotError):
        store.write("evil", 1, "x", doc())
    assert not list((tmp_path / "elsewhere").iterdir())


def test_unicode_and_surrogates_round_trip(tmp_path: Path) -> None:
    store = Files(root=str(tmp_path))
    for obs in ["中文 ✓ é", "lone \ud800 surrogate", "\x00\x01 nul"]:
        ref = store.write("c", 1, "x", doc(obs))
        assert store.read(ref.uri)["observation"] == obs


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_root_raises_oserror(tmp_path: Path) -> None:
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(OSError):
            Files(root=str(root)).write("c", 1, "x", doc())
    finally:
        root.chmod(0o700)


def test_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(OSError):
        Files(root=str(tmp_path / "f")).write("c", 1, "x", doc())


# --------------------------------------------------------------------------- concurrency


def _check_all_complete(root: Path, expected: int) -> None:
    files = sorted((root / "shared").glob("*.json"))
    assert len(files) == expected
    seen = set()
    for f in files:
        d = json.loads(f.read_text("utf-8"))  # never partial, never interleaved
        assert d["observation"] == d["marker"] * 5000
        seen.add(d["marker"])
    assert len(seen) == expected
    assert not list((root / "shared").glob(".tmp-*"))


def test_threads_same_conv_id(tmp_path: Path) -> None:
    store = Files(root=str(tmp_path))
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(25):
                m = f"<{t}:{i}>"
                store.write("shared", 1, "bash", {"marker": m, "observation": m * 5000})
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    _check_all_complete(tmp_path, 200)


def _proc_worker(root: str, p: int, n: int) -> None:
    store = Files(root=root)
    for i in range(n):
        m = f"<p{p}:{i}>"
        store.write("shared", 1, "bash", {"marker": m, "observation": m * 5000})


def test_processes_same_conv_id(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn" if sys.platform == "darwin" else "fork")
    procs = [ctx.Process(target=_proc_worker, args=(str(tmp_path), p, 30)) for p in range(4)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(60)
        assert pr.exitcode == 0
    _check_all_complete(tmp_path, 120)


def test_no_hard_links_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(*a: object, **k: object) -> None:
        raise OSError(1, "Operation not permitted")  # EPERM, like some FUSE/SMB mounts

    monkeypatch.setattr(os, "link", no_link)
    store = Files(root=str(tmp_path))
    refs = [store.write("c", 1, "x", doc(str(i))) for i in range(3)]
    assert [store.read(r.uri)["observation"] for r in refs] == ["0", "1", "2"]
    assert stat.S_IMODE(os.stat(refs[0].path).st_mode) == 0o600


# --------------------------------------------------------------------------- fsspec


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_fsspec_store(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("fsspec")
    root = (
        f"memory://snaps-{os.getpid()}-{time.time_ns()}"
        if kind == "memory"
        else f"file://{tmp_path}/s"
    )
    store = FsspecStore(root=root)
    r1 = store.write("run-42", 3, "sql_query", doc("a"))
    r2 = store.write("run-42", 3, "sql_query", doc("b"))
    store.write("../../etc", 1, "x", doc())
    assert conv_folder("../../etc") == "~2E~2E~2F~2E~2E~2Fetc"
    assert r1.uri == "ctxsnap://run-42/step_003_sql_query"
    assert r2.name == "step_003_sql_query_2"
    assert store.read(r1.uri)["observation"] == "a"
    assert store.read(r2.path)["observation"] == "b"
    assert [r.name for r in store.list("run-42")] == ["step_003_sql_query", "step_003_sql_query_2"]
    assert store.list("nobody") == []
    with pytest.raises(SnapshotError):
        store.read("ctxsnap://../etc")
    if kind == "file":
        assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
        assert len(list((tmp_path / "s").iterdir())) == 2


# --------------------------------------------------------------------------- retention


def test_prune_by_age_and_size(tmp_path: Path) -> None:
    store = Files(root=str(tmp_path))
    now = time.time()
    refs = []
    for i in range(10):
        r = store.write(f"c{i % 2}", i, "x", doc("x" * 100_000))
        age_days = 10 - i
        os.utime(r.path, (now - age_days * 86400, now - age_days * 86400))
        refs.append(r)
    (tmp_path / "c0" / "notes.txt").write_text("not a snapshot")
    rep = prune(tmp_path, max_age_days=5.5, dry_run=True, now=now)
    assert len(rep.removed) == 5 and all(Path(r.path).exists() for r in refs)
    rep = prune(tmp_path, max_age_days=5.5, now=now)
    assert sorted(rep.removed) == sorted(r.path for r in refs[:5])
    assert rep.kept_files == 5
    # ~100 KB each → keep 2: the least recently written conversation (c0: 6, 8) goes
    # first, then the oldest of c1 (5)
    rep = prune(tmp_path, max_total_mb=0.25, now=now)
    assert rep.kept_files == 2
    assert {Path(p).name for p in (tmp_path).rglob("step_*.json")} == {
        Path(refs[7].path).name,
        Path(refs[9].path).name,
    }
    assert (tmp_path / "c0" / "notes.txt").exists()
    assert prune(tmp_path / "missing", max_age_days=1).removed == []


def test_cli_prune(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ctxpolicy.cli.snapshots import snapshots

    store = Files(root=str(tmp_path))
    old = store.write("c", 1, "x", doc())
    new = store.write("c", 2, "x", doc())
    os.utime(old.path, (time.time() - 30 * 86400,) * 2)
    runner = CliRunner()
    res = runner.invoke(
        snapshots, ["prune", "--root", str(tmp_path), "--max-age-days", "7", "--dry-run"]
    )
    assert (
        res.exit_code == 0 and f"would remove {old.path}" in res.output and Path(old.path).exists()
    )
    res = runner.invoke(
        snapshots, ["prune", "--root", str(tmp_path), "--max-age-days", "7", "--json"]
    )
    out = json.loads(res.output)
    assert res.exit_code == 0 and out["removed"] == [old.path]
    assert out["partly_evicted"] == [str(tmp_path / "c")] and out["evicted_conversations"] == []
    assert not Path(old.path).exists() and Path(new.path).exists()
    gone = store.write("d", 1, "x", doc())
    os.utime(gone.path, (time.time() - 30 * 86400,) * 2)
    res = runner.invoke(snapshots, ["prune", "--root", str(tmp_path), "--max-age-days", "7"])
    assert res.exit_code == 0 and "conversations emptied: 1; partly pruned" in res.output
    res = runner.invoke(snapshots, ["prune", "--root", str(tmp_path)])
    assert res.exit_code == 2 and "no retention set" in res.output
    assert runner.invoke(snapshots, ["prune"]).exit_code == 2


# --------------------------------------------------------------------------- O(1) names


def _count_fs_ops(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"link": 0, "open": 0}
    real_link, real_open = os.link, os.open

    def link(*a: object, **k: object) -> None:
        counts["link"] += 1
        real_link(*a, **k)  # type: ignore[arg-type]

    def open_(*a: object, **k: object) -> int:
        counts["open"] += 1
        return real_open(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "open", open_)
    return counts


def test_naming_is_linear_in_the_number_of_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = _count_fs_ops(monkeypatch)
    ops = {}
    for n in (100, 1000):
        store = Files(root=str(tmp_path / str(n)))
        before = sum(counts.values())
        for i in range(n):  # distinct documents (the same one written again is reused)
            store.write("c", 3, "bash", {"observation": f"x{i:04d}"})
        ops[n] = sum(counts.values()) - before
    assert ops[1000] / ops[100] < 12, ops  # O(n); the old linear probing was ~100×
    assert counts["link"] <= 1100 + 110
    # a new process (fresh store object) in a directory with 1,000 of them: O(1) too
    fresh = Files(root=str(tmp_path / "1000"))
    before = counts["link"]
    ref = fresh.write("c", 3, "bash", {"observation": "late"})
    assert counts["link"] - before <= 3
    names = [r.name for r in fresh.list("c")]
    assert len(names) == 1001 and names[-1] == ref.name  # still in write order


@pytest.mark.parametrize(("durability", "expected"), [("fsync", 2), ("flush", 0)])
def test_durability_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str, expected: int
) -> None:
    from ctxpolicy.snapshots import LocalOptions

    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    store = LocalStore(LocalOptions(layout="files", durability=durability), root=str(tmp_path))  # type: ignore[arg-type]
    store.write("c", 1, "x", doc())
    assert len(calls) == expected  # the file, then its directory
    assert LocalOptions().durability == "flush"


def test_longest_names_stay_readable(tmp_path: Path) -> None:
    """A 48-char action plus a time-based suffix (another process took the name) and
    an absurd step number still give a name that `read` and `list` accept."""
    first = Files(root=str(tmp_path)).write("c", 10**30, "x" * 200, doc("1"))
    second = Files(root=str(tmp_path)).write("c", 10**30, "x" * 200, doc("2"))
    assert second.name == first.name + "_2"  # one next name is tried first
    third = Files(root=str(tmp_path)).write("c", 10**30, "x" * 200, doc("3"))
    assert third.name.startswith(first.name + "_") and len(third.name) > 80
    store = Files(root=str(tmp_path))
    assert [store.read(r.uri)["observation"] for r in store.list("c")] == ["1", "2", "3"]
    assert store.read(third.path)["observation"] == "3"


def test_the_same_document_written_again_keeps_its_name(tmp_path: Path) -> None:
    """A call redone after a crash between the snapshot write and the state commit
    writes the same document again (only its time differs): same name, one file."""
    first = Files(root=str(tmp_path)).write("c", 7, "bash", {**doc("out"), "timestamp": 1})
    again = Files(root=str(tmp_path)).write("c", 7, "bash", {**doc("out"), "timestamp": 2})
    other = Files(root=str(tmp_path)).write("c", 7, "bash", {**doc("new"), "timestamp": 3})
    assert again.uri == first.uri and other.uri != first.uri
    assert len(list((tmp_path / "c").glob("*.json"))) == 2
    assert not list((tmp_path / "c").glob("*.tmp*"))


# --------------------------------------------------------------------------- fast write path

_json_value = nested(JSON_SCALARS, st.text(max_size=5), max_leaves=20, tuples=True)


@given(st.dictionaries(st.text(max_size=8), _json_value | st.sets(st.integers()), max_size=6))
@settings(max_examples=300, deadline=None)
def test_document_bytes_are_those_of_json_dumps_indent_1(document: dict[str, object]) -> None:
    """The top level is written without Python's indenting encoder: same bytes."""
    expected = json.dumps(document, ensure_ascii=False, default=str, indent=1)
    try:
        want = expected.encode("utf-8")
    except UnicodeEncodeError:
        want = _ascii_json(expected)
    assert dump_document(document) == want


def test_document_with_non_string_keys_or_cycles_is_still_written(tmp_path: Path) -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    odd = {1: "one", "n": {2: [3]}}
    assert dump_document(odd) == json.dumps(odd, ensure_ascii=False, indent=1).encode()
    doc = json.loads(dump_document({"a": "x", "cycle": cyclic}))
    assert doc["as_text"] == ["cycle"] and doc["a"] == "x"


def test_folder_replaced_by_a_symlink_after_a_write_is_refused(tmp_path: Path) -> None:
    """The fast path trusts a folder only while it is a real directory (lstat)."""
    root = tmp_path / "root"
    store = Files(root=str(root))
    first = store.write("c", 1, "x", doc("a"))
    folder = root / "c"
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", folder)
    with pytest.raises(SnapshotError):
        store.write("c", 2, "x", doc("b"))
    assert not list((tmp_path / "elsewhere").iterdir())
    assert not Path(first.path).exists()


def test_folder_removed_after_a_write_is_created_again(tmp_path: Path) -> None:
    """Retention removes empty folders; the next write recreates the folder (0700) and
    its reference points at a file that exists."""
    store = Files(root=str(tmp_path))
    store.write("c", 1, "x", doc("a"))
    for p in (tmp_path / "c").iterdir():
        p.unlink()
    (tmp_path / "c").rmdir()
    ref = store.write("c", 2, "x", doc("b"))
    assert store.read(ref.uri)["observation"] == "b"
    assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ref.path).st_mode) == 0o600
    assert [p.name for p in (tmp_path / "c").iterdir()] == [Path(ref.path).name]  # no temp left


def test_file_mode_is_exact_whatever_the_umask(tmp_path: Path) -> None:
    from ctxpolicy.snapshots import LocalOptions

    old = os.umask(0o077)
    try:
        ref = LocalStore(LocalOptions(layout="files", file_mode=0o640), root=str(tmp_path)).write(
            "c", 1, "x", doc()
        )
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(ref.path).st_mode) == 0o640


def test_a_taken_temp_name_is_never_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Temp files are created with O_EXCL: a name another writer holds (a forked
    child with the same counter, a namesake process) is skipped, never truncated."""
    import itertools

    import ctxpolicy.snapshots.local as snapshots

    store = Files(root=str(tmp_path))
    store.write("c", 1, "x", doc("first"))  # the folder exists
    monkeypatch.setattr(snapshots, "_TEMP_PREFIX", "fixed-")
    monkeypatch.setattr(snapshots, "_TEMPS", itertools.count())
    taken = tmp_path / "c" / ".tmp-fixed-0.json"
    taken.write_text("another writer's partial file")
    ref = store.write("c", 2, "x", doc("second"))
    assert store.read(ref.uri)["observation"] == "second"
    assert taken.read_text() == "another writer's partial file"
    assert snapshots._TEMP_PREFIX != "fixed-"  # a new random part after the collision
    assert sorted(p.name for p in (tmp_path / "c").iterdir() if p.name.startswith(".tmp-")) == [
        taken.name
    ]
