"""Cutting text to a size: the one head/tail cutter family with its one marker,
one-line shortening, and the one no-tokenizer token estimate (script-aware:
:func:`estimate_tokens`).

Every cutter that keeps the two ends of a text puts the same marker where it removed
the middle: ``[… N chars elided …]`` (:func:`elision`; with a hint, ``[… N chars
elided; ask for a line range or grep …]``), on a line of its own; a cut by whole lines
says ``[… lines A-B elided (N of M lines) …]`` (:func:`lines_elision`). :data:`ELISION`
recognises the character marker. :func:`cut_middle` is the cut itself,
:func:`head_tail` keeps about two thirds head and one third tail, and
:func:`truncate_keep_refs` does so keeping the reference lines
(:mod:`ctxpolicy.conversation.refs`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ctxpolicy.conversation.refs import split_refs

__all__ = [
    "ELISION",
    "cut_middle",
    "describe_call",
    "elision",
    "estimate_tokens",
    "first_meaningful_line",
    "head_tail",
    "is_wide",
    "lines_elision",
    "result_outcome",
    "short",
    "truncate_keep_refs",
]

#: The marker every head/tail cutter puts where it removed characters (its number is
#: group 1; an optional hint after a semicolon).
ELISION = re.compile(r"\[… (\d+) chars elided(?:; [^\]\n]{1,80})? …\]")


def elision(n: int, hint: str = "") -> str:
    """The marker for ``n`` characters removed (``hint``: how to see them)."""
    return f"[… {n} chars elided; {hint} …]" if hint else f"[… {n} chars elided …]"


def lines_elision(first: int, last: int, total: int | None = None) -> str:
    """The marker for the 1-based inclusive line range ``first..last`` removed."""
    n = last - first + 1
    of = f" of {total}" if total is not None else ""
    return f"[… lines {first}-{last} elided ({n}{of} lines) …]"


def cut_middle(text: str, head_n: int, tail_n: int, hint: str = "", extra: str = "") -> str:
    """``text`` without the characters between its first ``head_n`` and last ``tail_n``:
    the marker on a line of its own in their place (then ``extra``, e.g. an outline of
    what was removed); ``text`` itself when nothing would be removed."""
    removed = len(text) - head_n - tail_n
    if removed <= 0:
        return text
    tail = text[len(text) - tail_n :] if tail_n > 0 else ""
    return f"{text[:head_n]}\n{elision(removed, hint)}\n{extra}{tail}"


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
    """Keep the head and tail of ``text`` (≈ 2/3 head), with the elision marker."""
    if len(text) <= max_chars:
        return text
    head = max(0, (max_chars * 2) // 3)
    return cut_middle(text, head, max(0, max_chars - head))


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
    fn = tc.get("function") or {}
    name = str(fn.get("name", "?"))
    args = fn.get("arguments", "")
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
