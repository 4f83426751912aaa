"""LangChain / LangGraph adapter (extra ``langchain``).

``create_agent`` (langchain 1.x)::

    from langchain.agents import create_agent
    from ctxpolicy.integrations.langchain import CtxPolicyMiddleware

    agent = create_agent(model, tools, system_prompt=SYSTEM,
                         middleware=[CtxPolicyMiddleware("policies/agents.yaml", agent="coding_agent")])

* ``wrap_model_call`` — the messages the model receives are ``session.prepare``\\ d
  (tool schemas counted); the graph state keeps the full history, so nothing is
  lost and the session's sticky decisions keep the sent prefix stable. A provider
  context-overflow error runs the ``on_overflow`` layer and retries (bounded).
* ``wrap_tool_call`` — every tool result goes through ``session.add_tool_result``
  (preprocessed, snapshotted, referenced) before it enters the state.

LangGraph ``pre_model_hook`` (``create_react_agent``)::

    hook = pre_model_hook("policies/agents.yaml", agent="coding_agent")
    graph = create_react_agent(model, tools, pre_model_hook=hook)

returns ``{"llm_input_messages": [...]}`` — the prepared messages, state untouched.

Conversion (:func:`to_openai` / :class:`LangChainConversation`): ``SystemMessage`` →
system, ``HumanMessage`` → user, ``AIMessage`` with ``tool_calls`` → assistant with
``tool_calls``, ``ToolMessage`` → tool. The engine groups an ``AIMessage`` and the
``ToolMessage``\\ s answering it into one unit, so a tool call is never separated from
its result (the bug of langchain#34282, #38352, #33245). Messages kept unchanged are
the original objects (ids, ``response_metadata``, ``additional_kwargs``); a rewritten
tool result is the original ``ToolMessage`` with new content; a summary is a
``HumanMessage``; the ledger is appended to the system message.

One session per conversation: the middleware keys sessions by the LangGraph
``thread_id`` (``config["configurable"]["thread_id"]``; ``"default"`` without one).
The session state of a thread lives in the policy's state store (``state:``; by
default a sqlite file beside the snapshots, ``postgres`` for a fleet), so the
in-process LRU of sessions is only a cache: an evicted thread, a restarted worker or
another worker resumes it exactly (docs/state.md).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation import content_text, message_fingerprint
from ctxpolicy.integrations._common import Message, json_args, parse_args, require

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.components import StateStore
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = [
    "CtxPolicyMiddleware",  # noqa: F822 - built lazily by __getattr__
    "LangChainConversation",
    "SessionPool",
    "pre_model_hook",
    "to_openai",
]

_MAX_SESSIONS = 256


def _lc_messages() -> Any:
    return require("langchain_core.messages", "langchain")


# --------------------------------------------------------------------------- conversion


def _text_of(content: Any) -> Any:
    """LangChain content (string or blocks) as OpenAI content."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts: list[Any] = []
        for b in content:
            if isinstance(b, str):
                parts.append({"type": "text", "text": b})
            elif isinstance(b, Mapping):
                btype = b.get("type")
                if btype == "text" or "text" in b:
                    parts.append({"type": "text", "text": str(b.get("text", ""))})
                elif btype in ("image_url", "image"):
                    parts.append(
                        dict(b)
                        if btype == "image_url"
                        else {"type": "image_url", "image_url": {"url": ""}}
                    )
                elif btype in ("tool_use", "tool_call", "function_call"):
                    continue  # represented by tool_calls
                elif btype in ("thinking", "reasoning"):
                    parts.append(
                        {"type": "text", "text": str(b.get("thinking") or b.get("reasoning") or "")}
                    )
                else:
                    parts.append({"type": "text", "text": json.dumps(b, default=str)[:2000]})
        if all(p.get("type") == "text" for p in parts):
            return "\n".join(p["text"] for p in parts)
        return parts
    return str(content)


def message_to_openai(msg: Any) -> Message:
    """One ``BaseMessage`` as an OpenAI chat message."""
    mtype = getattr(msg, "type", None)
    if mtype == "system":
        return {"role": "system", "content": _text_of(msg.content)}
    if mtype == "human":
        return {"role": "user", "content": _text_of(msg.content)}
    if mtype == "ai":
        out: Message = {"role": "assistant", "content": _text_of(msg.content) or None}
        calls = [
            {
                "id": str(tc.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(tc.get("name", "")),
                    "arguments": json_args(tc.get("args")),
                },
            }
            for tc in getattr(msg, "tool_calls", None) or []
        ]
        if calls:
            out["tool_calls"] = calls
        return out
    if mtype == "tool":
        content = msg.content
        text = (
            content
            if isinstance(content, str)
            else content_text(content) or json.dumps(content, default=str)
        )
        return {"role": "tool", "tool_call_id": str(msg.tool_call_id), "content": text}
    role = getattr(msg, "role", None) or "user"
    return {
        "role": role if role in ("system", "user", "assistant") else "user",
        "content": _text_of(msg.content),
    }


def to_openai(messages: Sequence[Any]) -> list[Message]:
    """A ``BaseMessage`` list as OpenAI chat messages."""
    return [message_to_openai(m) for m in messages]


class LangChainConversation:
    """BaseMessages as OpenAI messages for the engine, and the prepared list back."""

    def __init__(self, messages: Sequence[Any], system_message: Any = None) -> None:
        self.system_message = system_message
        self.originals = list(messages)
        self.messages: list[Message] = []
        self._by_fp: dict[str, list[Any]] = {}
        self._tool_msgs: dict[str, Any] = {}
        self._ai_by_calls: dict[tuple[str, ...], Any] = {}
        items = ([system_message] if system_message is not None else []) + self.originals
        for m in items:
            d = message_to_openai(m)
            self.messages.append(d)
            self._by_fp.setdefault(message_fingerprint(d), []).append(m)
            if d["role"] == "tool":
                self._tool_msgs[d["tool_call_id"]] = m
            elif d.get("tool_calls"):
                self._ai_by_calls[tuple(tc["id"] for tc in d["tool_calls"])] = m

    def back(self, prepared: Sequence[Mapping[str, Any]]) -> tuple[Any, list[Any]]:
        """``(system_message, messages)`` for a prepared list."""
        lc = _lc_messages()
        system_parts: list[str] = []
        system_msg = None
        out: list[Any] = []
        used: dict[str, int] = {}
        for m in prepared:
            fp = message_fingerprint(m)
            cands = self._by_fp.get(fp)
            orig = None
            if cands:
                n = used.get(fp, 0)
                used[fp] = n + 1
                orig = cands[min(n, len(cands) - 1)]
            role = m.get("role")
            if role in ("system", "developer"):
                if orig is not None and orig is self.system_message and system_msg is None:
                    system_msg = orig
                else:
                    system_parts.append(content_text(m.get("content")))
                continue
            if orig is not None:
                out.append(orig)
                continue
            out.append(self._rebuild(m, lc))
        if system_parts:
            extra = "\n\n".join(p for p in system_parts if p)
            if system_msg is None:
                system_msg = lc.SystemMessage(content=extra)
            elif isinstance(system_msg.content, str):
                system_msg = system_msg.model_copy(
                    update={"content": f"{system_msg.content}\n\n{extra}"}
                )
            else:
                system_msg = system_msg.model_copy(
                    update={"content": [*system_msg.content, {"type": "text", "text": extra}]}
                )
        return system_msg, out

    def _rebuild(self, m: Mapping[str, Any], lc: Any) -> Any:
        role = m.get("role")
        text = content_text(m.get("content"))
        if role == "tool":
            tid = str(m.get("tool_call_id", ""))
            orig = self._tool_msgs.get(tid)
            if orig is not None:
                return orig.model_copy(update={"content": text})
            return lc.ToolMessage(content=text, tool_call_id=tid)
        if role == "assistant":
            ids = tuple(str(tc.get("id", "")) for tc in m.get("tool_calls") or [])
            orig = self._ai_by_calls.get(ids) if ids else None
            if orig is not None:
                return orig.model_copy(update={"content": text})
            calls = [
                {
                    "id": str(tc.get("id", "")),
                    "name": (tc.get("function") or {}).get("name", ""),
                    "args": parse_args((tc.get("function") or {}).get("arguments")),
                    "type": "tool_call",
                }
                for tc in m.get("tool_calls") or []
            ]
            return lc.AIMessage(content=text, tool_calls=calls)
        content = m.get("content")
        return lc.HumanMessage(content=content if isinstance(content, list) else text)


# --------------------------------------------------------------------------- sessions


class SessionPool:
    """Sessions by conversation id, all under one policy, sharing one state store.

    The pool keeps at most ``max_sessions`` sessions in memory (LRU); the state of
    every conversation is in the store, so a session evicted here is resumed from it
    when its conversation comes back. ``state_store=`` overrides the policy's store.
    """

    def __init__(
        self,
        policy: Policy | str | Any,
        *,
        agent: str = "default",
        session: Session | None = None,
        max_sessions: int = _MAX_SESSIONS,
        **session_options: Any,
    ) -> None:
        from ctxpolicy.engine import Session
        from ctxpolicy.policy.models import Policy

        if isinstance(policy, Session):
            session, policy = policy, policy.policy
        if not isinstance(policy, Policy):
            from ctxpolicy import load_policy

            policy = load_policy(policy, agent=agent)
        self.policy: Policy = policy
        self._fixed = session
        self._options = session_options
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._max = max_sessions
        self._store: StateStore | None = session_options.pop("state_store", None)
        self._owns_store = False

    @property
    def state_store(self) -> StateStore | None:
        """The store the pool's sessions load from and save to (opened on first use)."""
        if self._store is None and not self._owns_store:
            from ctxpolicy.components import StateStoreError
            from ctxpolicy.state import open_state_store

            self._owns_store = True
            try:
                self._store = open_state_store(self.policy, env=self._options.get("env"))
            except (StateStoreError, ValueError):
                self._store = None  # each session reports `state.unavailable` itself
        return self._store

    def close(self) -> None:
        """Close the state store the pool opened."""
        if self._owns_store and self._store is not None:
            self._store.close()
        self._store = None

    def get(self, conv_id: str | None = None) -> Session:
        if self._fixed is not None:
            return self._fixed
        from ctxpolicy.engine import Session

        key = conv_id or "default"
        s = self._sessions.get(key)
        if s is None:
            s = Session(self.policy, conv_id=key, state_store=self.state_store, **self._options)
            self._sessions[key] = s
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(key)
        return s


def _thread_id() -> str | None:
    try:
        from langgraph.config import get_config

        cfg = get_config()
    except Exception:
        return None
    tid = (cfg.get("configurable") or {}).get("thread_id")
    return str(tid) if tid is not None else None


def _tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    try:
        from langchain_core.utils.function_calling import convert_to_openai_tool
    except ImportError:  # pragma: no cover
        return None
    out = []
    for t in tools:
        try:
            out.append(convert_to_openai_tool(t))
        except Exception:  # provider built-in tools (dicts of other shapes)
            if isinstance(t, Mapping):
                out.append(dict(t))
    return out


def _input_tokens(response: Any) -> int | None:
    result = getattr(response, "result", None)
    msgs = result if isinstance(result, list) else [response]
    for m in reversed(msgs):
        usage = getattr(m, "usage_metadata", None)
        if isinstance(usage, Mapping) and isinstance(usage.get("input_tokens"), int):
            return int(usage["input_tokens"])
    return None


# --------------------------------------------------------------------------- middleware


def _middleware_base() -> type:
    mod = require("langchain.agents.middleware", "langchain")
    return mod.AgentMiddleware


def _make_middleware_class() -> type:
    base = _middleware_base()

    class CtxPolicyMiddleware(base):  # type: ignore[misc, valid-type]
        """Applies a ctxpolicy policy to every model call of a ``create_agent`` agent.

        ``policy`` is a policy file path (with ``agent``), a resolved ``Policy`` or a
        ``Session`` (then every conversation shares it). ``preprocess_tools=False``
        leaves tool results untouched.
        """

        def __init__(
            self,
            policy: Policy | str | Any,
            *,
            agent: str = "default",
            preprocess_tools: bool = True,
            record_usage: bool = True,
            **session_options: Any,
        ) -> None:
            super().__init__()
            self.sessions = SessionPool(policy, agent=agent, **session_options)
            self.preprocess_tools = preprocess_tools
            self.record_usage = record_usage

        @property
        def name(self) -> str:
            return "CtxPolicyMiddleware"

        def session(self, conv_id: str | None = None) -> Session:
            """The session of a conversation (the current thread's by default)."""
            return self.sessions.get(conv_id or _thread_id())

        # -- model calls ------------------------------------------------------------
        def _prepare(self, request: Any) -> tuple[Session, LangChainConversation, Any]:
            session = self.session()
            conv = LangChainConversation(request.messages, request.system_message)
            return session, conv, _tool_schemas(request.tools)

        def _override(
            self, request: Any, conv: LangChainConversation, prepared: list[Message]
        ) -> Any:
            system, msgs = conv.back(prepared)
            return request.override(messages=msgs, system_message=system)

        def _usage(self, session: Session, response: Any) -> None:
            if self.record_usage:
                n = _input_tokens(response)
                if n:
                    session.record_usage(n)

        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            session, conv, tools = self._prepare(request)
            prepared = session.prepare(conv.messages, tools=tools)
            while True:
                try:
                    response = handler(self._override(request, conv, prepared))
                except Exception as exc:
                    retry = session.on_error(exc, conv.messages, tools)
                    if retry is None:
                        raise
                    prepared = retry
                    continue
                self._usage(session, response)
                return response

        async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            session, conv, tools = self._prepare(request)
            prepared = session.prepare(conv.messages, tools=tools)
            while True:
                try:
                    response = await handler(self._override(request, conv, prepared))
                except Exception as exc:
                    retry = session.on_error(exc, conv.messages, tools)
                    if retry is None:
                        raise
                    prepared = retry
                    continue
                self._usage(session, response)
                return response

        # -- tool calls -------------------------------------------------------------
        def _post_tool(self, request: Any, result: Any) -> Any:
            if not self.preprocess_tools or getattr(result, "type", None) != "tool":
                return result  # a Command, or preprocessing off
            # errors are preprocessed too: a long traceback is a tool result like any other
            tc = request.tool_call
            call = {"id": tc.get("id"), "name": tc.get("name", ""), "arguments": tc.get("args")}
            content = result.content
            raw = (
                content
                if isinstance(content, str)
                else content_text(content) or json.dumps(content, default=str)
            )
            text = self.session().add_tool_result(call, raw)
            if text == content:
                return result
            return result.model_copy(update={"content": text})

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return self._post_tool(request, handler(request))

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return self._post_tool(request, await handler(request))

    return CtxPolicyMiddleware


_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    # ``CtxPolicyMiddleware`` subclasses langchain's AgentMiddleware, so it is built on
    # first access: importing this module never needs langchain.
    global _CLASS
    if name == "CtxPolicyMiddleware":
        if _CLASS is None:
            _CLASS = _make_middleware_class()
        return _CLASS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- LangGraph hook


def pre_model_hook(
    policy: Policy | str | Any,
    *,
    agent: str = "default",
    **session_options: Any,
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A LangGraph ``pre_model_hook``: ``state -> {"llm_input_messages": prepared}``.

    The graph state is not modified (the full history stays in ``messages``); the
    model sees the prepared list. Sessions are kept per ``thread_id``.
    """
    _lc_messages()
    pool = SessionPool(policy, agent=agent, **session_options)

    def hook(state: Mapping[str, Any]) -> dict[str, Any]:
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        session = pool.get(_thread_id())
        conv = LangChainConversation(messages)
        system, msgs = conv.back(session.prepare(conv.messages))
        return {"llm_input_messages": ([system] if system is not None else []) + msgs}

    hook.sessions = pool  # type: ignore[attr-defined]
    return hook
