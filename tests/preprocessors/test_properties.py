"""Every built-in preprocessor: never raises, never grows the text (redact: bounded)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.plugins import get_registry
from tests.strategies import joined

NAMES = [
    "head_tail",
    "head_tail_lines",
    "test_failures",
    "log_levels",
    "command_output",
    "table_rows",
    "json_prune",
]

FRAGMENTS = [
    "ERROR",
    "WARN",
    "FAILED ",
    "::",
    "PASSED",
    "=== RUN",
    "--- FAIL: T",
    "test result: ",
    "Ran 3 tests in 0s",
    "● a › b",
    "Tests:  1 failed",
    " Test Files  1",
    "|",
    "---+---",
    "(3 rows)",
    ",",
    "\t",
    "{",
    "}",
    "[",
    "]",
    '"',
    "\x1b[31m",
    "\r",
    "\n",
    "\x00",
    "\ud800",
    "中文",
    "é",
    "==== FAILURES ====",
    "____ t ____",
    "E   x",
    "def f(x):",
    "   12\tstatic int g(int a)",
    "7: class C:",
]
TEXT = st.one_of(
    st.text(max_size=2000),
    st.binary(max_size=2000).map(lambda b: b.decode("utf-8", "replace")),
    joined(FRAGMENTS, 400),
    st.lists(st.sampled_from(FRAGMENTS), max_size=400).map("\n".join),
)


def instance(name: str, **options: object) -> object:
    cls = get_registry().get("preprocessor", name)
    assert cls is not None, name
    return cls(cls.Options.model_validate(options))


def test_all_builtins_registered() -> None:
    assert set(NAMES) | {"redact"} <= set(get_registry().names("preprocessor"))


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=150, deadline=None)
@given(text=TEXT)
def test_never_raises_never_longer(name: str, text: str) -> None:
    out = instance(name).process(text, None)
    assert isinstance(out, str) and len(out) <= len(text)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("head_tail", {"max_chars": 0}),
        ("head_tail", {"max_tokens": 1}),
        ("head_tail", {"max_chars": 0, "outline": 10_000}),
        ("head_tail", {"max_tokens": 5, "outline": 3}),
        ("head_tail_lines", {"lines": 0, "min_lines": 0, "outline": 10_000}),
        ("head_tail_lines", {"lines": 0, "min_lines": 0}),
        ("head_tail_lines", {"lines": 3, "min_lines": 5, "max_lines": 4}),
        ("log_levels", {"last": 1, "levels": ["INFO"]}),
        ("command_output", {"head_lines": 0, "tail_lines": 0, "max_chars": 10}),
        ("table_rows", {"max_rows": 0}),
        ("json_prune", {"max_array_items": 0, "max_string_chars": 0, "max_depth": 1}),
        ("test_failures", {"max_failures": 0, "max_detail_lines": 0, "keep_failed_only": False}),
    ],
)
@settings(max_examples=60, deadline=None)
@given(text=TEXT)
def test_extreme_options(name: str, options: dict, text: str) -> None:
    out = instance(name, **options).process(text, None)
    assert isinstance(out, str) and len(out) <= len(text)


@settings(max_examples=150, deadline=None)
@given(text=TEXT, secret=st.sampled_from(["sk-" + "a" * 30, "AKIA" + "B" * 16, "ghp_" + "c" * 36]))
def test_redact_removes_secrets(text: str, secret: str) -> None:
    red = instance("redact")
    src = text + " " + secret + " " + text
    out = red.process(src, None)
    assert secret not in out
    # each replacement is at most len("[REDACTED:aws_access_key]") = 25 chars; matches are ≥ 6
    assert len(out) <= len(src) + 25 * max(1, src.count("@") + 1)


def test_deep_json_does_not_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for name in NAMES:
        assert len(instance(name).process(deep, None)) <= len(deep)
