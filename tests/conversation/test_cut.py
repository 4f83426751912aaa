"""conversation/cut.result_outcome: what a tool result says, bounded and in one pass."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.conversation.cut import result_outcome
from ctxpolicy.conversation.refs import ref_line


def test_small_result_joined_rules_and_references_skipped() -> None:
    text = "a | b\n---+---\n1 | 2\n\n" + ref_line("ctxsnap://c/step_001_x")
    assert result_outcome(text, 80, 40) == "a | b; 1 | 2"
    assert result_outcome("def f():\n    return 1", 80, 40) == "def f(): return 1"
    assert result_outcome("\n \n", 80, 40) == ""


def test_long_result_is_its_first_line() -> None:
    text = "collected 3000 items\n" + "ok\n" * 3000
    assert result_outcome(text, 80, 40) == "collected 3000 items"
    assert result_outcome("x" * 500, 80, 40) == "x" * 39 + "…"


@given(st.text(max_size=400), st.integers(1, 200), st.integers(1, 100))
def test_bounded(text: str, n: int, first_n: int) -> None:
    out = result_outcome(text, n, first_n)
    assert len(out) <= max(n, first_n)
    assert "\n" not in out
