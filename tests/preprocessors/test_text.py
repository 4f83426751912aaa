"""`clean_terminal` and `collapse_repeats` fast paths give what their line-by-line rules give."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.preprocessors._text import (
    _CONTROL_RE,
    ANSI_RE,
    backspaced,
    clean_terminal,
    collapse_repeats,
    drop_controls,
)
from tests.strategies import joined

PIECES = [
    "a",
    "bc",
    " ",
    "\n",
    "\r\n",
    "\r",
    "\b",
    "\t",
    "\x00",
    "\x07",
    "\x7f",
    "\x1b[31m",
    "\x1b]0;t\x07",
    "é",
]


def line_by_line(text: str) -> str:
    """The rules of :func:`clean_terminal`, applied one line at a time (backspaces: the
    examples below)."""
    text = ANSI_RE.sub("", text).replace("\r\n", "\n")
    out = []
    for line in text.split("\n"):
        if "\r" in line:
            parts = [p for p in line.split("\r") if p]
            line = parts[-1] if parts else ""
        out.append(_CONTROL_RE.sub("", backspaced(line)))
    return "\n".join(out)


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(max_size=200), joined(PIECES, 60)))
def test_same_as_line_by_line(text: str) -> None:
    assert clean_terminal(text) == line_by_line(text)


def test_examples() -> None:
    assert clean_terminal("\x1b[32mok\x1b[0m\r\n10%\r50%\r100%\nab\bc\x00") == "ok\n100%\nac"
    assert clean_terminal("plain\ttext\n") == "plain\ttext\n"


@pytest.mark.parametrize(
    ("line", "shown"),
    [("ab\bc", "ac"), ("\b\bx", "x"), ("abc\b\b", "a"), ("a\b\b\bb", "b"), ("é\bè", "è")],
)
def test_a_backspace_deletes_the_character_before_it(line: str, shown: str) -> None:
    assert backspaced(line) == shown
    assert clean_terminal(line) == shown


def collapse_one_by_one(lines: list[str], min_repeats: int) -> list[str]:
    """The rule of :func:`collapse_repeats`, line by line."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and lines[j] == lines[i]:
            j += 1
        run = j - i
        out += [lines[i], f"… line repeated {run} times"] if run >= min_repeats else lines[i:j]
        i = j
    return out


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(st.sampled_from(["a", "b", "", "a "]), max_size=40),
    min_repeats=st.integers(0, 5),
)
def test_collapse_repeats_same_as_one_by_one(lines: list[str], min_repeats: int) -> None:
    assert collapse_repeats(iter(lines), min_repeats=min_repeats) == collapse_one_by_one(
        lines, min_repeats
    )


@settings(max_examples=400, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=200),
        joined(PIECES, 60),
    )
)
def test_drop_controls_is_the_regex(text: str) -> None:
    assert drop_controls(text) == _CONTROL_RE.sub("", text)


def test_drop_controls_every_ascii_character() -> None:
    text = "".join(map(chr, range(128)))
    assert drop_controls(text) == _CONTROL_RE.sub("", text) == "\t\n" + text[32:127]
