"""Which shell commands asked for an explicit, bounded part of a file."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.preprocessors._shell import MAX_COMMAND, asked_slice, command_text


@pytest.mark.parametrize(
    "command",
    [
        "sed -n '700,850p' django/db/backends/base/schema.py",
        "sed -n 1,5p f",
        "sed -n -e '10,+20p' f",
        "sed -n '1,5p;40,50p' f",
        "nl -ba sympy/core/basic.py | sed -n '300,350p'",
        "cat -n f.py | head -n 80",
        "head -n 20 django/db/models/sql/query.py",
        "head -20 f",
        "head f",
        "tail -n 30 log.txt",
        "tail --lines=30 log.txt",
        "grep -m 5 foo f",
        "grep -n foo f 2>/dev/null | head -20",
        "cd /work/repo && sed -n '1,40p' a.py",
        "sed -n '1,40p' a.py; sed -n '1,40p' b.py",
        "grep -n x f 2>&1 | head -n 3",
    ],
)
def test_slices(command: str) -> None:
    assert asked_slice(command) == "slice"


@pytest.mark.parametrize("command", ["cat f.py", "cat -n f.py", "nl -ba f.py", "cd d && cat f"])
def test_whole_file_reads(command: str) -> None:
    assert asked_slice(command) == "file"


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "grep -n foo f",
        "grep -rn foo .",
        "cat a b",
        "cat <<'EOF' > f.py\nprint(1)\nEOF",
        "sed -n '1,$p' f",
        "sed -i '1d' f",
        "sed 's/a/b/' f",
        "sed -n '/start/,/end/p' f",
        "tail -n +5 f",
        "tail -f log",
        "head -n 20 f > out.txt",
        'echo "$(cat f)"',
        "cat `which x`",
        "(cd d && sed -n 1,5p f)",
        "python -m pytest -x",
        "sed -n '1,5p' f && python run.py",
        "sed -n 'unterminated",
        "",
        "x" * (MAX_COMMAND + 1),
    ],
)
def test_not_slices(command: str) -> None:
    assert asked_slice(command) is None


def test_command_text() -> None:
    assert command_text('{"command": "head f"}') == "head f"
    assert command_text({"cmd": "head f"}) == "head f"
    assert command_text({"command": ["bash", "-lc", "head f"]}) == "head f"
    assert command_text(["head", "-n", "3", "f"]) == "head -n 3 f"
    assert command_text("sed -n 1,2p f") == "sed -n 1,2p f"
    assert command_text("{not json") is None
    assert command_text({"path": "f"}) is None
    assert command_text(None) is None
    assert command_text(["x", 1]) is None


ALPHABET = st.sampled_from(
    [
        *"ab1,;&|'\"\\$`()<>{} \n\t-p",
        "sed -n ",
        "head -n ",
        "tail ",
        "grep -m ",
        "cat ",
        "2>",
        "&&",
        "||",
        "10,20p",
    ]
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(ALPHABET, max_size=60))
def test_never_raises(parts: list[str]) -> None:
    command = "".join(parts)
    assert asked_slice(command) in ("slice", "file", None)
    assert command_text(command) in (command, None) or command.lstrip().startswith("{")


@settings(max_examples=60, deadline=None)
@given(
    arguments=st.recursive(
        st.none() | st.text(max_size=20) | st.integers(),
        lambda c: (
            st.lists(c, max_size=4)
            | st.dictionaries(st.sampled_from(["command", "cmd", "x"]), c, max_size=3)
        ),
        max_leaves=12,
    )
)
def test_command_text_never_raises(arguments: object) -> None:
    got = command_text(arguments)
    assert got is None or isinstance(got, str)


@pytest.mark.parametrize(
    "command",
    [
        "sed -n " + "'" * MAX_COMMAND,
        '"' + "\\" * (MAX_COMMAND - 2) + '"',
        "a|" * (MAX_COMMAND // 2),
        "sed -n '" + "1p;" * (MAX_COMMAND // 3 - 4) + "'",
        "head " + "-n 5 " * (MAX_COMMAND // 6),
    ],
)
def test_hostile_commands_are_fast(command: str) -> None:
    """At the length bound every shape is parsed in well under a second (one pass);
    past it nothing is parsed."""
    start = time.perf_counter()
    for _ in range(20):
        asked_slice(command)
        asked_slice(command * 1000)
    assert time.perf_counter() - start < 1.0
