"""The exact content key and the JSON memo: equal only for the same JSON."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import message_fingerprint
from ctxpolicy.conversation.samejson import MISS, JsonMemo, KeyedList, content_key, memo_key

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, float("inf")]),
    st.sampled_from(["", "a", "b", "1", "true", "é"]),
)
JSON = st.recursive(
    LEAVES,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from("abc"), kids, max_size=3)
    ),
    max_leaves=12,
)


def _text(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


@settings(max_examples=400, deadline=None)
@given(JSON, JSON)
def test_content_key_is_equal_exactly_when_fingerprints_are(a: Any, b: Any) -> None:
    ma, mb = {"role": "user", "content": a}, {"role": "user", "content": b}
    same_fp = message_fingerprint(ma) == message_fingerprint(mb)
    assert (content_key(ma) == content_key(mb)) == same_fp


@settings(max_examples=400, deadline=None)
@given(JSON, JSON)
def test_memo_key_equal_means_the_same_json_text(a: Any, b: Any) -> None:
    ka, kb = memo_key(a), memo_key(b)
    assert ka is not None and kb is not None
    if ka == kb:
        assert _text(a) == _text(b)


def test_two_parses_of_one_request_get_one_key() -> None:
    """What makes the memo pay: a client's tools, parsed afresh on every call, hit."""
    tools = [
        {
            "name": f"T{i}",
            "description": "Reads a file.",
            "input_schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["path"],
                "properties": {
                    "path": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1},
                },
            },
        }
        for i in range(24)
    ]
    text = json.dumps(tools)
    assert memo_key(json.loads(text)) == memo_key(json.loads(text)) is not None


def test_equal_values_that_json_tells_apart_have_different_keys() -> None:
    pairs = [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # key order
        ([1], [True]),
        ([1], [1.0]),
        ([0.0], [-0.0]),
    ]
    for a, b in pairs:
        assert a == b
        assert memo_key(a) != memo_key(b)
    assert content_key({"x": [1]}) != content_key({"x": [True]})
    assert content_key({"a": 1, "b": 2}) == content_key({"b": 2, "a": 1})  # as the fingerprint


def test_memo_keeps_the_last_values_and_refuses_what_marshal_cannot_write() -> None:
    memo = JsonMemo(size=2)
    for i in range(3):
        memo.put(memo_key([i]), "r", i)
    assert memo.get(memo_key([0]), "r") is MISS  # evicted, oldest first
    assert memo.get(memo_key(json.loads("[2]")), "r") == 2
    assert memo.get(memo_key([1]), "other") is MISS
    assert memo_key([object()]) is None
    memo.put(None, "r", 1)
    assert memo.get(None, "r") is MISS


def test_keyed_list_copies_are_plain_lists() -> None:
    k = KeyedList([{"a": 1}])
    k.memo_key = b"k"
    both = k + [{"b": 2}]  # noqa: RUF005 - the operator is what is tested
    assert type(both) is list and type(list(k)) is list
    assert json.dumps(k) == '[{"a": 1}]'
