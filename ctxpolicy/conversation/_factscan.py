"""Where a match of a fact pattern can start: :mod:`ctxpolicy.conversation.facts`'
patterns tried only there instead of at every position.

Python's ``re`` has no literal to skip to in a pattern that starts with ``\\b`` or a
lookbehind: ``findall`` calls the matcher at every position (about 20 ns a
character, each pattern). The functions here find, at C speed, a superset of the
positions where a pattern can start a match: ``str.find`` of a literal the match
holds, or a scan that starts with a literal ``re`` skips to, of the text itself or
of its *classes* (one byte a character, see below). :func:`matches_at` then tries
the pattern itself there and only there.

:func:`matches_at` returns exactly ``list(pattern.finditer(text))`` when its
``starts`` are non-decreasing and include every ``s`` with
``pattern.match(text, s)``: ``finditer`` takes the match at the least start not
before the end of its previous match, and so does the loop. ``pattern.match(text,
s)`` is the match ``finditer`` finds at ``s``: ``\\b``, ``^`` and lookbehinds see the
characters before ``s``. (None of the patterns matches the empty string.)

Each ``*_starts`` function says which condition every match start meets; each is
linear in the text (bounded lookarounds; a run or a line read at most twice), so
:func:`matches_at` tries a pattern at a subset of the positions ``findall`` would
and stays linear. tests/conversation/test_factscan.py checks every start against
the pattern at every position of generated texts; tests/security/test_fact_redos.py
attacks each scan.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, AnyStr

__all__ = [
    "EXCEPTION_ENDS",
    "Finder",
    "assign_starts",
    "errno_starts",
    "error_line_starts",
    "exception_starts",
    "hex_starts",
    "matches_at",
    "number_starts",
    "path_tokens",
    "ticket_starts",
    "url_starts",
    "uuid_starts",
]


def matches_at(pattern: re.Pattern[str], text: str, starts: Iterable[int]) -> list[re.Match[str]]:
    """``list(pattern.finditer(text))``, ``pattern`` tried at ``starts`` only (see the
    module docstring for what ``starts`` must hold)."""
    out: list[re.Match[str]] = []
    pos = 0
    match = pattern.match
    for s in starts:
        if s >= pos and (m := match(text, s)) is not None:
            out.append(m)
            pos = m.end()
    return out


@dataclass(frozen=True)
class Finder:
    """A pattern and where its matches can start."""

    pattern: re.Pattern[str]
    #: a superset of the positions where ``pattern`` can match, non-decreasing (or
    #: None: the pattern's own scan costs less on this text)
    starts: Callable[[str], list[int] | None]
    #: texts shorter than this are scanned by ``pattern`` itself: trying every
    #: position of a short text costs less than finding where to try (measured)
    short: int = 0

    def finditer(self, text: str) -> list[re.Match[str]]:
        """``list(pattern.finditer(text))``."""
        if len(text) < self.short or (starts := self.starts(text)) is None:
            # most short texts have no match: ``search`` says so without an iterator
            p = self.pattern
            return list(p.finditer(text)) if p.search(text) is not None else []
        return matches_at(self.pattern, text, starts)

    def findall(self, text: str) -> list[Any]:
        """``pattern.findall(text)``."""
        if len(text) < self.short or (starts := self.starts(text)) is None:
            return self.pattern.findall(text)
        found = matches_at(self.pattern, text, starts)
        groups = self.pattern.groups
        if groups == 0:
            return [m.group() for m in found]
        if groups == 1:
            return [m.group(1) or "" for m in found]
        return [m.groups("") for m in found]


def _occurrences(text: AnyStr, sub: AnyStr) -> list[int]:
    """Where ``sub`` occurs in ``text`` (overlaps included), in order."""
    out: list[int] = []
    i = text.find(sub)
    while i >= 0:
        out.append(i)
        i = text.find(sub, i + 1)
    return out


def url_starts(text: str) -> list[int]:
    """``\\bhttps?://`` starts 5 or 4 characters before a ``://`` (occurrences of
    ``://`` are at least 3 apart, so the list is increasing)."""
    out: list[int] = []
    i = text.find("://")
    while i >= 0:
        out.extend(s for s in (i - 5, i - 4) if s >= 0)
        i = text.find("://", i + 3)
    return out


#: a ``-`` followed by 4 hex digits and a ``-``: one character per match, so
#: ``finditer`` tries every ``-``
_UUID_DASH = re.compile(r"-(?=[0-9a-f]{4}-)", re.IGNORECASE)


def uuid_starts(text: str) -> list[int]:
    """A UUID (``8 hex - 4 hex - ...``, case-insensitive) has such a ``-`` 8
    characters after its start."""
    return [m.start() - 8 for m in _UUID_DASH.finditer(text) if m.start() >= 8]


# The scans below read a text's *classes*: one byte a character (``str.encode``
# writes ``?`` for each character outside ASCII), mapped by ``bytes.translate`` to
# what a pattern asks of it, so that the scan starts with a literal ``re`` skips to.
# A class a character outside ASCII (or a ``?``) shares is one it *may* be in: a
# word character, a digit, whitespace; a start is kept whenever it may be one.
_ASCII_WORD = string.ascii_letters + string.digits + "_"
_ASCII_SPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what ``\s`` matches in ASCII


#: a scan that would try more than one position in this many gives way to the
#: pattern's own scan
_FEW = 32


def _table(other: str, *classes: tuple[str, str]) -> bytes:
    """A ``bytes.translate`` table: each character of ``chars`` to ``cls`` for each
    ``(cls, chars)`` (a later pair wins), every other byte to ``other``."""
    table = bytearray(other.encode() * 256)
    for cls, chars in classes:
        for c in chars:
            table[ord(c)] = ord(cls)
    return bytes(table)


def _classes(text: str, table: bytes) -> bytes:
    return text.encode("ascii", "replace").translate(table)


# h: [0-9a-f]; w: another word character; " ": no word character (or outside ASCII)
_HEX_CLASSES = _table(" ", ("w", _ASCII_WORD), ("h", "0123456789abcdef"))
#: 7 of ``[0-9a-f]`` after no word character; the 7 consumed are not word starts
_HEX_START = re.compile(rb"hhhhhhh(?<![hw]hhhhhhh)")


def hex_starts(text: str) -> list[int]:
    """``\\b[0-9a-f]{7,64}``: a word start followed by 7 of ``[0-9a-f]``."""
    return [m.start() for m in _HEX_START.finditer(_classes(text, _HEX_CLASSES))]


# U: [A-Z]; D: [0-9]; - and _; w: another word character; d: outside ASCII (``\d``
# may match it); " ": the rest
_TICKET_CLASSES = _table(
    " ", ("w", _ASCII_WORD), ("U", string.ascii_uppercase), ("D", string.digits),
    ("-", "-"), ("_", "_"), ("d", "?"),
)  # fmt: skip
#: ``_TICKET`` up to its first two ``\d`` (``[A-Z]`` after no word character, then
#: the same bounded repeats); consumes the ``[A-Z]`` only
_TICKET_START = re.compile(rb"U(?<![UDw_]U)(?=[UD]{1,9}(?:[-_][UD]{1,32}){0,8}[-_]?[Dd]{2})")


def ticket_starts(text: str) -> list[int]:
    """``\\b[A-Z][A-Z0-9]{1,9}(?:[-_][A-Z0-9]{1,32}){0,8}[-_]?\\d\\d``, in classes."""
    return [m.start() for m in _TICKET_START.finditer(_classes(text, _TICKET_CLASSES))]


# D: [0-9]; w: another word character; . , % and s (whitespace) as themselves;
# x: $ or outside ASCII (a digit, whitespace or unit may be there); " ": the rest
_NUMBER_CLASSES = _table(
    " ", ("w", _ASCII_WORD), ("D", string.digits), (".", "."), (",", ","), ("%", "%"),
    ("s", _ASCII_SPACE), ("x", "$?"),
)  # fmt: skip
#: ``_NUMBER`` up to the first character of its unit (``[\w%$]`` or outside ASCII),
#: starting at a digit or at an ``x``, after neither a word character nor a ``.``
_NUMBER_TAIL = rb"(?:[.,][Dx]{1,32}){0,16}[sx]?[wx%]"
_NUMBER_STARTS = (
    re.compile(rb"D(?<![Dw.]D)(?=[Dx]{0,31}" + _NUMBER_TAIL + rb")"),
    re.compile(rb"x(?<![Dw.]x)(?=[Dx]{0,32}" + _NUMBER_TAIL + rb")"),
)


def number_starts(text: str) -> list[int] | None:
    """``(?<![\\w.])\\$?\\d{1,32}(?:[.,]\\d{1,32}){0,16}\\s?`` and a unit's first
    character, in classes; None in a text mostly outside ASCII (where about every
    ``x`` would be a start, each tried from Python)."""
    classes = _classes(text, _NUMBER_CLASSES)
    if classes.count(b"x") > len(text) // _FEW:
        return None
    digit, other = ([m.start() for m in p.finditer(classes)] for p in _NUMBER_STARTS)
    return sorted(digit + other) if other else digit


#: a: [A-Za-z0-9]; " ": the rest
_ALNUM_CLASSES = _table(" ", ("a", string.ascii_letters + string.digits))
#: a match of ``facts._EXCEPTION`` ends with one of these
EXCEPTION_ENDS = ("Error", "Exception", "Exceeded", "Timeout", "Failure", "Fault")


def exception_starts(text: str) -> list[int]:
    """``\\b[A-Z][A-Za-z0-9]*(?:Error|...)\\b`` is a whole run of ``[A-Za-z0-9]``
    (a word character on neither side): the start of each run that holds one of the
    endings (each run read once)."""
    hits = sorted({i for end in EXCEPTION_ENDS for i in _occurrences(text, end)})
    if not hits:
        return []
    classes = _classes(text, _ALNUM_CLASSES)
    out: list[int] = []
    run_end = 0
    for i in hits:
        if i >= run_end:
            out.append(classes.rfind(b" ", 0, i) + 1)
            run_end = classes.find(b" ", i)
            if run_end < 0:
                break
    return out


# f: 4 or 5; D: another digit; U: [A-Z]; w: another word character; " ": a space;
# x: outside ASCII (maybe a digit); o: the rest
_ERRNO_CLASSES = _table(
    "o", ("w", _ASCII_WORD), ("U", string.ascii_uppercase), ("D", string.digits),
    ("f", "45"), (" ", " "), ("x", "?"),
)  # fmt: skip
#: ``\b[45]\d\d `` before an [A-Z] (each phrase of ``_ERRNO`` starts with one)
_ERRNO_STATUS = re.compile(rb"f(?<![fDUw]f)(?=[fDx]{2} U)")
#: ``E`` after no word character, before 3 of ``[A-Z]`` (consumes the ``E``)
_ERRNO_E = re.compile(r"E(?<!\wE)(?=[A-Z]{3})")


def errno_starts(text: str) -> list[int]:
    """``\\b(?:E[A-Z]{3,}|HTTP [45]\\d\\d|[45]\\d\\d (?:Bad Request|...))``: a
    word-start ``E`` before 3 of ``[A-Z]``, an ``HTTP `` or a status before an
    uppercase letter."""
    found = [m.start() for m in _ERRNO_E.finditer(text)]
    found += _occurrences(text, "HTTP ")
    found += (m.start() for m in _ERRNO_STATUS.finditer(_classes(text, _ERRNO_CLASSES)))
    return sorted(set(found))


#: ``_ASSIGN``'s ``key \s? (?:=|:=)`` read backwards from the ``=``: the key is a
#: whole run of ``[\w.-]`` (nothing of ``[\w.-]`` before it, by the lookbehind, and
#: ``\s``, ``:`` and ``=`` are not in it), 2 to 61 characters long, so one ``=`` has
#: at most one key. The scan of the reversed text skips to each ``=`` (a literal) and
#: consumes no other ``=``.
_ASSIGN_BACKWARDS = re.compile(r"=:?\s?([\w.-]{2,61})(?![\w.-])")


def assign_starts(text: str) -> list[int]:
    """``(?<![\\w.-])[A-Za-z_][\\w.-]{1,60}\\s?(?:=|:=)``: the start of the run of
    ``[\\w.-]`` that ends 0, 1 or 2 characters before an ``=``."""
    if "=" not in text:
        return []
    n = len(text)
    out = [n - m.end(1) for m in _ASSIGN_BACKWARDS.finditer(text[::-1])]
    out.reverse()
    return out


#: the words of ``facts._ERROR_LINE`` (case-insensitive; its ``Error`` and
#: ``Exception`` after ``[a-z0-9]`` hold ``error`` and ``exception``)
_ERROR_WORDS = (b"error", b"exception", b"traceback", b"failed", b"failure", b"fatal", b"panic")
# e: e or E; w: another word character; s: whitespace; x: outside ASCII (or ``?``)
_E_SPACE_CLASSES = _table(
    " ", ("w", _ASCII_WORD), ("e", "eE"), ("s", _ASCII_SPACE), ("x", "?")
)  # fmt: skip
#: ``\bE\s{2,}`` (case-insensitive), its first 3 characters
_E_SPACE = re.compile(rb"e(?<![ew]e)[sx]{2}")


def error_line_starts(text: str) -> list[int] | None:
    """``^.*(?:\\b(?:error|...)\\b|[a-z0-9](?:Error|Exception)\\b|\\bE\\s{2,})``
    (``re.IGNORECASE | re.MULTILINE``): the start of each line holding, in ASCII
    lowercase, one of the words or an ``e`` and two whitespace characters, or a
    character outside ASCII (what it matches case-insensitively is not looked into)
    or a ``?`` (which ``str.encode`` writes for one); each line read a few times
    (once a needle). None in a text mostly outside ASCII (about every line would be
    tried)."""
    raw = text.encode("ascii", "replace")
    if raw.count(b"?") > len(raw) // _FEW:
        return None
    lower = raw.lower()
    spaces = raw.translate(_E_SPACE_CLASSES)
    starts: set[int] = set()

    def lines_with(find: Callable[[int], int]) -> None:
        """Note the start of each line where ``find`` (from a position) finds a hit."""
        i = find(0)
        while i >= 0:
            starts.add(raw.rfind(b"\n", 0, i) + 1)
            end = raw.find(b"\n", i)
            if end < 0:
                return
            i = find(end)

    for word in (*_ERROR_WORDS, b"?"):
        lines_with(partial(lower.find, word))
    lines_with(lambda pos: -1 if (m := _E_SPACE.search(spaces, pos)) is None else m.start())
    return sorted(starts)


#: " ": ASCII whitespace; x: the rest (outside ASCII: maybe whitespace)
_SPACE_CLASSES = _table("x", (" ", _ASCII_SPACE))


def path_tokens(text: str, ext: re.Pattern[str]) -> list[str]:
    """Pieces of ``text`` that every path lies in, in order, each between whitespace
    (or an end of ``text``): the whitespace-free tokens with a ``/`` or a match of
    ``ext`` (``str.split()`` splits on exactly what ``\\s`` matches). In a long text,
    the runs between ASCII whitespace around each ``/`` and each match of ``ext``
    (whitespace outside ASCII may be inside one), each run read once or twice."""
    if len(text) < 256:  # split() costs less than classes there
        return [t for t in text.split() if "/" in t or ("." in t and ext.search(t) is not None)]
    classes = _classes(text, _SPACE_CLASSES)
    n = len(text)
    runs: dict[int, int] = {}

    def run_at(i: int) -> int:
        """Note the run holding position ``i``; return where it ends."""
        end = classes.find(b" ", i)
        end = n if end < 0 else end
        runs[classes.rfind(b" ", 0, i) + 1] = end
        return end

    i = text.find("/")
    while i >= 0:
        i = text.find("/", run_at(i))
    m = ext.search(text)
    while m is not None:
        m = ext.search(text, run_at(m.start()))
    return [text[a : runs[a]] for a in sorted(runs)]
