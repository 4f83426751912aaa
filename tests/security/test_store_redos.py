"""Issue 19 item 4: ``ctx_search`` with a catastrophic regex does not hang.

RE2 runs in time linear in the input: the test compares the time of a catastrophic
pattern on a small and on a 20× larger input (a ratio, not a wall-clock limit; a
backtracking engine grows exponentially with the line length here). Pattern length
and bytes scanned are bounded, and over a limit the model gets a clear error.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.snapshots import LocalStore
from ctxpolicy.snapshots import recall as recall_mod
from ctxpolicy.snapshots.recall import MAX_PATTERN_CHARS, SearchLimit, handle_tool_call, search

CATASTROPHIC = [
    r"(a+)+$",
    r"(a|a)*b",
    r"(a|aa)+$",
    r"^(a+)+b",
    r"(x+x+)+y",
    r"(.*a){12}",
    r"(\w+\s?)*$",
    r"((a*)*)*b",
]


def _store(tmp_path: Path, line: str, lines: int = 1) -> LocalStore:
    store = LocalStore(root=str(tmp_path))
    store.write("c", 1, "log", {"observation": "\n".join([line] * lines)})
    return store


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_answer(tmp_path: Path, pattern: str) -> None:
    store = _store(tmp_path, "a" * 5000 + "!", lines=20)
    out = handle_tool_call(store, "c", "ctx_search", {"pattern": pattern, "regex": True})
    assert out.startswith(("No earlier", "ctxsnap://", "Error: ")), out


def _time(store: LocalStore, pattern: str) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        search(store, "c", pattern, regex=True)
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"(x+x+)+y"])
def test_time_grows_linearly_with_input(tmp_path: Path, pattern: str) -> None:
    small = _store(tmp_path / "s", "a" * 2_000 + "!", lines=10)
    large = _store(tmp_path / "l", "a" * 40_000 + "!", lines=10)
    ratio = _time(large, pattern) / max(_time(small, pattern), 1e-6)
    # 20× the input: linear is ~20×; a backtracking engine would not finish at all
    assert ratio < 200, ratio


def test_backreferences_and_lookaround_are_refused_clearly(tmp_path: Path) -> None:
    store = _store(tmp_path, "abab")
    for pattern in [r"(a)\1", r"(?=a)a", r"(?<!b)a", r"a{1000}{1000}"]:
        out = handle_tool_call(store, "c", "ctx_search", {"pattern": pattern, "regex": True})
        assert out.startswith("Error: invalid or unsupported regular expression"), out


def test_pattern_length_is_bounded(tmp_path: Path) -> None:
    store = _store(tmp_path, "x")
    for regex in (True, False):
        out = handle_tool_call(
            store, "c", "ctx_search", {"pattern": "a" * (MAX_PATTERN_CHARS + 1), "regex": regex}
        )
        assert out == f"Error: `pattern` is longer than {MAX_PATTERN_CHARS} characters"


def test_scanned_bytes_are_bounded(tmp_path: Path, monkeypatch: Any) -> None:
    store = LocalStore(root=str(tmp_path))
    for i in range(5):
        store.write("c", i, "log", {"observation": f"needle {i}\n" + "x" * 100_000})
    with pytest.raises(SearchLimit) as info:
        search(store, "c", "nothing", max_scan_bytes=250_000)
    assert info.value.hits == []
    monkeypatch.setattr(recall_mod, "MAX_SCAN_BYTES", 250_000)
    out = handle_tool_call(store, "c", "ctx_search", {"pattern": "nothing"})
    assert out.startswith("Error: the search stopped after scanning") and "without a match" in out
    out = handle_tool_call(store, "c", "ctx_search", {"pattern": "needle"})
    assert out.splitlines()[0].endswith("needle 0") and "there may be more matches" in out
