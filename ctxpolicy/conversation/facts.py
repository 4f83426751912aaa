"""Deterministic extraction of facts an agent must not lose.

Shared by the extractive summarizer, the progress ledger, the key-facts check run
after every compaction (:func:`lost_facts`) and the simulator's fact-retention
metric. A *fact* is a short exact string: a file path, a URL, an identifier (hex
digest, UUID, ticket/booking/order id such as ``ABC123`` or ``JIRA-42``), a number
with a unit (``250 ms``, ``16GB``), an exception or error name, a symbol written in
backticks, or a ``name=value`` setting (design B's ``max_connections=10``).

Extraction is regex based, pure and deterministic: the same text always gives the
same facts in the same order (order of first appearance, duplicates removed).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ctxpolicy.conversation import _factscan as scan
from ctxpolicy.conversation.lru import Lru
from ctxpolicy.conversation.messages import content_text

if TYPE_CHECKING:
    from ctxpolicy.conversation import Unit

__all__ = [
    "DERIVED_HEADING",
    "INSTRUCTION_CHARS",
    "MAX_INSTRUCTIONS",
    "Facts",
    "call_source",
    "error_lines",
    "extract",
    "first_facts",
    "instruction_text",
    "is_derived_line",
    "is_path",
    "is_user_turn",
    "missing_facts",
    "units_text",
    "user_instructions",
    "whole_lines",
    "without_derived",
]

# Linear time on any input (issue 29 item 4). ``re`` backtracks, so a pattern that
# may scan an unbounded run before failing costs O(run) at each of the run's start
# positions: O(n²) on ``'1,' * n``. Every quantifier that a failing attempt can
# expand is therefore bounded (a number part ≤ 32 digits and ≤ 16 parts, a path
# segment ≤ 64 characters and ≤ 32 directories, a ticket part ≤ 32): an attempt
# reads a bounded window, so a text costs O(len). The unbounded ones left either
# start at most once per run (``\b`` word starts, the starts of the tokens
# ``_find_paths`` runs ``_PATH`` on, alternative 3 of ``_PATH``) or cannot fail once
# started (URLs, absolute paths). A long text's patterns are tried only where
# ``_factscan`` finds that a match can start (a subset of the positions ``findall``
# tries), by scans that are linear themselves (bounded lookarounds; each run or line
# read at most twice). tests/security/test_fact_redos.py attacks each pattern and
# each scan.
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
_EXTENSIONS = (
    r"(?:py|js|ts|tsx|jsx|go|rs|java|kt|rb|php|c|h|cc|cpp|hpp|cs|"
    r"json|ya?ml|toml|ini|cfg|md|rst|txt|csv|sql|sh|html|css|lock|log)\b"
)
_PATH = re.compile(
    r"(?<![\w/:.<])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]+"  # /abs, ~/x, ./x, ../x (not </tag)
    r"|(?<![\w/:.-])(?:[\w@+-][\w.@+-]{0,254}/){1,32}[\w@+-][\w.@+-]{0,254}\.[A-Za-z0-9]{1,8}\b"
    r"|(?<![\w/:.-])[\w-]+\." + _EXTENSIONS
)
_UNITS = (
    r"ms|µs|us|ns|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|"
    r"[KMGTP]i?B|[kKMGT]b|bytes?|B|%|tokens?|lines?|rows?|files?|requests?|req/s|rps|qps|"
    r"MHz|GHz|kHz|Hz|°C|°F|px|kg|g|mb|gb|kb|x|×|USD|EUR|CNY|\$"
)
_NUMBER = re.compile(r"(?<![\w.])\$?\d{1,32}(?:[.,]\d{1,32}){0,16}\s?(?:" + _UNITS + r")(?![\w/])")
_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Exceeded|Timeout|Failure|Fault)\b")
#: Each match of :data:`_ERRNO` holds an ``E``, an ``HTTP `` or one of these.
_ERRNO_PHRASES = (
    "Bad Request", "Unauthorized", "Forbidden", "Not Found", "Internal Server Error",
    "Service Unavailable", "Gateway Timeout",
)  # fmt: skip
_ERRNO = re.compile(
    r"\b(?:E[A-Z]{3,}|HTTP [45]\d\d|[45]\d\d (?:" + "|".join(_ERRNO_PHRASES) + r"))\b"
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


#: Every path lies inside one whitespace-free token (no path character is
#: whitespace, and whitespace passes the lookbehinds of :data:`_PATH` just as the
#: start of a string does) that holds a ``/`` (alternatives 1 and 2) or this
#: (alternative 3), so :data:`_PATH` runs on these tokens only instead of trying its
#: alternatives at every position.
_EXTENSION = re.compile(r"\." + _EXTENSIONS)
_DIGIT = re.compile(r"\d")

# Each pattern tried where its matches can start (ctxpolicy/conversation/_factscan.py);
# ``short``: below that many characters the pattern's own scan is quicker (measured on
# the shared traces' texts and on one-line tool results, issue 32).
_URLS = scan.Finder(_URL, scan.url_starts)
_UUIDS = scan.Finder(_UUID, scan.uuid_starts, short=96)
_HEXES = scan.Finder(_HEX, scan.hex_starts)
_TICKETS = scan.Finder(_TICKET, scan.ticket_starts, short=64)
_NUMBERS = scan.Finder(_NUMBER, scan.number_starts, short=96)
_EXCEPTIONS = scan.Finder(_EXCEPTION, scan.exception_starts, short=128)
_ERRNOS = scan.Finder(_ERRNO, scan.errno_starts, short=128)
_ASSIGNS = scan.Finder(_ASSIGN, scan.assign_starts)
_ERROR_LINES = scan.Finder(_ERROR_LINE, scan.error_line_starts, short=256)
#: A match of :data:`_EXCEPTION` ends with one of these.
_EXCEPTION_ENDS = scan.EXCEPTION_ENDS


#: A preprocessor's own statistics over a tool's output (``table_rows``' per-column
#: ``distinct=… min=… max=…``): the line that is this heading and the indented lines
#: after it are not what the tool printed, and are not mined for facts.
DERIVED_HEADING = "column summary (all rows):"


#: Keys of a preprocessor's statistics: ``min=3`` is no setting of the task.
_STAT_KEYS = frozenset({"distinct", "min", "max", "nulls"})


def is_derived_line(line: str) -> bool:
    """Whether ``line`` is (a piece of) a preprocessor's per-column statistics
    (``  month: distinct=12 min=1 max=12 nulls=2``), also when a cut took its start
    (``istinct=40 min=3``) or its heading: substring tests, O(len(line))."""
    if "inct=" in line or "nulls=" in line:
        return True
    i = line.find("min=")
    return i >= 0 and line.find(" max=", i) > 0


def _without_stat_lines(text: str) -> str:
    """``text`` without the lines :func:`is_derived_line` finds (one pass)."""
    if "inct=" not in text and "min=" not in text and "nulls=" not in text:
        return text  # substring tests: no line to look at
    return "\n".join(line for line in text.split("\n") if not is_derived_line(line))


def without_derived(text: str) -> str:
    """``text`` without the blocks a preprocessor derived (:data:`DERIVED_HEADING` and
    its indented lines) and without stray lines of such statistics (a block whose
    heading a cut took: ``istinct=40 min=3 max=9``). Linear in ``len(text)``."""
    i = text.find(DERIVED_HEADING)
    if i < 0:
        return _without_stat_lines(text)
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
    return _without_stat_lines("".join(out))


def _find_paths(text: str) -> list[str]:
    """``_PATH.findall(text)``, run on the tokens that can hold a path only (joined by
    a space: what each token's neighbours were, to the lookbehinds and ``\\b``)."""
    return _PATH.findall(" ".join(scan.path_tokens(text, _EXTENSION)))


#: texts up to this many characters have their facts remembered by :func:`extract`;
#: the least recently used are forgotten once the texts remembered hold
#: ``_MEMO_TOTAL`` characters (about 8 MB of text at worst, most of it shared with the
#: conversations). A ``tune`` study replays the same traces trial after trial: the memo
#: must hold one whole replay's texts, or that cyclic access never hits (the 19 shared
#: traces at 16k: 2,576 texts, 2.4 M characters; a memo of 512 texts hit 15 %).
_MEMO_CHARS = 16_384
_MEMO_TOTAL = 8_000_000


def _text_chars(key: tuple[str, frozenset[str]], facts: Facts) -> int:
    return len(key[0])


class _Memo(Lru[tuple[str, frozenset[str]], Facts]):
    """An LRU of :class:`Facts` by ``(text, categories)``, bounded by characters;
    thread-safe (extraction runs outside the lock: two threads may extract one text
    at once, and both get the same answer)."""

    def __init__(self, total_chars: int) -> None:
        super().__init__(total_chars, _text_chars)

    @property
    def total_chars(self) -> int:
        return self.limit

    @property
    def chars(self) -> int:
        return self.weight


_extract_memo = _Memo(_MEMO_TOTAL)


def extract(text: str, only: Collection[str] | None = None) -> Facts:
    """Facts of one text (deterministic); with ``only`` (:class:`Facts` field names)
    just those categories, the others left empty.

    Each pattern runs only when the text holds what every match of it needs (a
    ``://``, a digit, a ``=``, ...): a C-speed substring test instead of a regex pass;
    in all but short texts it is tried only where a match can start
    (:mod:`ctxpolicy.conversation._factscan`), with the same facts in the same order.
    A pure function of its arguments: the facts of short texts are remembered (a
    bounded LRU, :data:`_MEMO_TOTAL`: the same text read again by a later compaction,
    or by every trial of a ``tune`` study); each call gets its own :class:`Facts`.
    """
    want = _ALL if only is None else frozenset(only)
    if len(text) > _MEMO_CHARS:
        return _extract(text, want)
    key = (text, want)
    kept = _extract_memo.get(key)
    if kept is None:
        kept = _extract(text, want)
        _extract_memo.put(key, kept)
    return Facts(**{f: list(getattr(kept, f)) for f in _FIELDS})


def _extract(text: str, want: frozenset[str]) -> Facts:
    text = without_derived(text)
    if not text:
        return Facts()
    if "://" in text:
        found = _URLS.finditer(text)
        urls = _dedupe(m.group().rstrip(".,;:") for m in found)
        # paths inside URLs are not separate facts
        scrubbed = _replace_spans(text, found)
    else:
        urls, scrubbed = [], text
    if scrubbed.count("-") >= 4:  # a UUID holds 4
        found = _UUIDS.finditer(scrubbed)
        uuids = [m.group() for m in found]
        scrub2 = _replace_spans(scrubbed, found) if found else scrubbed
    else:
        uuids, scrub2 = [], scrubbed
    digits = _DIGIT.search(scrub2) is not None
    paths = (
        _dedupe(
            p
            for p in map(_clean_path, _find_paths(scrub2))
            if len(p) > 1 and p not in ("/", "./", "../") and not p.startswith("//")
        )
        if "paths" in want and ("/" in scrub2 or "." in scrub2)
        else []
    )
    ids = digits and "ids" in want
    hexes = [h for h in _HEXES.findall(scrub2) if not h.isdigit()] if ids else []
    # _TICKET, _EXCEPTION and every alternative of _ERRNO hold an [A-Z]
    upper = not scrub2.islower()
    tickets = (
        [
            t
            for t in _TICKETS.findall(scrub2)
            if any(c.isalpha() for c in t) and not _is_unit_number(t)
        ]
        if ids and upper
        else []
    )
    numbers = _NUMBERS.findall(scrub2) if digits and "numbers" in want else []
    if "errors" in want and upper:
        exceptions = (
            _EXCEPTIONS.findall(scrub2) if any(e in scrub2 for e in _EXCEPTION_ENDS) else []
        )
        errnos = (
            _ERRNOS.findall(scrub2)
            if "E" in scrub2 or "HTTP " in scrub2 or any(p in scrub2 for p in _ERRNO_PHRASES)
            else []
        )
        errors = _dedupe([*exceptions, *errnos])
    else:
        errors = []
    symbols = (
        _dedupe(s.strip() for s in _BACKTICK.findall(text) if s.strip() and not s.strip().isdigit())
        if "symbols" in want and "`" in text
        else []
    )
    settings = (
        _dedupe(
            f"{k}={v.rstrip('.,;:')}"
            for k, v in _ASSIGNS.findall(scrub2)
            if v.rstrip(".,;:") and k not in _STAT_KEYS
        )
        if "settings" in want and "=" in scrub2
        else []
    )
    return Facts(
        paths=paths,
        urls=urls if "urls" in want else [],
        ids=_dedupe([*uuids, *hexes, *tickets]) if "ids" in want else [],
        numbers=_dedupe(n.strip() for n in numbers) if numbers else [],
        errors=errors,
        symbols=symbols,
        settings=settings,
    )


def _replace_spans(text: str, found: list[re.Match[str]]) -> str:
    """``pattern.sub(" ", text)`` given ``found``, the pattern's matches in ``text``."""
    out: list[str] = []
    pos = 0
    for m in found:
        out.append(text[pos : m.start()])
        out.append(" ")
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


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
        line.strip()[:max_len] for line in _ERROR_LINES.findall(text or "") if line.strip()
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


#: what the head/tail cuts put where they cut a text (preprocessors/_text.py and
#: layers/_util.py): the partial lines on either side are fragments, not facts
_CUT_MARKERS = (
    re.compile(r"\n\.\.\. \[\d+ chars omitted\] \.\.\.\n"),
    re.compile(r"\n\[… \d+ chars elided …\]\n"),
)


def whole_lines(text: str) -> str:
    """``text`` without the partial lines a character cut leaves beside its marker
    (``pt SympifyError:`` from ``except SympifyError:``): one pass, linear."""
    if " chars omitted] " not in text and " chars elided " not in text:
        return text  # no marker (each holds one of these): a substring test, no regex pass
    cuts = sorted(m.span() for rx in _CUT_MARKERS for m in rx.finditer(text))
    if not cuts:
        return text
    out: list[str] = []
    pos = 0
    for start, end in cuts:
        if start >= pos:
            line_start = text.rfind("\n", pos, start) + 1 if start > pos else pos
            out.append(text[pos:line_start])
            out.append("\n")
        elif end <= pos:
            continue
        nl = text.find("\n", end)
        pos = len(text) if nl < 0 else nl + 1
    out.append(text[pos:])
    return "".join(out)


#: User turns the task state keeps verbatim (the newest; the first, the task, always).
MAX_INSTRUCTIONS = 30
#: Longest user turn kept whole; a longer one keeps its head and says where the rest is.
INSTRUCTION_CHARS = 2000
#: What ends an instruction kept by its head only.
INSTRUCTION_CUT = " … [the rest is in the compacted history]"


#: notes a client adds to its user's turns (Claude Code's reminders): not the user's words
_NOTE_OPEN, _NOTE_CLOSE = "<system-reminder>", "</system-reminder>"


def without_client_notes(text: str) -> str:
    """``text`` without the ``<system-reminder>`` blocks a coding client puts in its
    user's turns (one pass: each block is found from where the last one ended)."""
    start = text.find(_NOTE_OPEN)
    if start < 0:
        return text
    parts: list[str] = []
    at = 0
    while start >= 0:
        end = text.find(_NOTE_CLOSE, start + len(_NOTE_OPEN))
        if end < 0:
            break  # an unclosed note is left as written
        parts.append(text[at:start])
        at = end + len(_NOTE_CLOSE)
        start = text.find(_NOTE_OPEN, at)
    parts.append(text[at:])
    return "".join(parts)


def instruction_text(text: str) -> str:
    """A user turn as the task state keeps it: verbatim (stripped, without a client's
    reminders), or its first :data:`INSTRUCTION_CHARS` characters and
    :data:`INSTRUCTION_CUT`."""
    text = without_client_notes(text).strip()
    if len(text) <= INSTRUCTION_CHARS:
        return text
    return text[:INSTRUCTION_CHARS] + INSTRUCTION_CUT


def is_user_turn(m: Mapping[str, Any]) -> bool:
    """Whether ``m`` is a turn the user wrote (not a tool result relayed as user text,
    nor a message of the engine's own making)."""
    if m.get("role") != "user":
        return False
    text = content_text(m.get("content"))
    if text.startswith(("[tool result", "[ctxpolicy ")):
        return False
    return bool(without_client_notes(text).strip())


def user_instructions(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The user's turns among ``messages``, as the task state keeps them
    (:func:`instruction_text`), each once, the newest :data:`MAX_INSTRUCTIONS`."""
    out: dict[str, None] = {}
    for m in messages:
        if is_user_turn(m):
            item = instruction_text(content_text(m.get("content")))
            out.pop(item, None)
            out[item] = None
    return list(out)[-MAX_INSTRUCTIONS:]


def call_source(name: str, args: Any) -> str:
    """What a later successful call must share with a failed one to close its error:
    the tool and its target (a path), or the program a shell command ran."""
    if isinstance(args, Mapping):
        for k in ("path", "file", "file_path", "filename", "target"):
            if isinstance(args.get(k), str):
                return f"{name}:{args[k]}"
        for k in ("command", "cmd"):
            if isinstance(args.get(k), str):
                words = args[k].split()
                return f"{name}:{words[0] if words else ''}"
    return name
