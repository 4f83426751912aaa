"""Cutting text to a size: head/tail with the elision marker, one-line shortening,
and the one no-tokenizer token estimate (script-aware: :func:`estimate_tokens`).

:func:`head_tail` keeps about two thirds head and one third tail with
``[… N chars elided …]`` (:data:`ELISION`) between; :func:`truncate_keep_refs` does
so keeping the reference lines (:mod:`ctxpolicy.conversation.refs`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ctxpolicy.conversation.messages import call_arguments, call_name
from ctxpolicy.conversation.refs import split_refs

__all__ = [
    "ELISION",
    "describe_call",
    "estimate_tokens",
    "first_meaningful_line",
    "head_tail",
    "is_wide",
    "result_outcome",
    "short",
    "truncate_keep_refs",
]

#: The marker :func:`head_tail` puts where it removed text.
ELISION = re.compile(r"\[… (\d+) chars elided …\]")


def is_wide(ch: str) -> bool:
    """A CJK / full-width character (one token each in the estimate)."""
    return unicodedata.east_asian_width(ch) in ("W", "F")


def estimate_tokens(text: str) -> int:
    """Script-aware token estimate (no tokenizer needed).

    ASCII runs count ~4 characters per token, CJK / full-width characters one token
    each, other non-ASCII characters ~2 per token. Used by ``max_tokens`` options,
    which must not import tiktoken (preprocessors are imported by the validator).
    """
    ascii_n = wide = other = 0
    for ch in text:
        if ch < "\x80":
            ascii_n += 1
        elif is_wide(ch):
            wide += 1
        else:
            other += 1
    return (ascii_n + 3) // 4 + wide + (other + 1) // 2


def head_tail(text: str, max_chars: int) -> str:
    """Keep the head and tail of ``text`` (≈ 2/3 head), with an elision marker."""
    if len(text) <= max_chars:
        return text
    head = max(0, (max_chars * 2) // 3)
    tail = max(0, max_chars - head)
    removed = len(text) - head - tail
    tail_s = text[len(text) - tail :] if tail else ""
    return f"{text[:head]}\n[… {removed} chars elided …]\n{tail_s}"


def truncate_keep_refs(text: str, max_chars: int) -> str | None:
    """Head/tail-truncate ``text`` to ``max_chars`` keeping reference lines.

    Returns None when nothing would be saved (already short, already truncated, or
    the result would not be shorter).
    """
    body, refs = split_refs(text)
    if len(body) <= max_chars or ELISION.search(body):
        return None
    out = head_tail(body, max_chars)
    if refs:
        out = out + "\n" + "\n".join(refs)
    return out if len(out) < len(text) else None


def short(text: str, n: int) -> str:
    """One line, at most ``n`` characters (with an ellipsis)."""
    line = " ".join(text.split())
    return line if len(line) <= n else line[: max(0, n - 1)] + "…"


def describe_call(tc: Mapping[str, Any], n: int = 120) -> str:
    """``name(arguments)`` of a tool call, shortened."""
    name = call_name(tc) or "?"
    args = call_arguments(tc, "")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False, sort_keys=True)
    try:
        parsed = json.loads(args) if args else {}
        if isinstance(parsed, dict):
            args = ", ".join(f"{k}={v}" for k, v in parsed.items())
    except ValueError:
        pass
    return short(f"{name}({args})", n)


def first_meaningful_line(text: str, n: int = 120) -> str:
    body, _ = split_refs(text)
    for line in body.splitlines():
        if line.strip():
            return short(line, n)
    return ""


#: characters of a table rule or underline (``----+----``, ``===``): not an outcome
_RULE_CHARS = frozenset("-+=|_:~*#─━│┃┼╋┬┴├┤╪═ \t")


def result_outcome(text: str, n: int = 120, first_n: int = 60) -> str:
    """What a tool result says: all its meaningful lines joined with ``; `` when they
    fit in ``n`` characters (a computed table such as ``region; APAC 0.47; EU 0.57``
    stays whole), else its first meaningful line in at most ``first_n``. Reference
    lines and table rules are skipped; one pass over the text."""
    body, _ = split_refs(text)
    parts: list[str] = []
    size = -2
    for raw in body.splitlines():
        line = " ".join(raw.split())
        if not line or _RULE_CHARS.issuperset(line):
            continue
        size += len(line) + 2
        if size > n:
            return short(parts[0] if parts else line, first_n)
        if parts and not parts[-1].endswith((":", ";")):
            parts.append("; ")
        elif parts:
            parts.append(" ")
        parts.append(line)
    return "".join(parts)
