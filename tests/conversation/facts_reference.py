"""The reference for :mod:`ctxpolicy.conversation.facts`: that module as it was at
84c503d (issue 32), before its patterns were tried only where a match can start
(:mod:`ctxpolicy.conversation._factscan`). Everything below this docstring is a
verbatim copy; tests/conversation/test_factscan.py checks that the module gives what
this gives, for every input.

Its own docstring then read: "Deterministic extraction of facts an agent must not
lose. [...] Extraction is regex based, pure and deterministic: the same text always
gives the same facts in the same order (order of first appearance, duplicates
removed)."
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxpolicy.conversation import Unit

__all__ = [
    "DERIVED_HEADING",
    "Facts",
    "error_lines",
    "extract",
    "first_facts",
    "is_path",
    "missing_facts",
    "units_text",
    "without_derived",
]

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


@dataclass
class Facts:
    """Facts of a text, by category, each list in order of first appearance."""

    paths: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)

    def all(self) -> list[str]:
        """Every fact once, categories in declaration order."""
        seen: set[str] = set()
        out: list[str] = []
        for f in fields(self):
            for item in getattr(self, f.name):
                if item not in seen:
                    seen.add(item)
                    out.append(item)
        return out

    def merge(self, other: Facts) -> Facts:
        """A new :class:`Facts` with ``other``'s items appended (deduplicated)."""
        out = Facts()
        for f in fields(self):
            setattr(out, f.name, _dedupe([*getattr(self, f.name), *getattr(other, f.name)]))
        return out

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


def _dedupe(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for s in items:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def _clean_path(p: str) -> str:
    return p.rstrip(".,;:")


#: Whitespace-free tokens holding a ``/`` or a ``.``: every path lies inside one (no
#: path character is whitespace, and whitespace passes the lookbehinds of
#: :data:`_PATH` just as the start of a string does), so :data:`_PATH` runs on
#: these tokens only instead of trying its alternatives at every position.
_PATH_TOKEN = re.compile(r"(?<!\S)\S*[/.]\S*")
_DIGIT = re.compile(r"\d")
#: A match of :data:`_EXCEPTION` ends with one of these.
_EXCEPTION_ENDS = ("Error", "Exception", "Exceeded", "Timeout", "Failure", "Fault")


#: A preprocessor's own statistics over a tool's output (``table_rows``' per-column
#: ``distinct=… min=… max=…``): the line that is this heading and the indented lines
#: after it are not what the tool printed, and are not mined for facts.
DERIVED_HEADING = "column summary (all rows):"


def without_derived(text: str) -> str:
    """``text`` without the blocks a preprocessor derived (:data:`DERIVED_HEADING` and
    its indented lines). One pass: O(len(text))."""
    i = text.find(DERIVED_HEADING)
    if i < 0:
        return text
    out: list[str] = []
    pos = 0
    while i >= 0:
        out.append(text[pos:i])
        j = text.find("\n", i)
        while j >= 0 and text.startswith("  ", j + 1):
            j = text.find("\n", j + 1)
        pos = len(text) if j < 0 else j
        i = text.find(DERIVED_HEADING, pos)
    out.append(text[pos:])
    return "".join(out)


def _find_paths(text: str) -> list[str]:
    """``_PATH.findall(text)``, scanning only the tokens that can hold a path."""
    return [p for tok in _PATH_TOKEN.findall(text) for p in _PATH.findall(tok)]


#: texts up to this many characters are remembered by :func:`extract` (with at most
#: ``_MEMO_SIZE`` of them: a few MB at worst); longer ones are extracted every time.
_MEMO_CHARS = 16_384
_MEMO_SIZE = 512


def extract(text: str, only: Collection[str] | None = None) -> Facts:
    """Facts of one text (deterministic); with ``only`` (:class:`Facts` field names)
    just those categories, the others left empty.

    Each pattern runs only when the text holds what every match of it needs (a
    ``://``, a digit, a ``=``, ...): a C-speed substring test instead of a regex pass.
    A pure function of its arguments: the facts of short texts are remembered (a
    bounded LRU, the same text read again by a later compaction, or by every trial of
    a ``tune`` study); each call gets its own :class:`Facts`.
    """
    want = _ALL if only is None else frozenset(only)
    if len(text) > _MEMO_CHARS:
        return _extract(text, want)
    kept = _extract_memo(text, want)
    return Facts(**{f: list(getattr(kept, f)) for f in _FIELDS})


@lru_cache(maxsize=_MEMO_SIZE)
def _extract_memo(text: str, want: frozenset[str]) -> Facts:
    return _extract(text, want)


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


_FIELDS = tuple(f.name for f in fields(Facts))
_ALL = frozenset(_FIELDS)


def _is_unit_number(token: str) -> bool:
    return bool(re.fullmatch(r"\d+[A-Z]{1,3}", token))


def first_facts(texts: Iterable[str], limit: int) -> list[str]:
    """``extract("\n".join(texts)).all()[:limit]``, reading only the texts needed.

    :meth:`Facts.all` lists paths first, and the paths of joined texts are those of
    each text in turn (a path never spans the newline between two texts, nor do the
    URLs and UUIDs scrubbed before paths are looked for): once the texts read hold
    ``limit`` distinct paths, the rest cannot change the answer. Otherwise the
    texts read are extracted whole, as one, for every category but the paths, which
    are the ones already found (unless a text holds a block a preprocessor derived:
    :func:`without_derived` of the joined texts may then cut into the next one).
    """
    read: list[str] = []
    paths: dict[str, None] = {}
    for text in texts:
        read.append(text)
        for p in extract(text, only=("paths",)).paths:
            paths.setdefault(p)
        if len(paths) >= limit:
            return list(paths)[:limit]
    if not read:
        return []
    joined = "\n".join(read)
    if DERIVED_HEADING in joined:
        return extract(joined).all()[:limit]
    facts = extract(joined, only=_ALL - {"paths"})
    facts.paths = list(paths)
    return facts.all()[:limit]


def error_lines(text: str, limit: int = 5, max_len: int = 200) -> list[str]:
    """Up to ``limit`` distinct lines that look like errors (last ones win), shortened."""
    found = _dedupe(
        line.strip()[:max_len] for line in _ERROR_LINE.findall(text or "") if line.strip()
    )
    return found[-limit:] if limit else found


def is_path(fact: str) -> bool:
    """Whether ``fact`` is a file path as :func:`extract` finds them."""
    return _PATH.fullmatch(fact) is not None


def units_text(units: Sequence[Unit]) -> str:
    """All text of a unit list (contents, tool-call names and arguments)."""
    return "\n".join(u.text() for u in units)


def missing_facts(
    facts: Sequence[str], after_units: Sequence[Unit], ledger_text: str | None = None
) -> list[str]:
    """The ``facts`` whose exact string occurs neither in ``after_units`` nor in
    ``ledger_text`` (in their order)."""
    if not facts:
        return []
    after_text = units_text(after_units) + "\n" + (ledger_text or "")
    return [f for f in facts if f not in after_text]
