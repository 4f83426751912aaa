"""Small text helpers shared by the built-in preprocessors.

Import-light on purpose (stdlib only): ``ctxpolicy validate`` imports every
preprocessor module to read its options model.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Iterable, Iterator, Sequence

from ctxpolicy.conversation.cut import is_wide

__all__ = [
    "ANSI_RE",
    "OUTLINE_DESCRIPTION",
    "already_numbered",
    "clean_terminal",
    "collapse_repeats",
    "cut_chars",
    "cut_middle",
    "drop_controls",
    "head_tail_chars",
    "never_longer",
    "number_lines",
    "omitted_chars_marker",
    "omitted_lines_marker",
    "outline",
    "own_line_number",
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


def head_tail_chars(text: str, max_chars: int, outline_limit: int = 0) -> str:
    """First and last ``max_chars // 2`` characters with a marker between them (and up
    to ``outline_limit`` definition lines of the omitted part, see :func:`cut_middle`).

    Returns ``text`` unchanged when it fits, or when cutting would not make it shorter.
    """
    max_chars = max(max_chars, 0)
    if len(text) <= max_chars:
        return text
    return cut_middle(text, max_chars - max_chars // 2, max_chars // 2, outline_limit)


def cut_middle(text: str, head_n: int, tail_n: int, outline_limit: int = 0) -> str:
    """``text`` without the characters between its first ``head_n`` and last ``tail_n``:
    a marker in their place, followed by up to ``outline_limit`` definition lines of
    the omitted part (:func:`outline`); ``text`` itself when that is not shorter."""
    omitted = len(text) - head_n - tail_n
    if omitted <= 0:
        return text
    tail = text[len(text) - tail_n :] if tail_n else ""
    defs: list[str] = []
    if outline_limit:
        # whole lines of the omitted part (the partial first and last belong to head/tail)
        lines = text[head_n : len(text) - tail_n].split("\n")[1:-1]
        defs = outline(lines, text.count("\n", 0, head_n) + 2, outline_limit)
    out = text[:head_n] + omitted_chars_marker(omitted) + "".join(d + "\n" for d in defs) + tail
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
    if "\x1b" in text:  # every escape sequence starts with ESC
        text = ANSI_RE.sub("", text)
    if "\r" in text:  # (a one-character scan is far cheaper than a two-character one)
        text = text.replace("\r\n", "\n")
    if "\r" in text or "\b" in text:  # redraws and backspaces: line by line
        out: list[str] = []
        for line in text.split("\n"):
            if "\r" in line:
                parts = [p for p in line.split("\r") if p]
                line = parts[-1] if parts else ""
            if "\b" in line:
                line = backspaced(line)
            out.append(line)
        text = "\n".join(out)
    # the other controls go in one pass (none of them is a newline)
    return drop_controls(text)


def backspaced(line: str) -> str:
    """``line`` as a terminal shows it: each backspace deletes the character before it."""
    buf: list[str] = []
    for ch in line:
        if ch == "\b":
            if buf:
                buf.pop()
        else:
            buf.append(ch)
    return "".join(buf)


_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F])


def drop_controls(text: str) -> str:
    """``text`` without the C0 controls but tab and newline, and without DEL
    (``_CONTROL_RE.sub("", text)``). An ASCII text (most tool output) goes through
    ``bytes.translate``: one table lookup a byte instead of a regex charset test a
    character."""
    if text.isascii():  # O(1): CPython keeps the flag
        data = text.encode("ascii")
        kept = data.translate(None, _CONTROL_BYTES)
        return text if len(kept) == len(data) else kept.decode("ascii")
    return _CONTROL_RE.sub("", text)


def collapse_repeats(lines: Iterable[str], *, min_repeats: int = 3) -> list[str]:
    """Collapse runs of identical lines: the line once, then ``… line repeated N times``.

    ``N`` is how many times the line occurred in a row. Runs shorter than
    ``min_repeats`` are kept as they are.
    """
    lines = list(lines)
    if min_repeats >= 2:
        # a run of n equal lines is n - 1 equal neighbours in a row: without
        # min_repeats - 1 of them nothing collapses (C-speed: comparisons as bytes)
        same = bytes(map(operator.eq, lines, itertools.islice(lines, 1, None)))
        if b"\x01" * (min_repeats - 1) not in same:
            return lines
    out: list[str] = []
    for line, group in itertools.groupby(lines):
        run = len(list(group))
        if run >= min_repeats:
            out.append(line)
            out.append(f"… line repeated {run} times")
        else:
            out.extend([line] * run)
    return out


def tokens_to_chars(text: str, max_tokens: int, *, from_end: bool = False) -> int:
    """How many characters of ``text`` (from its start, or end) fit ``max_tokens``."""
    budget = max_tokens * 4  # in quarter-tokens
    used = 0
    seq = reversed(text) if from_end else iter(text)
    n = 0
    for ch in seq:
        cost = 1 if ch < "\x80" else (4 if is_wide(ch) else 2)
        if used + cost > budget:
            break
        used += cost
        n += 1
    return n


def never_longer(original: str, processed: str) -> str:
    """The processed text, unless it is longer than the original (then the original)."""
    return processed if len(processed) <= len(original) else original


# --------------------------------------------------------------------------- outline

OUTLINE_DESCRIPTION = (
    "Up to this many definition lines of the omitted part (def/class/fn/func, C-family "
    "signatures…) are kept, numbered, after the marker, so a cut source file still shows "
    "what it holds and where. 0: off."
)

#: A line number an editor or ``cat -n`` put in front of the text (``   282\t``, ``282:``).
_LINENO_RE = re.compile(r"^\s*(\d+)(?:\t|: ?|\|)")
#: Definitions introduced by a keyword, at any indentation (methods included).
_KEYWORD_DEF_RE = re.compile(
    r"(?:(?:export|default|pub(?:\([\w:]+\))?|async|unsafe|static|final|abstract|public|"
    r"private|protected|internal|override|open|inline|extern|const|local)\s+)*"
    r"(?:def|class|function\*?|fn|func|struct|enum|trait|impl|interface|protocol|module|"
    r"namespace|object|record|union|actor|primitive|fun|be|new|sub|proc|defp?|macro)"
    r"\s+[\w<(]"
)
#: A C-family signature: type words, a name and a parameter list, no ``;`` or ``=``
#: (a declaration or a call), optionally followed by ``{``.
_SIGNATURE_RE = re.compile(
    r"(?:(?:public|private|protected|static|final|abstract|virtual|inline|extern|"
    r"override|synchronized|async)\s+)*"
    r"[A-Za-z_][\w:<>,\[\]*& ]*?[\s*&]\**[A-Za-z_][\w:~]*\("
    r"(?:[^;=]*\)\s*(?:const\s*)?(?:(?:throws|->)\s*[\w<>, .:]+)?\s*\{?|[^;=)]*,)\s*$"
)
_ACCESS_MODIFIER = re.compile(r"(?:public|private|protected|static)\b")
_NOT_A_DEFINITION = re.compile(
    r"(?:if|else|for|while|switch|return|case|do|catch|try|sizeof|new|delete|throw|"
    r"goto|assert|print|printf|yield|await|raise|with|elif|except)\b"
)


def own_line_number(line: str) -> int | None:
    """The line number a tool put in front of ``line`` (``   282\t``, ``282:``), if any."""
    m = _LINENO_RE.match(line)
    return int(m.group(1)) if m else None


def already_numbered(lines: Sequence[str], sample: int = 40) -> bool:
    """Whether most of the first ``sample`` non-empty lines start with a line number
    (``cat -n``, ``282:``), so that numbering them again would only add noise."""
    seen = [ln for ln in lines[: sample * 2] if ln.strip()][:sample]
    return len(seen) >= 3 and sum(1 for ln in seen if _LINENO_RE.match(ln)) >= 0.9 * len(seen)


#: What a definition line starts with: every keyword and modifier above is lower-case
#: ASCII, and a signature starts with ``[A-Za-z_]``.
_DEF_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_LOWER_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz")


def _definition(body: str, stripped: str | None = None) -> bool:
    """Whether ``body`` (``stripped`` is ``body.lstrip()``, when the caller has it) is a
    definition line. Each regex runs only where its first character could match, and
    the signature only on a line with a ``(``: the same answers, fewer regex calls."""
    if stripped is None:
        stripped = body.lstrip()
    if not stripped or len(stripped) > 300 or stripped[0] not in _DEF_FIRST:
        return False
    if stripped[0] in _LOWER_FIRST:
        if _NOT_A_DEFINITION.match(stripped):
            return False
        if _KEYWORD_DEF_RE.match(stripped):
            return True
    # C-family signatures only at the start of a line or behind an access modifier
    # (a method), so calls and statements inside bodies are not taken
    if "(" not in stripped:
        return False
    if body[:1].isspace() and not _ACCESS_MODIFIER.match(stripped):
        return False
    return bool(_SIGNATURE_RE.match(stripped))


def outline(lines: Sequence[str], first_lineno: int, limit: int, width: int = 160) -> list[str]:
    """Definition lines (``def``/``class``/``fn``/``func``/C-family signatures…) among
    ``lines``, numbered — what an agent needs to ask for the omitted part by range.

    A line that carries its own number (``cat -n``, ``282:``) keeps it; others are
    numbered from ``first_lineno``. At most ``limit`` lines, each at most ``width``
    characters; a last line says how many more definitions were left out.
    """
    if limit <= 0:
        return []
    return definitions_listing(definitions(lines, first_lineno), limit, width)


def definitions(lines: Sequence[str], first_lineno: int) -> Iterator[tuple[int, str]]:
    """``(number, line)`` of each definition line among ``lines`` (numbered as
    :func:`outline` says)."""
    for i, line in enumerate(lines):
        stripped = line.lstrip()  # (str.lstrip and the regex's \s: the same spaces)
        first = stripped[:1]
        # a line number starts with a digit (\d: str.isdecimal) after the spaces
        m = _LINENO_RE.match(line) if first.isdecimal() else None
        if m:
            number, body = int(m.group(1)), line[m.end() :]
            stripped = body.lstrip()
        elif first not in _DEF_FIRST or (first not in _LOWER_FIRST and "(" not in stripped):
            continue  # what _definition says first of such a line: not one
        else:
            number, body = first_lineno + i, line
        if _definition(body, stripped):
            yield number, body


def definitions_listing(found: Iterable[tuple[int, str]], limit: int, width: int) -> list[str]:
    """:func:`outline`'s lines for the ``(number, line)`` definitions ``found``."""
    listed: list[str] = []
    more = 0
    for number, body in found:
        if len(listed) >= limit:
            more += 1
            continue
        text = body.strip()
        if len(text) > width:
            text = text[: width - 1] + "…"
        listed.append(f"{number}: {text}")
    if not listed:
        return []
    head = "[definitions in the omitted part]"
    return [head, *listed, *([f"[… {more} more definitions]"] if more else [])]
