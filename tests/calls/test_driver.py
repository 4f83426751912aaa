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
from tests.integrations.conftest import big_output, make_policy

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
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix BUG-1234."},
    ]
    for i in range(steps):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": big_output(i, 30)})
    return out


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
