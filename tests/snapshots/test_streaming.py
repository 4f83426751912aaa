"""ctx_recall reads no more than it answers (issue 29 item 5): streaming, bounded."""

from __future__ import annotations

import gc
import json
import re
import tracemalloc
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.snapshots import LocalOptions, LocalStore
from ctxpolicy.snapshots.archive import HistoryArchive
from ctxpolicy.snapshots.recall import handle_tool_call, recall
from ctxpolicy.snapshots.streaming import HeadTail, bounded, bounded_recall


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="ab\nc", max_size=40), max_size=30),
    st.integers(0, 120),
    st.sampled_from(["\n", "\n\n", ""]),
)
def test_head_tail_is_bounded_of_the_joined_text(pieces: list[str], cap: int, sep: str) -> None:
    ht = HeadTail(cap, sep)
    for p in pieces:
        ht.add(p)
    assert ht.text() == bounded(sep.join(pieces), cap)


def _archive(root: Path, n: int, size: int, conv: str = "c") -> tuple[LocalStore, str]:
    store = LocalStore(root=str(root), options=LocalOptions(max_total_mb=None, max_age_days=None))
    arch = HistoryArchive(store, conv, max_bytes=1 << 20)
    batch = []
    for i in range(1, n + 1):
        body = f"msg {i} " + "x" * size + (" NEEDLE" if i % 97 == 0 else "")
        batch.append({"role": "tool" if i % 2 else "user", "content": body})
        if len(batch) == 500:
            arch.append(batch, step=i)
            batch = []
    if batch:
        arch.append(batch, step=n)
    return store, arch.ref


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 40),
    first=st.integers(1, 300),
    span=st.integers(0, 300),
    cap=st.integers(400, 3000),
    grep=st.sampled_from([None, "msg 1", "x\n", "NEEDLE", "zzz"]),
)
def test_streamed_answer_equals_the_bounded_whole(
    tmp_path: Path, n: int, first: int, span: int, cap: int, grep: str | None
) -> None:
    root = tmp_path / f"s{n}"
    if not root.exists():
        _archive(root, n, 37)
    store = LocalStore(root=str(root))
    ref = HistoryArchive(store, "c").ref
    lines = (first, first + span)
    for rng in (lines, None):
        if rng is None and grep is None:
            continue
        want = recall(store, ref, lines=rng, grep=grep)
        got = bounded_recall(store, ref, lines=rng, grep=grep, max_chars=cap)
        assert got == ("" if grep is not None and not want else bounded(want, cap))
    # a message range from both ends: the whole range when it fits
    whole = recall(store, ref)
    got = bounded_recall(store, ref, max_chars=cap)
    if len(whole) <= cap:
        assert got == whole
    else:
        keep = max(0, (cap - 300) // 2)  # what the marker leaves of each end
        assert got.startswith(whole[:keep]) and got.endswith(whole[len(whole) - keep :])
        assert len(got) <= cap + 64


def test_whole_history_answer_names_the_gap_and_the_gap_resolves(tmp_path: Path) -> None:
    store, ref = _archive(tmp_path, 2000, 100)
    out = handle_tool_call(store, "c", "ctx_recall", json.dumps({"ref": ref}), max_chars=4000)
    assert len(out) <= 4000
    assert out.startswith("#1 (step 500) tool")
    assert "msg 2000 " in out
    gap = re.search(r"recall (ctxsnap://\S+/history#(\d+)-(\d+)),", out)
    assert gap is not None
    inner = handle_tool_call(
        store, "c", "ctx_recall", json.dumps({"ref": gap.group(1), "grep": "msg 1000 "})
    )
    assert inner.count("msg 1000 ") == 1


def _peak(fn) -> int:  # type: ignore[no-untyped-def]
    """The lowest of three traced peaks of ``fn()`` (after a warm-up call and a
    collection): one-off work such as a cache rebuilt after a collection must not
    decide a ratio."""
    peaks = []
    for _ in range(3):
        fn()
        gc.collect()
        tracemalloc.start()
        try:
            fn()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return min(peaks)


def test_recall_memory_does_not_grow_with_the_archive(tmp_path: Path) -> None:
    """Attack: the ledger points the model at the whole history; a 10x larger
    archive must not cost 10x the memory for any form of the recall tool."""
    small, ref_s = _archive(tmp_path / "small", 1_500, 1_000)  # ~1.5 MB
    big, ref_b = _archive(tmp_path / "big", 15_000, 1_000)  # ~15 MB
    for args in (
        {},
        {"lines": "1-40"},
        {"lines": "2-999999999"},
        {"grep": "NEEDLE"},
        {"grep": "no such text"},
    ):

        def run(store: LocalStore, ref: str, args: dict[str, str] = args) -> None:
            out = handle_tool_call(store, "c", "ctx_recall", {"ref": ref, **args})
            assert not out.startswith("Error"), out
            assert len(out) <= 20_100  # the answer cap and its marker

        p_small = _peak(lambda: run(small, ref_s))
        p_big = _peak(lambda: run(big, ref_b))
        assert p_big < 1.5 * p_small + 256 * 1024, (args, p_small, p_big)
        assert p_big < 4 * 1024 * 1024, (args, p_big)  # vs ~15 MB of archive


def test_scan_is_bounded_like_search(tmp_path: Path) -> None:
    store, ref = _archive(tmp_path, 3_000, 1_000)  # ~3 MB
    out = bounded_recall(store, ref, grep="NEEDLE", max_chars=20_000, max_scan_bytes=1 << 20)
    assert "stopped after scanning 1 MB" in out
    assert 0 < out.count("NEEDLE") < 3_000 // 97
