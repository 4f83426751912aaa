"""How the scripted server counts a request's prompt tokens, per API.

ctxpolicy's exact tiktoken count (``cl100k_base``, offline copy) with the OpenAI chat
framing, tool schemas included: the same count a policy using ``tokenizer:
cl100k_base`` computes. Anthropic requests are counted on their text (tool use and
results included) plus 1,600 tokens per image or document; Responses ``input`` items
as the chat messages they stand for.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["count_anthropic_tokens", "count_openai_tokens", "count_request"]

_counter_lock = threading.Lock()
_counter: Any = None


def _get_counter() -> Any:
    global _counter
    with _counter_lock:
        if _counter is None:
            from ctxpolicy.policy.models import ModelSpec
            from ctxpolicy.tokens import TokenCounter

            _counter = TokenCounter(
                ModelSpec(
                    context_window=1_000_000, tokenizer=["cl100k_base", "quicktok:cl100k_base"]
                )
            )
        return _counter


def count_openai_tokens(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
) -> int:
    """Prompt tokens of a Chat Completions request, as this server counts them."""
    c = _get_counter()
    return int(c.count_messages(list(messages)) + (c.count_tools(list(tools)) if tools else 0))


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return json.dumps(block, default=str)
    btype = block.get("type")
    if btype == "text":
        return str(block.get("text", ""))
    if btype in ("thinking",):
        return str(block.get("thinking", ""))
    if btype == "redacted_thinking":
        return ""
    if btype == "tool_use":
        return f"{block.get('name', '')} {json.dumps(block.get('input', {}), default=str)}"
    if btype == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return "\n".join(_block_text(b) for b in content)
        return "" if content is None else str(content)
    if btype in ("image", "document"):
        return ""
    return json.dumps(block, default=str)


def count_anthropic_tokens(body: Mapping[str, Any]) -> int:
    """Prompt tokens of a Messages API request (text blocks, tool use/results, tools)."""
    msgs: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = system if isinstance(system, str) else "\n".join(_block_text(b) for b in system)
        msgs.append({"role": "system", "content": text})
    images = 0
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            images += sum(
                1
                for b in content
                if isinstance(b, Mapping) and b.get("type") in ("image", "document")
            )
            text = "\n".join(_block_text(b) for b in content)
        else:
            text = "" if content is None else str(content)
        msgs.append({"role": str(m.get("role", "user")), "content": text})
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    return count_openai_tokens(msgs, tools) + 1600 * images


def _responses_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if body.get("instructions"):
        msgs.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        return [*msgs, {"role": "user", "content": items}]
    for it in items or []:
        if not isinstance(it, Mapping):
            continue
        t = it.get("type", "message")
        if t == "message":
            content = it.get("content")
            if isinstance(content, list):
                content = "\n".join(
                    str(p.get("text", "")) for p in content if isinstance(p, Mapping)
                )
            msgs.append({"role": str(it.get("role", "user")), "content": content or ""})
        elif t == "function_call":
            msgs.append(
                {"role": "assistant", "content": f"{it.get('name', '')} {it.get('arguments', '')}"}
            )
        elif t == "function_call_output":
            out = it.get("output")
            msgs.append(
                {
                    "role": "tool",
                    "content": out if isinstance(out, str) else json.dumps(out, default=str),
                }
            )
        else:
            msgs.append({"role": "assistant", "content": json.dumps(it, default=str)})
    return msgs


#: The prompt tokens of one request body, by API.
_COUNT: dict[str, Callable[[Mapping[str, Any]], int]] = {
    "chat": lambda body: count_openai_tokens(body.get("messages") or [], body.get("tools")),
    "responses": lambda body: count_openai_tokens(_responses_messages(body), body.get("tools")),
    "anthropic": count_anthropic_tokens,
}


def count_request(api: str, body: Mapping[str, Any]) -> int:
    """Prompt tokens of a request body of ``api`` (``chat``, ``responses``,
    ``anthropic``), as the scripted server counts them."""
    return _COUNT[api](body)
