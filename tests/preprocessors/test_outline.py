"""``outline``: definition lines of the part a preprocessor leaves out."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.preprocessors._text import definitions_listing, outline
from ctxpolicy.preprocessors.head_tail import HeadTail, HeadTailOptions
from ctxpolicy.preprocessors.head_tail_lines import HeadTailLines, HeadTailLinesOptions
from ctxpolicy.sim.replay import load_trace
from tests.preprocessors.test_golden import load
from tests.shared_data import TRACES, require
from tests.strategies import joined

DEFINITIONS = [
    "def reserve(store, sku):",
    "    async def fetch(self) -> bytes:",
    "class Planner(Base):",
    "static ast_t* make_pattern_type(pass_opt_t* opt, ast_t* pattern)",
    "static bool infer(ast_t* pattern, ast_t* match_type,",
    "int main(int argc, char** argv) {",
    "std::string Foo::bar(int x) const {",
    "    public static void main(String[] args) {",
    "fn main() {",
    "pub async fn serve(&self, addr: SocketAddr) -> Result<()> {",
    "func (s *Server) Start() error {",
    "export default function App() {",
    "interface Props {",
    "  fun ref apply(): None =>",
    "impl Display for Point {",
]
NOT_DEFINITIONS = [
    "    return make_pattern_type(opt, child);",
    "int x = foo(3);",
    "foo(bar);",
    "    if (x) {",
    "ERROR foo(bar) failed",
    "Some sentence (with parens)",
    "Traceback (most recent call last):",
    '  File "a.py", line 3, in <module>',
    "FAILED tests/test_a.py::test_b - assert 1 == 2",
    "drwxr-xr-x 2 root root 4096 Jan  1 00:00 file.c",
    "    store.set(sku, level - qty)",
    "",
]


@pytest.mark.parametrize("line", DEFINITIONS)
def test_definitions_are_found(line: str) -> None:
    assert outline([line], 7, 5) == ["[definitions in the omitted part]", f"7: {line.strip()}"]


@pytest.mark.parametrize("line", NOT_DEFINITIONS)
def test_statements_calls_and_prose_are_not(line: str) -> None:
    assert outline([line], 1, 5) == []


def test_own_line_numbers_are_kept_and_the_list_is_bounded() -> None:
    lines = ["   282\tstatic int f(int a)", "283: def g():", "  x = 1", "def h():", "def i():"]
    assert outline(lines, 10, 3) == [
        "[definitions in the omitted part]",
        "282: static int f(int a)",
        "283: def g():",
        "13: def h():",
        "[… 1 more definitions]",
    ]
    assert outline(lines, 10, 0) == []
    long = "def " + "x" * 400 + "():"
    assert outline([long], 1, 1) == []  # a 400-char "definition" is data, not code
    wide = "def " + "y" * 200 + "():"
    (_, kept) = outline([wide], 1, 1)
    assert len(kept) == len("1: ") + 160 and kept.endswith("…")


def test_head_tail_lines_outline_names_every_omitted_function() -> None:
    text = load("read_file_1000_lines.py")
    lines = text.split("\n")
    out = HeadTailLines(HeadTailLinesOptions(outline=500)).process(text)
    omitted = {
        i + 1
        for i, ln in enumerate(lines)
        if ln.startswith("def ") and 50 < i + 1 <= len(lines) - 50
    }
    listed = {int(n) for n in re.findall(r"^(\d+): def ", out.split("omitted", 1)[1], re.M)}
    assert omitted and listed >= omitted
    for n in omitted:  # numbered as in the file
        assert f"{n}: {lines[n - 1]}" in out
    plain = HeadTailLines(HeadTailLinesOptions()).process(text)
    assert "[definitions in the omitted part]" not in plain
    assert len(plain) < len(out) < len(text)


def test_head_tail_outline_on_a_real_openhands_file_view() -> None:
    # OpenHands' str_replace_editor `view` of a 583-line C file (cat -n numbers)
    msgs = load_trace(
        require(TRACES / "openhands__multi_swe_bench.output.ponylang__ponyc-4588.jsonl")
    )
    text = next(
        m["content"]
        for m in msgs
        if m.get("role") == "tool"
        and "`cat -n` on /workspace/ponylang__ponyc__0.1/src/libponyc/expr/match.c"
        in str(m["content"])
    )
    out = HeadTail(HeadTailOptions(max_chars=3000, outline=30)).process(text)
    head, rest = out.split("chars omitted] ...\n", 1)
    assert rest.startswith("[definitions in the omitted part]\n")
    assert "282: static ast_t* make_pattern_type(pass_opt_t* opt, ast_t* pattern)\n" in rest
    assert len(out) < 3000 + 30 * 170
    # head and tail are exactly those of the plain cut
    plain = HeadTail(HeadTailOptions(max_chars=3000)).process(text)
    assert plain.startswith(head) and plain.endswith(out[-1500:])


def test_command_output_outline_of_a_cat_of_a_source_file() -> None:
    from ctxpolicy.preprocessors.command_output import CommandOutput, CommandOutputOptions

    text = load("read_file_1000_lines.py")
    lines = text.split("\n")
    out = CommandOutput(CommandOutputOptions(outline=5, max_chars=None)).process(text)
    after = out.split("omitted (", 1)[1].split("\n")[1:7]
    first = [i + 1 for i, ln in enumerate(lines) if ln.startswith("def ") and i + 1 > 40][:5]
    assert after[0] == "[definitions in the omitted part]"
    assert after[1:6] == [f"{n}: {lines[n - 1]}" for n in first]
    assert CommandOutput(CommandOutputOptions()).process(text).count("[definitions") == 0


def test_head_tail_lines_keeps_a_tools_own_line_numbers() -> None:
    body = [f"{n:6d}\tline {n}" for n in range(1, 301)]
    text = "Here's the result of running `cat -n` on a.py:\n" + "\n".join(body)
    out = HeadTailLines(HeadTailLinesOptions(lines=3, min_lines=20)).process(text).split("\n")
    # not "2:      1\tline 1", and the omitted range is named in the file's numbers
    assert out[:3] == ["Here's the result of running `cat -n` on a.py:", *body[:2]]
    assert out[3] == "... [lines 3-297 omitted (295 lines)] ..."
    assert out[4:] == body[-3:]
    plain = "\n".join(f"line {n}" for n in range(1, 301))
    got = HeadTailLines(HeadTailLinesOptions(lines=3, min_lines=20)).process(plain).split("\n")
    assert got[0] == "1: line 1" and got[3] == "... [lines 4-297 omitted (294 of 300 lines)] ..."


# --------------------------------------------------------------------------- fast path
# ``outline`` and ``_definition`` as they were before their first-character checks
# (kept here, not imported): the fast ones must answer the same for any line.


def _old_definition(body: str) -> bool:
    from ctxpolicy.preprocessors import _text as t

    stripped = body.lstrip()
    if not stripped or len(stripped) > 300 or t._NOT_A_DEFINITION.match(stripped):
        return False
    if t._KEYWORD_DEF_RE.match(stripped):
        return True
    if body[:1].isspace() and not t._ACCESS_MODIFIER.match(stripped):
        return False
    return bool(t._SIGNATURE_RE.match(stripped))


def old_definitions(lines: list[str], first_lineno: int) -> Iterator[tuple[int, str]]:
    from ctxpolicy.preprocessors._text import _LINENO_RE

    for i, line in enumerate(lines):
        m = _LINENO_RE.match(line)
        number, body = (int(m.group(1)), line[m.end() :]) if m else (first_lineno + i, line)
        if _old_definition(body):
            yield number, body


def old_outline(lines: list[str], first_lineno: int, limit: int, width: int = 160) -> list[str]:
    """The definitions found by the old rule, listed as ``outline`` lists them (the
    listing itself: the examples above)."""
    if limit <= 0:
        return []
    return definitions_listing(old_definitions(lines, first_lineno), limit, width)


OUTLINE_PIECES = [
    *DEFINITIONS,
    *NOT_DEFINITIONS,
    " ",
    "\t",
    "\u3000",  # an ideographic space: \s and str.lstrip both take it
    "\x1c",  # a separator str.isspace takes
    "12",
    "٣",  # a non-ASCII decimal digit (\d, str.isdecimal)
    "²",  # a digit that is not decimal (str.isdigit, not \d)
    ": ",
    "|",
    "def ",
    "public ",
    "_init(",
    "Foo(",
    "x",
    "(",
    ")",
    "{",
    ";",
    "=",
    "é",
]
LINE = st.one_of(st.text(max_size=40), joined(OUTLINE_PIECES, 8))


@settings(max_examples=500, deadline=None)
@given(lines=st.lists(LINE, max_size=12), first=st.integers(1, 500), limit=st.integers(0, 4))
def test_outline_is_the_old_outline(lines: list[str], first: int, limit: int) -> None:
    assert outline(lines, first, limit) == old_outline(lines, first, limit)


def test_the_first_character_checks_hold_for_every_character() -> None:
    from ctxpolicy.preprocessors._text import _LINENO_RE

    for code in range(0x110000):
        ch = chr(code)
        # str.lstrip takes what the regexes' \s takes; str.isdecimal is \d
        assert (ch.lstrip() == "") == bool(re.fullmatch(r"\s", ch)), hex(code)
        assert ch.isdecimal() == bool(re.fullmatch(r"\d", ch)), hex(code)
    assert _LINENO_RE.pattern.startswith(r"^\s*(\d+)")


def test_outline_on_the_shared_traces_is_the_old_outline() -> None:
    from tests.shared_data import shared_traces

    for path in shared_traces():
        for m in load_trace(path):
            text = m.get("content")
            if m.get("role") != "tool" or not isinstance(text, str):
                continue
            lines = text.split("\n")
            assert outline(lines, 1, 30) == old_outline(lines, 1, 30)
