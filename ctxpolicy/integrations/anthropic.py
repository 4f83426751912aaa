"""Anthropic SDK adapter (extra ``anthropic``): budgeted ``messages.create``.

::

    import anthropic, ctxpolicy
    from ctxpolicy.integrations.anthropic import wrap

    client = wrap(anthropic.Anthropic(), ctxpolicy.Session(policy))
    resp = client.messages.create(model="claude-sonnet-4-5", max_tokens=2048,
                                  system=SYSTEM, messages=history, tools=tools)

Messages API content is converted to the engine's OpenAI-style messages and back
(:class:`AnthropicConversation`):

* ``system`` (string or text blocks) ↔ the system message;
* ``text`` / ``image`` / ``document`` blocks ↔ user or assistant content;
* ``tool_use`` blocks ↔ assistant ``tool_calls`` (``input`` ↔ JSON ``arguments``);
* ``tool_result`` blocks of a user message ↔ ``tool`` messages directly after the
  assistant message, so a ``tool_use`` and its ``tool_result`` are one unit and are
  kept or dropped together; the user's other blocks follow as a user message;
* ``thinking`` / ``redacted_thinking`` blocks stay with their assistant message
  (their text is counted, their signature is sent back untouched).

Messages the policy keeps unchanged are sent back as their original blocks
(``cache_control``, ``citations``, signatures intact); rewritten ones (a truncated
tool result, a summary, the ledger) become new blocks, a truncated ``tool_result``
keeping its ``is_error`` and ``cache_control``.

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

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.driver import CallDriver, UsageOnly
from ctxpolicy.conversation import content_text, message_fingerprint
from ctxpolicy.integrations._common import (
    Message,
    Proxy,
    as_session,
    is_async_callable,
    is_given,
    json_args,
    parse_args,
    require,
    to_plain,
)

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

#: The Messages API accepts at most this many ``cache_control`` breakpoints.
MAX_BREAKPOINTS = 4
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
OMITTED_PREFIX = "[earlier conversation omitted to fit the context window]"


def _anthropic() -> Any:
    return require("anthropic", "anthropic")


# --------------------------------------------------------------------------- conversion


def _block_to_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """A content block as an OpenAI content part (for counting and summaries)."""
    btype = block.get("type")
    if btype == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if btype == "image":
        src = block.get("source") or {}
        if src.get("type") == "base64":
            url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
        else:
            url = str(src.get("url", ""))
        return {"type": "image_url", "image_url": {"url": url}}
    if btype == "document":
        title = block.get("title") or (block.get("source") or {}).get("type", "")
        return {"type": "text", "text": f"[document {title}]"}
    if btype == "thinking":
        return {"type": "text", "text": str(block.get("thinking", ""))}
    if btype == "redacted_thinking":
        return {"type": "text", "text": "[redacted thinking]"}
    if btype in ("tool_use", "tool_result"):
        return None
    return {"type": "text", "text": content_text([block]) or str(block.get("type", ""))}


def _tool_result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, Mapping):
                if b.get("type") == "text":
                    parts.append(str(b.get("text", "")))
                else:
                    parts.append(f"[{b.get('type', 'block')}]")
        return "\n".join(parts)
    return str(content)


def _simple_content(parts: list[dict[str, Any]]) -> Any:
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(str(p["text"]) for p in parts)
    return parts


@dataclass
class _Origin:
    role: str  # "system" | "user" | "assistant"
    blocks: list[Any]  # original blocks (or a one-element [str] for string content)


class AnthropicConversation:
    """A Messages API request (``system`` + ``messages``) as OpenAI-style messages, and back."""

    def __init__(self, messages: Sequence[Any], system: Any = None) -> None:
        self.messages: list[Message] = []
        origins: list[_Origin] = []
        self._tool_results: dict[str, dict[str, Any]] = {}
        self._tool_uses: dict[str, dict[str, Any]] = {}
        self._assistants: list[tuple[list[str], list[dict[str, Any]]]] = []
        self.system_blocks: list[dict[str, Any]] | None = None
        self.system_was_string = isinstance(system, str)
        if is_given(system) and system:
            if isinstance(system, str):
                self.system_blocks = [{"type": "text", "text": system}]
            else:
                self.system_blocks = [to_plain(b) for b in system]
            text = "\n".join(str(b.get("text", "")) for b in self.system_blocks)
            self.messages.append({"role": "system", "content": text})
            origins.append(_Origin("system", list(self.system_blocks)))
        for raw in messages:
            m = to_plain(raw)
            if not isinstance(m, Mapping):
                continue
            role = str(m.get("role", "user"))
            content = m.get("content")
            if isinstance(content, str) or content is None:
                self.messages.append({"role": role, "content": content or ""})
                origins.append(_Origin(role, [content or ""]))
                continue
            blocks = [
                b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content
            ]
            if role == "assistant":
                parts = [p for p in (_block_to_part(b) for b in blocks) if p is not None]
                calls: list[dict[str, Any]] = []
                for b in blocks:
                    if b.get("type") == "tool_use":
                        cid = str(b.get("id", ""))
                        self._tool_uses[cid] = b
                        calls.append(
                            {
                                "id": cid,
                                "type": "function",
                                "function": {
                                    "name": str(b.get("name", "")),
                                    "arguments": json_args(b.get("input")),
                                },
                            }
                        )
                msg: Message = {
                    "role": "assistant",
                    "content": _simple_content(parts) if parts else None,
                }
                if calls:
                    msg["tool_calls"] = calls
                    self._assistants.append(([c["id"] for c in calls], blocks))
                self.messages.append(msg)
                origins.append(_Origin("assistant", blocks))
                continue
            results = [b for b in blocks if b.get("type") == "tool_result"]
            others = [b for b in blocks if b.get("type") != "tool_result"]
            for b in results:
                tid = str(b.get("tool_use_id", ""))
                self._tool_results[tid] = b
                self.messages.append(
                    {"role": "tool", "tool_call_id": tid, "content": _tool_result_text(b)}
                )
                origins.append(_Origin("user", [b]))
            if others or not results:
                parts = [p for p in (_block_to_part(b) for b in others) if p is not None]
                self.messages.append({"role": role, "content": _simple_content(parts)})
                origins.append(_Origin(role, others))
        self._origins: dict[str, list[_Origin]] = {}
        for msg, origin in zip(self.messages, origins, strict=True):
            self._origins.setdefault(message_fingerprint(msg), []).append(origin)

    # -- back --------------------------------------------------------------------------
    def to_request(
        self,
        prepared: Sequence[Mapping[str, Any]],
        *,
        breakpoints: bool = False,
        breakpoint_after: int | None = None,
        cache_tail: bool = False,
    ) -> AnthropicRequest:
        """``system`` and ``messages`` for ``prepared``; optionally with cache breakpoints.

        ``breakpoint_after`` is the index (in ``prepared``) of the last message of the
        stable prefix; ``None`` means only the system prompt is stable. Markers are
        placed only with ``breakpoints=True``.
        """
        system: list[dict[str, Any]] = []
        out: list[dict[str, Any]] = []
        # (index in prepared) -> (message index in out or -1 for system, last block index)
        where: dict[int, tuple[int, int]] = {}
        used: dict[str, int] = {}
        for i, m in enumerate(prepared):
            fp = message_fingerprint(m)
            cands = self._origins.get(fp)
            origin: _Origin | None = None
            if cands:
                n = used.get(fp, 0)
                used[fp] = n + 1
                origin = cands[min(n, len(cands) - 1)]
            if origin is not None:
                role, blocks = origin.role, copy.deepcopy(origin.blocks)
            else:
                role, blocks = self._rebuild(m)
            if role == "system":
                system.extend(
                    b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in blocks
                )
                if system:
                    where[i] = (-1, len(system) - 1)
                continue
            if not blocks:
                continue
            if out and out[-1]["role"] == role:
                prev = out[-1]
                if isinstance(prev["content"], str):
                    prev["content"] = (
                        [{"type": "text", "text": prev["content"]}] if prev["content"] else []
                    )
                new_blocks = [
                    {"type": "text", "text": b} if isinstance(b, str) else b for b in blocks
                ]
                new_blocks = [
                    b for b in new_blocks if not (b.get("type") == "text" and not b.get("text"))
                ]
                if role == "user":  # tool_result blocks must come first in a user turn
                    tr = [b for b in new_blocks if b.get("type") == "tool_result"]
                    if tr and any(b.get("type") != "tool_result" for b in prev["content"]):
                        firsts = [b for b in prev["content"] if b.get("type") == "tool_result"]
                        rest = [b for b in prev["content"] if b.get("type") != "tool_result"]
                        prev["content"] = [*firsts, *tr, *rest]
                        new_blocks = [b for b in new_blocks if b.get("type") != "tool_result"]
                        prev["content"].extend(new_blocks)
                    else:
                        prev["content"].extend(new_blocks)
                else:
                    prev["content"].extend(new_blocks)
                where[i] = (len(out) - 1, len(prev["content"]) - 1)
                continue
            if len(blocks) == 1 and isinstance(blocks[0], str):
                out.append({"role": role, "content": blocks[0]})
                where[i] = (len(out) - 1, 0)
            else:
                out.append({"role": role, "content": list(blocks)})
                where[i] = (len(out) - 1, len(blocks) - 1)
        if out and out[0]["role"] != "user":
            out.insert(0, {"role": "user", "content": OMITTED_PREFIX})
            where = {k: (mi + 1 if mi >= 0 else mi, bi) for k, (mi, bi) in where.items()}
        req = AnthropicRequest(
            system=system, messages=out, system_was_string=self.system_was_string
        )
        if breakpoints:
            req.place_breakpoints(where, breakpoint_after, cache_tail=cache_tail)
        return req

    def _rebuild(self, m: Mapping[str, Any]) -> tuple[str, list[Any]]:
        role = str(m.get("role", "user"))
        if role in ("system", "developer"):
            return "system", [{"type": "text", "text": content_text(m.get("content"))}]
        if role == "tool":
            tid = str(m.get("tool_call_id", ""))
            base = self._tool_results.get(tid, {})
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": tid,
                "content": content_text(m.get("content")),
            }
            for key in ("is_error", "cache_control"):
                if key in base:
                    block[key] = base[key]
            return "user", [block]
        if role == "assistant":
            ids = [str(tc.get("id", "")) for tc in m.get("tool_calls") or []]
            blocks: list[Any] = []
            # thinking blocks of the original turn must precede its tool_use blocks
            for orig_ids, orig_blocks in self._assistants:
                if ids and orig_ids == ids:
                    blocks.extend(
                        b for b in orig_blocks if b.get("type") in ("thinking", "redacted_thinking")
                    )
                    break
            text = content_text(m.get("content"))
            if text:
                blocks.append({"type": "text", "text": text})
            for tc in m.get("tool_calls") or []:
                tid = str(tc.get("id", ""))
                orig = self._tool_uses.get(tid)
                if orig is not None:
                    blocks.append(copy.deepcopy(orig))
                else:
                    fn = tc.get("function") or {}
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": tid,
                            "name": fn.get("name", ""),
                            "input": parse_args(fn.get("arguments")),
                        }
                    )
            return "assistant", blocks
        content = m.get("content")
        if isinstance(content, list):
            blocks = []
            for p in content:
                if isinstance(p, Mapping) and p.get("type") == "image_url":
                    url = str((p.get("image_url") or {}).get("url", ""))
                    if url.startswith("data:") and ";base64," in url:
                        media, data = url[5:].split(";base64,", 1)
                        blocks.append(
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": media, "data": data},
                            }
                        )
                    else:
                        blocks.append({"type": "image", "source": {"type": "url", "url": url}})
                else:
                    text = content_text([p])
                    if text:
                        blocks.append({"type": "text", "text": text})
            return "user", blocks
        return "user", [str(content or "")]


@dataclass
class CacheBreakpoints:
    """Where the adapter put ``cache_control`` markers (for tests and events)."""

    stable_index: int | None  # index in the prepared list of the last stable message
    positions: list[tuple[int, int]]  # (message index or -1 for system, block index)


@dataclass
class AnthropicRequest:
    """``system`` + ``messages`` ready for ``messages.create``."""

    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    system_was_string: bool = False
    breakpoints: CacheBreakpoints | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages}
        if self.system:
            plain = (
                self.system_was_string
                and len(self.system) == 1
                and set(self.system[0]) == {"type", "text"}
            )
            out["system"] = self.system[0]["text"] if plain else self.system
        return out

    def _count_markers(self) -> int:
        n = sum(1 for b in self.system if isinstance(b, dict) and "cache_control" in b)
        for m in self.messages:
            if isinstance(m["content"], list):
                n += sum(1 for b in m["content"] if isinstance(b, dict) and "cache_control" in b)
        return n

    def _mark(self, pos: tuple[int, int]) -> bool:
        mi, bi = pos
        if mi == -1:
            if not (0 <= bi < len(self.system)):
                return False
            block = self.system[bi]
        else:
            if not (0 <= mi < len(self.messages)):
                return False
            msg = self.messages[mi]
            if isinstance(msg["content"], str):
                if not msg["content"]:
                    return False
                msg["content"] = [{"type": "text", "text": msg["content"]}]
                bi = 0
            if not (0 <= bi < len(msg["content"])):
                return False
            block = msg["content"][bi]
        if not isinstance(block, dict) or block.get("type") in ("thinking", "redacted_thinking"):
            return False
        if block.get("type") == "text" and not block.get("text"):
            return False
        if "cache_control" not in block:
            block["cache_control"] = dict(EPHEMERAL)
        return True

    def place_breakpoints(
        self,
        where: Mapping[int, tuple[int, int]],
        stable_index: int | None,
        *,
        cache_tail: bool,
    ) -> None:
        wanted: list[tuple[int, int]] = []
        if stable_index is not None:
            # the last block of the stable prefix; walk back over messages that map nowhere
            for i in range(stable_index, -1, -1):
                if i in where:
                    wanted.append(where[i])
                    break
        elif 0 in where and where[0][0] == -1:
            wanted.append(where[0])  # the caller's system prompt (not the ledger after it)
        elif self.system:
            wanted.append((-1, len(self.system) - 1))
        if cache_tail and self.messages:
            last = self.messages[-1]
            bi = 0 if isinstance(last["content"], str) else len(last["content"]) - 1
            tail = (len(self.messages) - 1, bi)
            if tail not in wanted:
                wanted.append(tail)
        placed: list[tuple[int, int]] = []
        for pos in wanted:
            if self._count_markers() >= MAX_BREAKPOINTS:
                break
            if self._mark(pos):
                placed.append(pos)
        self.breakpoints = CacheBreakpoints(stable_index=stable_index, positions=placed)


def to_openai(messages: Sequence[Any], system: Any = None) -> list[Message]:
    """Messages API ``messages`` (+ ``system``) as OpenAI-style messages."""
    return AnthropicConversation(messages, system).messages


def from_openai(
    prepared: Sequence[Mapping[str, Any]], conversation: AnthropicConversation
) -> dict[str, Any]:
    """``{"messages": ..., "system": ...}`` for a prepared list of ``conversation``."""
    return conversation.to_request(prepared).kwargs()


def _tools_for_count(tools: Any) -> list[dict[str, Any]] | None:
    if not is_given(tools) or not tools:
        return None
    out = []
    for t in to_plain(list(tools)):
        if isinstance(t, Mapping):
            out.append(
                {
                    "name": t.get("name", ""),
                    "description": t.get("description", ""),
                    "parameters": t.get("input_schema") or {},
                }
            )
    return out


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
        conv = AnthropicConversation(list(kwargs.pop("messages")), kwargs.pop("system", None))
        tools = _tools_for_count(kwargs.get("tools"))
        driver = CallDriver(
            self.session, format=UsageOnly(self._tokens), catch=(_anthropic().APIStatusError,)
        )
        if self.is_async:

            async def asend(prepared: list[Message]) -> Any:
                req, fps = self._build(conv, prepared)
                resp = await fn(**req.kwargs(), **kwargs)
                self._done(req, fps)
                return resp

            return driver.acall(conv.messages, tools, asend)

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

    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": copy.deepcopy(t["function"]["parameters"]),
        }
        for t in openai_tools()
    ]


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
