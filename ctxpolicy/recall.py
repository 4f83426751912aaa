"""Getting dropped detail back: ``recall`` one snapshot, ``search`` a session's.

:func:`recall` is for the application (``Session.recall``) and returns the exact
original observation. :func:`handle_tool_call` is what the *model* reaches
through the ``ctx_recall`` / ``ctx_search`` function tools (:func:`recall_tools`):
it never raises (errors come back as text), bounds its answer, and redacts the
default secret patterns — a key that was redacted from the context does not come
back through the recall tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.components import SnapshotStore

__all__ = ["handle_tool_call", "recall", "recall_tools", "search"]

RECALL_TOOL = "ctx_recall"
SEARCH_TOOL = "ctx_search"
MAX_TOOL_CHARS = 20_000
_RANGE_RE = re.compile(r"^\s*(\d+)\s*(?:[-:,]\s*(\d+)\s*)?$")


def _observation(doc: Mapping[str, Any]) -> str:
    obs = doc.get("observation", "")
    return obs if isinstance(obs, str) else json.dumps(obs, ensure_ascii=False, default=str)


def _parse_lines(lines: Sequence[int] | str) -> tuple[int, int]:
    if isinstance(lines, str):
        m = _RANGE_RE.match(lines)
        if not m:
            raise ValueError(f"lines must look like '10-40', got {lines!r}")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
    else:
        first, last = (int(x) for x in lines)
    if first < 1 or last < first:
        raise ValueError(f"bad line range {first}-{last} (1-based, inclusive)")
    return first, last


def recall(
    store: SnapshotStore,
    ref: str,
    *,
    lines: Sequence[int] | str | None = None,
    grep: str | None = None,
) -> str:
    """The original observation of a snapshot (``ctxsnap://`` URI or path).

    ``lines`` — a 1-based inclusive range (``"10-40"`` or ``(10, 40)``): exactly those
    lines, joined by ``\\n``. ``grep`` — a substring (case-sensitive): the matching lines
    as ``"<n>: <line>"`` (within ``lines`` when both are given). Raises ``SnapshotError``
    for an unknown ref and ``ValueError`` for a bad range.
    """
    text = _observation(store.read(ref))
    if lines is None and grep is None:
        return text
    all_lines = text.split("\n")
    first, last = (1, len(all_lines)) if lines is None else _parse_lines(lines)
    chosen = all_lines[first - 1 : last]
    if grep is None:
        return "\n".join(chosen)
    return "\n".join(f"{first + i}: {ln}" for i, ln in enumerate(chosen) if grep in ln)


def search(
    store: SnapshotStore,
    conv_id: str,
    pattern: str,
    *,
    regex: bool = False,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """Lines matching ``pattern`` (substring, or ``regex``) in a session's snapshots.

    Hits are ``{"ref", "action", "step", "line", "text"}`` in snapshot order, at most
    ``limit``; each hit's text is cut to 300 characters.
    """
    rx = re.compile(pattern) if regex else None
    hits: list[dict[str, Any]] = []
    for ref in store.list(conv_id):
        try:
            doc = store.read(ref.uri)
        except Exception:
            continue
        for n, line in enumerate(_observation(doc).split("\n"), 1):
            found = rx.search(line) is not None if rx is not None else pattern in line
            if found:
                hits.append(
                    {
                        "ref": ref.uri,
                        "action": doc.get("action"),
                        "step": doc.get("step"),
                        "line": n,
                        "text": line if len(line) <= 300 else line[:300] + "…",
                    }
                )
                if len(hits) >= limit:
                    return hits
    return hits


def recall_tools() -> list[dict[str, Any]]:
    """OpenAI function-tool schemas of ``ctx_recall`` and ``ctx_search``."""
    return [
        {
            "type": "function",
            "function": {
                "name": RECALL_TOOL,
                "description": "Fetch the full original of an earlier tool result that was "
                "shortened or removed from the conversation. Pass the reference shown as "
                "'[Full detail available at: ... (ctxsnap://...)]'. Optionally a line range "
                "or a substring to return only matching lines.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "ref": {
                            "type": "string",
                            "description": "ctxsnap:// URI (or the path) of the snapshot.",
                        },
                        "lines": {
                            "type": "string",
                            "description": "1-based inclusive line range, e.g. '120-180'.",
                        },
                        "grep": {
                            "type": "string",
                            "description": "Only lines containing this text, with line numbers.",
                        },
                    },
                    "required": ["ref"],
                    "additionalProperties": False,
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": SEARCH_TOOL,
                "description": "Search all earlier full tool results of this conversation "
                "for a text (or a regular expression); returns references and matching lines.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string", "description": "Text to look for."},
                        "regex": {
                            "type": "boolean",
                            "description": "Treat pattern as a Python regular expression.",
                        },
                    },
                    "required": ["pattern"],
                    "additionalProperties": False,
                },
            },
        },
    ]


def _bounded(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    omitted = len(text) - 2 * half
    return (
        f"{text[:half]}\n... [{omitted} chars omitted; ask for a line range or grep] ...\n"
        f"{text[-half:]}"
    )


def _owned_by(ref: str, conv_id: str) -> bool:
    """True when ``ref`` names a snapshot of ``conv_id`` (the model may not read others)."""
    from pathlib import PurePath

    from ctxpolicy.snapshots import parse_uri, safe_conv_id

    parsed = parse_uri(ref)
    conv = parsed[0] if parsed is not None else PurePath(ref).parent.name
    return conv == safe_conv_id(conv_id)


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
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return f"Error: arguments are not valid JSON: {exc}"
        else:
            args = dict(arguments or {})
        if not isinstance(args, dict):
            return "Error: arguments must be a JSON object"
        if name == RECALL_TOOL:
            ref = args.get("ref")
            if not isinstance(ref, str) or not ref:
                return "Error: `ref` (a ctxsnap:// reference) is required"
            if not _owned_by(ref, conv_id):
                return "Error: that snapshot belongs to another conversation"
            lines = args.get("lines")
            grep = args.get("grep")
            if lines is not None and not isinstance(lines, (str, list, tuple)):
                lines = str(lines)
            text = recall(store, ref, lines=lines or None, grep=grep if grep else None)
            if grep and not text:
                text = f"(no line contains {grep!r})"
        elif name == SEARCH_TOOL:
            pattern = args.get("pattern")
            if not isinstance(pattern, str) or not pattern:
                return "Error: `pattern` is required"
            try:
                hits = search(store, conv_id, pattern, regex=bool(args.get("regex")))
            except re.error as exc:
                return f"Error: invalid regular expression: {exc}"
            if not hits:
                return f"No earlier tool result contains {pattern!r}."
            text = "\n".join(f"{h['ref']}:{h['line']}: {h['text']}" for h in hits)
        else:
            return f"Error: unknown tool {name!r} (expected {RECALL_TOOL} or {SEARCH_TOOL})"
        if redact:
            from ctxpolicy.preprocessors.redact import default_redactor

            text = default_redactor().redact(text)[0]
        return _bounded(text, max_chars)
    except Exception as exc:
        return f"Error: {type(exc).__name__}: {exc}"
