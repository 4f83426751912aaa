"""Provider wire formats ↔ the engine's messages, one class each.

* :class:`ChatWire` — OpenAI Chat Completions (the engine's own vocabulary);
* :class:`ResponsesWire` — OpenAI Responses, stateless ``input`` item lists;
* :class:`AnthropicWire` — Anthropic Messages.

Each follows :class:`Wire` (:mod:`.base`): extract a request body into engine messages
and the tools to count, build the provider's request from a prepared list, read usage
and tool calls from an answer or its stream, error bodies, tool schemas.
:mod:`.sse` is the server-sent events framing. Every decision about a provider's format
(thinking blocks, ``cache_control``, content blocks, documents and images) lives here;
nothing here imports a provider SDK or the engine.
"""

from __future__ import annotations

from ctxpolicy.wire.anthropic import AnthropicConversation, AnthropicRequest, AnthropicWire
from ctxpolicy.wire.base import Extracted, StreamTurn, ToolCall, Wire, WireError
from ctxpolicy.wire.chat import ChatWire
from ctxpolicy.wire.responses import ResponsesInput, ResponsesWire

__all__ = [
    "WIRES",
    "AnthropicConversation",
    "AnthropicRequest",
    "AnthropicWire",
    "ChatWire",
    "Extracted",
    "ResponsesInput",
    "ResponsesWire",
    "StreamTurn",
    "ToolCall",
    "Wire",
    "WireError",
    "for_api",
    "for_path",
]

#: One instance of each wire, by API name (``chat``, ``responses``, ``anthropic``).
WIRES: dict[str, Wire] = {w.name: w for w in (ChatWire(), ResponsesWire(), AnthropicWire())}


def for_api(name: str) -> Wire:
    """The wire of an API name; :class:`KeyError` for an unknown one."""
    return WIRES[name]


def for_path(path: str) -> Wire | None:
    """The wire whose request path ``path`` ends with (None for a path no wire prepares)."""
    for w in WIRES.values():
        if path.endswith(w.paths):
            return w
    return None
