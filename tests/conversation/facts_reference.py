"""The reference for :mod:`ctxpolicy.conversation.facts`: its patterns and its
extraction as they were at 84c503d (issue 32), before the patterns were tried only
where a match can start (:mod:`ctxpolicy.conversation._factscan`). The patterns and
``_extract``/``error_lines`` below are verbatim copies (every pattern run with
``findall`` over the whole text); the helpers that did not change are the module's
own, and ``first_facts`` is what the module documents it to be.
tests/conversation/test_factscan.py checks that the module gives what this gives,
for every input, and that its patterns are these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ctxpolicy.conversation.facts import (
    Facts,
    _clean_path,
    _dedupe,
    _is_unit_number,
    without_derived,
)

_FIELDS = ("paths", "urls", "ids", "numbers", "errors", "symbols", "settings")
_ALL = frozenset(_FIELDS)

# Linear time on any input (issue 29 item 4). ``re`` backtracks, so a pattern that
# may scan an unbounded run before failing costs O(run) at each of the run's start
# positions: O(n²) on ``'1,' * n``. Every quantifier that a failing attempt can
# expand is therefore bounded (a number part ≤ 32 digits and ≤ 16 parts, a path
# segment ≤ 64 characters and ≤ 32 directories, a ticket part ≤ 32): an attempt
# reads a bounded window, so a text costs O(len). The unbounded ones left either
# start at most once per run (``\b`` word starts, ``_PATH_TOKEN``'s token starts,
# alternative 3 of ``_PATH``) or cannot fail once started (URLs, absolute paths).
# tests/security/test_fact_redos.py attacks each of them.
_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+", re.IGNORECASE)
_UUID = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE
)
# hex digests / commit ids: 7+ hex chars with at least one digit and one letter a-f
_HEX = re.compile(r"\b(?=[0-9a-f]{0,63}[0-9])(?=[0-9a-f]{0,63}[a-f])[0-9a-f]{7,64}\b")
# ticket / booking / order ids: ABC123, JIRA-1234, ORD_2024_001, INC0012345
_TICKET = re.compile(
    r"\b[A-Z][A-Z0-9]{1,9}(?:[-_][A-Z0-9]{1,32}){0,8}[-_]?\d{2,32}[A-Z0-9]{0,32}\b"
)
# paths: absolute, ~/, ./, ../ or relative with a directory and an extension
_PATH = re.compile(
    r"(?<![\w/:.<])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]+"  # /abs, ~/x, ./x, ../x (not </tag)
    r"|(?<![\w/:.-])(?:[\w@+-][\w.@+-]{0,254}/){1,32}[\w@+-][\w.@+-]{0,254}\.[A-Za-z0-9]{1,8}\b"
    r"|(?<![\w/:.-])[\w-]+\.(?:py|js|ts|tsx|jsx|go|rs|java|kt|rb|php|c|h|cc|cpp|hpp|cs|"
    r"json|ya?ml|toml|ini|cfg|md|rst|txt|csv|sql|sh|html|css|lock|log)\b"
)
_UNITS = (
    r"ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|"
    r"[KMGTP]i?B|[kKMGT]b|bytes?|B|%|tokens?|lines?|rows?|files?|requests?|req/s|rps|qps|"
    r"MHz|GHz|kHz|Hz|°C|°F|px|kg|g|mb|gb|kb|x|×|USD|EUR|CNY|\$"
)
_NUMBER = re.compile(r"(?<![\w.])\$?\d{1,32}(?:[.,]\d{1,32}){0,16}\s?(?:" + _UNITS + r")(?![\w/])")
_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Exceeded|Timeout|Failure|Fault)\b")
_ERRNO = re.compile(
    r"\b(?:E[A-Z]{3,}|HTTP [45]\d\d|[45]\d\d (?:Bad Request|Unauthorized|Forbidden|Not Found|Internal Server Error|Service Unavailable|Gateway Timeout))\b"
)
_BACKTICK = re.compile(r"`([^`\n]{1,80})`")
_ASSIGN = re.compile(
    r"(?<![\w.-])([A-Za-z_][\w.-]{1,60})\s?(?:=|:=)\s?(\"[^\"\n]{0,60}\"|'[^'\n]{0,60}'|[\w./:+-]{1,60})"
)
_ERROR_LINE = re.compile(
    r"^.*(?:\b(?:error|exception|traceback|failed|failure|fatal|panic)\b"
    r"|(?-i:[a-z0-9](?:Error|Exception)\b)|\bE\s{2,}).*$",
    re.IGNORECASE | re.MULTILINE,
)


_PATH_TOKEN = re.compile(r"(?<!\S)\S*[/.]\S*")
_DIGIT = re.compile(r"\d")
#: A match of :data:`_EXCEPTION` ends with one of these.
_EXCEPTION_ENDS = ("Error", "Exception", "Exceeded", "Timeout", "Failure", "Fault")


def _find_paths(text: str) -> list[str]:
    """``_PATH.findall(text)``, scanning only the tokens that can hold a path."""
    return [p for tok in _PATH_TOKEN.findall(text) for p in _PATH.findall(tok)]


def _extract(text: str, want: frozenset[str]) -> Facts:
    text = without_derived(text)
    if not text:
        return Facts()
    if "://" in text:
        urls = _dedupe(u.rstrip(".,;:") for u in _URL.findall(text))
        # paths inside URLs are not separate facts
        scrubbed = _URL.sub(" ", text)
    else:
        urls, scrubbed = [], text
    if "-" in scrubbed:
        uuids = _UUID.findall(scrubbed)
        scrub2 = _UUID.sub(" ", scrubbed) if uuids else scrubbed
    else:
        uuids, scrub2 = [], scrubbed
    digits = _DIGIT.search(scrub2) is not None
    paths = (
        [_clean_path(m) for m in _find_paths(scrub2)]
        if "paths" in want and ("/" in scrub2 or "." in scrub2)
        else []
    )
    paths = _dedupe(
        p for p in paths if len(p) > 1 and p not in ("/", "./", "../") and not p.startswith("//")
    )
    ids = digits and "ids" in want
    hexes = [h for h in _HEX.findall(scrub2) if not h.isdigit()] if ids else []
    tickets = (
        [
            t
            for t in _TICKET.findall(scrub2)
            if any(c.isalpha() for c in t) and not _is_unit_number(t)
        ]
        if ids
        else []
    )
    numbers = _NUMBER.findall(scrub2) if digits and "numbers" in want else []
    if "errors" in want:
        exceptions = _EXCEPTION.findall(scrub2) if any(e in scrub2 for e in _EXCEPTION_ENDS) else []
        errors = _dedupe([*exceptions, *_ERRNO.findall(scrub2)])
    else:
        errors = []
    symbols = (
        _dedupe(s.strip() for s in _BACKTICK.findall(text) if s.strip() and not s.strip().isdigit())
        if "symbols" in want and "`" in text
        else []
    )
    settings = (
        _dedupe(f"{k}={v.rstrip('.,;:')}" for k, v in _ASSIGN.findall(scrub2) if v.rstrip(".,;:"))
        if "settings" in want and "=" in scrub2
        else []
    )
    return Facts(
        paths=paths,
        urls=urls if "urls" in want else [],
        ids=_dedupe([*uuids, *hexes, *tickets]) if "ids" in want else [],
        numbers=_dedupe(n.strip() for n in numbers),
        errors=errors,
        symbols=symbols,
        settings=settings,
    )


def error_lines(text: str, limit: int = 5, max_len: int = 200) -> list[str]:
    """Up to ``limit`` distinct lines that look like errors (last ones win), shortened."""
    found = _dedupe(
        line.strip()[:max_len] for line in _ERROR_LINE.findall(text or "") if line.strip()
    )
    return found[-limit:] if limit else found


def extract(text: str, only: Iterable[str] | None = None) -> Facts:
    return _extract(text, _ALL if only is None else frozenset(only))


def first_facts(texts: Iterable[str], limit: int) -> list[str]:
    """What :func:`ctxpolicy.conversation.facts.first_facts` is documented to be."""
    return extract("\n".join(texts)).all()[:limit]
