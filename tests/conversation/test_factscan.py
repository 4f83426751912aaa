"""Issue 32: fact extraction tries each pattern only where a match can start
(ctxpolicy/conversation/_factscan.py) and gives exactly what it gave before, for
every input: the same facts in the same order as tests/conversation/facts_reference.py
(facts.py at 84c503d, verbatim), on generated text and on every text of the shared
traces."""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import _factscan as scan
from ctxpolicy.conversation import facts
from tests.conversation import facts_reference as reference
from tests.strategies import joined


def _facts(f: Any) -> tuple[list[str], ...]:
    return dataclasses.astuple(f)


def assert_same(text: str) -> None:
    """Every category and the helpers built on them, against the reference, with
    each pattern tried where its ``starts`` say (whatever the length of ``text``) and
    as the finders choose (short texts: the pattern's own scan)."""
    finders = {k: v for k, v in vars(facts).items() if isinstance(v, scan.Finder)}
    try:
        for name, finder in finders.items():
            setattr(facts, name, dataclasses.replace(finder, short=0))
        _assert_same(text)
    finally:
        for name, finder in finders.items():
            setattr(facts, name, finder)
    _assert_same(text)


def _assert_same(text: str) -> None:
    assert _facts(facts._extract(text, facts._ALL)) == _facts(
        reference._extract(text, reference._ALL)
    ), text
    assert facts.error_lines(text) == reference.error_lines(text), text
    lines = text.split("\n")
    assert facts.first_facts(iter(lines), 6) == reference.first_facts(iter(lines), 6), text


# Pieces of what each pattern looks for (and of what makes it fail): hex, digits,
# units, paths, ``=``, backticks, URLs, uppercase words, error names, newlines, and
# characters outside ASCII (word characters, digits and whitespace among them).
PIECES = [
    *" \n\t\r\x0b\x1c\u00a0\u2003",
    *"/.~-_:@+=`'\"<>()[]$,;%#?*",
    *"0123456789abcdefABCDEFxyzEHT",
    *"é٣µ°×ſK",
    "3f2a9c1d",
    "deadbeef0",
    "abc1234",
    "0123abcd-0123-abcd-ABCD-0123456789ab",
    "abcdefab-abcd-abcd-abcd-abcdefabcdef",
    "-abcd-",
    "ORD_2024_001",
    "JIRA-42",
    "INC0012345",
    "AB12",
    "JIRA٣٤",
    "AB-1٣",
    "1" * 32,
    "2" * 33,
    "5\u00a0ms",
    "$$5 ms",
    "×$5%",
    "12GB",
    "250 ms",
    "1,234.5",
    " MB",
    "µs",
    "°C",
    "req/s",
    "tokens",
    "src/",
    "../",
    "./",
    "~/",
    "a.py",
    ".json",
    ".yaml",
    ".tar.gz",
    "README.md",
    "</tag>",
    "http://",
    "HTTPS://",
    "https://x.io/a?b=1",
    "httpſ://",
    "://",
    "Error",
    "ValueError",
    "Exception",
    "TimeoutError",
    "Timeout",
    "Fault",
    "HTTP 404",
    "HTTP 5",
    "503 Service Unavailable",
    "404 Not Found",
    " Not Found",
    "ENOENT",
    "EACCES",
    "`sym`",
    "k=v",
    "a := 3",
    "max_connections=10",
    "key = 'q'",
    'x="y"',
    "a.b-c",
    "error:",
    "Traceback",
    "FAILED",
    "E   ",
    "E  \n",
    "panic",
    "faıled",
    "TRACEBA\u212a",
    "e\u00a0\u00a0x",
    "1Exception",
    "fatal",
    facts.DERIVED_HEADING,
]

pieces = joined(PIECES, 60)
alphabet_text = st.text(
    alphabet=st.sampled_from(list("ab0f9AZE_-./=:` \n$%,@~+\"'()é٣\u00a0")), max_size=200
)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(pieces, alphabet_text, st.text(max_size=150)))
@example(
    "HTTP 4040 Not Found HTTP 404x 404 Not Found 4٣٣ Not Found é503 Gateway Timeout ×503 Gateway Timeout"
)
@example("AErrorAError_x ZError éError FooErrorError")
@example("x" * 62 + "=1 " + "y" * 61 + "=2 " + "a: =1 b :=2 c\t= 3")
@example("httpſ://a hTTps://b http://c")
@example("the e\n\u00a0x\nE \n\n y")
@example("AB" + "-1" * 8 + "-12 ABCDEFGHIJ12 AB" + "_1" * 8 + "_34")
@example("AB-٣٣ JIRA٣٤x é$5 ms $$5 ms ×$5% 5\u00a0ms 5\u2003GB °9 KB")
@example("1" * 32 + " ms " + "2" * 33 + "ms 3" + ",4" * 16 + " ms $" + "5" * 32 + " ms")
def test_extract_is_the_reference(text: str) -> None:
    assert_same(text)


def test_extract_is_the_reference_on_every_text_of_the_shared_traces() -> None:
    from ctxpolicy.sim.importers import load_trace
    from tests.shared_data import shared_traces

    for path in shared_traces():
        texts = [c for m in load_trace(path) if isinstance(c := m.get("content"), str)]
        for text in texts:
            assert_same(text)
        assert_same("\n".join(texts))


FINDERS = sorted(k for k, v in vars(facts).items() if isinstance(v, scan.Finder))


def test_every_pattern_has_a_finder() -> None:
    assert len(FINDERS) == 9 and "_ERROR_LINES" in FINDERS


@pytest.mark.parametrize("name", FINDERS)
@settings(max_examples=300, deadline=None)
@given(text=st.one_of(pieces, alphabet_text))
def test_each_pattern_starts_only_where_its_scan_says(name: str, text: str) -> None:
    """Each ``*_starts`` holds every position where its pattern matches (a start it
    missed would be a fact lost even where extract's other steps hide it)."""
    finder: scan.Finder = getattr(facts, name)
    pattern, starts = finder.pattern, finder.starts(text)
    if starts is None:  # the pattern's own scan
        return
    assert starts == sorted(starts)
    every = [s for s in range(len(text)) if pattern.match(text, s)]
    assert set(every) <= set(starts)
    assert [m.span() for m in scan.matches_at(pattern, text, starts)] == [
        m.span() for m in pattern.finditer(text)
    ]


@pytest.mark.parametrize("short", [0, 10**9])
def test_a_finder_finds_what_its_pattern_finds(short: int) -> None:
    text = "a=1 b := 'x' ` `c` d=\"\" HTTP 404 ENOENT 404 Not Found y"
    every = lambda t: list(range(len(t)))  # noqa: E731
    for finder in [
        scan.Finder(facts._ASSIGN, scan.assign_starts, short),
        scan.Finder(facts._ERRNO, scan.errno_starts, short),
        scan.Finder(re.compile("(x)|(y)"), every, short),
        scan.Finder(re.compile("`(z?)`"), every, short),
        scan.Finder(re.compile("E"), every, short),
        scan.Finder(re.compile("Q"), every, short),
    ]:
        assert finder.findall(text) == finder.pattern.findall(text)
        found = finder.finditer(text)
        assert [m.span() for m in found] == [m.span() for m in finder.pattern.finditer(text)]


@pytest.mark.parametrize(
    "name",
    ["_URL", "_UUID", "_HEX", "_TICKET", "_PATH", "_NUMBER", "_EXCEPTION", "_ERRNO", "_BACKTICK",
     "_ASSIGN", "_ERROR_LINE"],
)  # fmt: skip
def test_the_patterns_are_the_references(name: str) -> None:
    """What a fact is did not change: only where the patterns are tried."""
    ours, theirs = getattr(facts, name), getattr(reference, name)
    assert (ours.pattern, ours.flags) == (theirs.pattern, theirs.flags)


def test_str_split_splits_where_backslash_s_matches() -> None:
    """path_tokens relies on it: the tokens of ``str.split()`` are ``\\S+``'s."""
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    assert every.split() == re.findall(r"\S+", every)
