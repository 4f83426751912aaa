"""Strands Agents adapter (extra ``strands``): a ``ConversationManager``.

::

    from strands import Agent
    from ctxpolicy.integrations.strands import CtxPolicyConversationManager

    manager = CtxPolicyConversationManager("policies/agents.yaml", agent="coding_agent")
    agent = Agent(model=model, tools=[...] + manager.recall_tools(),
                  conversation_manager=manager, session_manager=sessions)

Strands sends ``agent.messages`` to the model as they are, so the manager keeps the
full history itself and, before every model call (``BeforeModelCallEvent``), puts the
policy's prepared view into ``agent.messages``; what the loop appends after that is
added to the full history on the next call, so nothing is lost.

* ``AfterToolCallEvent`` — each tool result goes through ``session.add_tool_result``
  (preprocessed, snapshotted, referenced) before the loop adds it to the history.
* ``reduce_context`` — Strands' overflow recovery (``ContextWindowOverflowException``):
  the policy's ``on_overflow`` layer compacts, the loop retries; when nothing can be
  removed it re-raises, as Strands asks.
* ``apply_management`` — after each invocation: the view is already within budget.
* ``recall_tools()`` — ``ctx_recall`` and ``ctx_search`` as Strands tools.

Conversations: an explicit ``conv_id``, else the id of the agent's ``session_manager``
(Strands' persistent, caller-supplied session id) with the agent's ``agent_id``; the
stored conversation is ``"<policy agent>/<session id>/<agent_id>"``. An agent with
neither is a fresh, private conversation in memory (Strands' own random session id of
an agent without a session manager is not used: it is 8 hex digits and not persisted).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.driver import off_loop
from ctxpolicy.calls.pool import resolve_policy
from ctxpolicy.conversation import content_text, message_fingerprint
from ctxpolicy.conversation import messages as chat
from ctxpolicy.integrations._common import (
    Message,
    as_session,
    call_args,
    conversation_key,
    lazy_class,
    recall_docs,
    require,
)

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = ["CtxPolicyConversationManager", "from_openai", "to_openai"]  # noqa: F822

_RECALL_NAMES = frozenset({"ctx_recall", "ctx_search"})


def _result_text(result: Mapping[str, Any]) -> str:
    parts = []
    for c in result.get("content") or []:
        if "text" in c:
            parts.append(str(c["text"]))
        elif "json" in c:
            parts.append(json.dumps(c["json"], ensure_ascii=False, default=str))
    return "\n".join(parts)


def to_openai(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Strands messages as OpenAI chat messages (a ``toolResult`` block is a tool message)."""
    out: list[Message] = []
    for m in messages:
        blocks = m.get("content") or []
        if m.get("role") == "assistant":
            text = "\n".join(str(b["text"]) for b in blocks if "text" in b)
            calls = [
                chat.new_call(
                    str(b["toolUse"].get("toolUseId", "")),
                    str(b["toolUse"].get("name", "")),
                    json.dumps(b["toolUse"].get("input") or {}, default=str),
                )
                for b in blocks
                if "toolUse" in b
            ]
            msg: Message = {"role": "assistant", "content": text or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
            continue
        for b in blocks:
            if "toolResult" in b:
                r = b["toolResult"]
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(r.get("toolUseId", "")),
                        "content": _result_text(r),
                    }
                )
        rest = [str(b["text"]) for b in blocks if "text" in b]
        if rest or not any("toolResult" in b for b in blocks):
            out.append({"role": "user", "content": "\n".join(rest)})
    return out


def from_openai(
    prepared: Sequence[Mapping[str, Any]], originals: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """OpenAI messages as Strands messages; unchanged blocks are the originals'."""
    results: dict[str, dict[str, Any]] = {}
    by_fp: dict[str, list[dict[str, Any]]] = {}
    for m in originals:
        for b in m.get("content") or []:
            if "toolResult" in b:
                results[str(b["toolResult"].get("toolUseId", ""))] = b
        for d in to_openai([m]):
            if d["role"] != "tool":
                by_fp.setdefault(message_fingerprint(d), []).append(
                    {
                        "role": m["role"],
                        "content": [b for b in m["content"] if "toolResult" not in b],
                    }
                )
    out: list[dict[str, Any]] = []
    used: dict[str, int] = {}
    system: list[str] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:  # Strands' models want alternating roles
            out[-1] = {"role": role, "content": [*out[-1]["content"], *blocks]}
        else:
            out.append({"role": role, "content": blocks})

    for m in prepared:
        role = m.get("role")
        text = content_text(m.get("content"))
        if role in ("system", "developer"):
            system.append(text)  # the ledger: Strands keeps the system prompt apart
            continue
        if role == "tool":
            tid = chat.result_id(m)
            orig = results.get(tid)
            if orig is not None and _result_text(orig["toolResult"]) == text:
                add("user", [orig])
            else:
                status = orig["toolResult"].get("status", "success") if orig else "success"
                add(
                    "user",
                    [
                        {
                            "toolResult": {
                                "toolUseId": tid,
                                "status": status,
                                "content": [{"text": text}],
                            }
                        }
                    ],
                )
            continue
        kept = chat.nth_original(by_fp, used, message_fingerprint(m))
        if kept is not None:
            add(kept["role"], list(kept["content"]))
            continue
        blocks: list[dict[str, Any]] = [{"text": text}] if text else []
        if role == "assistant":
            for tc in chat.tool_calls(m):
                use = {
                    "toolUseId": chat.call_id(tc),
                    "name": chat.call_name(tc),
                    "input": call_args(tc),
                }
                blocks.append({"toolUse": use})
            add("assistant", blocks or [{"text": ""}])
        else:
            add("user", blocks or [{"text": ""}])
    if system and out and out[0]["role"] == "user":
        out[0] = {"role": "user", "content": [{"text": "\n\n".join(system)}, *out[0]["content"]]}
    return out


def _make_class() -> type:
    cm = require("strands.agent.conversation_manager", "strands")
    events = require("strands.hooks", "strands")

    class CtxPolicyConversationManager(cm.ConversationManager):  # type: ignore[name-defined]
        """A Strands ``ConversationManager`` running a ctxpolicy policy."""

        def __init__(
            self,
            policy: Policy | str | Any,
            *,
            agent: str = "default",
            conv_id: str | None = None,
            preprocess_tools: bool = True,
            **session_options: Any,
        ) -> None:
            super().__init__()
            from ctxpolicy.engine import Session

            self._fixed: Session | None = policy if isinstance(policy, Session) else None
            self.policy: Policy = (
                self._fixed.policy if self._fixed else resolve_policy(policy, agent)
            )
            self.conv_id = conv_id
            self.preprocess_tools = preprocess_tools
            self._options = session_options
            self.session: Session | None = self._fixed
            self.full: list[dict[str, Any]] = []  # the whole history, never compacted
            self._view: list[dict[str, Any]] = []  # what was put into agent.messages

        # -- identity ----------------------------------------------------------------
        def session_for(self, agent: Any) -> Session:
            if self.session is None:
                conv = self.conv_id
                manager = getattr(agent, "_session_manager", None)
                if conv is None and manager is not None and getattr(manager, "session_id", None):
                    conv = f"{manager.session_id}/{getattr(agent, 'agent_id', 'default')}"
                key = conversation_key(self.policy.agent, conv) if conv else None
                self.session = as_session(self.policy, conv_id=key, **self._options)
            return self.session

        # -- hooks -------------------------------------------------------------------
        def register_hooks(self, registry: Any, **kwargs: Any) -> None:
            super().register_hooks(registry, **kwargs)
            registry.add_callback(events.BeforeModelCallEvent, self._before_model)
            registry.add_callback(events.AfterToolCallEvent, self._after_tool)

        def _sync(self, agent: Any) -> None:
            """Add what the loop appended since the last view to the full history."""
            msgs = agent.messages
            n = len(self._view)
            if (
                n
                and len(msgs) >= n
                and all(a is b for a, b in zip(msgs[:n], self._view, strict=False))
            ):
                self.full.extend(msgs[n:])
            elif not self._view:
                self.full = list(msgs)
            else:  # the application replaced the history: it is the new full history
                self.full = list(msgs)

        def _show(self, agent: Any, prepared: Sequence[Mapping[str, Any]]) -> None:
            view = from_openai(prepared, self.full)
            agent.messages[:] = view
            self._view = list(agent.messages)

        def _prepare(self, agent: Any) -> list[Message]:
            return self.session_for(agent).prepare(to_openai(self.full))

        async def _before_model(self, event: Any) -> None:
            # Strands awaits async callbacks: the engine runs in a worker thread
            agent = event.agent
            self._sync(agent)
            self._show(agent, await off_loop(self._prepare, agent))

        def _processed(self, agent: Any, call: dict[str, Any], raw: str) -> str:
            return self.session_for(agent).add_tool_result(call, raw)

        async def _after_tool(self, event: Any) -> None:
            if not self.preprocess_tools:
                return
            use = event.tool_use
            if use.get("name") in _RECALL_NAMES:
                return
            result = event.result
            raw = _result_text(result)
            call = {
                "id": use.get("toolUseId"),
                "name": use.get("name", ""),
                "arguments": use.get("input"),
            }
            text = await off_loop(self._processed, event.agent, call, raw)
            if text != raw:
                event.result = {**result, "content": [{"text": text}]}

        # -- ConversationManager -----------------------------------------------------
        def apply_management(self, agent: Any, **kwargs: Any) -> None:
            """After an invocation: the model's view was prepared before each call."""
            self._sync(agent)
            self._view = list(agent.messages)

        def reduce_context(self, agent: Any, e: Exception | None = None, **kwargs: Any) -> None:
            """Strands' overflow recovery: the policy's ``on_overflow`` layer."""
            self._sync(agent)
            session = self.session_for(agent)
            exc = e if e is not None else RuntimeError("context window overflow")
            prepared = session.on_error(exc, to_openai(self.full))
            if prepared is None:
                prepared = session.on_error(
                    RuntimeError(f"context_length_exceeded: {exc}"), to_openai(self.full)
                )
            if prepared is None:
                if e is not None:
                    raise e
                return
            before = len(agent.messages)
            self._show(agent, prepared)
            self.removed_message_count += max(0, before - len(agent.messages))

        def get_state(self) -> dict[str, Any]:
            state = super().get_state()
            state["ctxpolicy_conv_id"] = self.session.conv_id if self.session else None
            return state

        def recall_tools(self) -> list[Any]:
            """``ctx_recall`` and ``ctx_search`` as Strands tools (this conversation only)."""
            from strands import tool

            docs = recall_docs()
            owner = self

            def answer(name: str, args: dict[str, Any]) -> str:
                if owner.session is None:
                    return "Error: nothing has been recorded in this conversation yet."
                clean = {k: v for k, v in args.items() if v not in (None, "")}
                return owner.session.recall_tool()[1](name, clean)

            def ctx_recall(ref: str, lines: str = "", grep: str = "") -> str:
                return answer("ctx_recall", {"ref": ref, "lines": lines, "grep": grep})

            def ctx_search(pattern: str, regex: bool = False) -> str:
                return answer("ctx_search", {"pattern": pattern, "regex": regex})

            ctx_recall.__annotations__ = {"ref": str, "lines": str, "grep": str, "return": str}
            ctx_search.__annotations__ = {"pattern": str, "regex": bool, "return": str}
            ctx_recall.__doc__ = docs["ctx_recall"]
            ctx_search.__doc__ = docs["ctx_search"]
            return [tool(ctx_recall), tool(ctx_search)]

    return CtxPolicyConversationManager


_LAZY = lazy_class(__name__, "CtxPolicyConversationManager", _make_class)


def __getattr__(name: str) -> Any:
    # the class subclasses Strands' ConversationManager: built on first access
    return _LAZY(name)
