"""Getting dropped detail back: ``recall`` one snapshot, ``search`` a session's.

:func:`recall` is for the application (``Session.recall``) and returns the exact
original observation (or the archived messages a ``…/history`` reference names).
:func:`handle_tool_call` is what the *model* reaches through the ``ctx_recall`` /
``ctx_search`` function tools (:func:`recall_tools`). It treats every argument as
hostile:

* it never raises (errors come back as text) and bounds its answer;
* a reference is resolved by the store first (:meth:`SnapshotStore.locate`:
  canonical path, ``..``, symlinks, URL forms) and only then checked to be in the
  caller's own conversation folder; what is read is the canonical reference, not
  the text the model sent;
* error texts never contain the store root, a path, another conversation's folder
  or the reference itself; "not yours" and "does not exist" read the same;
* regular expressions run on RE2 (linear time, no backreferences) with limits on
  the pattern length and on the bytes scanned; over a limit the model gets a clear
  error instead of a hang;
* it redacts the default secret patterns — a key that was redacted from the
  context does not come back through the recall tool.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ctxpolicy.components import SnapshotStore
from ctxpolicy.conversation.messages import function_tool
from ctxpolicy.snapshots.names import (
    MAX_REF_CHARS,
    SnapshotError,
    history_uri,
    parse_history_ref,
)
from ctxpolicy.snapshots.streaming import (
    MAX_SCAN_BYTES,
    bounded,
    bounded_recall,
    observation_text,
)

__all__ = ["answer_chars", "handle_tool_call", "recall", "recall_tools", "search"]

RECALL_TOOL = "ctx_recall"
SEARCH_TOOL = "ctx_search"
MAX_TOOL_CHARS = 20_000
#: The smallest answer a budget sizes (:func:`answer_chars`): a few dozen lines.
MIN_TOOL_CHARS = 2_000
#: Characters per token assumed when a token allowance becomes a character cap.
CHARS_PER_TOKEN = 4
MAX_ARGUMENT_CHARS = 65_536
MAX_PATTERN_CHARS = 1_000
REGEX_FALLBACK_TIMEOUT_S = 2.0
_RANGE_RE = re.compile(r"^\s*([0-9]{1,12})\s*(?:[-:,]\s*([0-9]{1,12})\s*)?$")
_RECALL_KEYS = frozenset({"ref", "lines", "grep"})
_SEARCH_KEYS = frozenset({"pattern", "regex"})
_NOT_FOUND = (
    "Error: no earlier tool result of this conversation has that reference. Use a "
    "ctxsnap:// reference exactly as shown in this conversation, or ctx_search."
)


class SearchLimit(RuntimeError):
    """A search stopped at a limit (bytes scanned, or the fallback engine's time)."""

    def __init__(self, message: str, hits: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.hits = hits


def _same(text: str) -> str:
    return text


class _ToolError(Exception):
    """An error whose text is safe to show the model."""


def _parse_lines(lines: Sequence[int] | str | int) -> tuple[int, int]:
    if isinstance(lines, bool):
        raise ValueError("lines must look like '10-40'")
    if isinstance(lines, int):
        first = last = lines
    elif isinstance(lines, str):
        m = _RANGE_RE.match(lines) if len(lines) <= 64 else None
        if not m:
            raise ValueError("lines must look like '10-40' (1-based, inclusive)")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
    else:
        vals = list(lines)
        if len(vals) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
            raise ValueError("lines must be two integers, e.g. [10, 40]")
        first, last = vals
    if first < 1 or last < first:
        raise ValueError(f"bad line range {first}-{last} (1-based, inclusive)")
    return first, last


def _text_of(store: SnapshotStore, ref: str) -> str:
    hist = parse_history_ref(ref)
    if hist is not None:
        from ctxpolicy.snapshots.archive import HistoryArchive

        archive = HistoryArchive.from_folder(store, hist.folder)
        if hist.last is None and len(archive) == 0:
            raise SnapshotError(2, "nothing has been archived in this conversation yet")
        return archive.transcript(hist)
    return observation_text(store.read(ref))


def recall(
    store: SnapshotStore,
    ref: str,
    *,
    lines: Sequence[int] | str | int | None = None,
    grep: str | None = None,
) -> str:
    """The original observation of a snapshot (``ctxsnap://`` URI or path), or the
    archived messages of a ``ctxsnap://<folder>/history[#n[-m]]`` reference.

    ``lines`` — a 1-based inclusive range (``"10-40"`` or ``(10, 40)``): exactly those
    lines, joined by ``\\n``. ``grep`` — a substring (case-sensitive): the matching lines
    as ``"<n>: <line>"`` (within ``lines`` when both are given). Raises ``SnapshotError``
    for an unknown ref and ``ValueError`` for a bad range.
    """
    text = _text_of(store, ref)
    if lines is None and grep is None:
        return text
    all_lines = text.split("\n")
    first, last = (1, len(all_lines)) if lines is None else _parse_lines(lines)
    chosen = all_lines[first - 1 : last]
    if grep is None:
        return "\n".join(chosen)
    return "\n".join(f"{first + i}: {ln}" for i, ln in enumerate(chosen) if grep in ln)


# --------------------------------------------------------------------------- search


def _matcher(pattern: str, regex: bool) -> Callable[[str], bool]:
    """A line predicate: substring, RE2 (linear time), or the ``regex`` module with a
    deadline when RE2 is not installed."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    if not regex:
        return lambda line: pattern in line
    try:
        import re2
    except ImportError:  # pragma: no cover - google-re2 is a dependency
        return _fallback_matcher(pattern)
    options = re2.Options()
    options.max_mem = 32 << 20
    try:
        rx = re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(
            f"invalid or unsupported regular expression ({exc}); RE2 syntax: no "
            "backreferences or look-around"
        ) from None
    return lambda line: rx.search(line) is not None


def _fallback_matcher(pattern: str) -> Callable[[str], bool]:  # pragma: no cover
    import regex as rx_mod

    rx = rx_mod.compile(pattern)
    deadline = time.monotonic() + REGEX_FALLBACK_TIMEOUT_S

    def match(line: str) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the regular expression took too long")
        return rx.search(line, timeout=left) is not None

    return match


def _sources(store: SnapshotStore, conv_id: str) -> Iterator[tuple[str, Any, Any, str]]:
    """``(ref, action, step, text)`` of every snapshot, then every archived message."""
    for ref in store.list(conv_id):
        try:
            doc = store.read(ref.uri)
        except Exception:
            continue
        yield ref.uri, doc.get("action"), doc.get("step"), observation_text(doc)
    from ctxpolicy.snapshots.archive import HistoryArchive, render_transcript

    try:
        archive = HistoryArchive(store, conv_id)
        if not archive.native:
            return
        folder = archive.folder
        for n, step, m in archive.iter_messages():
            yield history_uri(folder, n), "history", step, render_transcript([(n, step, m)])
    except SnapshotError:
        return


def search(
    store: SnapshotStore,
    conv_id: str,
    pattern: str,
    *,
    regex: bool = False,
    limit: int = 20,
    max_scan_bytes: int = MAX_SCAN_BYTES,
) -> list[dict[str, Any]]:
    """Lines matching ``pattern`` (substring, or an RE2 ``regex``) in a session's
    snapshots and archived history.

    Hits are ``{"ref", "action", "step", "line", "text"}`` in snapshot order (archived
    messages last, as ``ctxsnap://<folder>/history#<n>``), at most ``limit``; each
    hit's text is cut to 300 characters. Raises ``ValueError`` for a bad or too long
    pattern and :class:`SearchLimit` (carrying the hits so far) when more than
    ``max_scan_bytes`` would be scanned.
    """
    found = _matcher(pattern, regex)
    hits: list[dict[str, Any]] = []
    scanned = 0
    for ref, action, step, text in _sources(store, conv_id):
        scanned += len(text)
        if scanned > max_scan_bytes:
            raise SearchLimit(
                f"the search stopped after scanning {max_scan_bytes // (1024 * 1024)} MB "
                "(its limit)",
                hits,
            )
        for n, line in enumerate(text.split("\n"), 1):
            if found(line):
                hits.append(
                    {
                        "ref": ref,
                        "action": action,
                        "step": step,
                        "line": n,
                        "text": line if len(line) <= 300 else line[:300] + "…",
                    }
                )
                if len(hits) >= limit:
                    return hits
    return hits


# --------------------------------------------------------------------------- tools


def recall_tools() -> list[dict[str, Any]]:
    """OpenAI function-tool schemas of ``ctx_recall`` and ``ctx_search``."""
    return [
        function_tool(
            RECALL_TOOL,
            "Fetch the full original of an earlier tool result that was "
            "shortened or removed from the conversation. Pass the reference shown as "
            "'[Full detail available at: ... (ctxsnap://...)]' (or the history "
            "reference of the progress ledger). Optionally a line range or a "
            "substring to return only matching lines.",
            {
                "type": "object",
                "properties": {
                    "ref": {
                        "type": "string",
                        "maxLength": MAX_REF_CHARS,
                        "description": "ctxsnap:// URI (or the path) of the snapshot.",
                    },
                    "lines": {
                        "type": "string",
                        "description": "1-based inclusive line range, e.g. '120-180'.",
                    },
                    "grep": {
                        "type": "string",
                        "maxLength": MAX_PATTERN_CHARS,
                        "description": "Only lines containing this text, with line numbers.",
                    },
                },
                "required": ["ref"],
                "additionalProperties": False,
            },
        ),
        function_tool(
            SEARCH_TOOL,
            "Search all earlier full tool results and the archived "
            "history of this conversation for a text (or an RE2 regular expression); "
            "returns references and matching lines.",
            {
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "maxLength": MAX_PATTERN_CHARS,
                        "description": "Text to look for.",
                    },
                    "regex": {
                        "type": "boolean",
                        "description": "Treat pattern as an RE2 regular expression "
                        "(no backreferences or look-around).",
                    },
                },
                "required": ["pattern"],
                "additionalProperties": False,
            },
        ),
    ]


def answer_chars(tool_growth_tokens: int) -> int:
    """The character cap of one recall answer under a budget: what the budget reserves
    for the tool results of one round (``tool_growth``, learned or fixed), at
    :data:`CHARS_PER_TOKEN`, never below :data:`MIN_TOOL_CHARS`. A small window gets
    short answers (ask for a line range or grep for more), a large one long answers."""
    return max(MIN_TOOL_CHARS, CHARS_PER_TOKEN * max(0, int(tool_growth_tokens)))


def _clean_str(value: Any, what: str, max_chars: int) -> str:
    if not isinstance(value, str):
        raise _ToolError(f"`{what}` must be a string")
    if len(value) > max_chars:
        raise _ToolError(f"`{what}` is longer than {max_chars} characters")
    if "\x00" in value:
        raise _ToolError(f"`{what}` contains a NUL character")
    return value


def owned_ref(store: SnapshotStore, conv_id: str, ref: str) -> str:
    """The canonical reference behind ``ref`` when it is in ``conv_id``'s own folder.

    Resolution happens first (the store's :meth:`~SnapshotStore.locate`, or the
    strict history-ref grammar), ownership is checked on the result. Raises
    :class:`SnapshotError` with a message that names nothing.
    """
    own = store.folder(conv_id)
    hist = parse_history_ref(ref)
    if hist is not None:
        if hist.folder != own:
            raise SnapshotError(13, "not a reference of this conversation")
        return ref
    try:
        loc = store.locate(ref)
    except SnapshotError:
        raise
    except Exception as exc:  # a third-party store's odd error: same answer
        raise SnapshotError(2, "not a reference of this conversation") from exc
    if loc.conv_id != own:
        raise SnapshotError(13, "not a reference of this conversation")
    return loc.uri


def _tool_recall(
    store: SnapshotStore,
    conv_id: str,
    args: Mapping[str, Any],
    *,
    max_chars: int,
    clean: Callable[[str], str],
) -> str:
    extra = set(args) - _RECALL_KEYS
    if extra:
        raise _ToolError(f"unknown argument(s) {sorted(map(str, extra))[:5]}; use ref, lines, grep")
    if "ref" not in args or args["ref"] in ("", None):
        raise _ToolError("`ref` (a ctxsnap:// reference) is required")
    ref = _clean_str(args["ref"], "ref", MAX_REF_CHARS).strip()
    lines = args.get("lines")
    grep = args.get("grep")
    grep = None if grep is None or grep == "" else _clean_str(grep, "grep", MAX_PATTERN_CHARS)
    if lines == "" or lines is None:
        lines = None
    elif isinstance(lines, str):
        lines = _clean_str(lines, "lines", 64)
    elif not isinstance(lines, (int, list)) or isinstance(lines, bool):
        raise _ToolError("`lines` must look like '10-40'")
    try:
        canonical = owned_ref(store, conv_id, ref)
    except SnapshotError:
        return _NOT_FOUND
    try:
        if lines is not None:
            lines = _parse_lines(lines)
        text = bounded_recall(
            store, canonical, lines=lines, grep=grep, max_chars=max_chars, clean=clean
        )
    except ValueError as exc:
        raise _ToolError(str(exc)) from None
    except SnapshotError as exc:
        if exc.errno == 5:
            return "Error: that snapshot is damaged and cannot be read."
        return (
            "Error: that snapshot of this conversation is no longer in the store "
            "(removed by retention) or was never written."
        )
    if grep and not text:
        text = f"(no line contains {grep!r})"
    return text


def _tool_search(store: SnapshotStore, conv_id: str, args: Mapping[str, Any]) -> str:
    extra = set(args) - _SEARCH_KEYS
    if extra:
        raise _ToolError(f"unknown argument(s) {sorted(map(str, extra))[:5]}; use pattern, regex")
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise _ToolError("`pattern` (a non-empty string) is required")
    pattern = _clean_str(pattern, "pattern", MAX_PATTERN_CHARS)
    use_regex = args.get("regex", False)
    if use_regex is None:
        use_regex = False
    if not isinstance(use_regex, bool):
        raise _ToolError("`regex` must be true or false")
    note = ""
    try:
        hits = search(store, conv_id, pattern, regex=use_regex, max_scan_bytes=MAX_SCAN_BYTES)
    except ValueError as exc:
        raise _ToolError(str(exc)) from None
    except TimeoutError as exc:  # pragma: no cover - only without RE2
        raise _ToolError(f"{exc}; use a simpler pattern") from None
    except SearchLimit as exc:
        if not exc.hits:
            raise _ToolError(
                f"{exc} without a match; search one result with ctx_recall(ref, grep=...)"
            ) from None
        hits, note = exc.hits, f"\n({exc}; there may be more matches)"
    if not hits:
        return f"No earlier tool result contains {pattern!r}."
    return "\n".join(f"{h['ref']}:{h['line']}: {h['text']}" for h in hits) + note


def handle_tool_call(
    store: SnapshotStore | None,
    conv_id: str,
    name: str,
    arguments: str | Mapping[str, Any] | None,
    *,
    max_chars: int = MAX_TOOL_CHARS,
    redact: bool = True,
) -> str:
    """Run ``ctx_recall`` / ``ctx_search`` for the model. Never raises."""
    try:
        if store is None:
            return "Error: snapshots are disabled for this agent; nothing to recall."
        if isinstance(arguments, (str, bytes)):
            if len(arguments) > MAX_ARGUMENT_CHARS:
                return f"Error: arguments are longer than {MAX_ARGUMENT_CHARS} characters"
            try:
                args = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                return "Error: arguments are not valid JSON"
        elif arguments is None:
            args = {}
        elif isinstance(arguments, Mapping):
            args = dict(arguments)
        else:
            return "Error: arguments must be a JSON object"
        if not isinstance(args, dict):
            return "Error: arguments must be a JSON object"
        clean: Callable[[str], str] = _same
        if redact:
            from ctxpolicy.conversation.redact import default_redactor

            redactor = default_redactor()

            def clean(text: str) -> str:
                return redactor.redact(text)[0]

        if name == RECALL_TOOL:
            # redacted piece by piece while it streams (a whole message or result
            # at a time, so a secret is never cut before it is redacted)
            text = _tool_recall(store, conv_id, args, max_chars=max_chars, clean=clean)
        elif name == SEARCH_TOOL:
            text = clean(_tool_search(store, conv_id, args))
        else:
            shown = name if isinstance(name, str) and len(name) <= 64 else "?"
            return f"Error: unknown tool {shown!r} (expected {RECALL_TOOL} or {SEARCH_TOOL})"
        return bounded(text, max_chars)
    except _ToolError as exc:
        return f"Error: {exc}"
    except Exception as exc:  # never a path, a root or another conversation's name
        return f"Error: the {RECALL_TOOL}/{SEARCH_TOOL} call failed ({type(exc).__name__})"
