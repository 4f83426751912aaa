"""The counter's caches: growing conversations, edits, bounds, threads, list memo and
the identity tier."""

from __future__ import annotations

import json
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import message_fingerprint
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens import (
    TokenCounter,
)
from ctxpolicy.tokens.msgkeys import json_text
from tests.strategies import nested

from .conftest import counter

# --------------------------------------------------------------------------- cache


def _conversation(k: int) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(k):
        msgs.append(
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls {i}"})},
                    }
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "name": "bash",
                "content": f"file_{i}.py\n" * (i + 1),
            }
        )
    return msgs


def _naive(c: TokenCounter, msgs) -> int:
    return sum(c._compute_message(m) for m in msgs) + 3


def test_growing_conversation_costs_only_new_messages():
    c = counter("gpt-4")
    msgs = _conversation(20)
    assert c.count_messages(msgs[:11]) == _naive(c, msgs[:11])
    misses = c.stats()["misses"]
    assert misses == 11
    assert c.count_messages(msgs[:15]) == _naive(c, msgs[:15])
    assert c.stats()["misses"] == misses + 4
    assert c.count_messages(msgs[:15]) == _naive(c, msgs[:15])
    assert c.stats()["misses"] == misses + 4
    assert c.stats()["list_hits"] >= 1


def test_in_place_edits_are_noticed():
    c = counter("gpt-4")
    msgs = _conversation(5)
    c.count_messages(msgs)
    msgs[3]["content"] = "a much longer replacement content " * 10
    assert c.count_messages(msgs) == _naive(c, msgs)
    msgs[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"cmd": "cat " + "x" * 400})
    assert c.count_messages(msgs) == _naive(c, msgs)
    assert c.count_message(msgs[1]) == c._compute_message(msgs[1])
    msgs[1]["tool_calls"].append(
        {"id": "z", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    )
    assert c.count_message(msgs[1]) == c._compute_message(msgs[1])
    del msgs[2]
    assert c.count_messages(msgs) == _naive(c, msgs)


def test_copies_and_different_lists_hit_the_cache():
    c = counter("gpt-4")
    msgs = _conversation(6)
    total = c.count_messages(msgs)
    misses = c.stats()["misses"]
    assert c.count_messages([dict(m) for m in msgs]) == total  # shallow copies
    assert c.count_messages(json.loads(json.dumps(msgs))) == total  # deep copies
    assert c.count_messages(msgs[::2]) == _naive(c, msgs[::2])
    assert c.stats()["misses"] == misses


def test_cache_is_bounded():
    c = counter("gpt-4", cache_size=8, hot_size=4)
    msgs = [{"role": "user", "content": f"message number {i}"} for i in range(50)]
    for m in msgs:
        c.count_message(m)
    st = c.stats()
    assert st["value_entries"] <= 4 and st["digest_entries"] <= 8 and st["identity_entries"] <= 4
    assert st["evictions"] > 0
    # a demoted entry is found again by content hash, without recounting
    before = c.stats()["misses"]
    c.count_message(dict(msgs[-6]))
    assert c.stats()["misses"] == before and c.stats()["digest_hits"] >= 1
    assert c.count_messages(msgs) == _naive(c, msgs)


def test_fingerprint_is_message_fingerprint_and_tracks_edits():
    c = counter("gpt-4")
    m = {"role": "user", "content": "hello", "meta": {"a": [1, 2]}}
    assert c.fingerprint(m) == message_fingerprint(m)
    assert c.fingerprint(m) == message_fingerprint(m)
    m["meta"]["a"].append(3)
    assert c.fingerprint(m) == message_fingerprint(m)


def test_concurrent_counting_is_correct():
    c = counter("gpt-4", hot_size=64)
    convs = [_conversation(15 + i) for i in range(4)]
    want = [_naive(c, conv[:j]) for conv in convs for j in range(1, len(conv) + 1)]
    errors: list[str] = []

    def work() -> None:
        got = [c.count_messages(conv[:j]) for conv in convs for j in range(1, len(conv) + 1)]
        if got != want:
            errors.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_list_memo_reuses_only_the_equal_prefix():
    c = counter("gpt-4")
    msgs = _conversation(8)
    c.count_messages(msgs)
    changed = [dict(msgs[0]), *msgs[1:5], {"role": "user", "content": "new turn"}, *msgs[6:]]
    assert c.count_messages(changed) == _naive(c, changed)
    assert c.count_messages(msgs) == _naive(c, msgs)
    assert c.count_messages(msgs[:3]) == _naive(c, msgs[:3])
    assert c.count_messages(tuple(msgs)) == _naive(c, msgs)


def test_explicit_vocabulary_for_an_unpublished_tokenizer_is_approximate():
    """cl100k for Claude counts cl100k exactly and Claude only approximately: say so."""
    claude = TokenCounter(
        ModelSpec(context_window=1000, tokenizer="cl100k_base"), model_name="claude-sonnet-4"
    )
    assert claude.approximate and not claude.resolution.exact
    assert "no public tokenizer for model 'claude-sonnet-4'" in claude.resolution.fallback
    mine = TokenCounter(
        ModelSpec(context_window=1000, tokenizer="cl100k_base"), model_name="my-model"
    )
    assert not mine.approximate and mine.resolution.exact  # an unknown model: the user knows


def _counting(c: TokenCounter) -> list[str]:
    """Texts the tokenizer of ``c`` encodes from now on."""
    seen: list[str] = []
    real = c._count

    def count(text: str) -> int:
        seen.append(text)
        return real(text)

    c._count = count  # type: ignore[method-assign]
    return seen


def test_a_long_text_is_encoded_once_and_the_cache_is_bounded_by_characters():
    c = counter("gpt-4")
    text = "line of a long tool result\n" * 200
    encoded = _counting(c)
    n = c.count_text(text)
    assert c.count_message({"role": "tool", "tool_call_id": "t", "content": text}) > n
    assert encoded.count(text) == 1  # the message reused the count of its text
    c.text_cache_chars = 40_000
    for i in range(200):
        c.count_text(f"{i} " + "x" * 1000)
    assert c._long_chars <= c.text_cache_chars
    assert c.count_text(text) == n  # evicted or not, the count is the same


def test_reserve_keeps_a_whole_conversation_in_the_identity_tier():
    c = counter("gpt-4", hot_size=8)
    msgs = [{"role": "user", "content": f"message number {i}"} for i in range(100)]
    c.reserve(len(msgs))
    for m in msgs:
        c.count_message(m)
    hits, misses = c.stats()["hits"], c.stats()["misses"]
    assert [c.count_message(dict(m)) for m in msgs] == [c._compute_message(m) for m in msgs]
    assert c.stats()["hits"] == hits + 100 and c.stats()["misses"] == misses


_json = nested(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    st.text(max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_json, max_size=4) | st.dictionaries(st.text(max_size=4), _json, max_size=4))
def test_json_text_is_json_dumps(value):
    assert json_text(value) == json.dumps(value, ensure_ascii=False, check_circular=False)
