"""Trace importers: every supported trace format becomes a list of OpenAI Chat messages.

Formats (chosen from the file's extension and content):

* **JSONL** — one OpenAI Chat message per line (``../shared/traces``,
  ``examples/traces``); blank lines are skipped;
* **JSON array** of OpenAI Chat messages;
* **Anthropic Messages JSON** — a request body ``{"system": ..., "messages": [...]}``
  or a bare array whose ``content`` is a list of blocks (``text``, ``tool_use``,
  ``tool_result``); converted to assistant ``tool_calls`` and ``tool`` messages;
* **SWE-agent ``.traj``** — its ``history`` (assistant ``action`` → a synthesized
  tool call ``{"command": action}``, the following observation → its result);
* **OpenHands event JSON** — a list of events (or ``{"history": [...]}``) with
  ``action`` / ``observation`` entries.

Every problem raises :class:`TraceError` naming the file and the line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxpolicy.conversation.messages import call_name, new_call, tool_calls

__all__ = ["TraceError", "compaction_mark", "load_trace", "mark_warning", "parse_trace_text"]

Message = dict[str, Any]
_ROLES = {"system", "user", "assistant", "tool", "developer"}


#: The nesting depth reported when a trace is nested deeper than JSON can be read.
MAX_TRACE_DEPTH = 500


class TraceError(ValueError):
    """A trace that cannot be read; ``str()`` is ``file:line: message``."""

    def __init__(self, file: str, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file = file
        self.line = line
        self.message = message


#: Text only ctxpolicy writes into a context (reference lines, cut markers, its own
#: messages): a trace holding it was exported after compaction (the agent's history).
_MARKS: tuple[tuple[str, str], ...] = (
    ("a snapshot reference", r"\[Full detail available at: |ctxsnap://"),
    ("a truncation marker", r"\.\.\. \[\d{1,12} chars omitted\] \.\.\."),
    ("a truncation marker", r"\.\.\. \[lines \d{1,12}-\d{1,12} omitted \("),
    ("a truncation marker", r"\[ctxpolicy: \d{1,12} characters of this \w{1,20} removed"),
    ("a ctxpolicy message", r"\[ctxpolicy (?:progress ledger|handover)\]"),
    ("a masked observation", r"\[same output as step \d{1,12} below\]"),
    ("a ctxpolicy summary", r"\[Summary of earlier conversation \(extractive digest\)\]"),
)
_MARK_RE = re.compile("|".join(f"(?P<m{i}>{rx})" for i, (_, rx) in enumerate(_MARKS)))


#: The tools the model calls to read back what was shortened: their arguments name
#: references and their answers hold them, in a raw recorded trace too.
_RECALL_TOOLS = ("ctx_recall", "ctx_search")


def _recall_ids(message: Any) -> set[str]:
    """Ids of the recall calls of an assistant message (a JSONL trace line)."""
    ids: set[str] = set()
    for call in tool_calls(message) if isinstance(message, dict) else ():
        if call_name(call) in _RECALL_TOOLS and isinstance(call.get("id"), str):
            ids.add(call["id"])
    return ids


def _outside_recall(message: Any, recall: set[str]) -> str | None:
    """The text of a JSONL trace line's message that is not the model's own recall:
    without the arguments of its recall calls, nothing for the answer of one; None
    when the line is not a message (then the whole line is searched)."""
    if not isinstance(message, dict) or "role" not in message:
        return None
    if message.get("role") == "tool" and message.get("tool_call_id") in recall:
        return ""
    kept = dict(message)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        kept["tool_calls"] = [
            c for c in calls if not (isinstance(c, dict) and c.get("id") in recall)
        ]
    return json.dumps(kept, ensure_ascii=False)


def compaction_mark(path: str | Path) -> tuple[int, str, str] | None:
    """The first line of ``path`` holding text ctxpolicy writes when it compacts
    (:data:`_MARKS`): ``(line, what, the text found)``, or None. One streaming pass.

    The model's own recall (a ``ctx_recall``/``ctx_search`` call naming a reference,
    and its answer) is not such text: a trace recorded with ``record=`` holds it
    whenever the model read something back."""
    recall: set[str] = set()
    try:
        with Path(path).open("r", encoding="utf-8-sig", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                message: Any = None
                if any(t in line for t in _RECALL_TOOLS) or (recall and '"tool"' in line):
                    try:
                        message = json.loads(line)
                    except ValueError:
                        message = None
                    recall |= _recall_ids(message)
                m = _MARK_RE.search(line)
                if m is None:
                    continue
                if message is None and recall and line.lstrip().startswith("{"):
                    try:
                        message = json.loads(line)
                    except ValueError:
                        message = None
                rest = _outside_recall(message, recall)
                if rest is not None:
                    m = _MARK_RE.search(rest)
                    if m is None:
                        continue
                what = _MARKS[int(str(m.lastgroup)[1:])][0]
                return lineno, what, m.group(0)
    except OSError:
        return None
    return None


def mark_warning(path: str | Path) -> str | None:
    """The warning ``simulate`` and ``tune`` print for a trace that already holds
    ctxpolicy's references or truncation markers (None for a raw trace)."""
    found = compaction_mark(path)
    if found is None:
        return None
    line, what, text = found
    return (
        f"{path}:{line}: this trace already holds {what} ({text.strip()!r}): it was "
        "exported after ctxpolicy compacted it (an agent's history), so its numbers are "
        "not those of the real run; record raw traces with Session(..., record=PATH) "
        "(docs/simulate.md, 'Record your own traces')"
    )


def load_trace(path: str | Path) -> list[Message]:
    """The messages of one trace file, whatever its supported format."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise TraceError(str(p), 1, f"cannot read trace: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TraceError(str(p), line, "not UTF-8 text") from None
    try:
        return parse_trace_text(text, name=str(p))
    except RecursionError:  # a structure too deep for a later step: still an ordinary error
        raise TraceError(str(p), 1, "trace nested too deeply to read") from None


def parse_trace_text(text: str, *, name: str = "<trace>") -> list[Message]:
    """Parse a trace given as text (see the module docstring for formats)."""
    stripped = text.lstrip()
    if not stripped:
        raise TraceError(name, 1, "empty trace")
    is_jsonl = name.endswith(".jsonl") or (stripped[0] == "{" and _looks_like_jsonl(text))
    if is_jsonl:
        return _from_jsonl(text, name)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(
            name, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})"
        ) from None
    except RecursionError:
        raise _too_deep(name, text, 1) from None
    lines = _element_lines(text) if isinstance(data, list) else []
    return _from_json(data, name, lines)


def _too_deep(name: str, text: str, first_line: int) -> TraceError:
    """The error for JSON nested deeper than the parser recurses: at the line where
    the nesting passes :data:`MAX_TRACE_DEPTH` (one pass, strings skipped)."""
    depth, line, in_str, esc = 0, first_line, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            elif ch == "\n":
                line += 1
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_TRACE_DEPTH:
                break
        elif ch in "]}":
            depth -= 1
        elif ch == "\n":
            line += 1
    return TraceError(
        name, line, f"JSON nested too deeply (more than {MAX_TRACE_DEPTH} levels) to read"
    )


def _looks_like_jsonl(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except (json.JSONDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and "role" in obj and "\n" in text.strip()


def _from_jsonl(text: str, name: str) -> list[Message]:
    out: list[Message] = []
    # "\n" only: str.splitlines() also breaks at U+2028, U+0085, ... inside a string
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(
                name, lineno, f"invalid JSON: {exc.msg} (column {exc.colno})"
            ) from None
        except RecursionError:
            raise _too_deep(name, line, lineno) from None
        out.extend(_check_message(obj, name, lineno))
    if not out:
        raise TraceError(name, 1, "no messages")
    return _anthropic_to_openai(out, name, [1] * len(out)) if _has_blocks(out) else out


def _element_lines(text: str) -> list[int]:
    """1-based line of each top-level element of a JSON array (best effort)."""
    dec = json.JSONDecoder()
    lines: list[int] = []
    i = text.index("[") + 1
    n = len(text)
    line, counted = 1, 0  # newlines before `counted`: one pass over the text, not one per element
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        line += text.count("\n", counted, i)
        counted = i
        lines.append(line)
        try:
            _, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break
    return lines


def _check_message(obj: Any, name: str, line: int) -> list[Message]:
    if not isinstance(obj, dict):
        raise TraceError(name, line, f"expected a message object, got {type(obj).__name__}")
    role = obj.get("role")
    if role not in _ROLES:
        raise TraceError(
            name,
            line,
            f"message has no valid role (got {role!r}); expected one of {sorted(_ROLES)}",
        )
    if role == "tool" and not obj.get("tool_call_id"):
        raise TraceError(name, line, "tool message without tool_call_id")
    tcs = obj.get("tool_calls")
    if tcs is not None:
        if not isinstance(tcs, list):
            raise TraceError(name, line, "tool_calls must be a list")
        for tc in tcs:
            if (
                not isinstance(tc, dict)
                or not isinstance(tc.get("function"), dict)
                or "id" not in tc
            ):
                raise TraceError(
                    name, line, "each tool call needs an id and a function {name, arguments}"
                )
    return [dict(obj)]


def _has_blocks(msgs: Sequence[Message]) -> bool:
    for m in msgs:
        c = m.get("content")
        if isinstance(c, list) and any(
            isinstance(b, Mapping) and b.get("type") in ("tool_use", "tool_result") for b in c
        ):
            return True
    return False


def _from_json(data: Any, name: str, lines: list[int]) -> list[Message]:
    def line_of(i: int) -> int:
        return lines[i] if i < len(lines) else 1

    if isinstance(data, Mapping):
        if isinstance(data.get("messages"), list):  # Anthropic / OpenAI request body
            msgs = data["messages"]
            out: list[Message] = []
            system = data.get("system")
            if system:
                out.append({"role": "system", "content": _blocks_text(system)})
            for i, m in enumerate(msgs):
                out.extend(_check_message(m, name, 1 if not lines else line_of(i)))
            return _anthropic_to_openai(out, name, [1] * len(out)) if _has_blocks(out) else out
        if isinstance(data.get("history"), list):
            hist = data["history"]
            if hist and isinstance(hist[0], Mapping) and "role" in hist[0]:
                return _from_swe_agent(hist, name)
            return _from_openhands(hist, name)
        raise TraceError(
            name,
            1,
            "unrecognised JSON trace: expected a list of messages, "
            "{messages: [...]}, a SWE-agent .traj or OpenHands events",
        )
    if not isinstance(data, list):
        raise TraceError(name, 1, f"unrecognised JSON trace (top level is {type(data).__name__})")
    if not data:
        raise TraceError(name, 1, "no messages")
    if all(
        isinstance(e, Mapping) and "role" not in e and ("action" in e or "observation" in e)
        for e in data
    ):
        return _from_openhands(data, name)
    out = []
    for i, m in enumerate(data):
        out.extend(_check_message(m, name, line_of(i)))
    return _anthropic_to_openai(out, name, lines) if _has_blocks(out) else out


def _blocks_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if (
                isinstance(b, Mapping)
                and b.get("type", "text") == "text"
                and isinstance(b.get("text"), str)
            ):
                parts.append(b["text"])
            elif isinstance(b, str):
                parts.append(b)
        return "\n".join(parts)
    return "" if content is None else str(content)


def _anthropic_to_openai(msgs: Sequence[Message], name: str, lines: list[int]) -> list[Message]:
    out: list[Message] = []
    for i, m in enumerate(msgs):
        line = lines[i] if i < len(lines) else 1
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        role = m.get("role")
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        results: list[Message] = []
        for b in content:
            if not isinstance(b, Mapping):
                raise TraceError(name, line, "content block is not an object")
            kind = b.get("type")
            if kind == "text":
                texts.append(str(b.get("text", "")))
            elif kind == "tool_use":
                if "id" not in b or "name" not in b:
                    raise TraceError(name, line, "tool_use block needs id and name")
                args = json.dumps(b.get("input", {}), sort_keys=True)
                calls.append(new_call(str(b["id"]), str(b["name"]), args))
            elif kind == "tool_result":
                if "tool_use_id" not in b:
                    raise TraceError(name, line, "tool_result block needs tool_use_id")
                results.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(b["tool_use_id"]),
                        "content": _blocks_text(b.get("content")),
                    }
                )
            # images, thinking, documents: not text the context keeps here
        if role == "assistant":
            msg: Message = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        else:
            out.extend(results)
            if texts:
                out.append({"role": role, "content": "\n".join(texts)})
    return out


def _from_swe_agent(history: Sequence[Any], name: str) -> list[Message]:
    out: list[Message] = []
    n = 0
    pending: str | None = None
    for i, h in enumerate(history):
        if not isinstance(h, Mapping) or h.get("role") not in _ROLES:
            raise TraceError(name, 1, f"history[{i}]: entry without a valid role")
        role = h["role"]
        text = _blocks_text(h.get("content"))
        if role == "assistant":
            if h.get("tool_calls"):
                msg = {"role": "assistant", "content": text or None, "tool_calls": h["tool_calls"]}
                pending = None
                out.append(msg)
                continue
            action = h.get("action")
            if isinstance(action, str) and action.strip():
                n += 1
                pending = f"call_{n:04d}"
                out.append(
                    {
                        "role": "assistant",
                        "content": text or None,
                        "tool_calls": [new_call(pending, "bash", json.dumps({"command": action}))],
                    }
                )
            else:
                out.append({"role": "assistant", "content": text})
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(
                        h.get("tool_call_id") or (h.get("tool_call_ids") or [""])[0]
                    ),
                    "content": text,
                }
            )
        elif pending is not None and role == "user":
            out.append({"role": "tool", "tool_call_id": pending, "content": text})
            pending = None
        else:
            out.append({"role": role, "content": text})
    if not out:
        raise TraceError(name, 1, "empty SWE-agent history")
    return out


def _from_openhands(events: Sequence[Any], name: str) -> list[Message]:
    out: list[Message] = []
    n = 0
    pending: str | None = None
    for i, e in enumerate(events):
        if not isinstance(e, Mapping):
            raise TraceError(name, 1, f"event {i} is not an object")
        source = e.get("source")
        if "observation" in e:
            text = str(e.get("content") or e.get("message") or "")
            if pending is not None:
                out.append({"role": "tool", "tool_call_id": pending, "content": text})
                pending = None
            elif text:
                out.append({"role": "user", "content": text})
            continue
        action = e.get("action")
        text = str(e.get("message") or (e.get("args") or {}).get("content") or "")
        if action == "message" or action is None:
            if text:
                out.append({"role": "assistant" if source == "agent" else "user", "content": text})
            continue
        if action == "system":
            out.append(
                {"role": "system", "content": str((e.get("args") or {}).get("content") or text)}
            )
            continue
        n += 1
        pending = f"call_{n:04d}"
        raw_args = e.get("args")
        args: Mapping[str, Any] = raw_args if isinstance(raw_args, Mapping) else {}
        thought = str(args.get("thought") or "")
        call_args = {k: v for k, v in args.items() if k not in ("thought",)}
        out.append(
            {
                "role": "assistant",
                "content": thought or None,
                "tool_calls": [
                    new_call(
                        pending, str(action), json.dumps(call_args, sort_keys=True, default=str)
                    )
                ],
            }
        )
    if pending is not None:
        out.append({"role": "tool", "tool_call_id": pending, "content": "[no observation]"})
    if not out:
        raise TraceError(name, 1, "no OpenHands events with messages")
    return out
