"""StreamScanner: bytes pass through unchanged (or minus the injected usage chunk) and
the provider's prompt tokens are found, however the stream is cut into chunks."""

from __future__ import annotations

import itertools
import json

from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.gateway.sse import MAX_EVENT_BYTES, StreamScanner
from ctxpolicy.testing.server import sse_events


def chat_stream(include_usage: bool) -> tuple[list[bytes], bytes]:
    reply = {
        "id": "c1",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hello there, world"}}
        ],
        "usage": {"prompt_tokens": 321, "completion_tokens": 5, "total_tokens": 326},
    }
    events = sse_events("chat", reply, {"stream_options": {"include_usage": include_usage}})
    usage_event = next(e for e in events if b'"usage"' in e)
    return events, usage_event


def anthropic_stream() -> list[bytes]:
    reply = {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 100, "output_tokens": 3, "cache_read_input_tokens": 20},
    }
    return sse_events("anthropic", reply, {})


def cut(data: bytes, points: list[int]) -> list[bytes]:
    marks = sorted({p % (len(data) + 1) for p in points} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(marks)]


def run(scanner: StreamScanner, chunks: list[bytes]) -> bytes:
    return b"".join(scanner.feed(c) for c in chunks) + scanner.flush()


@given(st.lists(st.integers(min_value=0), max_size=40), st.booleans())
def test_chat_any_chunking(points: list[int], crlf: bool) -> None:
    events, usage_event = chat_stream(True)
    data = b"".join(events)
    if crlf:
        data = data.replace(b"\n", b"\r\n")
        usage_event = usage_event.replace(b"\n", b"\r\n")
    passthrough = StreamScanner("chat")
    assert run(passthrough, cut(data, points)) == data
    assert passthrough.usage == 321
    dropping = StreamScanner("chat", drop_usage_chunk=True)
    assert run(dropping, cut(data, points)) == data.replace(usage_event, b"")
    assert dropping.usage == 321


@given(st.lists(st.integers(min_value=0), max_size=40))
def test_anthropic_usage_includes_cached_input(points: list[int]) -> None:
    data = b"".join(anthropic_stream())
    s = StreamScanner("anthropic", drop_usage_chunk=True)  # never drops Anthropic events
    assert run(s, cut(data, points)) == data
    assert s.usage == 120


def test_hostile_streams_stay_bounded() -> None:
    s = StreamScanner("chat", drop_usage_chunk=True)
    huge = b"data: " + b"x" * (MAX_EVENT_BYTES + 10)
    assert s.feed(huge) == huge  # flushed unchanged once over the limit
    assert s.feed(b"\n\n") == b"\n\n" and s.usage is None
    bad = StreamScanner("chat")
    junk = (
        b'data: {"usage": nope\n\ndata: [1, "usage"]\n\ndata: {"usage": {"prompt_tokens": -4}}\n\n'
    )
    assert run(bad, [junk]) == junk and bad.usage is None


def test_usage_chunk_with_choices_is_kept() -> None:
    chunk = {"choices": [{"index": 0, "delta": {}}], "usage": {"prompt_tokens": 9}}
    ev = b"data: " + json.dumps(chunk).encode() + b"\n\n"
    s = StreamScanner("chat", drop_usage_chunk=True)
    assert run(s, [ev]) == ev and s.usage == 9
