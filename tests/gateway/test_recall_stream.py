"""RecallProbe: when a streamed answer stops being a possible recall-only call."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.gateway import recall_stream
from ctxpolicy.gateway.recall_stream import RecallProbe
from ctxpolicy.testing.server import sse_events


def _chat(reply: dict[str, Any]) -> bytes:
    from ctxpolicy.testing.server import _chat_reply

    body = _chat_reply(reply, "m", 10, lambda: "call_1")
    return b"".join(sse_events("chat", body, {"stream_options": {"include_usage": True}}))


def _anthropic(reply: dict[str, Any]) -> bytes:
    from ctxpolicy.testing.server import _anthropic_reply

    return b"".join(sse_events("anthropic", _anthropic_reply(reply, "m", 10, lambda: "t1"), {}))


RECALL = {"tool_calls": [{"id": "r1", "name": "ctx_recall", "arguments": {"ref": "ctxsnap://x"}}]}
OTHER = {"tool_calls": [{"id": "o1", "name": "read_file", "arguments": {"path": "a"}}]}


def _feed(api: str, data: bytes, cuts: list[int]) -> RecallProbe:
    probe = RecallProbe(api)
    pos = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        if cut > pos:
            probe.feed(data[pos:cut])
            pos = cut
    return probe


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_any_chunking_gives_the_same_decision(cuts: list[int]) -> None:
    for api, make in (("chat", _chat), ("anthropic", _anthropic)):
        probe = _feed(api, make(RECALL), cuts)
        answer = probe.answer()
        assert not probe.decided and answer is not None
        if api == "chat":
            (call,) = answer["choices"][0]["message"]["tool_calls"]
            assert call["function"] == {"name": "ctx_recall", "arguments": '{"ref": "ctxsnap://x"}'}
        else:
            (block,) = answer["content"]
            assert block["input"] == {"ref": "ctxsnap://x"} and block["name"] == "ctx_recall"
        for other in ({"content": "hello"}, OTHER):
            data = make(other)  # once: a reply's `created` is the clock's second
            probe = _feed(api, data, cuts)
            assert probe.decided and probe.answer() is None
            assert bytes(probe.held) == data[: len(probe.held)]


def test_hostile_streams_are_passed_on_not_held() -> None:
    for junk in (b"data: {nope\n\n", b"data: [1, 2]\n\n", b'data: {"error": {}}\n\n'):
        probe = RecallProbe("chat")
        assert probe.feed(junk) and probe.answer() is None
    probe = RecallProbe("chat")
    assert probe.feed(b"data: " + b"x" * (recall_stream.MAX_HELD_BYTES + 1))
    assert probe.answer() is None
    # an event that never ends is held only up to the bound
    probe = RecallProbe("anthropic")
    for _ in range(5):
        if probe.feed(b"y" * (recall_stream.MAX_HELD_BYTES // 4)):
            break
    assert probe.decided
    # no tool call at all (an empty answer): nothing to answer inside the gateway
    probe = RecallProbe("chat")
    probe.feed(b'data: {"choices": [{"delta": {"content": "  "}}]}\n\ndata: [DONE]\n\n')
    assert not probe.decided and probe.answer() is None


def test_small_chunks_of_a_long_event_cost_linear_time() -> None:
    import time

    from ctxpolicy.gateway.sse import StreamScanner

    def run(n: int) -> float:
        probe, scanner = RecallProbe("chat"), StreamScanner("chat", drop_usage_chunk=True)
        t0 = time.perf_counter()
        probe.feed(b"data: ")
        for _ in range(n):
            probe.feed(b"x" * 16)
            scanner.feed(b"x" * 16)
        return time.perf_counter() - t0

    run(2000)
    small, big = min(run(4000) for _ in range(3)), min(run(32_000) for _ in range(3))
    assert big / small < 8 * 4  # 8x the bytes: linear is ~8x, quadratic ~64x
