"""Issue 29 item 4: fact extraction runs in time linear in its input.

Python's ``re`` backtracks: a pattern that scans an unbounded run before it fails
costs O(run) at each start position, so ``'1,' * n`` took O(n²) (20 KB: 6.9 s).
Every quantifier a failing attempt can expand is bounded now. The tests compare the
CPU time of an input with that of one 8× larger (a ratio, never a wall-clock limit):
linear is ≈ 8, the old patterns gave ≈ 64 and more.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from ctxpolicy.conversation import facts
from ctxpolicy.engine import Session
from tests.engine_helpers import conversation, make_policy
from tests.timing import assert_linear

SHAPES: dict[str, Callable[[int], str]] = {
    "comma digits": lambda n: "1," * (n // 2),
    "dot digits": lambda n: "1." * (n // 2),
    "digit run": lambda n: "1" * n,
    "digits and spaces": lambda n: "1 " * (n // 2),
    "ticket parts": lambda n: "AB-" * (n // 3),
    "ticket digits": lambda n: "AB" + "_1" * (n // 2),
    "path segments": lambda n: "x/@" * (n // 3),
    "at run before dirs": lambda n: ("@" * 255 + ("a" * 60 + "/") * 40 + " ") * (n // 2700 + 1),
    "dotted dirs": lambda n: "a./" * (n // 3),
    "hex run": lambda n: "a1" * (n // 2),
    "assignments": lambda n: "a=" * (n // 2),
    "punctuation": lambda n: ",.-_/:@+" * (n // 8),
    "exception word": lambda n: "E" * n,
}


# Inputs aimed at the scans that find where each pattern can start
# (ctxpolicy/conversation/_factscan.py: each one's hits, runs and lines), also run
# through error_lines; measured at 32k and 256k characters.
HOSTILE: dict[str, Callable[[int], str]] = {
    "error words on one line": lambda n: "error " * (n // 6) + "\n",
    "question marks": lambda n: "?" * n,
    "outside ASCII": lambda n: "é٣\u00a0" * (n // 3),
    "exception endings in one run": lambda n: "AError" * (n // 6) + " ",
    "slashes": lambda n: "/" * n,
    "extensions": lambda n: "a.py" * (n // 4),
    "equals": lambda n: "=" * n,
    "keys": lambda n: "a:=" * (n // 3),
    "uuid dashes": lambda n: "-abcd" * (n // 5),
    "url separators": lambda n: "://" * (n // 3),
    "e and spaces": lambda n: "e  " * (n // 3),
    "hex digits": lambda n: "0" * n,
    "ticket starts": lambda n: "AB12 " * (n // 5),
    "statuses": lambda n: " 404 N" * (n // 6),
    "dollars": lambda n: "$" * n,
}


def _extract_and_lines(text: str) -> None:
    facts.extract(text)
    facts.error_lines(text)


def _forget() -> None:
    facts._extract_memo.cache_clear()  # the scan itself, not a remembered answer


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_extract_is_linear(shape: str) -> None:
    make = SHAPES[shape]
    small, large = make(4_000), make(32_000)
    assert_linear(facts.extract, small, large, floor=2e-4, what=shape, before=_forget)


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_start_scans_are_linear(shape: str) -> None:
    make = HOSTILE[shape]
    small, large = make(32_000), make(256_000)
    assert_linear(_extract_and_lines, small, large, floor=2e-4, what=shape, before=_forget)


def test_results_unchanged_on_ordinary_text() -> None:
    text = (
        "Open src/app/main.py and ./run.sh, see https://x.io/a?b=1. JIRA-1234 and "
        "ORD_2024_001 failed after 250 ms with KeyError (HTTP 503); max_connections=10, "
        "1,234.5 MB used, commit 3f2a9c1d, `parse_args`, /var/log/app.log"
    )
    got = facts.extract(text).all()
    for fact in [
        "src/app/main.py",
        "./run.sh",
        "JIRA-1234",
        "ORD_2024_001",
        "250 ms",
        "KeyError",
        "HTTP 503",
        "max_connections=10",
        "1,234.5 MB",
        "3f2a9c1d",
        "parse_args",
        "/var/log/app.log",
    ]:
        assert fact in got, fact


def _prepare_cpu(arguments: str) -> float:
    msgs = conversation(6, 300)
    msgs[2]["tool_calls"][0]["function"]["arguments"] = arguments
    policy = make_policy(
        None,
        pipeline=[{"layer": "summarize", "at": "warning", "options": {"summarizer": "extractive"}}],
    )
    best = float("inf")
    for i in range(2):
        s = Session(policy, conv_id=f"redos-{len(arguments)}-{i}-{time.time_ns()}")
        facts._extract_memo.cache_clear()  # the scans themselves, not remembered answers
        t0 = time.process_time()
        s.prepare(msgs)
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.parametrize(
    "make",
    [
        lambda n: json.dumps({"v": "1," * n}),
        lambda n: "1," * n,
        lambda n: json.dumps({"v": "9" * n}),
    ],
    ids=["json string of 1,", "raw 1,", "digits"],
)
def test_prepare_with_huge_numeric_arguments_is_linear(make: Callable[[int], str]) -> None:
    """Tool-call arguments reach the ledger and the summarizer unprocessed (8.9k
    characters took 1.06 s, 18.9k 4.34 s before)."""
    ratio = _prepare_cpu(make(32_000)) / max(_prepare_cpu(make(4_000)), 1e-3)
    assert ratio < 24, ratio
