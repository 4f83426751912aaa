"""Issue 19 items 9 and 11: what a tool returns is kept exactly in its snapshot.

* a tool output nested 5,000 levels deep (and other things ``json.dumps`` refuses:
  cycles, 5,000-digit integers, objects whose ``__str__`` raises) is rendered by the
  iterative encoder, into the context and the snapshot, instead of
  ``<unrenderable dict>``;
* a lone surrogate (``os.fsdecode(b"\\xff")``) in a tool output, its arguments or a
  message does not make ``add_tool_result``, ``prepare`` or the archive raise, with
  any tokenizer, and recall returns the exact original.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.engine import Session
from ctxpolicy.snapshots import LocalStore
from ctxpolicy.snapshots.archive import HistoryArchive
from ctxpolicy.snapshots.recall import recall
from tests.engine_helpers import make_policy

BAD = os.fsdecode(b"\xff")  # '\udcff'


def _deep(n: int) -> tuple[Any, str]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(n - 1):
        cur["a"] = {}
        cur = cur["a"]
    return root, '{"a": ' * (n - 1) + "{}" + "}" * (n - 1)


def _deep_list(n: int) -> tuple[Any, str]:
    root: list[Any] = []
    cur = root
    for _ in range(n - 1):
        nxt: list[Any] = []
        cur.append(nxt)
        cur = nxt
    return root, "[" * n + "]" * n


def _session(tmp_path: Path, tokenizer: str = "cl100k_base") -> Session:
    policy = make_policy(
        tmp_path,
        model={"context_window": 8000, "max_output_tokens": 1000, "tokenizer": tokenizer},
        tools={"*": {"preprocess": "head_tail", "options": {"max_chars": 200}}},
    )
    return Session(policy, conv_id="integrity")


@pytest.mark.parametrize("make", [_deep, _deep_list])
def test_deep_output_is_kept_exactly(tmp_path: Path, make: Any) -> None:
    s = _session(tmp_path)
    output, expected = make(5000)
    text = s.add_tool_result({"name": "deep", "id": "c1"}, output)
    assert "unrenderable" not in text
    ev = [e for e in s.events if e["type"] == "tool.preprocessed"][-1]
    assert ev["snapshot"]
    assert s.recall(ev["snapshot"]) == expected
    assert text.startswith(expected[:50])


def test_other_unrenderable_outputs(tmp_path: Path) -> None:
    class Bad:
        def __str__(self) -> str:
            raise RuntimeError("no")

    cyc: list[Any] = [1]
    cyc.append(cyc)
    s = _session(tmp_path)
    cases = [
        ({"n": 10**5000}, json.dumps({"n": "X"}).replace('"X"', str(10**4000) + "0" * 1000)),
        ({"b": b"bytes"}, '{"b": "b\'bytes\'"}'),
        (cyc, '[1, "<cycle>"]'),
        ({"x": Bad()}, None),
    ]
    for output, expected in cases:
        s.add_tool_result({"name": "odd", "id": f"c{id(output)}"}, output)
        ev = [e for e in s.events if e["type"] == "tool.preprocessed"][-1]
        got = s.recall(ev["snapshot"])
        if expected is not None:
            assert got == expected
        else:
            assert got.startswith('{"x": "<Bad: RuntimeError>"')


def test_deep_arguments_and_meta_do_not_lose_the_snapshot(tmp_path: Path) -> None:
    s = _session(tmp_path)
    deep, expected = _deep(5000)
    text = s.add_tool_result(
        {"name": "t", "id": "c1", "arguments": deep}, "the result", meta={"extra": deep}
    )
    ev = [e for e in s.events if e["type"] == "tool.preprocessed"][-1]
    assert ev["snapshot"] and "the result" in text
    assert s.recall(ev["snapshot"]) == "the result"
    assert s.snapshots is not None
    doc = s.snapshots.read(ev["snapshot"])
    assert doc["as_text"] == ["action_input", "extra"]
    assert doc["action_input"] == expected == doc["extra"]  # exactly, as JSON text


@pytest.mark.parametrize("tokenizer", ["cl100k_base", "quicktok:cl100k_base", "heuristic"])
def test_lone_surrogates_everywhere(tmp_path: Path, tokenizer: str) -> None:
    s = _session(tmp_path, tokenizer)
    outputs = [
        f"ls: cannot access '{BAD}.txt'",
        {"files": [f"a{BAD}b", BAD * 3]},
        ("\ud800" + "x" * 500 + "\udfff") * 3,
    ]
    for i, out in enumerate(outputs):
        text = s.add_tool_result({"name": "ls", "id": f"c{i}", "arguments": {"p": BAD}}, out)
        assert isinstance(text, str)
        ev = [e for e in s.events if e["type"] == "tool.preprocessed"][-1]
        expected = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
        assert s.recall(ev["snapshot"]) == expected
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": f"open {BAD}"},
        {
            "role": "assistant",
            "content": BAD,
            "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "f", "arguments": BAD}}
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": BAD * 100},
        {"role": "user", "content": "go"},
    ]
    assert s.prepare(msgs)


def test_archive_keeps_surrogates_and_deep_messages(tmp_path: Path) -> None:
    store = LocalStore(root=str(tmp_path))
    arch = HistoryArchive(store, "c")
    deep, deep_text = _deep(5000)
    msgs = [
        {"role": "user", "content": f"file {BAD} and \ud83d alone"},
        {"role": "tool", "tool_call_id": "1", "content": deep},
    ]
    ref = arch.append(msgs, step=3)
    step, first = arch.message(1)
    assert step == 3 and first == msgs[0]
    _, second = arch.message(2)
    compact = deep_text.replace(": ", ":")
    assert second == {
        "ctxpolicy_json_text": '{"role":"tool","tool_call_id":"1","content":' + compact + "}"
    }
    assert BAD in recall(store, ref)


def test_bytes_that_are_not_utf8_are_kept_exactly(tmp_path: Path) -> None:
    import base64

    s = _session(tmp_path)
    raw = b"name: caf\xe9 \xff\xfe end\n" * 3
    text = s.add_tool_result({"name": "cat", "id": "b1"}, raw)
    assert "\ufffd" in text
    ev = [e for e in s.events if e["type"] == "tool.preprocessed"][-1]
    assert s.snapshots is not None
    doc = s.snapshots.read(ev["snapshot"])
    assert doc["replaced_bytes"] == 9 and base64.b64decode(doc["original_base64"]) == raw


_ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def _outputs(draw: st.DrawFn) -> Any:
    value = draw(_JSONISH | _ANY_TEXT | st.binary(max_size=60))
    depth = draw(st.sampled_from([0, 0, 0, 1500, 3000]))
    for _ in range(depth):  # sometimes far deeper than json.dumps can go
        value = [value]
    return value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(output=_outputs(), tokenizer=st.sampled_from(["cl100k_base", "heuristic"]))
def test_fuzz_tool_outputs_are_kept_exactly(
    tmp_path_factory: pytest.TempPathFactory, output: Any, tokenizer: str
) -> None:
    """Fuzzer: deep, surrogate-laden and non-UTF-8 outputs never raise, and the
    snapshot holds exactly the rendered text (bytes: exactly the bytes)."""
    import base64

    from ctxpolicy.conversation.jsontext import to_json
    from ctxpolicy.engine.tool_results import render_output

    s = _session(tmp_path_factory.mktemp("fuzz"), tokenizer)
    text = s.add_tool_result({"name": "fuzz", "id": "f1", "arguments": {"x": output}}, output)
    assert isinstance(text, str)
    ev = [e for e in s.events if e["type"] == "tool.preprocessed"][-1]
    assert ev["snapshot"] and s.snapshots is not None
    expected = render_output(output)[0]
    assert s.recall(ev["snapshot"]) == expected
    if isinstance(output, (list, dict)):
        assert expected == to_json(output)[0]
    if isinstance(output, bytes) and "\ufffd" in expected:
        assert base64.b64decode(s.snapshots.read(ev["snapshot"])["original_base64"]) == output
    assert s.prepare([{"role": "user", "content": "go"}])
