"""What every provider wire format offers, and the plain-value helpers they share.

A wire class turns one provider's request body into the engine's messages (the OpenAI
Chat vocabulary of :mod:`ctxpolicy.conversation`) plus the tools to count, and builds the
provider's request back from a prepared list; it reads usage and tool calls from a
response or a stream, shapes error bodies and tool schemas. Values are plain JSON-like
dicts: no provider SDK is imported here (SDK objects are turned into dicts by
:func:`to_plain`, which only duck-types ``model_dump``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeGuard, TypeVar, runtime_checkable

from ctxpolicy.conversation import Message
from ctxpolicy.conversation.lru import Lru
from ctxpolicy.conversation.samejson import MISS, JsonMemo, KeyedList, memo_key

__all__ = [
    "TOOLS_MEMO",
    "Extracted",
    "StreamTurn",
    "ToolCall",
    "Wire",
    "WireError",
    "converted_tools",
    "dumps",
    "dumps_request",
    "is_given",
    "json_args",
    "parse_args",
    "request_state",
    "to_plain",
]

T = TypeVar("T")


class WireError(ValueError):
    """A request body the wire format cannot interpret (the gateway answers HTTP 400)."""


class ToolCall(NamedTuple):
    """One tool call of an answer: the provider's id, the tool's name, its arguments
    (a JSON string on the OpenAI wires, an object on Anthropic's)."""

    id: str
    name: str
    arguments: Any


@dataclass
class Extracted:
    """One request body seen by the engine.

    ``messages`` are the engine's messages, ``tools`` the tool schemas to count (OpenAI
    function shape), ``body`` the client's body (everything the engine does not touch is
    sent back from it), ``state`` what the wire needs to build the provider's request
    back (original blocks or items, keyed by message).
    """

    body: dict[str, Any]
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    state: Any = field(default=None, repr=False)
    #: the :func:`~ctxpolicy.conversation.samejson.memo_key` of ``body["tools"]``, when
    #: known (the encoding of the outgoing body looks its JSON text up by it)
    tools_key: bytes | None = field(default=None, repr=False)


@runtime_checkable
class StreamTurn(Protocol):
    """Reads one streamed answer event by event (parsed ``data:`` objects).

    :meth:`event` returns what the event showed: ``"text"`` (visible non-blank text),
    ``"call"`` (a tool call started; its name is in :attr:`names`), ``"other"`` (a block
    or an event that is neither: thinking, a built-in tool, an error), or None (nothing
    decisive: a delta of something already seen, a ping). :meth:`answer` gives the turn
    seen so far as the wire's non-streaming response body.
    """

    @property
    def names(self) -> list[str]:
        """The names of the tool calls seen so far."""
        ...

    def event(self, obj: Mapping[str, Any]) -> str | None: ...

    def answer(self) -> dict[str, Any]: ...

    def calls(self) -> list[ToolCall]: ...


@runtime_checkable
class Wire(Protocol):
    """One provider wire format (OpenAI Chat, OpenAI Responses, Anthropic Messages)."""

    #: The API's name in metrics and logs: ``chat``, ``responses`` or ``anthropic``.
    name: str
    #: The provider whose upstream and credential the format uses: ``openai``/``anthropic``.
    provider: str
    #: The request paths (after ``/v1``) the gateway prepares with this wire.
    paths: tuple[str, ...]

    def extract(self, body: Mapping[str, Any]) -> Extracted:
        """The request as engine messages + tools to count; :class:`WireError` if malformed."""
        ...

    def build(
        self, req: Extracted, prepared: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> bytes:
        """The provider's request body for ``prepared`` (``tools`` replace the client's)."""
        ...

    def with_round(
        self, req: Extracted, assistant: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> Extracted:
        """``req`` continued by an assistant turn (as :meth:`assistant_and_calls` gave it)
        and the ``(call id, text)`` results of its tool calls."""
        ...

    def usage(self, resp: Any) -> int | None:
        """The provider's prompt tokens of a response body (None when absent)."""
        ...

    def stream_usage(self, event: Mapping[str, Any]) -> int | None:
        """The prompt tokens one stream event reports (None when it reports none)."""
        ...

    def is_usage_only_event(self, event: Mapping[str, Any]) -> bool:
        """True for the usage-only event :meth:`with_stream_usage` asked for."""
        ...

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """A copy of a streaming request that asks for usage in the stream, or None when
        the stream reports usage anyway (or the client asked for it already)."""
        ...

    def assistant_and_calls(self, resp: Any) -> tuple[dict[str, Any] | None, list[ToolCall]]:
        """The answer's assistant turn (in the wire's own form) and its tool calls."""
        ...

    def stream_turn(self) -> StreamTurn:
        """A reader of one streamed answer."""
        ...

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """An error of the gateway's own in the body shape this API's clients parse."""
        ...

    def tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Chat-format function tools (``{"type": "function", "function": ...}``) as this
        wire's tool definitions."""
        ...

    def tool_name(self, tool: Mapping[str, Any]) -> str:
        """The name of one of this wire's tool definitions (empty when it has none)."""
        ...

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers carrying ``api_key`` to this provider."""
        ...


# --------------------------------------------------------------------------- plain values


def is_given(value: T | None) -> TypeGuard[T]:
    """False for None and the SDKs' ``NOT_GIVEN`` / ``omit`` sentinels."""
    if value is None:
        return False
    return type(value).__name__ not in ("NotGiven", "Omit")


#: types returned as they are by :func:`to_plain` (exact types: no SDK object is one)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def to_plain(obj: Any) -> Any:
    """A JSON-like copy of SDK objects (pydantic models, TypedDicts, lists)."""
    kind = type(obj)
    if kind in _SCALARS:  # the bulk of a long history: no abc or attribute look-up
        return obj
    if kind is dict:
        return {
            k if type(k) is str else str(k): v if type(v) in _SCALARS else to_plain(v)
            for k, v in obj.items()
            if type(v) in _SCALARS or is_given(v)
        }
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items() if is_given(v) or v is None}
    if isinstance(obj, list | tuple):
        return [to_plain(v) for v in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return to_plain(dump(exclude_none=True, mode="json"))
        except TypeError:  # pragma: no cover - very old pydantic-like objects
            return to_plain(dump())
    return obj


def json_args(value: Any) -> str:
    """Tool-call arguments as the JSON string OpenAI messages carry."""
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def parse_args(value: Any) -> Any:
    """Tool-call arguments as an object (Anthropic ``input``, LangChain ``args``)."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            return {"_raw": value}
    return value if value is not None else {}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: results computed from the last tool lists (a client sends the same tools on every
#: call): their JSON text here, their counting shape in each wire
TOOLS_MEMO = JsonMemo(size=16)


class _Texts:
    """JSON texts of long values (the messages of a conversation, the same on every call
    but the last few), found by their memo key; the oldest dropped once texts and keys
    hold more than ``max_chars`` characters (bytes) together."""

    #: values whose memo key is shorter are encoded each time (as fast as a look-up)
    MIN_BYTES = 2048

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._texts: Lru[bytes, bytes] = Lru(max_chars, _key_and_text)

    @property
    def _chars(self) -> int:
        return self._texts.weight

    def text(self, value: Any) -> bytes:
        """The UTF-8 JSON text of ``value``."""
        key = memo_key(value)
        if key is None or len(key) < self.MIN_BYTES:
            return _json(value).encode()
        done = self._texts.get(key)
        if done is not None:
            return done
        text = _json(value).encode()
        if len(text) + len(key) <= self.max_chars // 8:
            self._texts.put(key, text)
        return text


def _key_and_text(key: bytes, text: bytes) -> int:
    return len(key) + len(text)


#: about 8 MB: the long messages of the conversations in flight
_TEXTS = _Texts(max_chars=8_000_000)

#: stand for a part of the body while the rest is encoded; random per process, so no
#: request can hold them
_MARKS = {k: f"ctxpolicy-{k}-{secrets.token_hex(16)}" for k in ("tools", "messages", "input")}
_MARKS_JSON = {k: _json(v) for k, v in _MARKS.items()}


def converted_tools(
    tools: Any, wire: str, convert: Callable[[Any], list[dict[str, Any]]]
) -> tuple[list[dict[str, Any]] | None, bytes | None]:
    """``convert(tools)`` (a wire's tools in the counter's shape, None when empty), kept
    per distinct ``tools`` (a client sends the same tools on every call), and the
    ``memo_key`` of ``tools``."""
    key = memo_key(tools)
    done = TOOLS_MEMO.get(key, wire)
    if done is not MISS:
        return done, key
    out = convert(tools) or None
    if key is None or out is None:
        return out, key
    result = KeyedList(out)
    result.memo_key = b"\x00" + wire.encode() + b":" + key
    TOOLS_MEMO.put(key, wire, result)
    return result, key


def dumps(body: Mapping[str, Any], tools_key: bytes | None = None) -> bytes:
    """A request body as the compact UTF-8 JSON sent upstream, the same bytes as
    ``json.dumps(body, ensure_ascii=False, separators=(",", ":"))``.

    What repeats from call to call is encoded once and spliced in: a ``tools`` list
    (``tools_key``: its :func:`~ctxpolicy.conversation.samejson.memo_key` when the
    caller knows it) and each long message of ``messages`` / ``input``."""
    parts: dict[str, bytes] = {}
    tools = body.get("tools")
    if type(tools) is list and len(tools) >= 4:
        key = tools_key if tools_key is not None else memo_key(tools)
        text = TOOLS_MEMO.get(key, "json")
        if text is MISS:
            text = _json(tools).encode()
            TOOLS_MEMO.put(key, "json", text)
        parts["tools"] = text
    for name in ("messages", "input"):
        items = body.get(name)
        if type(items) is list and len(items) >= 4:
            parts[name] = b"[" + b",".join(map(_TEXTS.text, items)) + b"]"
    if not parts:
        return _json(body).encode()
    # the rest of the body with a mark for each part, then the parts' bytes in their place
    out = _json({**body, **{k: _MARKS[k] for k in parts}})
    at: list[tuple[int, str]] = []
    for name in parts:
        mark = _MARKS_JSON[name]
        if out.count(mark) != 1:  # pragma: no cover - the marks are random per process
            return _json(body).encode()
        at.append((out.index(mark), name))
    chunks: list[bytes] = []
    pos = 0
    for i, name in sorted(at):
        chunks += (out[pos:i].encode(), parts[name])
        pos = i + len(_MARKS_JSON[name])
    chunks.append(out[pos:].encode())
    return b"".join(chunks)


def dumps_request(body: dict[str, Any], req: Extracted, tools: Any = None) -> bytes:
    """The outgoing ``body`` of ``req`` as :func:`dumps` encodes it: with ``tools`` in
    place of the client's when given, else with the client's (their memo key known)."""
    if tools is not None:
        body["tools"] = tools
    return dumps(body, req.tools_key if tools is None else None)


def request_state(req: Extracted, kind: type[T]) -> T:
    """``req.state``, the ``kind`` its wire's ``extract`` put there."""
    state = req.state
    assert isinstance(state, kind)
    return state


def positive_int(value: Any) -> int | None:
    """``value`` when it is a positive int (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
