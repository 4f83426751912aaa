"""pydantic-ai adapter (extra ``pydantic_ai``): a capability, and a history processor.

::

    from pydantic_ai import Agent
    from ctxpolicy.integrations.pydantic_ai import ContextPolicy

    agent = Agent(model, tools=[...], capabilities=[ContextPolicy("policies/agents.yaml",
                                                                  agent="coding_agent")])
    result = await agent.run("Fix BUG-1234", conversation_id="user-42")

:class:`ContextPolicy` is a pydantic-ai capability (``capabilities=[...]``):

* the conversation is pydantic-ai's own ``RunContext.conversation_id`` (the
  ``conversation_id=`` of ``Agent.run``, the one on ``message_history``, or the fresh
  id pydantic-ai gives a new conversation): one :class:`ctxpolicy.Session` per
  conversation id, never a shared default;
* ``after_tool_execute`` (the tool hook) sends every tool result through
  ``session.add_tool_result`` — the model sees the preprocessed text, the original
  is snapshotted;
* ``prepare_model_request`` prepares the messages of each attempt under the policy
  (the tool definitions counted); unchanged messages are sent as the same objects;
* ``on_model_request_error`` answers a provider overflow error with
  ``session.on_error`` (window learned, compaction forced) and another attempt
  (``RetryModelRequest``), bounded by the policy's ``on_overflow.retries``;
* ``get_toolset`` adds ``ctx_recall`` / ``ctx_search`` (``recall=False`` to leave them out).

Without capabilities, :func:`history_processor` gives the preparation alone, as a
``ProcessHistory`` processor for one session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.driver import CallSteps, UsageOnly, off_loop
from ctxpolicy.calls.pool import SessionPool, resolve_policy
from ctxpolicy.conversation import content_text, message_fingerprint
from ctxpolicy.conversation.messages import (
    call_id,
    function_tool,
    new_call,
    nth_original,
    result_id,
    tool_calls,
)
from ctxpolicy.integrations._common import Message, as_session, require

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

    #: built on first use (it subclasses pydantic-ai's ``AbstractCapability``)
    ContextPolicy: type[Any]

__all__ = ["ContextPolicy", "MessageMap", "history_processor"]

#: sessions kept per capability (least recently used conversations are closed)
MAX_SESSIONS = 1024


def _pai() -> Any:
    return require("pydantic_ai", "pydantic_ai")


def _msgs() -> Any:
    return require("pydantic_ai.messages", "pydantic_ai")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(c if isinstance(c, str) else f"[{type(c).__name__}]" for c in content)
    return str(content)


class MessageMap:
    """pydantic-ai ``ModelMessage`` objects seen as chat messages, and back.

    A request's parts become one chat message each (system, user, tool return, retry
    prompt); a response becomes one assistant message (text + tool calls, thinking
    kept with it). :meth:`to_model` maps a prepared list back: unchanged messages
    are the original parts (the original message object when all its parts stay),
    rewritten ones new parts.
    """

    def __init__(self, messages: Sequence[Any]) -> None:
        m = _msgs()
        self.originals = list(messages)
        self.messages: list[Message] = []
        self._origin: dict[str, list[tuple[int, tuple[Any, ...], str]]] = {}
        self._tool_names: dict[str, str] = {}
        self._calls: dict[str, Any] = {}
        for idx, msg in enumerate(self.originals):
            if isinstance(msg, m.ModelResponse):
                text = "".join(p.content for p in msg.parts if isinstance(p, m.TextPart))
                calls = [p for p in msg.parts if isinstance(p, m.ToolCallPart)]
                chat: Message = {"role": "assistant", "content": text or None}
                if calls:
                    chat["tool_calls"] = [
                        new_call(c.tool_call_id, c.tool_name, c.args_as_json_str()) for c in calls
                    ]
                for c in calls:
                    self._tool_names[c.tool_call_id] = c.tool_name
                    self._calls[c.tool_call_id] = c
                self._add(chat, idx, tuple(msg.parts), "response")
                continue
            extra: list[Any] = []
            for part in getattr(msg, "parts", []):
                chat_m = self._request_part(part, m)
                if chat_m is None:
                    extra.append(part)
                    continue
                self._add(chat_m, idx, (*extra, part), "request")
                extra = []
            if extra and self.messages:  # parts no chat message stands for: keep them
                fp = message_fingerprint(self.messages[-1])
                i, parts, kind = self._origin[fp][-1]
                self._origin[fp][-1] = (i, (*parts, *extra), kind)

    def _request_part(self, part: Any, m: Any) -> Message | None:
        if isinstance(part, m.SystemPromptPart):
            return {"role": "system", "content": part.content}
        if isinstance(part, m.UserPromptPart):
            return {"role": "user", "content": _text(part.content)}
        if isinstance(part, m.ToolReturnPart):
            return {
                "role": "tool",
                "tool_call_id": part.tool_call_id,
                "content": part.model_response_str(),
            }
        if isinstance(part, m.RetryPromptPart):
            if part.tool_name:
                return {
                    "role": "tool",
                    "tool_call_id": part.tool_call_id,
                    "content": part.model_response(),
                }
            return {"role": "user", "content": part.model_response()}
        return None

    def _add(self, chat: Message, idx: int, parts: tuple[Any, ...], kind: str) -> None:
        self.messages.append(chat)
        self._origin.setdefault(message_fingerprint(chat), []).append((idx, parts, kind))

    def to_model(self, prepared: Sequence[Message]) -> list[Any]:
        """The ``ModelMessage`` list standing for ``prepared``."""
        m = _msgs()
        groups: list[tuple[int | None, str, list[Any]]] = []
        used: dict[str, int] = {}
        for chat in prepared:
            found = nth_original(self._origin, used, message_fingerprint(chat))
            if found is not None:
                idx, parts, kind = found
                origin: int | None = idx
            else:
                origin = None
                kind, parts = self._rebuild(chat, m)
            if groups and groups[-1][0] == origin and groups[-1][1] == kind and origin is not None:
                groups[-1][2].extend(parts)
            else:
                groups.append((origin, kind, list(parts)))
        out: list[Any] = []
        for origin, kind, group in groups:
            if origin is not None:
                orig = self.originals[origin]
                if list(orig.parts) == group:
                    out.append(orig)
                else:
                    out.append(dataclasses.replace(orig, parts=group))
            elif kind == "response":
                out.append(m.ModelResponse(parts=group))
            else:
                out.append(m.ModelRequest(parts=group))
        return out

    def _rebuild(self, chat: Message, m: Any) -> tuple[str, tuple[Any, ...]]:
        role = chat.get("role")
        text = content_text(chat.get("content"))
        if role == "tool":
            tid = result_id(chat)
            return "request", (
                m.ToolReturnPart(
                    tool_name=self._tool_names.get(tid, ""), content=text, tool_call_id=tid
                ),
            )
        if role == "assistant":
            parts: list[Any] = [m.TextPart(content=text)] if text else []
            for tc in tool_calls(chat):
                call = self._calls.get(call_id(tc))
                if call is not None:
                    parts.append(call)
            return "response", tuple(parts)
        if role == "system":
            return "request", (m.SystemPromptPart(content=text),)
        return "request", (m.UserPromptPart(content=text),)


def _tool_schemas(request_context: Any) -> list[dict[str, Any]] | None:
    params = getattr(request_context, "model_request_parameters", None)
    defs = [
        *(getattr(params, "function_tools", None) or []),
        *(getattr(params, "output_tools", None) or []),
    ]
    out = [function_tool(d.name, d.description or "", d.parameters_json_schema) for d in defs]
    return out or None


def history_processor(session: Session | Any, **options: Any) -> Callable[[list[Any]], list[Any]]:
    """A pydantic-ai history processor preparing every request under ``session``.

    For ``Agent(history_processors=[...])`` (older pydantic-ai) or
    ``capabilities=[ProcessHistory(...)]``. It knows one conversation; prefer
    :class:`ContextPolicy`, which also handles tool results, overflow errors and recall.
    """
    sess = as_session(session, **options)

    def process(messages: list[Any]) -> list[Any]:
        conv = MessageMap(messages)
        return conv.to_model(sess.prepare(conv.messages))

    return process


def _capability_base() -> Any:
    return require("pydantic_ai.capabilities", "pydantic_ai").AbstractCapability


def _input_tokens(response: Any) -> int | None:
    tokens = getattr(getattr(response, "usage", None), "input_tokens", None)
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def _make_capability() -> type:
    pai = _pai()
    base = _capability_base()

    class ContextPolicy(base):  # type: ignore[misc,valid-type]
        """ctxpolicy as a pydantic-ai capability (see the module docstring)."""

        def __init__(
            self,
            policy: Any,
            *,
            agent: str = "default",
            recall: bool = True,
            max_sessions: int = MAX_SESSIONS,
            **session_options: Any,
        ) -> None:
            resolved = resolve_policy(policy, agent, who="ContextPolicy")
            #: sessions by pydantic-ai conversation id, stored as "<agent>/<id>"
            self.sessions = SessionPool(resolved, max_sessions=max_sessions, **session_options)
            self.recall = recall
            self.steps = CallSteps(UsageOnly(_input_tokens))

        def session(self, conversation_id: str) -> Session:
            """The ctxpolicy session of a pydantic-ai conversation id."""
            return self.sessions.get(_conversation(conversation_id))

        def held(self, conversation_id: str) -> contextlib.AbstractContextManager[Session]:
            """The session of a conversation id, in use for the block (a tool's step)."""
            return self.sessions.held(_conversation(conversation_id))

        def _held(self, ctx: Any) -> contextlib.AbstractAsyncContextManager[Session]:
            """The run's session, in use for a hook's step (opened off the loop)."""
            return self.sessions.aheld(_conversation(ctx.conversation_id))

        @classmethod
        def get_serialization_name(cls) -> str | None:
            return None

        async def prepare_model_request(self, ctx: Any, request_context: Any) -> Any:
            async with self._held(ctx) as sess:
                conv = MessageMap(request_context.messages)
                tools = _tool_schemas(request_context)
                prepared = await self.steps.abefore_model(sess, conv.messages, tools)
            request_context.messages = conv.to_model(prepared)
            return request_context

        async def after_model_request(
            self, ctx: Any, *, request_context: Any, response: Any
        ) -> Any:
            async with self._held(ctx) as sess:
                await self.steps.adone(sess, response)
            return response

        async def on_model_request_error(
            self, ctx: Any, *, request_context: Any, error: Exception
        ) -> Any:
            # an overflow: the next attempt's prepare_model_request runs on_error
            async with self._held(ctx) as sess:
                deferred = self.steps.defer(sess, error)
            if not deferred:
                raise error
            raise pai.exceptions.RetryModelRequest()

        async def after_tool_execute(
            self, ctx: Any, *, call: Any, tool_def: Any, args: Any, result: Any
        ) -> Any:
            from ctxpolicy.snapshots.recall import RECALL_TOOL, SEARCH_TOOL

            if call.tool_name in (RECALL_TOOL, SEARCH_TOOL):
                return result  # a recall answer is bounded already, never snapshotted again
            async with self._held(ctx) as sess:
                return await off_loop(
                    sess.add_tool_result,
                    new_call(call.tool_call_id, call.tool_name, call.args_as_json_str()),
                    result if isinstance(result, str) else _result_text(result),
                )

        def get_toolset(self) -> Any:
            if not self.recall:
                return None
            return recall_toolset(self.held)

    return ContextPolicy


def _conversation(conversation_id: Any) -> str:
    if not conversation_id:
        raise ValueError("the run has no conversation_id")
    return str(conversation_id)


def _result_text(result: Any) -> Any:
    dump = getattr(result, "model_dump", None)
    if callable(dump):
        result = dump(mode="json")
    if isinstance(result, (dict, list)):
        return result
    try:
        return json.loads(json.dumps(result, default=str))
    except (TypeError, ValueError):
        return str(result)


def recall_toolset(
    held: Callable[[str], contextlib.AbstractContextManager[Session]],
) -> Any:
    """A ``FunctionToolset`` of ``ctx_recall`` and ``ctx_search`` for the run's
    conversation; ``held(conversation_id)`` gives its session, in use for the answer
    (:meth:`ContextPolicy.held`)."""
    pai = _pai()
    from ctxpolicy.snapshots.recall import recall_tools

    tools = []
    for schema in recall_tools():
        fn = schema["function"]

        def make(name: str) -> Callable[..., str]:
            def call(ctx: Any, **arguments: Any) -> str:
                with held(ctx.conversation_id) as session:
                    return session.recall_tool()[1](name, arguments)

            return call

        tools.append(
            pai.Tool.from_schema(
                make(fn["name"]), fn["name"], fn["description"], fn["parameters"], takes_ctx=True
            )
        )
    return require("pydantic_ai.toolsets", "pydantic_ai").FunctionToolset(tools)


def __getattr__(name: str) -> Any:
    if name == "ContextPolicy":
        cls = _make_capability()
        globals()["ContextPolicy"] = cls
        return cls
    raise AttributeError(name)
