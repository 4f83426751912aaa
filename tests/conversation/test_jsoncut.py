"""``cut_json``: a shortened JSON text is still JSON (issue 29 item 3).

Invariants (Hypothesis): for any JSON document in any formatting and any budget the
result parses strictly (RFC 8259: no NaN, no raw control characters), stays within
its bound, creates no lone surrogate, and keeps the text when nothing needs to go;
``is_json`` agrees with a strict ``json.loads`` on mutated texts. Attacks: escapes
and surrogate pairs at every cut position, 100,000 levels of nesting, huge numbers
and member names, a colliding marker key, and CPU time at 8× the size (a ratio).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation.jsoncut import CUT_KEY, cut_json, is_json
from tests.timing import assert_linear


def mark(n: int) -> str:
    return f"[ctxpolicy: {n} characters of this tool-call argument removed to fit the window]"


def _reject(name: str) -> Any:
    raise ValueError(name)


def strict(text: str) -> Any:
    """What a strict server does (Python's json accepts NaN/Infinity; RFC 8259 not)."""
    return json.loads(text, parse_constant=_reject)


def bound(keep: int) -> int:
    return max(keep, 2) + len(mark(10**9)) + 80


def _no_lone_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


text_st = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]) | st.sampled_from('"\\\n\t\x00😀é'),
    max_size=60,
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text_st,
    lambda children: (
        st.lists(children, max_size=8)
        | st.dictionaries(text_st | st.just(CUT_KEY), children, max_size=8)
    ),
    max_leaves=60,
)
dumps_kw = st.fixed_dictionaries(
    {
        "ensure_ascii": st.booleans(),
        "indent": st.none() | st.integers(0, 3),
        "separators": st.sampled_from([None, (",", ":"), (", ", ": ")]),
    }
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, dumps_kw, st.integers(min_value=0, max_value=400))
def test_any_document_any_budget_stays_json(value: Any, kw: dict[str, Any], keep: int) -> None:
    text = json.dumps(value, **kw)
    out = cut_json(text, keep, mark)
    assert out is not None
    parsed = strict(out)
    assert len(out) <= max(len(text), bound(keep))
    assert _no_lone_surrogate(parsed)
    if len(text.strip()) <= max(keep, 2):
        assert out == text
    else:
        assert "characters of this tool-call argument removed" in out or out == text.strip()


@settings(max_examples=300, deadline=None)
@given(json_values, st.data())
def test_is_json_agrees_with_a_strict_parser(value: Any, data: st.DataObject) -> None:
    text = json.dumps(value, ensure_ascii=data.draw(st.booleans()))
    how = data.draw(st.sampled_from(["keep", "truncate", "insert", "delete"]))
    if how != "keep" and text:
        at = data.draw(st.integers(0, len(text) - 1))
        if how == "truncate":
            text = text[:at]
        elif how == "insert":
            text = text[:at] + data.draw(st.sampled_from(list(',:[]{}"\\ 1en-.\x01'))) + text[at:]
        else:
            text = text[:at] + text[at + 1 :]
    try:
        strict(text)
        expected = True
    except ValueError:
        expected = False
    assert is_json(text) is expected
    assert (cut_json(text, 10, mark) is not None) is expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        '{"a": NaN}',
        "[1, 2,]",
        '{"a": "line\nbreak"}',
        '{"path": "a.py", "content": "cut off by max_tokens',
        "[1] [2]",
        "01",
        '{"a" 1}',
        "{'a': 1}",
        "tru",
        "[" * 5000,
    ],
)
def test_not_json_is_reported(text: str) -> None:
    assert cut_json(text * 3, 4, mark) is None
    assert not is_json(text * 3)


def test_one_long_string_is_shortened_inside_and_nothing_else_moves() -> None:
    text = json.dumps({"path": "src/app.py", "content": "x" * 50_000, "mode": "w"})
    out = cut_json(text, 1000, mark)
    assert out is not None
    value = strict(out)
    assert value["path"] == "src/app.py" and value["mode"] == "w"
    assert "removed to fit the window" in value["content"]
    assert value["content"].startswith("x" * 400) and value["content"].endswith("x" * 400)


@pytest.mark.parametrize(
    "unit",
    ["\\ud83d\\ude00", "\\u00e9", "\\n", '\\"', "\\\\", "\\\\u0041", "é😀", "a\\\\\\ud83d\\ude00"],
)
def test_escapes_and_surrogate_pairs_are_never_split(unit: str) -> None:
    text = '{"s": "' + unit * 300 + '"}'
    original = strict(text)["s"]
    for keep in range(20, 140):
        out = cut_json(text, keep, mark)
        assert out is not None, keep
        s = strict(out)["s"]
        assert _no_lone_surrogate(s), (unit, keep)
        head, _, tail = s.partition("\n[ctxpolicy:")
        assert original.startswith(head) and original.endswith(tail.split("]\n", 1)[-1])


@pytest.mark.parametrize("depth", [2_000, 100_000])
@pytest.mark.parametrize("open_, close", [("[", "]"), ('{"a":', "}")])
def test_deep_nesting_is_cut_without_recursion(depth: int, open_: str, close: str) -> None:
    inner = '"' + "v" * 5000 + '"'
    text = open_ * depth + inner + close * depth
    out = cut_json(text, 600, mark)
    assert out is not None and is_json(out)
    assert len(out) <= bound(600)
    if depth <= 500:  # deep enough for the point, shallow enough for json.loads
        strict(out)


def test_a_huge_number_becomes_a_string_with_its_head_and_tail() -> None:
    text = '{"n": ' + "7" * 20_000 + "}"
    out = cut_json(text, 200, mark)
    assert out is not None
    n = strict(out)["n"]
    assert isinstance(n, str) and n.startswith("7" * 90) and n.endswith("7" * 90)


def test_structure_is_closed_and_reopened_with_its_member_names() -> None:
    text = json.dumps([{"path": f"f{i}", "body": {"lines": ["y" * 40] * 3}} for i in range(200)])
    out = cut_json(text, 300, mark)
    assert out is not None
    value = strict(out)
    assert value[0]["path"] == "f0"
    assert isinstance(value[-1], dict) and value[-1]["body"]["lines"][-1] == "y" * 40


def test_the_marker_member_never_collides_with_an_existing_name() -> None:
    members = {CUT_KEY: 1, "\\u0063txpolicy_cut_2": 2}
    body = ", ".join(f'"{k}": {v}' for k, v in members.items())
    items = ", ".join(f'"k{i}": {i}' for i in range(400))
    text = "{" + body + ", " + items + "}"
    out = cut_json(text, 120, mark)
    assert out is not None
    pairs = json.loads(out, object_pairs_hook=lambda kv: kv)
    names = [k for k, _ in pairs]
    assert len(names) == len(set(names))
    assert any(k.startswith(CUT_KEY) and "removed" in str(v) for k, v in pairs)


def test_a_huge_member_name_on_the_tail_path_is_not_repeated() -> None:
    text = json.dumps({"k" * 100_000: {"x": "v" * 100_000}})
    out = cut_json(text, 400, mark)
    assert out is not None and len(out) <= bound(400)
    strict(out)


SHAPES: dict[str, Callable[[int], str]] = {
    "numbers": lambda n: "[" + "1," * (n // 2) + "1]",
    "empty arrays": lambda n: "[" + "[]," * (n // 3) + "[]]",
    "deep arrays": lambda n: "[" * (n // 2) + "]" * (n // 2),
    "deep objects": lambda n: '{"a":' * (n // 6) + "1" + "}" * (n // 6),
    "escapes": lambda n: '"' + "\\n\\u00e9" * (n // 8) + '"',
    "backslashes": lambda n: '"' + "\\\\" * (n // 2) + '"',
    "members": lambda n: "{" + ",".join(f'"k{i}":{i}' for i in range(n // 10)) + "}",
    "marker-like members": lambda n: (
        "{" + ",".join(f'"ctxpolicy_cut_{i}":{i}' for i in range(n // 22)) + "}"
    ),
    "short strings": lambda n: json.dumps(["ab"] * (n // 6)),
    "digits": lambda n: "1" * n,
    "mixed": lambda n: json.dumps([{"a": [1, {"b": "c\\n"}], "d": None}] * (n // 40)),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_cut_is_linear(shape: str) -> None:
    make = SHAPES[shape]
    small, large = make(25_000), make(200_000)
    assert cut_json(large, 1000, mark) is not None
    assert_linear(lambda text: cut_json(text, 1000, mark), small, large, floor=5e-4, what=shape)
