"""The code names an agent wrote itself: what a summary keeps of the names it worked with.

A *code name* is a dotted name, a snake_case, CamelCase or camelCase identifier. The
names the agent wrote in its own replies and tool-call arguments (not every name a tool
printed, such as an ``ls`` listing) are the ones it is the likeliest to use again; the
``extractive`` summarizer lists them (its ``names`` option) and the ``summarize`` layer
appends the ones any summary left out (its ``names`` option).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxpolicy.conversation import content_text
from ctxpolicy.conversation import messages as chat

__all__ = ["own_texts", "rank_written_names", "written_text"]

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


def own_texts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the agent wrote in each of ``messages``: an assistant message's text and
    call arguments, its first :data:`MESSAGE_CHARS`; "" for any other message. The
    input of :func:`written_text` and :func:`rank_written_names`, read once."""
    return [
        (content_text(m.get("content")) + "\n" + chat.calls_arguments_text(m))[:MESSAGE_CHARS]
        if m.get("role") == "assistant"
        else ""
        for m in messages
    ]


def written_text(own: Sequence[str]) -> str:
    """The newest :data:`WRITTEN_CHARS` of the agent's writing (:func:`own_texts`)."""
    parts: list[str] = []
    total = 0
    for text in reversed(own):
        if not text:
            continue
        parts.append(text)
        total += len(text)
        if total >= WRITTEN_CHARS:
            break
    return "\n".join(parts)


def rank_written_names(
    own: Sequence[str],
    limit: int,
    *,
    max_len: int = 160,
    previous: Iterable[str] = (),
) -> list[str]:
    """The code names the agent wrote (``own``: :func:`own_texts` of the messages), the
    most often written first (ties: the most recently written first), then the
    ``previous`` ones not among them; at most ``limit``. Deterministic."""
    counts: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, text in enumerate(own):
        for match in _CODE_NAME.finditer(text):
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
