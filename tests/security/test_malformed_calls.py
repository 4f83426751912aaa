"""Issue 19 items 8 and 9 (engine side): malformed ``tool_calls``, non-object messages,
duplicate call ids and values nested 5,000 levels deep are repaired — or left out of
the context *and archived* — never lost without a trace; every repair is named by a
``conversation.repaired`` event (kind, message index).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import check_messages, content_text
from ctxpolicy.engine import Session
from tests.engine_helpers import make_policy
from tests.helpers_conv import deep_value

FN = {"name": "read_file", "arguments": '{"path": "a.py"}'}
BAD = os.fsdecode(b"\xff")


def _session(tmp_path: Path | None = None, **policy: Any) -> Session:
    return Session(make_policy(tmp_path, **policy), conv_id="repairs")


def _msgs(*middle: Any) -> list[Any]:
    return [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "task"},
        *middle,
        {"role": "user", "content": "continue"},
    ]


def _repairs(s: Session) -> dict[tuple[str, int], dict[str, Any]]:
    return {(e["repair"], e["index"]): e for e in s.events if e["type"] == "conversation.repaired"}


def _ids(out: list[dict[str, Any]]) -> list[str]:
    return [tc["id"] for m in out for tc in m.get("tool_calls") or []]


def _assert_sendable(out: list[dict[str, Any]]) -> None:
    assert not check_messages(out)
    ids = _ids(out)
    assert len(ids) == len(set(ids)), "call ids must be unique in a request"
    for m in out:
        assert isinstance(m, dict)
        calls = m.get("tool_calls")
        if "tool_calls" in m:
            assert isinstance(calls, list) and calls
            for tc in calls:
                assert isinstance(tc["id"], str) and tc["id"]
                assert isinstance(tc["function"]["name"], str)
                assert isinstance(tc["function"]["arguments"], str)


def test_one_call_object_is_wrapped_and_keeps_its_result() -> None:
    s = _session()
    call = {"id": "c1", "type": "function", "function": FN}
    msgs = _msgs(
        {"role": "assistant", "content": None, "tool_calls": call},
        {"role": "tool", "tool_call_id": "c1", "content": "file body"},
    )
    out = s.prepare(msgs)
    _assert_sendable(out)
    assert out[2]["tool_calls"] == [call]
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": "file body"}
    assert ("tool_calls_wrapped", 2) in _repairs(s)


def test_tool_calls_as_json_text_are_parsed() -> None:
    s = _session()
    text = json.dumps([{"id": "c1", "type": "function", "function": FN}])
    out = s.prepare(
        _msgs(
            {"role": "assistant", "content": "", "tool_calls": text},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        )
    )
    _assert_sendable(out)
    assert out[2]["tool_calls"][0]["function"] == FN
    assert out[3]["content"] == "ok"
    assert ("tool_calls_invalid", 2) in _repairs(s)


def test_unusable_calls_are_archived_and_named(tmp_path: Path) -> None:
    s = _session(tmp_path)
    garbage = f"rm -rf / {BAD} ☠ " * 50
    msgs = _msgs(
        {"role": "assistant", "content": "a", "tool_calls": garbage},
        {"role": "user", "content": "next"},
        {
            "role": "assistant",
            "content": "b",
            "tool_calls": ["call me", 7, None, {"id": "x"}, {"id": "c9", "function": FN}],
        },
        {"role": "tool", "tool_call_id": "c9", "content": "kept"},
    )
    out = s.prepare(msgs)
    _assert_sendable(out)
    assert "tool_calls" not in out[2] and out[2]["content"] == "a"
    assert out[4]["tool_calls"] == [{"id": "c9", "function": FN, "type": "function"}]
    events = _repairs(s)
    invalid, bad = events[("tool_calls_invalid", 2)], events[("bad_tool_call", 4)]
    assert invalid["removed"] == 1 and bad["removed"] == 4
    assert "call 0" in bad["detail"] and "call 3" in bad["detail"]
    assert garbage in s.recall(invalid["archived"])
    archived = s.recall(bad["archived"])
    assert "call me" in archived and '"x"' in archived


def test_missing_ids_are_synthesized_deterministically_and_paired_in_order() -> None:
    msgs = _msgs(
        {"role": "assistant", "content": "", "tool_calls": [{"function": FN}, {"function": FN}]},
        {"role": "tool", "content": "first"},
        {"role": "tool", "tool_call_id": None, "content": "second"},
    )
    a, b = _session().prepare(msgs), _session().prepare(list(reversed(list(reversed(msgs)))))
    assert a == b
    _assert_sendable(a)
    ids = _ids(a)
    assert [m["tool_call_id"] for m in a[3:5]] == ids
    assert [m["content"] for m in a[3:5]] == ["first", "second"]


def test_duplicate_ids_across_and_within_messages_keep_every_call_and_result() -> None:
    s = _session()
    msgs = _msgs(
        {"role": "assistant", "content": "1", "tool_calls": [{"id": "c1", "function": FN}]},
        {"role": "tool", "tool_call_id": "c1", "content": "old result"},
        {
            "role": "assistant",
            "content": "2",
            "tool_calls": [{"id": "c1", "function": FN}, {"id": "c1", "function": FN}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "new result A"},
        {"role": "tool", "tool_call_id": "c1", "content": "new result B"},
    )
    out = s.prepare(msgs)
    _assert_sendable(out)
    assert [m["content"] for m in out if m.get("role") == "tool"] == [
        "old result",
        "new result A",
        "new result B",
    ]
    assert out[3]["tool_call_id"] == "c1"  # the first use keeps its id
    assert "already used by message 2" in _repairs(s)[("duplicate_call", 4)]["detail"]


def test_non_object_messages_are_left_out_archived_and_named(tmp_path: Path) -> None:
    s = _session(tmp_path)
    secret_note = f"a note the agent appended as a bare string {BAD} 🙂"
    msgs = _msgs(secret_note, None, 42, ["user", "hi"])
    out = s.prepare(msgs)
    _assert_sendable(out)
    assert len(out) == 3
    events = _repairs(s)
    assert {i for kind, i in events if kind == "bad_message"} == {2, 3, 4, 5}
    archived = s.recall(events[("bad_message", 2)]["archived"])
    assert "a note the agent appended" in archived
    s.prepare(msgs)  # reported once
    assert sum(1 for e in s.events if e["type"] == "conversation.repaired") == len(events)


def test_non_string_arguments_are_encoded_not_dropped() -> None:
    s = _session()
    call = {"id": "c1", "function": {"name": "edit", "arguments": {"path": "a.py", "n": 1}}}
    out = s.prepare(
        _msgs(
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        )
    )
    _assert_sendable(out)
    assert json.loads(out[2]["tool_calls"][0]["function"]["arguments"]) == {"path": "a.py", "n": 1}
    assert ("bad_arguments", 2) in _repairs(s)


def test_thousands_of_id_less_calls_stay_linear() -> None:
    n = 3000
    calls = [{"function": FN} for _ in range(n)]
    msgs = _msgs(
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "content": f"r{i}"} for i in range(n)),
    )
    s = _session(model={"context_window": 400_000, "max_output_tokens": 1000})
    out = s.prepare(msgs)
    _assert_sendable(out)
    assert len(set(_ids(out))) == n


def _deep(n: int) -> tuple[Any, str]:
    """A dict nested ``n`` levels deep and its exact JSON text."""
    return deep_value(n - 1), '{"a": ' * (n - 1) + "{}" + "}" * (n - 1)


@pytest.mark.parametrize("depth", [150, 990, 5_000])
def test_a_deep_tool_output_in_messages_is_sent_and_snapshotted_exactly(
    tmp_path: Path, depth: int
) -> None:
    value, text = _deep(depth)
    middle: list[Any] = []
    for r in range(4):
        middle.append(
            {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{r}", "function": FN}]}
        )
        middle.append({"role": "tool", "tool_call_id": f"c{r}", "content": value})
    tokens = _session().counter.count_text(text) * 4
    s = _session(  # the results fill ~80 % of the window: above warning, below the trigger
        tmp_path,
        model={
            "context_window": int(tokens / 0.8),
            "max_output_tokens": 100,
            "tokenizer": "cl100k_base",
        },
        pipeline=[{"layer": "observation_mask", "at": "warning", "options": {"max_age_rounds": 1}}],
    )
    out = s.prepare(_msgs(*middle))
    _assert_sendable(out)
    results = [m for m in out if m.get("role") == "tool"]
    if depth > 100 * 5:  # too deep for the engine's recursive steps: sent as JSON text
        assert results[-1]["content"] == text, "the newest result is its exact JSON text"
        assert any(e.get("repair") == "deep_value" for e in s.events)
    else:
        assert results[-1]["content"] is value, "sent as the caller wrote it"
    masked = [m for m in results if m["content"] not in (text, value)]
    assert masked, "old rounds were masked"
    for m in masked:
        ref = content_text(m["content"]).rsplit("[Full detail available at: ", 1)[1][:-1]
        assert s.recall(ref) == text


# --------------------------------------------------------------------------- fuzz
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
_call = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from(["c1", "c2", "", None, 5, BAD]) | st.text(max_size=3),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {}, optional={"name": st.sampled_from(["ls", "", BAD]), "arguments": _json}
        )
        | _json,
    },
)
_tool_calls = st.lists(_call | _json, max_size=4) | _call | st.text(max_size=20) | _json
_message = st.one_of(
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.just("step")}).flatmap(
        lambda m: _tool_calls.map(lambda tc: {**m, "tool_calls": tc})
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "tool_call_id": st.sampled_from(["c1", "c2", "", None, 5, BAD]),
            "content": st.text(max_size=30) | st.text(max_size=9).map(lambda t: t + BAD + t),
        }
    ),
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=20)),
    _json,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, max_size=12))
def test_hostile_shapes_never_raise_and_stay_sendable(middle: list[Any]) -> None:
    s = _session()
    out = s.prepare(_msgs(*middle))
    _assert_sendable(out)
    sent = json.dumps(out, ensure_ascii=False, default=str)
    for m in middle:  # every tool result's text reaches the context (as result or orphan)
        if isinstance(m, dict) and m.get("role") == "tool" and m["content"].strip():
            assert json.dumps(m["content"], ensure_ascii=False)[1:-1] in sent


def test_a_reused_call_id_keeps_each_result_s_own_snapshot(tmp_path: Path) -> None:
    """Some providers number calls per turn (``call_0`` every time): the reference of
    each masked result must recall *that* result, not the last one with the id."""
    s = _session(
        tmp_path,
        model={"context_window": 6000, "max_output_tokens": 500, "tokenizer": "cl100k_base"},
        tools={"*": {"preprocess": "head_tail", "options": {"max_chars": 100_000}}},
        pipeline=[
            {
                "layer": "observation_mask",
                "at": "warning",
                "options": {"max_age_rounds": 1, "max_chars": 80, "dedupe": False},
            }
        ],
    )
    middle: list[Any] = []
    outputs = []
    for r in range(5):
        tc = {"id": "call_0", "type": "function", "function": FN}
        output = f"output of turn {r}: " + "".join(f"row {r}.{i}\n" for i in range(300))
        outputs.append(output)
        text = s.add_tool_result(tc, output)
        middle += [
            {"role": "assistant", "content": f"turn {r}", "tool_calls": [tc]},
            {"role": "tool", "tool_call_id": "call_0", "content": text},
        ]
    out = s.prepare(_msgs(*middle))
    _assert_sendable(out)
    results = [m for m in out if m.get("role") == "tool"]
    assert len(results) == 5
    masked = 0
    for r, m in enumerate(results):
        text = content_text(m["content"])
        if text.startswith(outputs[r]):
            continue
        masked += 1
        ref = re.findall(r"\[Full detail available at: (?:\S+ \()?(\S+?)\)?\]", text)[-1]
        assert s.recall(ref).startswith(f"output of turn {r}: "), (r, ref)
    assert masked >= 3
