"""The code names an agent wrote itself: what a summary keeps of the names it worked with.

A *code name* is a dotted name, a snake_case, CamelCase or camelCase identifier. The
names the agent wrote in its own replies and tool-call arguments (not every name a tool
printed, such as an ``ls`` listing) are the ones it is the likeliest to use again; the
``extractive`` summarizer lists them (its ``names`` option) and the ``summarize`` layer
appends the ones any summary left out (its ``names`` option).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxpolicy.conversation import content_text
from ctxpolicy.conversation import messages as chat

__all__ = ["rank_written_names", "written_text"]

#: A code name (bounded repetitions: linear on any text).
_CODE_NAME = re.compile(
    r"\b[A-Za-z_]\w{0,80}(?:\.[A-Za-z_]\w{0,80}){1,8}\b"
    r"|\b[A-Za-z][A-Za-z0-9]{0,80}_[A-Za-z0-9_]{1,80}\b"
    r"|\b[A-Z][a-z0-9]{1,40}(?:[A-Z][a-z0-9]{0,40}){1,8}\b"
    r"|\b[a-z][a-z0-9]{0,40}(?:[A-Z][a-z0-9]{0,40}){1,8}\b"
)
#: Characters of one message read (a reply that pastes a whole file reads as its start).
MESSAGE_CHARS = 20_000
#: The newest characters of the agent's writing :func:`written_text` returns.
WRITTEN_CHARS = 200_000
#: Shortest name listed (``e.g``, ``os.py`` say little).
MIN_CHARS = 4


def _args_text(m: Mapping[str, Any]) -> str:
    parts = []
    for tc in chat.tool_calls(m):
        args = chat.call_arguments(tc, "")
        parts.append(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    return "\n".join(parts)


def _own(m: Mapping[str, Any]) -> str:
    """What the agent wrote in ``m`` (its first :data:`MESSAGE_CHARS`); "" unless an
    assistant message."""
    if m.get("role") != "assistant":
        return ""
    return (content_text(m.get("content")) + "\n" + _args_text(m))[:MESSAGE_CHARS]


def written_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The agent's replies and call arguments among ``messages``, the newest
    :data:`WRITTEN_CHARS` in all."""
    parts: list[str] = []
    total = 0
    for m in reversed(messages):
        text = _own(m)
        if not text:
            continue
        parts.append(text)
        total += len(text)
        if total >= WRITTEN_CHARS:
            break
    return "\n".join(parts)


def rank_written_names(
    messages: Sequence[Mapping[str, Any]],
    limit: int,
    *,
    max_len: int = 160,
    previous: Iterable[str] = (),
) -> list[str]:
    """The code names the agent wrote in ``messages``, the most often written first
    (ties: the most recently written first), then the ``previous`` ones not among
    them; at most ``limit``. Deterministic."""
    counts: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, m in enumerate(messages):
        for match in _CODE_NAME.finditer(_own(m)):
            name = match.group(0)
            if MIN_CHARS <= len(name) <= max_len:
                counts[name] = counts.get(name, 0) + 1
                last[name] = i
    out = sorted(counts, key=lambda k: (-counts[k], -last[k]))[:limit]
    seen = set(out)
    for p in previous:
        if len(out) >= limit:
            break
        if p not in seen:
            out.append(p)
            seen.add(p)
    return out
