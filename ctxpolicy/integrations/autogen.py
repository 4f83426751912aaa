"""AutoGen adapter (extra ``autogen``; the v0.4+ API of ``autogen-core``).

::

    from autogen_agentchat.agents import AssistantAgent
    from ctxpolicy.integrations.autogen import CtxPolicyContext

    context = CtxPolicyContext("policies/agents.yaml", agent="coding_agent", conv_id="run-42")
    agent = AssistantAgent("coder", model_client, tools=[...] + context.recall_tools(),
                           model_context=context)

:class:`CtxPolicyContext` is a ``ChatCompletionContext``: the agent adds every message
to it and asks it for the messages of each model call.

* ``add_message`` — a ``FunctionExecutionResultMessage`` (the agent's tool results) goes
  through ``session.add_tool_result`` per result (preprocessed, snapshotted, with its
  reference) before it is kept; AutoGen has no other tool hook, so this is the one.
  Results of ``ctx_recall`` / ``ctx_search`` are kept as they are.
* ``get_messages`` — the kept history, ``session.prepare``\\ d: what the model sees
  fits the policy's budget; the context keeps the full history, so nothing is lost.
  Unchanged messages are the original objects; a summary is a ``UserMessage`` with
  ``source="ctxpolicy"``; the ledger joins the first ``SystemMessage`` (system content
  stays contiguous, which AutoGen's OpenAI client requires; ``merge_system=False``
  keeps the engine's placement). The engine runs in a worker thread.
* ``recall_tools()`` — ``ctx_recall`` and ``ctx_search`` as AutoGen ``FunctionTool``\\ s,
  answered from this conversation's snapshots only.

Conversations: ``conv_id`` is AutoGen's own identity of the conversation (a team or
run id you choose); it is stored as ``"<agent>/<conv_id>"``, so two agents' contexts
never share a state. Without ``conv_id`` the context is a fresh, private conversation
held in memory (never a shared default). ``save_state`` / ``load_state`` keep
AutoGen's own history format and add the ``conv_id``.

Overflow: AutoGen raises a provider's context-overflow error out of the model client
inside the agent, after the context returned its messages, so the context cannot retry
the call; :meth:`CtxPolicyContext.on_error` lets the caller that catches it compact
with the policy's ``on_overflow`` layer before running the agent again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.driver import off_loop
from ctxpolicy.calls.pool import resolve_policy
from ctxpolicy.conversation import content_text, message_fingerprint
from ctxpolicy.conversation import messages as chat
from ctxpolicy.integrations._common import (
    Message,
    as_session,
    conversation_key,
    json_args,
    lazy_class,
    recall_docs,
    require,
)

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = ["CtxPolicyContext", "contiguous_system", "from_openai", "to_openai"]  # noqa: F822 - lazy class

_RECALL_NAMES = frozenset({"ctx_recall", "ctx_search"})


def _models() -> Any:
    return require("autogen_core.models", "autogen")


def to_openai(messages: Sequence[Any]) -> list[Message]:
    """AutoGen ``LLMMessage``\\ s as OpenAI chat messages (one tool message per result)."""
    out: list[Message] = []
    for m in messages:
        kind = getattr(m, "type", None)
        content = getattr(m, "content", None)
        if kind == "SystemMessage":
            out.append({"role": "system", "content": str(content)})
        elif kind == "UserMessage":
            if isinstance(content, str):
                out.append({"role": "user", "content": content})
            else:
                text = [c if isinstance(c, str) else "[image]" for c in content or []]
                out.append({"role": "user", "content": "\n".join(text)})
        elif kind == "AssistantMessage":
            if isinstance(content, str):
                out.append({"role": "assistant", "content": content})
            else:
                calls = [
                    chat.new_call(str(c.id), str(c.name), json_args(c.arguments))
                    for c in content or []
                ]
                msg: Message = {"role": "assistant", "content": getattr(m, "thought", None)}
                if calls:
                    msg["tool_calls"] = calls
                out.append(msg)
        elif kind == "FunctionExecutionResultMessage":
            for r in content or []:
                out.append({"role": "tool", "tool_call_id": str(r.call_id), "content": r.content})
        else:
            out.append({"role": "user", "content": content_text(content) or str(content)})
    return out


class _Back:
    """Prepared OpenAI messages back to AutoGen messages, originals where unchanged."""

    def __init__(self, originals: Sequence[Any]) -> None:
        self._by_fp: dict[str, list[Any]] = {}
        self._results: dict[str, Any] = {}
        self._calls: dict[tuple[str, ...], Any] = {}
        for m in originals:
            kind = getattr(m, "type", None)
            if kind == "FunctionExecutionResultMessage":
                for r in m.content:
                    self._results[str(r.call_id)] = r
                continue
            d = to_openai([m])[0]
            self._by_fp.setdefault(message_fingerprint(d), []).append(m)
            if d.get("tool_calls"):
                self._calls[tuple(chat.call_id(tc) for tc in chat.tool_calls(d))] = m

    def __call__(self, prepared: Sequence[Mapping[str, Any]]) -> list[Any]:
        models = _models()
        out: list[Any] = []
        used: dict[str, int] = {}
        pending: list[Any] = []

        def flush() -> None:
            if pending:
                out.append(models.FunctionExecutionResultMessage(content=list(pending)))
                pending.clear()

        for m in prepared:
            role = m.get("role")
            text = content_text(m.get("content"))
            if role == "tool":
                tid = chat.result_id(m)
                orig = self._results.get(tid)
                if orig is not None:
                    pending.append(
                        orig if orig.content == text else orig.model_copy(update={"content": text})
                    )
                else:
                    pending.append(
                        models.FunctionExecutionResult(content=text, name="", call_id=tid)
                    )
                continue
            flush()
            kept = chat.nth_original(self._by_fp, used, message_fingerprint(m))
            if kept is not None:
                out.append(kept)
                continue
            if role in ("system", "developer"):
                out.append(models.SystemMessage(content=text))
            elif role == "assistant" and m.get("tool_calls"):
                ids = tuple(chat.call_id(tc) for tc in chat.tool_calls(m))
                orig = self._calls.get(ids)
                out.append(
                    orig.model_copy(update={"thought": text or None})
                    if orig is not None
                    else models.AssistantMessage(
                        content=_calls(chat.tool_calls(m)), source="ctxpolicy"
                    )
                )
            elif role == "assistant":
                out.append(models.AssistantMessage(content=text, source="ctxpolicy"))
            else:
                out.append(models.UserMessage(content=text, source="ctxpolicy"))
        flush()
        return out


def contiguous_system(prepared: Sequence[Message]) -> list[Message]:
    """``prepared`` with its system content in one block at the front: every system
    message after the leading ones (the ledger, a handover) is merged into the first
    (its text appended, in order), or, when the list does not start with one, they
    become one system message at the front, right after the system message
    ``AssistantAgent`` puts before the context's messages. AutoGen's OpenAI client
    refuses non-contiguous system messages unless ``model_info["multiple_system_messages"]``
    is set. Unchanged when the system content already is contiguous at the front."""
    out = list(prepared)
    lead = 0
    while lead < len(out) and out[lead].get("role") == "system":
        lead += 1
    later = [i for i in range(lead, len(out)) if out[i].get("role") == "system"]
    if not later:
        return out
    texts = [content_text(out[i].get("content")) for i in later]
    skip = set(later)
    rest = [m for i, m in enumerate(out) if i not in skip]
    if lead:
        first = content_text(rest[0].get("content"))
        rest[0] = {**rest[0], "content": "\n\n".join(t for t in (first, *texts) if t)}
        return rest
    return [{"role": "system", "content": "\n\n".join(t for t in texts if t)}, *rest]


def _calls(calls: Sequence[Mapping[str, Any]]) -> list[Any]:
    from autogen_core import FunctionCall

    return [
        FunctionCall(
            id=chat.call_id(tc),
            name=chat.call_name(tc),
            arguments=str(chat.call_arguments(tc) or "{}"),
        )
        for tc in calls
    ]


def from_openai(prepared: Sequence[Mapping[str, Any]], originals: Sequence[Any] = ()) -> list[Any]:
    """OpenAI messages as AutoGen messages (the ``originals`` objects where unchanged)."""
    return _Back(originals)(prepared)


def _make_context_class() -> type:
    mc = require("autogen_core.model_context", "autogen")

    class CtxPolicyContext(mc.ChatCompletionContext):  # type: ignore[name-defined]
        """A ``ChatCompletionContext`` that keeps the model's view inside a ctxpolicy policy.

        ``policy`` is a policy file (with ``agent``), a resolved ``Policy`` or a
        ``Session``. ``conv_id`` names the conversation (stored as
        ``"<agent>/<conv_id>"``); without it the conversation is private and in memory.
        """

        _messages: list[Any]  # the full history (AutoGen's base class keeps it)

        def __init__(
            self,
            policy: Policy | str | Any,
            *,
            agent: str = "default",
            conv_id: str | None = None,
            initial_messages: list[Any] | None = None,
            preprocess_tools: bool = True,
            merge_system: bool = True,
            **session_options: Any,
        ) -> None:
            super().__init__(initial_messages)
            from ctxpolicy.engine import Session

            if isinstance(policy, Session):
                self.session: Session = policy
            else:
                resolved = resolve_policy(policy, agent)
                key = conversation_key(resolved.agent, conv_id) if conv_id else None
                self.session = as_session(resolved, conv_id=key, **session_options)
            self.conv_id = conv_id
            self.preprocess_tools = preprocess_tools
            self.merge_system = merge_system

        async def add_message(self, message: Any) -> None:
            if self.preprocess_tools and getattr(message, "type", None) == (
                "FunctionExecutionResultMessage"
            ):
                message = await off_loop(self._processed, message)
            self._messages.append(message)

        def _processed(self, message: Any) -> Any:
            return message.model_copy(
                update={"content": [self._result(r) for r in message.content]}
            )

        def _result(self, r: Any) -> Any:
            if r.name in _RECALL_NAMES:
                return r
            call: dict[str, Any] = {"id": r.call_id, "name": r.name, "arguments": "{}"}
            for m in reversed(self._messages):
                if getattr(m, "type", None) == "AssistantMessage" and not isinstance(
                    m.content, str
                ):
                    found = next((c for c in m.content if c.id == r.call_id), None)
                    if found is not None:
                        call["arguments"] = found.arguments
                        break
            text = self.session.add_tool_result(call, r.content)
            return r if text == r.content else r.model_copy(update={"content": text})

        async def get_messages(self) -> list[Any]:
            # the engine runs in a worker thread, never on AutoGen's event loop
            return await off_loop(self.prepared_messages)

        def prepared_messages(self) -> list[Any]:
            """:meth:`get_messages`, synchronously."""
            messages = list(self._messages)
            prepared = self.session.prepare(to_openai(messages))
            return from_openai(self._system(prepared), messages)

        def _system(self, prepared: list[Message]) -> list[Message]:
            return contiguous_system(prepared) if self.merge_system else prepared

        def on_error(self, exc: BaseException) -> bool:
            """After ``exc`` from a run: True when it was a context overflow and the
            ``on_overflow`` layer compacted the kept history (run the agent again)."""
            prepared = self.session.on_error(exc, to_openai(self._messages))
            if prepared is None:
                return False
            self._messages = from_openai(self._system(prepared), self._messages)
            return True

        def recall_tools(self) -> list[Any]:
            """``ctx_recall`` and ``ctx_search`` as AutoGen ``FunctionTool``\\ s."""
            from autogen_core.tools import FunctionTool

            handler = self.session.recall_tool()[1]

            async def ctx_recall(ref: str, lines: str = "", grep: str = "") -> str:
                args = {"ref": ref, "lines": lines or None, "grep": grep or None}
                return handler("ctx_recall", {k: v for k, v in args.items() if v is not None})

            async def ctx_search(pattern: str, regex: bool = False) -> str:
                return handler("ctx_search", {"pattern": pattern, "regex": regex})

            ctx_recall.__annotations__ = {"ref": str, "lines": str, "grep": str, "return": str}
            ctx_search.__annotations__ = {"pattern": str, "regex": bool, "return": str}
            docs = recall_docs()
            return [
                FunctionTool(fn, description=docs[fn.__name__], name=fn.__name__)
                for fn in (ctx_recall, ctx_search)
            ]

        async def save_state(self) -> Mapping[str, Any]:
            return {**(await super().save_state()), "ctxpolicy_conv_id": self.conv_id}

        async def load_state(self, state: Mapping[str, Any]) -> None:
            await super().load_state({k: v for k, v in state.items() if k != "ctxpolicy_conv_id"})

    return CtxPolicyContext


_LAZY = lazy_class(__name__, "CtxPolicyContext", _make_context_class)


def __getattr__(name: str) -> Any:
    # the class subclasses autogen's ChatCompletionContext: built on first access
    return _LAZY(name)
