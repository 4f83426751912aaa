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


# The scans below start with one character class (``re`` skips to it without calling
# the matcher) and consume one character, so ``finditer`` tries every position. The
# lookbehind after the first character ``c`` is ``\b`` before ``c`` (``c`` is a word
# character: a boundary before it is "no word character before it").
_HEX_START = re.compile(r"[0-9a-f](?<!\w[0-9a-f])(?=[0-9a-f]{6})")
_UPPER_WORD_START = re.compile(r"[A-Z](?<!\w[A-Z])(?=[A-Z0-9])")
_EXCEPTION_START = re.compile(
    r"[A-Z](?<!\w[A-Z])(?=[A-Za-z0-9]*(?:Error|Exception|Exceeded|Timeout|Failure|Fault)\b)"
)
_NUMBER_START = re.compile(r"[$\d](?<![\w.][$\d])")
_ERRNO_E = re.compile(r"E(?<!\wE)(?=[A-Z]{3})")


def hex_starts(text: str) -> list[int]:
    """``\\b[0-9a-f]{7,64}``: a word start followed by 7 hex digits."""
    return [m.start() for m in _HEX_START.finditer(text)]


def ticket_starts(text: str) -> list[int]:
    """``\\b[A-Z][A-Z0-9]``: a word start at an uppercase letter and one of
    ``[A-Z0-9]`` after it."""
    return [m.start() for m in _UPPER_WORD_START.finditer(text)]


def exception_starts(text: str) -> list[int]:
    """``\\b[A-Z][A-Za-z0-9]*(?:Error|...)\\b``: the pattern's own condition, written
    to start with its first character (the scan then visits the uppercase letters
    only)."""
    return [m.start() for m in _EXCEPTION_START.finditer(text)]


def number_starts(text: str) -> list[int]:
    """``(?<![\\w.])\\$?\\d``: a ``$`` or a digit after neither a word character nor
    a ``.``."""
    return [m.start() for m in _NUMBER_START.finditer(text)]


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


def _occurrences(text: str, sub: str) -> list[int]:
    out: list[int] = []
    i = text.find(sub)
    while i >= 0:
        out.append(i)
        i = text.find(sub, i + 1)
    return out


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
