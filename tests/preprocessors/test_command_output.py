"""``command_output``'s exit-code search: the fast path finds what the rule finds."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.preprocessors.command_output import _EXIT_RE, CommandOutput, _exit_code
from tests.strategies import joined

# the rule as it was written before the fast path (kept here, not imported)
OLD_EXIT_RE = re.compile(
    r"(?im)^\W*(?:exit(?:ed)?[ _]?(?:code|status)|return[ _]?code|returncode|rc)\s*(?:[:=]|\s)\s*(-?\d{1,4})\b"
)


def old_exit_code(text: str) -> str | None:
    m = OLD_EXIT_RE.search(text[-2000:]) or OLD_EXIT_RE.search(text[:2000])
    return m.group(1) if m else None


PIECES = [
    "exit code",
    "Exit Code",
    "EXITED_STATUS",
    "exitstatus",
    "return code",
    "RETURN_CODE",
    "returncode",
    "rc",
    "RC",
    "ſtatus",  # long s: folds to "s" in a case-insensitive regex
    "exıt",  # dotless i: folds to "i"
    "İ",
    ":",
    "=",
    " ",
    "\t",
    "\n",
    "\r\n",
    "-",
    "1",
    "42",
    "12345",
    "٣",  # a non-ASCII decimal digit (\d)
    "> ",
    "# ",
    "x",
    "é",
    "<returncode>0</returncode>",
]
TEXT = st.one_of(
    st.text(max_size=300),
    joined(PIECES, 60),
    # long texts: the two 2,000-character windows
    st.tuples(
        joined(PIECES, 20),
        st.integers(1500, 4500),
        joined(PIECES, 20),
    ).map(lambda t: t[0] + "a\n" * (t[1] // 2) + t[2]),
)


@settings(max_examples=600, deadline=None)
@given(text=TEXT)
def test_exit_code_is_the_rules_first_match(text: str) -> None:
    assert _exit_code(text) == old_exit_code(text)
    assert _EXIT_RE.pattern == OLD_EXIT_RE.pattern


def test_examples() -> None:
    assert _exit_code("ok\nexit code: 3\n") == "3"
    assert _exit_code("\n\n  Exit status 2") == "2"
    assert _exit_code("RETURNCODE=-1") == "-1"
    assert _exit_code("<returncode>0</returncode>\n<output>\n</output>") is None
    assert _exit_code("rc 1\n" + "x" * 3000) == "1"  # the first window, when the last has none
    assert _exit_code("Exıt code 5") == old_exit_code("Exıt code 5") == "5"  # non-ASCII folding
    out = CommandOutput().process("".join(f"line {i}\n" for i in range(300)) + "exit code: 2\n")
    assert out.startswith("[exit code 2]\nline 0\n")
