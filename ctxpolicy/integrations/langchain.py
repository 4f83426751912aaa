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

One session per agent and conversation: the middleware keys sessions by the
policy's agent name and the LangGraph ``thread_id``
(``config["configurable"]["thread_id"]``); the stored conversation is
``"<agent>/<thread_id>"`` (:func:`~ctxpolicy.integrations._common.conversation_key`),
so a coder and an analyst on one thread never share a state or a snapshot folder.
The session state of a thread lives in the policy's state store (``state:``; by
default a sqlite file beside the snapshots, ``postgres`` for a fleet), so the
in-process LRU of sessions is only a cache: an evicted thread, a restarted worker or
another worker resumes it exactly (docs/state.md).

**No ``thread_id``: a fresh, private conversation.** An invocation without a
``thread_id`` gets a session of its own (random id, state in memory only, its own
snapshot folder) for the model and tool calls of that invocation, and nothing of it
is stored for anyone else to resume. Pass a ``thread_id`` to resume a conversation.

Recall: ``CtxPolicyMiddleware(..., recall=True)`` adds the ``ctx_recall`` and
``ctx_search`` tools to the agent (LangChain tools answered from the current
conversation's snapshots only); :func:`recall_tools` builds them for other graphs.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from ctxpolicy.calls.driver import CallDriver, UsageOnly, off_loop
from ctxpolicy.calls.pool import SessionPool as _Pool
from ctxpolicy.calls.pool import resolve_policy
from ctxpolicy.conversation import content_text, message_fingerprint
from ctxpolicy.conversation import messages as chat
from ctxpolicy.integrations._common import (
    Message,
    conversation_key,
    json_args,
    lazy_class,
    parse_args,
    recall_docs,
    require,
)

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.components import StateStore
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = [
    "CtxPolicyMiddleware",  # noqa: F822 - built lazily by __getattr__
    "LangChainConversation",
    "SessionPool",
    "pre_model_hook",
    "recall_tools",
    "to_openai",
]

_MAX_SESSIONS = 256
#: the graph-state key (private: never read from the input) holding an invocation's
#: private conversation token when it has no ``thread_id``
RUN_KEY = "ctxpolicy_run"
_RECALL_NAMES = frozenset({"ctx_recall", "ctx_search"})


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
            chat.new_call(
                str(tc.get("id") or ""), str(tc.get("name", "")), json_args(tc.get("args"))
            )
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
                self._tool_msgs[chat.result_id(d)] = m
            elif d.get("tool_calls"):
                self._ai_by_calls[tuple(chat.call_id(tc) for tc in chat.tool_calls(d))] = m

    def back(self, prepared: Sequence[Mapping[str, Any]]) -> tuple[Any, list[Any]]:
        """``(system_message, messages)`` for a prepared list."""
        lc = _lc_messages()
        system_parts: list[str] = []
        system_msg = None
        out: list[Any] = []
        used: dict[str, int] = {}
        for m in prepared:
            orig = chat.nth_original(self._by_fp, used, message_fingerprint(m))
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
            tid = chat.result_id(m)
            orig = self._tool_msgs.get(tid)
            if orig is not None:
                return orig.model_copy(update={"content": text})
            return lc.ToolMessage(content=text, tool_call_id=tid)
        if role == "assistant":
            ids = tuple(chat.call_id(tc) for tc in chat.tool_calls(m))
            orig = self._ai_by_calls.get(ids) if ids else None
            if orig is not None:
                return orig.model_copy(update={"content": text})
            calls = [
                {
                    "id": chat.call_id(tc),
                    "name": chat.call_name(tc),
                    "args": parse_args(chat.call_arguments(tc)),
                    "type": "tool_call",
                }
                for tc in chat.tool_calls(m)
            ]
            return lc.AIMessage(content=text, tool_calls=calls)
        content = m.get("content")
        return lc.HumanMessage(content=content if isinstance(content, list) else text)


# --------------------------------------------------------------------------- sessions


class SessionPool(_Pool):
    """Sessions by thread id, all under one policy, sharing one state store.

    :class:`ctxpolicy.calls.SessionPool` with LangChain's defaults: at most
    ``max_sessions`` sessions in memory (LRU, closed on eviction); the state of every
    conversation is in the store, so a session evicted here is resumed from it when
    its thread comes back. ``state_store=`` overrides the policy's store; a
    ``Session`` as ``policy`` (or ``session=``) serves every call.
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

        if isinstance(policy, Session):
            session, policy = policy, policy.policy
        super().__init__(
            resolve_policy(policy, agent), max_sessions=max_sessions, **session_options
        )
        self._fixed = session

    @property
    def state_store(self) -> StateStore | None:  # type: ignore[override]
        """The store the pool's sessions load from and save to (opened on first use)."""
        return super().state_store()

    def key(self, conv_id: str) -> str:
        """The stored conversation id of thread ``conv_id`` under this pool's agent."""
        return conversation_key(self.policy.agent, conv_id)

    def get(
        self, conv_id: str | None = None, *, agent: str | None = None, tenant: str = ""
    ) -> Session:
        """The session of thread ``conv_id`` (stored as ``"<agent>/<conv_id>"``).

        ``None`` is a new private conversation on every call (never a shared default);
        use :meth:`private` to keep one private conversation across calls.
        """
        if self._fixed is not None:
            return self._fixed
        if conv_id is None or conv_id == "":
            return self.private(uuid.uuid4().hex, agent=agent)
        return super().get(str(conv_id), agent=agent, tenant=tenant)

    def private(self, token: str, *, agent: str | None = None) -> Session:
        """The private conversation of one invocation without a thread id.

        Its state is in memory only (no store, random conversation id, its own
        snapshot folder), so no other invocation, process or worker resumes it.
        """
        if self._fixed is not None:
            return self._fixed
        return super().private(token, agent=agent)


def _thread_id(config: Mapping[str, Any] | None = None) -> str | None:
    """The LangGraph ``thread_id`` of ``config`` (the current run's by default)."""
    if config is None:
        try:
            from langgraph.config import get_config

            config = get_config()
        except Exception:
            return None
    tid = (config.get("configurable") or {}).get("thread_id")
    return str(tid) if tid not in (None, "") else None


def _conversation_of(
    state: Any, config: Mapping[str, Any] | None = None
) -> tuple[str, bool] | None:
    """``(conversation, private)`` of the current call: its thread, else its
    invocation's private token; None when it has neither."""
    tid = _thread_id(config)
    if tid is not None:
        return tid, False
    token = state.get(RUN_KEY) if isinstance(state, Mapping) else None
    return (token, True) if isinstance(token, str) and token else None


SessionOf = Callable[[Any], "Session | contextlib.AbstractContextManager[Session | None] | None"]


def recall_tools(session_of: SessionOf) -> list[Any]:
    """``ctx_recall`` and ``ctx_search`` as LangChain tools.

    ``session_of(runtime)`` returns the session of the call (``runtime`` is the
    ``ToolRuntime`` LangChain injects: ``state``, ``config``), or a context manager
    giving it (the session is then held for the answer, like
    :meth:`~ctxpolicy.calls.SessionPool.held`); the answer comes from that
    conversation's snapshots only (:func:`ctxpolicy.recall.handle_tool_call`: bounded,
    never raises, never another conversation's data).
    """
    from langchain.tools import ToolRuntime
    from langchain_core.tools import StructuredTool

    def run(name: str, runtime: Any, args: dict[str, Any]) -> str:
        found = session_of(runtime)
        if not isinstance(found, contextlib.AbstractContextManager):
            found = contextlib.nullcontext(found)
        with found as session:
            if session is None:
                return "Error: no conversation is active for this call; nothing to recall."
            clean = {k: v for k, v in args.items() if v is not None}
            return session.recall_tool()[1](name, clean)

    def ctx_recall(
        ref: str, runtime: ToolRuntime, lines: str | None = None, grep: str | None = None
    ) -> str:
        return run("ctx_recall", runtime, {"ref": ref, "lines": lines, "grep": grep})

    def ctx_search(pattern: str, runtime: ToolRuntime, regex: bool = False) -> str:
        return run("ctx_search", runtime, {"pattern": pattern, "regex": regex})

    # the real objects, not the strings ``from __future__ import annotations`` leaves
    ctx_recall.__annotations__ = {
        "ref": str,
        "runtime": ToolRuntime,
        "lines": str | None,
        "grep": str | None,
        "return": str,
    }
    ctx_search.__annotations__ = {
        "pattern": str,
        "runtime": ToolRuntime,
        "regex": bool,
        "return": str,
    }
    docs = recall_docs()
    return [
        StructuredTool.from_function(fn, name=fn.__name__, description=docs[fn.__name__])
        for fn in (ctx_recall, ctx_search)
    ]


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


def _no_tokens(response: Any) -> int | None:
    return None


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


_PRIVATE: Any = None  # langchain's PrivateStateAttr, set by _state_schema


def _state_schema() -> type:
    global _PRIVATE
    types = require("langchain.agents.middleware.types", "langchain")
    _PRIVATE = types.PrivateStateAttr  # the annotation below is resolved in this module

    class CtxPolicyState(types.AgentState):  # type: ignore[name-defined]
        """The agent state plus the private token of a run without a thread_id."""

        ctxpolicy_run: NotRequired[Annotated[str, _PRIVATE]]  # type: ignore[valid-type]

    return CtxPolicyState


def _make_middleware_class() -> type:
    base = _middleware_base()
    schema = _state_schema()

    class CtxPolicyMiddleware(base):  # type: ignore[misc, valid-type]
        """Applies a ctxpolicy policy to every model call of a ``create_agent`` agent.

        ``policy`` is a policy file path (with ``agent``), a resolved ``Policy`` or a
        ``Session`` (then every conversation shares it). ``preprocess_tools=False``
        leaves tool results untouched. ``recall=True`` adds the ``ctx_recall`` and
        ``ctx_search`` tools to the agent.
        """

        def __init__(
            self,
            policy: Policy | str | Any,
            *,
            agent: str = "default",
            preprocess_tools: bool = True,
            record_usage: bool = True,
            recall: bool = False,
            **session_options: Any,
        ) -> None:
            super().__init__()
            self.sessions = SessionPool(policy, agent=agent, **session_options)
            self.preprocess_tools = preprocess_tools
            self.record_usage = record_usage
            self.last_session: Session | None = None
            self.tools = recall_tools(self._runtime_held) if recall else []

        state_schema = schema  # the class attribute langchain reads

        @property
        def name(self) -> str:
            # unique per agent, so two policies' middlewares can sit in one agent
            return f"CtxPolicyMiddleware[{self.sessions.policy.agent}]"

        def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            """A run without a ``thread_id`` gets a private conversation token."""
            if _thread_id() is None and not state.get(RUN_KEY):
                return {RUN_KEY: uuid.uuid4().hex}
            return None

        async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            return self.before_agent(state, runtime)

        def session(self, conv_id: str | None = None) -> Session:
            """The session of thread ``conv_id``; without one, of the current call
            (inside a run) or the last session this middleware used (outside)."""
            if conv_id is not None:
                return self.sessions.get(conv_id)
            tid = _thread_id()
            if tid is not None:
                return self.sessions.get(tid)
            if self.last_session is None:
                raise LookupError("no thread_id and no call yet: pass the conversation's thread id")
            return self.last_session

        def _conversation(self, state: Any) -> tuple[str, bool]:
            found = _conversation_of(state)
            # called outside create_agent's graph: a private call of its own
            return found if found is not None else (uuid.uuid4().hex, True)

        @contextlib.contextmanager
        def _held(self, state: Any) -> Iterator[Session]:
            """The session of the current call, in use for the block (never evicted
            and closed meanwhile by other threads opening their conversations)."""
            conv, private = self._conversation(state)
            with self.sessions.held(conv, private=private) as s:
                self.last_session = s
                yield s

        @contextlib.asynccontextmanager
        async def _aheld(self, state: Any) -> AsyncIterator[Session]:
            """:meth:`_held` across awaits, the session opened in a worker thread."""
            conv, private = self._conversation(state)
            async with self.sessions.aheld(conv, private=private) as s:
                self.last_session = s
                yield s

        def _runtime_held(self, runtime: Any) -> contextlib.AbstractContextManager[Any]:
            found = _conversation_of(
                getattr(runtime, "state", None), getattr(runtime, "config", None)
            )
            if found is None:
                return contextlib.nullcontext(None)
            return self.sessions.held(found[0], private=found[1])

        # -- model calls ------------------------------------------------------------
        def _convert(self, request: Any) -> tuple[LangChainConversation, Any]:
            conv = LangChainConversation(request.messages, request.system_message)
            return conv, _tool_schemas(request.tools)

        def _override(
            self, request: Any, conv: LangChainConversation, prepared: list[Message]
        ) -> Any:
            system, msgs = conv.back(prepared)
            return request.override(messages=msgs, system_message=system)

        def _driver(self, session: Session) -> CallDriver:
            usage = UsageOnly(_input_tokens if self.record_usage else _no_tokens)
            return CallDriver(session, format=usage)

        # the conversation is held for the whole call: prepare, the model, usage
        def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            conv, tools = self._convert(request)
            with self._held(getattr(request, "state", None)) as session:
                return self._driver(session).call(
                    conv.messages, tools, lambda p: handler(self._override(request, conv, p))
                )

        async def awrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            # the engine (opening the session and converting too) runs in a worker thread
            async with self._aheld(getattr(request, "state", None)) as session:
                conv, tools = await off_loop(self._convert, request)

                async def send(prepared: list[Message]) -> Any:
                    return await handler(self._override(request, conv, prepared))

                return await self._driver(session).acall(conv.messages, tools, send)

        # -- tool calls -------------------------------------------------------------
        def _post_tool(self, request: Any, result: Any) -> Any:
            if not self.preprocess_tools or getattr(result, "type", None) != "tool":
                return result  # a Command, or preprocessing off
            if request.tool_call.get("name") in _RECALL_NAMES and self.tools:
                return result  # a recall answer is already bounded: never re-snapshotted
            # errors are preprocessed too: a long traceback is a tool result like any other
            tc = request.tool_call
            call = {"id": tc.get("id"), "name": tc.get("name", ""), "arguments": tc.get("args")}
            content = result.content
            raw = (
                content
                if isinstance(content, str)
                else content_text(content) or json.dumps(content, default=str)
            )
            with self._held(getattr(request, "state", None)) as session:
                text = session.add_tool_result(call, raw)
            if text == content:
                return result
            return result.model_copy(update={"content": text})

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return self._post_tool(request, handler(request))

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            result = await handler(request)
            return await off_loop(self._post_tool, request, result)

    return CtxPolicyMiddleware


_LAZY = lazy_class(__name__, "CtxPolicyMiddleware", _make_middleware_class)


def __getattr__(name: str) -> Any:
    # ``CtxPolicyMiddleware`` subclasses langchain's AgentMiddleware, so it is built on
    # first access: importing this module never needs langchain.
    return _LAZY(name)


# --------------------------------------------------------------------------- LangGraph hook


def pre_model_hook(
    policy: Policy | str | Any,
    *,
    agent: str = "default",
    **session_options: Any,
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A LangGraph ``pre_model_hook``: ``state -> {"llm_input_messages": prepared}``.

    The graph state is not modified (the full history stays in ``messages``); the
    model sees the prepared list. Sessions are kept per agent and ``thread_id``;
    without a ``thread_id``, per run (keyed by the random id LangGraph gives the first
    message), in memory only.
    """
    _lc_messages()
    pool = SessionPool(policy, agent=agent, **session_options)

    def hook(state: Mapping[str, Any]) -> dict[str, Any]:
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        tid = _thread_id()
        if tid is not None:
            conv_id, private = tid, False
        else:  # private to the run: LangGraph gives each new message a random id
            first = getattr(messages[0], "id", None) if messages else None
            conv_id, private = (f"msg:{first}" if first else uuid.uuid4().hex), True
        conv = LangChainConversation(messages)
        with pool.held(conv_id, private=private) as session:
            system, msgs = conv.back(session.prepare(conv.messages))
        return {"llm_input_messages": ([system] if system is not None else []) + msgs}

    hook.sessions = pool  # type: ignore[attr-defined]
    return hook
