"""Small text helpers shared by the built-in preprocessors.

Import-light on purpose (stdlib only): ``ctxpolicy validate`` imports every
preprocessor module to read its options model.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

__all__ = [
    "ANSI_RE",
    "clean_terminal",
    "collapse_repeats",
    "cut_chars",
    "estimate_tokens",
    "head_tail_chars",
    "never_longer",
    "number_lines",
    "omitted_chars_marker",
    "omitted_lines_marker",
    "split_lines",
    "tokens_to_chars",
]

#: CSI / OSC / single-character escape sequences (colours, cursor moves, titles).
ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL or ST
    r"|\x1b[@-Z\\-_]"  # two-character sequences
)


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` (a trailing newline does not add an empty last line).

    ``\\r\\n`` endings lose their ``\\r``; a lone ``\\r`` is kept (see
    :func:`clean_terminal` for progress bars).
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def omitted_chars_marker(n: int) -> str:
    return f"\n... [{n} chars omitted] ...\n"


def omitted_lines_marker(first: int, last: int, total: int | None = None) -> str:
    """Marker for the 1-based inclusive line range ``first..last``."""
    n = last - first + 1
    of = f" of {total}" if total is not None else ""
    return f"... [lines {first}-{last} omitted ({n}{of} lines)] ..."


def head_tail_chars(text: str, max_chars: int) -> str:
    """First and last ``max_chars // 2`` characters with a marker between them.

    Returns ``text`` unchanged when it fits, or when cutting would not make it shorter.
    """
    if max_chars < 0:
        max_chars = 0
    if len(text) <= max_chars:
        return text
    head_n = max_chars - max_chars // 2
    tail_n = max_chars // 2
    omitted = len(text) - head_n - tail_n
    out = text[:head_n] + omitted_chars_marker(omitted) + (text[-tail_n:] if tail_n else "")
    return out if len(out) < len(text) else text


def cut_chars(text: str, max_chars: int) -> str:
    """Keep at most ``max_chars`` characters followed by a ``[+N chars]`` note."""
    if len(text) <= max_chars:
        return text
    out = text[: max(max_chars, 0)] + f"… [+{len(text) - max_chars} chars]"
    return out if len(out) < len(text) else text


def number_lines(lines: Sequence[str], start: int) -> list[str]:
    """``"12: text"`` lines, numbered from ``start`` (1-based)."""
    return [f"{start + i}: {line}" for i, line in enumerate(lines)]


def clean_terminal(text: str) -> str:
    """Remove ANSI escapes and progress-bar redraws.

    Within a line, a carriage return rewinds the cursor: only the text after the
    last ``\\r`` is what a terminal finally shows (``\\r\\n`` is a plain newline).
    Backspaces delete the previous character. Other C0 controls but tab are dropped.
    """
    text = ANSI_RE.sub("", text).replace("\r\n", "\n")
    out: list[str] = []
    for line in text.split("\n"):
        if "\r" in line:
            parts = [p for p in line.split("\r") if p]
            line = parts[-1] if parts else ""
        if "\b" in line:
            buf: list[str] = []
            for ch in line:
                if ch == "\b":
                    if buf:
                        buf.pop()
                else:
                    buf.append(ch)
            line = "".join(buf)
        out.append(_CONTROL_RE.sub("", line))
    return "\n".join(out)


_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def collapse_repeats(lines: Iterable[str], *, min_repeats: int = 3) -> list[str]:
    """Collapse runs of identical lines: the line once, then ``… line repeated N times``.

    ``N`` is how many times the line occurred in a row. Runs shorter than
    ``min_repeats`` are kept as they are.
    """
    out: list[str] = []
    prev: str | None = None
    run = 0

    def flush() -> None:
        if prev is None:
            return
        if run >= min_repeats:
            out.append(prev)
            out.append(f"… line repeated {run} times")
        else:
            out.extend([prev] * run)

    for line in lines:
        if line == prev:
            run += 1
            continue
        flush()
        prev, run = line, 1
    flush()
    return out


def _is_wide(ch: str) -> bool:
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
        elif _is_wide(ch):
            wide += 1
        else:
            other += 1
    return (ascii_n + 3) // 4 + wide + (other + 1) // 2


def tokens_to_chars(text: str, max_tokens: int, *, from_end: bool = False) -> int:
    """How many characters of ``text`` (from its start, or end) fit ``max_tokens``."""
    budget = max_tokens * 4  # in quarter-tokens
    used = 0
    seq = reversed(text) if from_end else iter(text)
    n = 0
    for ch in seq:
        cost = 1 if ch < "\x80" else (4 if _is_wide(ch) else 2)
        if used + cost > budget:
            break
        used += cost
        n += 1
    return n


def never_longer(original: str, processed: str) -> str:
    """The processed text, unless it is longer than the original (then the original)."""
    return processed if len(processed) <= len(original) else original
