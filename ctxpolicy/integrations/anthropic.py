"""Anthropic SDK adapter (extra ``anthropic``): budgeted ``messages.create``.

::

    import anthropic, ctxpolicy
    from ctxpolicy.integrations.anthropic import wrap

    client = wrap(anthropic.Anthropic(), ctxpolicy.Session(policy))
    resp = client.messages.create(model="claude-sonnet-4-5", max_tokens=2048,
                                  system=SYSTEM, messages=history, tools=tools)

Messages API content is converted to the engine's OpenAI-style messages and back by
:class:`ctxpolicy.wire.anthropic.AnthropicConversation` (the conversion the gateway
uses too; docs/wire.md): unchanged messages go back as their original blocks,
``tool_use``/``tool_result`` pairs are one unit, thinking blocks stay with their turn.

Prompt caching (issue 12): each call places a ``cache_control: {"type": "ephemeral"}``
breakpoint on the last block of the *stable prefix* — the longest run of messages
unchanged since the previous call of this wrapper (on the first call, or when
compaction changed everything, the system prompt). ``cache_tail=True`` also marks
the last message (the cache entry the next call will read). Existing markers are
kept; no more than 4 breakpoints are ever sent (the API's limit).

An API error that is a context overflow ("prompt is too long: 210000 tokens >
200000 maximum", "exceed context limit") runs the policy's ``on_overflow`` layer
and retries; the session learns the stated limit and bounds the retries.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.driver import CallDriver, UsageOnly
from ctxpolicy.conversation import message_fingerprint
from ctxpolicy.integrations._common import (
    Message,
    Proxy,
    as_session,
    converted,
    is_async_callable,
    require,
    to_plain,
)
from ctxpolicy.wire.anthropic import (
    AnthropicConversation,
    AnthropicRequest,
    AnthropicWire,
    CacheBreakpoints,
    from_openai,
    to_openai,
)
from ctxpolicy.wire.anthropic import tools_for_count as _tools_for_count

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

__all__ = [
    "AnthropicConversation",
    "AnthropicRequest",
    "AnthropicWrapper",
    "CacheBreakpoints",
    "answer_recall",
    "from_openai",
    "is_recall_call",
    "prepare_request",
    "recall_tools",
    "to_openai",
    "wrap",
]


def _anthropic() -> Any:
    return require("anthropic", "anthropic")


def prepare_request(
    session: Session,
    messages: Sequence[Any],
    *,
    system: Any = None,
    tools: Any = None,
) -> dict[str, Any]:
    """Prepare a Messages API request under the session's policy (no call is made).

    Returns ``{"messages": ..., "system": ...}`` to pass on to ``messages.create``.
    """
    conv = AnthropicConversation(messages, system)
    prepared = session.prepare(conv.messages, tools=_tools_for_count(tools))
    return conv.to_request(prepared).kwargs()


# --------------------------------------------------------------------------- wrapper


def wrap(
    client: Any,
    session: Session | Any,
    *,
    agent: str = "default",
    conv_id: str | None = None,
    cache_control: bool = True,
    cache_tail: bool = False,
    record_usage: bool = True,
    record: str | os.PathLike[str] | None = None,
) -> AnthropicWrapper:
    """A proxy of an ``anthropic.Anthropic`` / ``AsyncAnthropic`` client whose
    ``messages.create`` goes through ``session``.

    ``session`` is a :class:`ctxpolicy.Session`, or a policy (object or file path +
    ``agent``) from which a new session is made for ``conv_id`` (with a durable
    ``state:`` store it resumes that conversation in any process, docs/state.md).
    ``cache_control`` places the stable-prefix breakpoint; ``cache_tail`` also marks
    the last message. ``record=PATH`` records the new session's trace for
    ``ctxpolicy simulate`` (docs/simulate.md, "Record your own traces").
    """
    _anthropic()
    return AnthropicWrapper(
        client,
        as_session(session, agent=agent, conv_id=conv_id, record=record),
        cache_control=cache_control,
        cache_tail=cache_tail,
        record_usage=record_usage,
    )


class AnthropicWrapper(Proxy):
    """The wrapped client: ``.messages.create`` budgeted, everything else delegated."""

    def __init__(
        self,
        client: Any,
        session: Session,
        *,
        cache_control: bool = True,
        cache_tail: bool = False,
        record_usage: bool = True,
    ) -> None:
        super().__init__(client)
        self.session = session
        self.cache_control = cache_control
        self.cache_tail = cache_tail
        self.record_usage = record_usage
        self.is_async = is_async_callable(client.messages.create)
        self.messages = _Messages(client.messages, self)
        self._last_sent: list[str] = []
        #: The request actually sent by the last successful call.
        self.last_request: AnthropicRequest | None = None

    @property
    def wrapped(self) -> Any:
        return self._inner

    def with_options(self, **options: Any) -> AnthropicWrapper:
        w = AnthropicWrapper(
            self._inner.with_options(**options),
            self.session,
            cache_control=self.cache_control,
            cache_tail=self.cache_tail,
            record_usage=self.record_usage,
        )
        w._last_sent = self._last_sent
        return w

    def _stable_index(self, prepared: Sequence[Mapping[str, Any]]) -> tuple[int | None, list[str]]:
        fps = [message_fingerprint(m) for m in prepared]
        k = 0
        for a, b in zip(fps, self._last_sent, strict=False):
            if a != b:
                break
            k += 1
        if k == 0:
            return None, fps
        return k - 1, fps

    def _build(
        self, conv: AnthropicConversation, prepared: list[Message]
    ) -> tuple[AnthropicRequest, list[str]]:
        stable, fps = self._stable_index(prepared)
        if not self.cache_control:
            return conv.to_request(prepared), fps
        req = conv.to_request(
            prepared, breakpoints=True, breakpoint_after=stable, cache_tail=self.cache_tail
        )
        return req, fps

    def _tokens(self, resp: Any) -> int | None:
        """The prompt tokens of a response, cached ones included (None: not given, or
        not recorded)."""
        if not self.record_usage:
            return None
        usage = getattr(resp, "usage", None)
        if usage is None:
            return None
        total = 0
        for attr in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            v = getattr(usage, attr, None)
            if isinstance(v, int):
                total += v
        return total if total > 0 else None

    def _create(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        if "messages" not in kwargs:
            return fn(**kwargs)
        kwargs = dict(kwargs)
        raw, system = list(kwargs.pop("messages")), kwargs.pop("system", None)
        tools = _tools_for_count(kwargs.get("tools"))
        driver = CallDriver(
            self.session, format=UsageOnly(self._tokens), catch=(_anthropic().APIStatusError,)
        )
        if self.is_async:

            async def acall() -> Any:
                conv = await converted(raw, lambda: AnthropicConversation(raw, system))

                async def asend(prepared: list[Message]) -> Any:
                    req, fps = self._build(conv, prepared)
                    resp = await fn(**req.kwargs(), **kwargs)
                    self._done(req, fps)
                    return resp

                return await driver.acall(conv.messages, tools, asend)

            return acall()

        conv = AnthropicConversation(raw, system)

        def send(prepared: list[Message]) -> Any:
            req, fps = self._build(conv, prepared)
            resp = fn(**req.kwargs(), **kwargs)
            self._done(req, fps)
            return resp

        return driver.call(conv.messages, tools, send)

    def _done(self, req: AnthropicRequest, fps: list[str]) -> None:
        self._last_sent = fps
        self.last_request = req


class _Messages(Proxy):
    def __init__(self, messages: Any, owner: AnthropicWrapper) -> None:
        super().__init__(messages)
        self._owner = owner

    def create(self, **kwargs: Any) -> Any:
        """``messages.create`` with ``system``/``messages`` prepared by the session."""
        return self._owner._create(self._inner.create, kwargs)


# --------------------------------------------------------------------------- recall


def recall_tools() -> list[dict[str, Any]]:
    """``ctx_recall`` and ``ctx_search`` as Messages API tool definitions.

    Add them to ``tools=``; answer the model's ``tool_use`` blocks for them with
    :func:`answer_recall`.
    """
    from ctxpolicy.snapshots.recall import recall_tools as openai_tools

    return AnthropicWire().tools(openai_tools())


def is_recall_call(block: Any) -> bool:
    """True for a ``tool_use`` block (dict or SDK object) calling a recall tool."""
    from ctxpolicy.snapshots.recall import RECALL_TOOL, SEARCH_TOOL

    b = to_plain(block)
    return (
        isinstance(b, Mapping)
        and b.get("type") == "tool_use"
        and b.get("name") in (RECALL_TOOL, SEARCH_TOOL)
    )


def answer_recall(session: Session, content: Any) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks answering the recall ``tool_use`` blocks of a response.

    ``content`` is an assistant response (or its ``content`` list); blocks that are
    not recall calls are skipped, so the caller answers its own tools beside these.
    The answers come from ``session``'s conversation only, bounded, and never raise
    (:func:`ctxpolicy.recall.handle_tool_call`).
    """
    blocks = getattr(content, "content", content)
    handler = session.recall_tool()[1]
    out: list[dict[str, Any]] = []
    for block in blocks or []:
        if not is_recall_call(block):
            continue
        b = to_plain(block)
        text = handler(str(b["name"]), b.get("input"))
        out.append(
            {
                "type": "tool_result",
                "tool_use_id": str(b.get("id", "")),
                "content": text,
                **({"is_error": True} if text.startswith("Error:") else {}),
            }
        )
    return out
