"""make_conversation: realistic, well paired, deterministic by seed."""

from __future__ import annotations

import json

from hypothesis import given, settings

from ctxpolicy.conversation import check_messages, to_units
from ctxpolicy.testing.conversations import (
    ERROR_OUTPUTS,
    conversation_strategy,
    make_conversation,
)


def test_deterministic_by_seed() -> None:
    assert make_conversation(10, seed=3) == make_conversation(10, seed=3)
    assert make_conversation(10, seed=3) != make_conversation(10, seed=4)


def test_pairing_and_shape() -> None:
    for seed in range(10):
        msgs = make_conversation(15, seed=seed)
        assert check_messages(msgs) == []
        units, repairs = to_units(msgs)
        assert repairs == []
        assert sum(u.kind == "step" for u in units) == 15 + 1  # + the final answer
        assert msgs[0]["role"] == "system" and msgs[-1]["role"] == "user"
        ids = [tc["id"] for m in msgs for tc in m.get("tool_calls") or []]
        assert len(ids) == len(set(ids))


def test_features_are_present() -> None:
    msgs = make_conversation(40, seed=1, parallel=0.5, big_outputs=0.3, errors=0.3)
    assert any(len(m.get("tool_calls") or []) > 1 for m in msgs)  # parallel calls
    tool_outputs = [m["content"] for m in msgs if m["role"] == "tool"]
    assert max(len(t) for t in tool_outputs) > 10_000  # big outputs
    assert any(t in ERROR_OUTPUTS for t in tool_outputs)  # failures
    assert any(ord(ch) > 0x2E80 for m in msgs for ch in json.dumps(m, ensure_ascii=False))


def test_knobs() -> None:
    msgs = make_conversation(5, seed=0, system=None, unicode=False, errors=0.0, final_user=False)
    assert msgs[0]["role"] == "user"
    assert msgs[-1]["role"] == "assistant"
    assert all(ch.isascii() for m in msgs for ch in json.dumps(m, ensure_ascii=False))
    assert make_conversation(0, seed=0) == [msgs_ for msgs_ in make_conversation(0, seed=0)]
    assert [m["role"] for m in make_conversation(0)] == ["system", "user", "user"]


@settings(max_examples=30, deadline=None)
@given(msgs=conversation_strategy())
def test_strategy_is_well_paired(msgs: list[dict]) -> None:
    assert check_messages(msgs) == []
    _, repairs = to_units(msgs)
    assert repairs == []


def test_one_source_builds_every_synthetic_conversation() -> None:
    """sim.synth's sessions and the tests' builders are made of this module's
    vocabulary, tool calls and ids; their seeded bytes are pinned (issue 26: moving
    them here changed none)."""
    import hashlib

    from ctxpolicy.sim import synth
    from ctxpolicy.testing.conversations import WORDS, CallIds, tool_call

    def digest(msgs: object) -> str:
        text = json.dumps(msgs, ensure_ascii=False).encode("utf-8", "surrogatepass")
        return hashlib.sha256(text).hexdigest()[:16]

    assert digest(make_conversation(12, seed=5)) == "00580b3139ec4b59"
    assert digest(synth.coding_session(seed=7, steps=12)) == "1951e76206404dae"
    assert digest(synth.data_session(seed=11, steps=8)) == "b8f034584daa569c"
    assert list(WORDS) == synth._WORDS
    ids = CallIds()
    assert [ids.next(), ids.next()] == ["call_0001", "call_0002"]
    assert tool_call("c", "grep", {"b": 1, "a": 2}) == {
        "id": "c",
        "type": "function",
        "function": {"name": "grep", "arguments": '{"a": 2, "b": 1}'},
    }
    assert tool_call("c", "grep", {"b": 1, "a": 2}, sort_keys=False)["function"]["arguments"] == (
        '{"b": 1, "a": 2}'
    )
