"""Where a match of a fact pattern can start: :mod:`ctxpolicy.conversation.facts`'
patterns tried only there instead of at every position.

Python's ``re`` has no literal to skip to in a pattern that starts with ``\\b`` or a
lookbehind: ``findall`` calls the matcher at every position (about 20 ns a
character, each pattern). The functions here find, at C speed (``str.find``, a
pattern that starts with a literal or a single character class), a superset of the
positions where a pattern can start a match; :func:`matches_at` then tries the
pattern itself there and only there.

:func:`matches_at` returns exactly ``list(pattern.finditer(text))`` when its
``starts`` are non-decreasing and include every ``s`` with
``pattern.match(text, s)``: ``finditer`` takes the match at the least start not
before the end of its previous match, and so does the loop. ``pattern.match(text,
s)`` is the match ``finditer`` finds at ``s``: ``\\b`` and lookbehinds see the
characters before ``s``. (None of the patterns matches the empty string.)

Each ``*_starts`` function says which condition on the text every match start
meets; each is linear in the text (a bounded look around each position a literal
or one-character class stops at), so :func:`matches_at` tries a pattern at a subset
of the positions ``findall`` would and stays linear.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "ERRNO_PHRASES",
    "SCAN_FROM",
    "assign_starts",
    "errno_starts",
    "exception_starts",
    "findall",
    "finditer",
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


#: texts shorter than this are scanned by ``finditer`` itself: trying every position
#: of a short text costs less than finding where to try
SCAN_FROM = 256


def finditer(
    pattern: re.Pattern[str], text: str, starts: Callable[[str], list[int]]
) -> list[re.Match[str]]:
    """``list(pattern.finditer(text))``: :func:`matches_at` with ``starts(text)``,
    or ``finditer`` itself for a text shorter than :data:`SCAN_FROM`."""
    if len(text) < SCAN_FROM:
        return list(pattern.finditer(text))
    return matches_at(pattern, text, starts(text))


def findall(pattern: re.Pattern[str], text: str, starts: Callable[[str], list[int]]) -> list[Any]:
    """``pattern.findall(text)``, as :func:`finditer` finds the matches."""
    if len(text) < SCAN_FROM:
        return pattern.findall(text)
    found = matches_at(pattern, text, starts(text))
    if pattern.groups == 0:
        return [m.group() for m in found]
    if pattern.groups == 1:
        return [m.group(1) or "" for m in found]
    return [m.groups("") for m in found]


def _occurrences(text: str, sub: str) -> list[int]:
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


def number_starts(text: str) -> list[int]:
    """``(?<![\\w.])\\$?\\d{1,32}(?:[.,]\\d{1,32}){0,16}\\s?`` and a unit's first
    character, in classes."""
    classes = _classes(text, _NUMBER_CLASSES)
    digit, other = (sorted(m.start() for m in p.finditer(classes)) for p in _NUMBER_STARTS)
    return sorted(digit + other) if other else digit


#: a: [A-Za-z0-9]; " ": the rest
_ALNUM_CLASSES = _table(" ", ("a", string.ascii_letters + string.digits))
_EXCEPTION_ENDS = ("Error", "Exception", "Exceeded", "Timeout", "Failure", "Fault")


def exception_starts(text: str) -> list[int]:
    """``\\b[A-Z][A-Za-z0-9]*(?:Error|...)\\b`` is a whole run of ``[A-Za-z0-9]``
    (a word character on neither side): the start of each run that holds one of the
    endings (each run read once)."""
    hits = sorted({i for end in _EXCEPTION_ENDS for i in _occurrences(text, end)})
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


#: the phrases of ``[45]\d\d (?:...)`` in ``facts._ERRNO``
ERRNO_PHRASES = (
    "Bad Request",
    "Unauthorized",
    "Forbidden",
    "Not Found",
    "Internal Server Error",
    "Service Unavailable",
    "Gateway Timeout",
)


#: ``E`` after no word character, before 3 of ``[A-Z]`` (consumes the ``E``)
_ERRNO_E = re.compile(r"E(?<!\wE)(?=[A-Z]{3})")


def errno_starts(text: str) -> list[int]:
    """``\\b(?:E[A-Z]{3,}|HTTP [45]\\d\\d|[45]\\d\\d (?:phrase))``: a word-start ``E``
    before 3 uppercase letters, an ``HTTP `` or 4 characters before a phrase."""
    found = {m.start() for m in _ERRNO_E.finditer(text)}
    found.update(_occurrences(text, "HTTP "))
    for phrase in ERRNO_PHRASES:
        found.update(i - 4 for i in _occurrences(text, phrase) if i >= 4)
    return sorted(found)


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


def path_tokens(text: str, ext: re.Pattern[str]) -> list[str]:
    """The whitespace-free tokens of ``text`` a path can lie in, in order: those with
    a ``/`` or a match of ``ext`` (``str.split()`` splits on exactly what ``\\s``
    matches)."""
    return [t for t in text.split() if "/" in t or ("." in t and ext.search(t) is not None)]
