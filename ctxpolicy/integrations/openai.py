"""OpenAI SDK adapter (extra ``openai``): budgeted chat completions and responses.

::

    import openai, ctxpolicy
    from ctxpolicy.integrations.openai import wrap

    session = ctxpolicy.Session(ctxpolicy.load_policy("policies/agents.yaml", agent="coding_agent"))
    client = wrap(openai.OpenAI(base_url="http://localhost:8000/v1"), session)
    resp = client.chat.completions.create(model="m", messages=history, tools=tools)

``wrap`` returns a proxy of the client — the client class is never patched. Its
``chat.completions.create`` (and ``parse``) sends ``session.prepare(messages,
tools)`` instead of ``messages`` (the tool schemas are counted), records the
provider's ``usage.prompt_tokens``, and on an API error that is a context overflow
(``context_length_exceeded``, "maximum context length", vLLM/Ollama/LiteLLM
wordings — see :func:`ctxpolicy.engine.overflow.is_context_overflow`) runs the
policy's ``on_overflow`` layer and retries; the session bounds the retries and then
raises :class:`ctxpolicy.ContextOverflowError`. ``responses.create(input=[...])``
does the same for Responses API item lists (see :class:`ResponsesInput`).
Everything else (``models``, ``embeddings``, ``with_raw_response`` …) is the
client's own. Works with ``openai.OpenAI``, ``openai.AsyncOpenAI``, Azure clients
and any OpenAI-compatible server through ``base_url``.

Recall: add :func:`recall_tools` to ``tools`` and answer the model's ``ctx_recall`` /
``ctx_search`` calls with :func:`answer_recall` (a ``tool`` message, or None for a
call that is not a recall call — run your own tool then)::

    for call in msg.tool_calls or []:
        reply = answer_recall(session, call)
        if reply is None:
            reply = {"role": "tool", "tool_call_id": call.id,
                     "content": session.add_tool_result(call, run_tool(call))}
        history.append(reply)

Your history is never modified: keep appending to it; each call prepares it anew
(sticky decisions inside the session keep the prefix stable between calls).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.driver import CallDriver, UsageOnly, off_loop
from ctxpolicy.integrations._common import (
    Message,
    Proxy,
    as_session,
    converted,
    is_async_callable,
    is_given,
    require,
    to_plain,
)
from ctxpolicy.wire.responses import ResponsesInput

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

__all__ = [
    "OpenAIWrapper",
    "ResponsesInput",
    "answer_recall",
    "is_recall_call",
    "prepare_chat",
    "prepare_responses_input",
    "recall_tools",
    "wrap",
]


def _openai() -> Any:
    return require("openai", "openai")


def _is_async(client: Any) -> bool:
    try:
        return is_async_callable(client.chat.completions.create)
    except AttributeError:
        return False


def wrap(
    client: Any,
    session: Session | Any,
    *,
    agent: str = "default",
    conv_id: str | None = None,
    record_usage: bool = True,
    record: str | os.PathLike[str] | None = None,
) -> OpenAIWrapper:
    """A proxy of ``client`` (sync or async) whose model calls go through ``session``.

    ``session`` is a :class:`ctxpolicy.Session` (one per conversation), or a policy
    (object or file path + ``agent``) from which a new session is made for
    ``conv_id``: with a durable ``state:`` store it resumes that conversation's
    state in any process (docs/state.md). ``record=PATH`` records the new session's
    trace for ``ctxpolicy simulate`` (docs/simulate.md, "Record your own traces").
    """
    _openai()
    return OpenAIWrapper(
        client,
        as_session(session, agent=agent, conv_id=conv_id, record=record),
        record_usage=record_usage,
    )


def prepare_chat(
    session: Session, messages: Sequence[Any], tools: Sequence[Any] | None = None
) -> list[Message]:
    """``session.prepare`` for messages that may be SDK objects (``resp.choices[0].message``)."""
    return session.prepare(
        [to_plain(m) for m in messages], tools=to_plain(list(tools)) if tools else None
    )


class OpenAIWrapper(Proxy):
    """The wrapped client: ``.chat.completions``, ``.responses``, the rest delegated."""

    def __init__(self, client: Any, session: Session, *, record_usage: bool = True) -> None:
        super().__init__(client)
        self.session = session
        self.record_usage = record_usage
        self.is_async = _is_async(client)
        self.chat = _Chat(client.chat, self)
        if hasattr(client, "responses"):
            self.responses = _Responses(client.responses, self)

    @property
    def wrapped(self) -> Any:
        """The original client."""
        return self._inner

    def with_options(self, **options: Any) -> OpenAIWrapper:
        """``client.with_options(...)``, still wrapped with the same session."""
        return OpenAIWrapper(
            self._inner.with_options(**options), self.session, record_usage=self.record_usage
        )

    def copy(self, **options: Any) -> OpenAIWrapper:
        return OpenAIWrapper(
            self._inner.copy(**options), self.session, record_usage=self.record_usage
        )

    # -- internals --------------------------------------------------------------------
    def _tokens(self, resp: Any) -> int | None:
        """The prompt tokens of a response (None: not given, or not recorded)."""
        if not self.record_usage:
            return None
        usage = getattr(resp, "usage", None)
        tokens = getattr(usage, "prompt_tokens", None)
        if tokens is None:
            tokens = getattr(usage, "input_tokens", None)
        return tokens if isinstance(tokens, int) and tokens > 0 else None

    def _driver(self) -> CallDriver:
        """The call protocol (prepare, overflow retry, usage) of this client's calls."""
        return CallDriver(
            self.session, format=UsageOnly(self._tokens), catch=(_openai().APIStatusError,)
        )

    def _chat(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        if "messages" not in kwargs:
            return fn(**kwargs)
        kwargs = dict(kwargs)
        raw = list(kwargs.pop("messages"))
        tools = kwargs.get("tools")
        plain_tools = to_plain(list(tools)) if is_given(tools) else None
        if self.is_async:

            async def asend(prepared: list[Message]) -> Any:
                return await fn(messages=prepared, **kwargs)

            async def acall() -> Any:
                messages = await converted(raw, lambda: [to_plain(m) for m in raw])
                return await self._driver().acall(messages, plain_tools, asend)

            return acall()
        messages = [to_plain(m) for m in raw]
        return self._driver().call(messages, plain_tools, lambda p: fn(messages=p, **kwargs))

    def _responses(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        items = kwargs.get("input")
        if not is_given(items) or isinstance(items, str):
            if self.is_async:

                async def passthrough() -> Any:
                    resp = await fn(**kwargs)
                    tokens = self._tokens(resp)
                    if tokens is not None:
                        await off_loop(self.session.record_usage, tokens)
                    return resp

                return passthrough()
            resp = fn(**kwargs)
            tokens = self._tokens(resp)
            if tokens is not None:
                self.session.record_usage(tokens)
            return resp
        kwargs = dict(kwargs)
        kwargs.pop("input")
        instructions = kwargs.get("instructions")
        items = list(items)

        def conversation() -> ResponsesInput:
            return ResponsesInput(
                items, instructions=instructions if is_given(instructions) else None
            )

        tools = kwargs.get("tools")
        plain_tools = to_plain(list(tools)) if is_given(tools) else None
        if self.is_async:

            async def acall() -> Any:
                conv = await converted(items, conversation)

                async def asend(prepared: list[Message]) -> Any:
                    return await fn(input=conv.to_items(prepared), **kwargs)

                return await self._driver().acall(conv.messages, plain_tools, asend)

            return acall()
        conv = conversation()
        return self._driver().call(
            conv.messages, plain_tools, lambda p: fn(input=conv.to_items(p), **kwargs)
        )


class _Chat(Proxy):
    def __init__(self, chat: Any, owner: OpenAIWrapper) -> None:
        super().__init__(chat)
        self.completions = _Completions(chat.completions, owner)


class _Completions(Proxy):
    def __init__(self, completions: Any, owner: OpenAIWrapper) -> None:
        super().__init__(completions)
        self._owner = owner

    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create`` with ``messages`` prepared by the session."""
        return self._owner._chat(self._inner.create, kwargs)

    def parse(self, **kwargs: Any) -> Any:
        """``chat.completions.parse`` (structured outputs) with prepared ``messages``."""
        return self._owner._chat(self._inner.parse, kwargs)


class _Responses(Proxy):
    def __init__(self, responses: Any, owner: OpenAIWrapper) -> None:
        super().__init__(responses)
        self._owner = owner

    def create(self, **kwargs: Any) -> Any:
        """``responses.create`` with an ``input`` item list prepared by the session."""
        return self._owner._responses(self._inner.create, kwargs)

    def parse(self, **kwargs: Any) -> Any:
        return self._owner._responses(self._inner.parse, kwargs)


# --------------------------------------------------------------------------- Responses API


def prepare_responses_input(
    session: Session,
    items: Sequence[Any],
    *,
    instructions: str | None = None,
    tools: Sequence[Any] | None = None,
) -> list[dict[str, Any]]:
    """Prepare a Responses API ``input`` list under the session's policy (no call made)."""
    conv = ResponsesInput(items, instructions=instructions)
    prepared = session.prepare(conv.messages, tools=to_plain(list(tools)) if tools else None)
    return conv.to_items(prepared)


# --------------------------------------------------------------------------- recall


def recall_tools() -> list[dict[str, Any]]:
    """The ``ctx_recall`` / ``ctx_search`` function-tool schemas (chat completions format)."""
    from ctxpolicy.snapshots.recall import recall_tools as schemas

    return schemas()


def _call_parts(tool_call: Any) -> tuple[str, str, Any]:
    """(id, name, arguments) of a chat tool call (SDK object or dict) or a Responses item."""
    plain = to_plain(tool_call)
    if not isinstance(plain, Mapping):
        return "", "", None
    fn = plain.get("function")
    if isinstance(fn, Mapping):
        return str(plain.get("id") or ""), str(fn.get("name") or ""), fn.get("arguments")
    call_id = plain.get("call_id") or plain.get("id") or ""
    return str(call_id), str(plain.get("name") or ""), plain.get("arguments")


def is_recall_call(tool_call: Any) -> bool:
    """True when ``tool_call`` calls ``ctx_recall`` or ``ctx_search``."""
    from ctxpolicy.snapshots.recall import RECALL_TOOL, SEARCH_TOOL

    return _call_parts(tool_call)[1] in (RECALL_TOOL, SEARCH_TOOL)


def answer_recall(session: Session, tool_call: Any) -> Message | None:
    """The ``tool`` message answering a ``ctx_recall``/``ctx_search`` call, else None.

    The answer comes from the session's own snapshots of this conversation only
    (:meth:`ctxpolicy.Session.recall_tool`): bounded, redacted, never an error
    raised — a bad reference or argument comes back as text for the model. It is
    not passed through ``add_tool_result`` (a recall is not snapshotted again).
    """
    call_id, name, arguments = _call_parts(tool_call)
    if not is_recall_call(tool_call):
        return None
    _, handler = session.recall_tool()
    return {"role": "tool", "tool_call_id": call_id, "content": handler(name, arguments)}
