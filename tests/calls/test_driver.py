"""The call driver with real sessions: prepare, overflow retry, usage, recall rounds, and
the async form keeping every engine call off the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.calls import CallDriver, CallSteps, ResponseFormat, UsageOnly, off_loop
from ctxpolicy.engine import ContextOverflowError, Session
from tests.integrations.conftest import long_history, make_policy

OVERFLOW = "This model's maximum context length is 4000 tokens (context_length_exceeded)"


class ChatFormat:
    """OpenAI chat completion dicts, as a wire class would read them."""

    def usage(self, response: Any) -> int | None:
        return (response.get("usage") or {}).get("prompt_tokens")

    def tool_calls(self, response: Any) -> list[tuple[str, str, Any]]:
        msg = response["choices"][0]["message"]
        return [
            (tc["id"], tc["function"]["name"], tc["function"]["arguments"])
            for tc in msg.get("tool_calls") or []
        ]

    def results_turn(
        self, response: Any, results: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        msg = dict(response["choices"][0]["message"])
        return [msg, *({"role": "tool", "tool_call_id": c, "content": t} for c, t in results)]


def answer(text: str = "done", *, prompt: int = 100, calls: Any = ()) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = [
            {"id": f"r{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return {"choices": [{"message": msg}], "usage": {"prompt_tokens": prompt}}


def history(steps: int) -> list[dict[str, Any]]:
    return long_history(steps, lines=30)


def test_the_format_protocol_is_what_a_wire_class_provides() -> None:
    assert isinstance(ChatFormat(), ResponseFormat)
    assert isinstance(UsageOnly(lambda r: None), ResponseFormat)


def test_call_prepares_sends_and_records_usage(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path), conv_id="c")
    sent: list[list[dict[str, Any]]] = []

    def send(prepared: list[dict[str, Any]]) -> Any:
        sent.append(prepared)
        return answer(prompt=1234)

    msgs = history(3)
    out = CallDriver(session, format=ChatFormat()).call(msgs, None, send)
    assert out["choices"][0]["message"]["content"] == "done"
    ref = Session(make_policy(tmp_path / "ref"), conv_id="c")
    assert sent == [ref.prepare(msgs)]
    assert session.state.usage_seen


def test_an_overflow_is_compacted_and_sent_again_then_gives_up(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path), conv_id="c")  # on_overflow.retries: 1
    sizes: list[int] = []

    def send(prepared: list[dict[str, Any]]) -> Any:
        sizes.append(session.counter.count_messages(prepared))
        raise RuntimeError(OVERFLOW)

    with pytest.raises(ContextOverflowError):
        CallDriver(session).call(history(12), None, send)
    assert len(sizes) == 2 and sizes[1] < sizes[0]  # one retry, with less


def test_an_error_that_is_not_an_overflow_is_raised_at_once(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path), conv_id="c")
    calls = []

    def send(prepared: list[dict[str, Any]]) -> Any:
        calls.append(1)
        raise ValueError("bad request: unknown field")

    with pytest.raises(ValueError, match="unknown field"):
        CallDriver(session).call(history(2), None, send)
    assert calls == [1]


def test_recall_rounds_are_answered_and_bounded(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path), conv_id="c")
    seen: list[list[dict[str, Any]]] = []

    def send(prepared: list[dict[str, Any]]) -> Any:
        seen.append(prepared)
        return answer("", calls=[("ctx_search", '{"pattern": "value_1_3"}')])

    driver = CallDriver(session, format=ChatFormat(), recall_rounds=2)
    out = driver.call(history(2), None, send)
    assert len(seen) == 3  # the first call and two recall rounds, then the answer goes back
    assert out["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "ctx_search"
    assert seen[1][-1]["role"] == "tool" and seen[1][-1]["tool_call_id"] == "r0"
    # a call of another tool is the host's: returned at once
    mixed = answer("", calls=[("ctx_search", "{}"), ("read", "{}")])
    n = len(seen)
    assert driver.call(history(2), None, lambda p: seen.append(p) or mixed) is mixed
    assert len(seen) == n + 1


def test_the_async_form_runs_every_engine_call_off_the_event_loop(tmp_path: Path) -> None:
    threads: set[int] = set()

    def on_event(event: dict[str, Any]) -> None:
        threads.add(threading.get_ident())

    session = Session(make_policy(tmp_path, window=4000), conv_id="c", on_event=on_event)
    threads.clear()  # opening it (here, before the loop) is not a call
    attempts = []

    async def send(prepared: list[dict[str, Any]]) -> Any:
        attempts.append(len(prepared))
        if len(attempts) == 1:
            raise RuntimeError(OVERFLOW)
        if len(attempts) == 2:
            return answer("", calls=[("ctx_recall", '{"ref": "x"}')], prompt=900)
        return answer(prompt=900)

    async def main() -> tuple[Any, int]:
        driver = CallDriver(session, format=ChatFormat(), recall_rounds=1)
        return await driver.acall(history(8), None, send), threading.get_ident()

    out, loop_thread = asyncio.run(main())
    assert out["choices"][0]["message"]["content"] == "done"
    assert len(attempts) == 3
    assert threads and loop_thread not in threads  # prepare, on_error, usage: all elsewhere


def test_steps_prepare_defer_an_overflow_and_record_usage(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path), conv_id="c")
    steps = CallSteps(ChatFormat())
    msgs = history(12)
    first = steps.before_model(session, msgs)
    assert not steps.defer(session, ValueError("not an overflow"))
    assert steps.defer(session, RuntimeError(OVERFLOW))
    second = steps.before_model(session, msgs)  # on_error's compacted messages
    assert session.counter.count_messages(second) < session.counter.count_messages(first)
    assert steps.failed(session, ValueError("nope"), msgs) is None
    steps.done(session, answer(prompt=777))
    assert session.state.usage_seen


def test_off_loop_carries_context_variables() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="")

    async def main() -> str:
        var.set("thread-id-7")
        return await off_loop(var.get)

    assert asyncio.run(main()) == "thread-id-7"


class Reply:
    """A reply of a host that speaks the wire itself: an HTTP status and a body, or a
    stream whose body is known only once it is read (``settle``)."""

    def __init__(self, status: int, body: Any, *, streamed: bool = False) -> None:
        self.status = status
        self.body = body
        self.streamed = streamed


class HttpFormat(ChatFormat):
    """A :class:`WireFormat`: failures arrive as replies, streams are settled, a round
    continues the request in the wire's own form (here: a copy of the chat messages)."""

    def __init__(self) -> None:
        self.settled = 0
        self.continued_with: list[list[tuple[str, str]]] = []

    def failure(self, reply: Reply) -> BaseException | None:
        return RuntimeError(reply.body) if reply.status >= 400 else None

    async def settle(self, reply: Reply) -> Reply:
        self.settled += 1
        return Reply(reply.status, reply.body) if reply.streamed else reply

    def usage(self, reply: Any) -> int | None:
        if not isinstance(reply, Reply) or reply.streamed or reply.status >= 400:
            return None
        return super().usage(reply.body)

    def tool_calls(self, reply: Any) -> list[tuple[str, str, Any]]:
        if reply.streamed or reply.status >= 400:
            return []
        return super().tool_calls(reply.body)

    def continued(
        self, messages: list[dict[str, Any]], reply: Reply, results: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        self.continued_with.append(list(results))
        return [*messages, *self.results_turn(reply.body, results)]


def test_a_wire_host_gets_failures_as_replies_and_relays_the_answer(tmp_path: Path) -> None:
    """The gateway's shape: an overflow reply is retried through on_error, a provider
    error that is not one comes back as the answer; a streamed recall-only answer is
    settled and answered; the final answer goes to the relay with the usage step."""
    from ctxpolicy.calls import WireFormat

    session = Session(make_policy(tmp_path, window=4000), conv_id="c")
    fmt = HttpFormat()
    assert isinstance(fmt, WireFormat)
    replies = [
        Reply(400, OVERFLOW),  # retried with less
        Reply(200, answer("", calls=[("ctx_search", '{"pattern": "x"}')]), streamed=True),
        Reply(200, answer("final", prompt=321)),
    ]
    sent: list[int] = []

    async def send(prepared: list[dict[str, Any]]) -> Reply:
        sent.append(len(prepared))
        return replies[len(sent) - 1]

    relayed: list[Any] = []

    async def relay(reply: Reply, record: Any) -> str:
        relayed.append(reply)
        await record(fmt.usage(reply) or 0)
        return "to the client"

    async def main() -> str:
        driver = CallDriver(None, open=lambda: session, format=fmt, recall_rounds=2, catch=())
        return await driver.acall(history(8), None, send, relay=relay)

    assert asyncio.run(main()) == "to the client"
    assert len(sent) == 3 and sent[1] <= sent[0]
    assert fmt.settled == 2 and len(fmt.continued_with) == 1
    assert relayed[0].body["choices"][0]["message"]["content"] == "final"
    assert session.state.usage_seen

    # a provider error that is not an overflow is the answer, relayed as it came
    errors = [Reply(429, "rate limited")]

    async def send_429(prepared: list[dict[str, Any]]) -> Reply:
        return errors[0]

    async def main_429() -> Any:
        driver = CallDriver(session, format=HttpFormat(), catch=())
        return await driver.acall(history(2), None, send_429, relay=lambda r, rec: _echo(r))

    assert asyncio.run(main_429()) is errors[0]


async def _echo(reply: Any) -> Any:
    return reply


def test_a_driver_needs_a_session_or_a_way_to_open_one() -> None:
    with pytest.raises(ValueError, match="session"):
        CallDriver(None)


def test_off_loop_lowers_the_switch_interval_while_engine_work_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads waiting for the interpreter lock held by a long prepare get it back
    within 0.5 ms instead of 5; the interpreter's own value is back once none runs."""
    import sys

    from ctxpolicy.calls.driver import SWITCH_INTERVAL

    monkeypatch.delenv("CTXPOLICY_SWITCH_INTERVAL", raising=False)
    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL  # CPython's default, 5 ms

    async def main() -> list[float]:
        both = await asyncio.gather(
            off_loop(sys.getswitchinterval), off_loop(lambda: sys.getswitchinterval())
        )
        return [*both, await off_loop(sys.getswitchinterval)]

    assert asyncio.run(main()) == [SWITCH_INTERVAL] * 3
    assert sys.getswitchinterval() == before
    monkeypatch.setenv("CTXPOLICY_SWITCH_INTERVAL", "0")  # leave the interpreter's own
    assert asyncio.run(off_loop(sys.getswitchinterval)) == before
