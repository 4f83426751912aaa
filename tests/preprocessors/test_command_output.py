"""``command_output``'s exit-code search: the fast path finds what the rule finds."""

from __future__ import annotations

import json
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


# ---------------------------------------------------------------- explicit slices

from ctxpolicy.components import ToolCall  # noqa: E402
from ctxpolicy.conversation.cut import estimate_tokens  # noqa: E402
from ctxpolicy.preprocessors.command_output import CommandOutputOptions  # noqa: E402

#: 150 numbered source lines (~30 characters each): over the 40 + 60 lines kept
SOURCE = "".join(f"{i:6d}\t    value_{i} = compute({i})\n" for i in range(700, 850))


def _sliced(text: str, command: str, **options: object) -> str:
    pre = CommandOutput(CommandOutputOptions.model_validate({"window": 32768, **options}))
    return pre.process(text, ToolCall(name="bash", arguments={"command": command}))


def test_a_slice_is_kept_whole() -> None:
    out = _sliced(SOURCE, "nl -ba f.py | sed -n '700,850p'")
    assert out == SOURCE.rstrip("\n")
    # the same output of a command that asked for no part is cut
    cut = _sliced(SOURCE, "python dump.py")
    assert "value_760" not in cut and "value_700" in cut and "value_849" in cut


def test_a_slice_over_the_bound_is_cut() -> None:
    big = SOURCE * 12  # ~14,000 tokens: over 8 % of 32k
    assert estimate_tokens(big) > 2621
    out = _sliced(big, "sed -n '1,1800p' f.py")
    assert out == _sliced(big, "python dump.py")
    assert len(out) < len(big)
    # an absolute bound, and one large enough
    assert _sliced(big, "sed -n '1,1800p' f.py", slice_max_tokens=20_000) == big.rstrip("\n")


def test_slices_off() -> None:
    cut = _sliced(SOURCE, "python dump.py")
    assert _sliced(SOURCE, "sed -n '700,850p' f.py", slice_max_tokens=None) == cut
    assert _sliced(SOURCE, "sed -n '700,850p' f.py", slice_max_tokens=0) == cut
    # below the smallest window, and plain reads when turned off
    assert _sliced(SOURCE, "sed -n '700,850p' f.py", window=16384) == cut
    assert _sliced(SOURCE, "cat f.py", whole_reads=False) == cut
    assert _sliced(SOURCE, "cat f.py") == SOURCE.rstrip("\n")
    pre = CommandOutput(CommandOutputOptions())
    assert pre.process(SOURCE) == cut  # no call: nothing asked


def test_a_slice_keeps_exit_code_and_streams() -> None:
    text = json.dumps({"stdout": SOURCE, "stderr": "warn", "exit_code": 0})
    out = _sliced(text, "sed -n '700,850p' f.py")
    assert out.startswith("[exit code 0]\n[stderr]\nwarn\n[stdout]\n")
    assert "value_760" in out


def test_the_engine_passes_the_window() -> None:
    from ctxpolicy.engine.tool_results import ToolResultProcessor
    from ctxpolicy.sim.replay import load_policy_file, with_window

    policy = load_policy_file("policies/agents.yaml", "coding_agent")
    for window, kept in ((32768, True), (16384, False)):
        proc = ToolResultProcessor(with_window(policy, window), store=None)
        pre = proc.rule_for("bash")[2][0]
        assert isinstance(pre, CommandOutput) and pre.options.window == window
        call = ToolCall(name="bash", arguments='{"command": "sed -n \'700,850p\' f.py"}')
        assert ("value_760" in pre.process(SOURCE, call)) is kept
