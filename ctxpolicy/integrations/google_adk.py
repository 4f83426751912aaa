"""Google ADK adapter (extra ``google_adk``): an ADK plugin.

::

    from google.adk.agents import LlmAgent
    from google.adk.runners import InMemoryRunner
    from ctxpolicy.integrations.google_adk import ContextPolicyPlugin

    plugin = ContextPolicyPlugin("policies/agents.yaml", agent="coding_agent")
    agent = LlmAgent(name="coder", model=model, tools=[read_file, *plugin.recall_tools()])
    runner = InMemoryRunner(agent=agent, plugins=[plugin])

ADK rebuilds the model request from the session's events before every model call, so
the plugin changes the request only, never the events:

* ``before_model_callback`` — ``llm_request.contents`` (and the system instruction)
  become OpenAI messages, ``session.prepare`` budgets them (the request's tool
  declarations counted), and the prepared view replaces ``llm_request.contents``;
  unchanged contents are the original ``types.Content`` objects;
* ``after_tool_callback`` — every tool result goes through ``session.add_tool_result``
  (preprocessed, snapshotted, referenced); the shortened text replaces the result
  (``{"result": text}``), so the event ADK stores is the short one;
* ``on_model_error_callback`` — a provider's context-overflow error (ADK surfaces the
  model's exception here) runs ``session.on_error`` and calls the agent's own model
  again with the compacted request, at most the policy's ``on_overflow.retries``
  times; then :class:`ctxpolicy.ContextOverflowError` propagates. Any other error is
  left to ADK;
* ``recall_tools()`` — ``ctx_recall`` and ``ctx_search`` as ADK ``FunctionTool``\\ s,
  answered from the calling conversation's snapshots only.

Conversations: ADK's own session — stored as ``"<policy agent>/<app>/<user>/<session
id>/<ADK agent>"`` (each part percent-encoded: injective whatever the ids hold) — so two
users, two sessions or two agents of one session never share a ctxpolicy
conversation. ADK always has a session; there is no shared default.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ctxpolicy.calls.driver import CallSteps, UsageOnly, off_loop
from ctxpolicy.calls.pool import SessionPool, resolve_policy
from ctxpolicy.conversation import content_text, message_fingerprint
from ctxpolicy.conversation import messages as chat
from ctxpolicy.integrations._common import (
    Message,
    call_args,
    conversation_key,
    lazy_class,
    recall_docs,
    require,
)

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

    #: built on first use (it subclasses ADK's ``BasePlugin``)
    ContextPolicyPlugin: type[Any]

__all__ = ["ContextPolicyPlugin", "from_openai", "response_text", "to_openai"]

#: sessions kept per plugin (least recently used conversations are closed)
MAX_SESSIONS = 1024
_RECALL_NAMES = frozenset({"ctx_recall", "ctx_search"})


def _types() -> Any:
    return require("google.genai.types", "google_adk")


def response_text(response: Any) -> str:
    """The text of a function response: its ``result`` when that is all it holds (what
    ADK makes of a tool that returns a string), else the response as JSON."""
    if isinstance(response, str):  # a tool's own return value, before ADK wraps it
        return response
    if isinstance(response, Mapping) and set(response) == {"result"}:
        value = response["result"]
        if isinstance(value, str):
            return value
        response = value
    if response is None:
        return ""
    return json.dumps(response, ensure_ascii=False, default=str)


def _system_text(instruction: Any) -> str:
    if instruction is None:
        return ""
    if isinstance(instruction, str):
        return instruction
    parts = getattr(instruction, "parts", None)
    if parts is not None:
        return "\n".join(p.text for p in parts if getattr(p, "text", None))
    if isinstance(instruction, Sequence):
        return "\n".join(_system_text(i) for i in instruction)
    return str(instruction)


def to_openai(contents: Sequence[Any], system_instruction: Any = None) -> list[Message]:
    """ADK contents (``google.genai.types.Content``) as OpenAI chat messages: a model
    turn is an assistant message with its function calls as ``tool_calls``; each
    function response a tool message (a user turn's text follows its responses)."""
    out: list[Message] = []
    system = _system_text(system_instruction)
    if system:
        out.append({"role": "system", "content": system})
    for i, c in enumerate(contents):
        parts = list(getattr(c, "parts", None) or [])
        texts = [p.text for p in parts if getattr(p, "text", None) and not p.thought]
        if getattr(c, "role", None) == "model":
            calls = []
            for j, p in enumerate(parts):
                fc = getattr(p, "function_call", None)
                if fc is not None:
                    args = json.dumps(fc.args or {}, ensure_ascii=False, default=str)
                    calls.append(chat.new_call(fc.id or f"adk_{i}_{j}", fc.name or "", args))
            msg: Message = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        answered = False
        for j, p in enumerate(parts):
            fr = getattr(p, "function_response", None)
            if fr is not None:
                answered = True
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": fr.id or f"adk_{i - 1}_{j}",
                        "content": response_text(fr.response),
                    }
                )
        if texts or not answered:
            out.append({"role": "user", "content": "\n".join(texts)})
    return out


def from_openai(prepared: Sequence[Mapping[str, Any]], originals: Sequence[Any] = ()) -> list[Any]:
    """OpenAI messages back as ADK contents; unchanged turns and function responses
    are the original objects, consecutive turns of one role are merged."""
    types = _types()
    by_fp: dict[str, list[Any]] = {}
    responses: dict[str, Any] = {}
    names: dict[str, str] = {}
    for c in originals:
        for p in getattr(c, "parts", None) or []:
            fr = getattr(p, "function_response", None)
            if fr is not None and fr.id:
                responses[str(fr.id)] = p
            fc = getattr(p, "function_call", None)
            if fc is not None and fc.id:
                names[str(fc.id)] = fc.name or ""
        if getattr(c, "role", None) == "model" or not any(
            getattr(p, "function_response", None) for p in c.parts or []
        ):
            for d in to_openai([c]):
                by_fp.setdefault(message_fingerprint(d), []).append(c)
    out: list[Any] = []
    used: dict[str, int] = {}

    def add(role: str, parts: list[Any], original: Any = None) -> None:
        if out and out[-1].role == role:
            out[-1] = types.Content(role=role, parts=[*(out[-1].parts or []), *parts])
        else:
            out.append(original if original is not None else types.Content(role=role, parts=parts))

    for m in prepared:
        role = m.get("role")
        if role in ("system", "developer"):
            continue  # the system instruction is the request's config (see the plugin)
        text = content_text(m.get("content"))
        if role == "tool":
            tid = chat.result_id(m)
            orig = responses.get(tid)
            if orig is not None and response_text(orig.function_response.response) == text:
                add("user", [orig])
            else:
                add(
                    "user",
                    [
                        types.Part(
                            function_response=types.FunctionResponse(
                                id=tid, name=names.get(tid, ""), response={"result": text}
                            )
                        )
                    ],
                )
            continue
        kept = chat.nth_original(by_fp, used, message_fingerprint(m))
        if kept is not None:
            add(kept.role, list(kept.parts or []), kept)
            continue
        parts: list[Any] = [types.Part(text=text)] if text else []
        if role == "assistant":
            for tc in chat.tool_calls(m):
                call = types.FunctionCall(
                    id=chat.call_id(tc), name=chat.call_name(tc), args=call_args(tc)
                )
                parts.append(types.Part(function_call=call))
            add("model", parts or [types.Part(text="")])
        else:
            add("user", parts or [types.Part(text="")])
    return out


def _tool_schemas(llm_request: Any) -> list[dict[str, Any]] | None:
    """The request's function declarations as OpenAI tool schemas (for counting)."""
    out: list[dict[str, Any]] = []
    for t in getattr(llm_request.config, "tools", None) or []:
        for d in getattr(t, "function_declarations", None) or []:
            schema = d.parameters_json_schema
            if schema is None and d.parameters is not None:
                schema = d.parameters.model_dump(exclude_none=True, mode="json")
            parameters = schema or {"type": "object", "properties": {}}
            out.append(chat.function_tool(d.name or "", d.description or "", parameters))
    return out or None


def _prompt_tokens(llm_response: Any) -> int | None:
    usage = getattr(llm_response, "usage_metadata", None)
    tokens = getattr(usage, "prompt_token_count", None)
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def _ids(ctx: Any) -> tuple[str, str, str, str]:
    s = ctx.session
    return str(s.app_name), str(s.user_id), str(s.id), str(ctx.agent_name)


def _make_class() -> type:
    base = require("google.adk.plugins.base_plugin", "google_adk").BasePlugin

    class ContextPolicyPlugin(base):  # type: ignore[misc,valid-type]
        """ctxpolicy as an ADK plugin (see the module docstring)."""

        def __init__(
            self,
            policy: Policy | str | Any,
            *,
            agent: str = "default",
            name: str = "ctxpolicy",
            preprocess_tools: bool = True,
            **session_options: Any,
        ) -> None:
            super().__init__(name=name)
            self.policy: Policy = resolve_policy(
                policy, agent, who="ContextPolicyPlugin", per="ADK session"
            )
            self.preprocess_tools = preprocess_tools
            self._options = session_options
            #: sessions by ADK conversation, stored as "<policy agent>/<conversation>"
            self.sessions = SessionPool(self.policy, max_sessions=MAX_SESSIONS, **session_options)
            self.sessions.on_close = self._forget
            self.steps = CallSteps(UsageOnly(_prompt_tokens))
            # per conversation: the messages of its last model call, for on_error
            self._last: dict[str, tuple[list[Message], list[dict[str, Any]] | None]] = {}

        def _forget(self, session: Session) -> None:
            self._last.pop(session.conv_id, None)
            self.steps.forget(session)

        # -- identity ----------------------------------------------------------------
        def _conversation(
            self, app_name: str, user_id: str, session_id: str, agent_name: str
        ) -> str:
            for part in (app_name, user_id, session_id, agent_name):
                if not isinstance(part, str) or not part:
                    raise ValueError(f"an ADK session id part must be a non-empty string: {part!r}")
            return "/".join(quote(p, safe="") for p in (app_name, user_id, session_id, agent_name))

        def key(self, app_name: str, user_id: str, session_id: str, agent_name: str) -> str:
            """The stored conversation of one ADK agent in one ADK session."""
            conv = self._conversation(app_name, user_id, session_id, agent_name)
            return conversation_key(self.policy.agent, conv)

        def session_for(
            self, app_name: str, user_id: str, session_id: str, agent_name: str = "agent"
        ) -> Session:
            """The ctxpolicy session of an ADK agent in an ADK session."""
            return self.sessions.get(self._conversation(app_name, user_id, session_id, agent_name))

        def session(self, ctx: Any) -> Session:
            """The session of an ADK callback or tool context."""
            return self.session_for(*_ids(ctx))

        def _held(self, ctx: Any) -> contextlib.AbstractAsyncContextManager[Session]:
            """The session of a callback's conversation, in use for the callback (other
            conversations opened meanwhile never evict it); opened off the loop."""
            return self.sessions.aheld(self._conversation(*_ids(ctx)))

        # -- callbacks (the engine runs in a worker thread, never on ADK's loop) -------
        async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> Any:
            async with self._held(callback_context) as sess:
                config = llm_request.config
                instruction = getattr(config, "system_instruction", None)
                messages = to_openai(llm_request.contents, instruction)
                tools = _tool_schemas(llm_request)
                self._last[sess.conv_id] = (messages, tools)
                prepared = await self.steps.abefore_model(sess, messages, tools)
            self._show(llm_request, prepared, instruction)
            return None

        def _show(self, llm_request: Any, prepared: list[Message], instruction: Any) -> None:
            llm_request.contents = from_openai(prepared, llm_request.contents)
            system = [content_text(m.get("content")) for m in prepared if m["role"] == "system"]
            original = _system_text(instruction)
            text = "\n\n".join(s for s in system if s)
            if text != original:  # the ledger or a handover joins the instruction
                llm_request.config.system_instruction = text or None

        async def after_model_callback(self, *, callback_context: Any, llm_response: Any) -> Any:
            async with self._held(callback_context) as sess:
                await self.steps.adone(sess, llm_response)
                content = getattr(llm_response, "content", None)
                last = self._last.get(sess.conv_id)
                if sess.recorder is not None and content is not None and last is not None:
                    reply = to_openai([content])
                    if reply and "tool_calls" not in reply[0] and not llm_response.partial:
                        # the final answer, which no later model call may pass to prepare
                        await off_loop(sess.recorder.record, [*last[0], *reply])
            return None

        async def on_model_error_callback(
            self, *, callback_context: Any, llm_request: Any, error: Exception
        ) -> Any:
            # held for every retry: on_error, the model again, until it answers
            async with self._held(callback_context) as sess:
                return await self._retry(sess, callback_context, llm_request, error)

        async def _retry(
            self, sess: Session, callback_context: Any, llm_request: Any, error: Exception
        ) -> Any:
            last = self._last.get(sess.conv_id)
            if last is None:
                return None
            messages, tools = last
            exc: Exception = error
            model = await self._model(callback_context)
            instruction = getattr(llm_request.config, "system_instruction", None)
            while True:
                # raises ContextOverflowError after the policy's retries
                retry = await self.steps.afailed(sess, exc, messages, tools)
                if retry is None:
                    return None if exc is error else _reraise(exc)
                request = llm_request.model_copy(deep=False)
                request.config = llm_request.config.model_copy()
                self._show(request, retry, instruction)
                try:
                    final = None
                    async for resp in model.generate_content_async(request, stream=False):
                        final = resp
                    return final
                except Exception as again:
                    exc = again

        async def _model(self, ctx: Any) -> Any:
            agent = ctx._invocation_context.agent
            resolve = getattr(agent, "canonical_model_async", None)
            if resolve is not None:
                return await resolve(ctx)
            return agent.canonical_model

        async def after_tool_callback(
            self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any
        ) -> Any:
            if not self.preprocess_tools or getattr(tool, "name", None) in _RECALL_NAMES:
                return None
            raw = response_text(result)
            call = {
                "id": tool_context.function_call_id,
                "name": getattr(tool, "name", "") or "",
                "arguments": tool_args,
            }
            async with self._held(tool_context) as sess:
                text = await off_loop(sess.add_tool_result, call, raw)
            return None if text == raw else {"result": text}

        async def close(self) -> None:
            await off_loop(self.sessions.close)
            self._last.clear()

        # -- recall ------------------------------------------------------------------
        def recall_tools(self) -> list[Any]:
            """``ctx_recall`` and ``ctx_search`` as ADK tools (the calling conversation)."""
            from google.adk.tools import FunctionTool

            docs = recall_docs()
            owner = self

            def answer(ids: tuple[str, str, str, str], name: str, args: dict[str, Any]) -> str:
                clean = {k: v for k, v in args.items() if v not in (None, "")}
                with owner.sessions.held(owner._conversation(*ids)) as sess:
                    return sess.recall_tool()[1](name, clean)

            async def ctx_recall(
                ref: str, tool_context: Any, lines: str = "", grep: str = ""
            ) -> str:
                args = {"ref": ref, "lines": lines, "grep": grep}
                return await off_loop(answer, _ids(tool_context), "ctx_recall", args)

            async def ctx_search(pattern: str, tool_context: Any, regex: bool = False) -> str:
                args = {"pattern": pattern, "regex": regex}
                return await off_loop(answer, _ids(tool_context), "ctx_search", args)

            from google.adk.tools import ToolContext

            ctx_recall.__annotations__ = {
                "ref": str,
                "tool_context": ToolContext,
                "lines": str,
                "grep": str,
                "return": str,
            }
            ctx_search.__annotations__ = {
                "pattern": str,
                "tool_context": ToolContext,
                "regex": bool,
                "return": str,
            }
            ctx_recall.__doc__ = docs["ctx_recall"]
            ctx_search.__doc__ = docs["ctx_search"]
            return [FunctionTool(ctx_recall), FunctionTool(ctx_search)]

    return ContextPolicyPlugin


def _reraise(exc: Exception) -> Any:
    raise exc


_LAZY = lazy_class(__name__, "ContextPolicyPlugin", _make_class)


def __getattr__(name: str) -> Any:
    # the class subclasses ADK's BasePlugin: built on first access
    return _LAZY(name)
