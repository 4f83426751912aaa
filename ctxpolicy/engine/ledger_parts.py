"""The pieces of the progress ledger (:mod:`ctxpolicy.engine.ledger`): its limits, the
typed records of the task state, and the helpers that read dropped units (tool names,
todo lists, what a call did, SQL tables, ids and facts) and write its lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.conversation import Unit, content_text
from ctxpolicy.conversation.cut import describe_call, short
from ctxpolicy.conversation.facts import (
    INSTRUCTION_CUT,
    error_lines,
    is_path,
)
from ctxpolicy.conversation.messages import call_arguments, call_id, call_name, tool_calls

HEADER = "[Progress ledger: task state of the compacted history]"
VERSION = 2
#: Entries each list keeps at most (newest win).
_MAX_PER_LIST = 200
#: Units of one drop :meth:`ProgressLedger.update` reads at most (newest).
MAX_READ = 2000
#: A tool result of at most this many non-empty lines and characters, shaped like a
#: table, is a computed result kept whole.
RESULT_LINES = 22
RESULT_CHARS = 1500
#: Results kept whole at most (the newest).
MAX_RESULTS = 4
MAX_DECISIONS = 12
MAX_ERRORS = 12
#: Trimmed first when over budget (oldest entry of the longest list first); then the
#: plan's completed items, then the oldest instructions (never the goal).
_TRIM_ORDER = ("done", "artifacts", "decisions", "results", "errors")

#: Tool names of the agents' own todo/plan tools (case and ``_``/``-`` ignored).
TODO_TOOLS = frozenset(
    {
        "todowrite",
        "todo",
        "todos",
        "writetodos",
        "updatetodos",
        "updateplan",
        "plan",
        "setplan",
        "writeplan",
        "updatetodolist",
        "managetodolist",
        "tasklist",
    }
)
_TODO_LIST_KEYS = ("todos", "plan", "items", "tasks", "steps", "todo_list", "todoList")
_TODO_TEXT_KEYS = ("content", "step", "task", "text", "title", "description", "activeForm")
_STATUS = {
    "completed": "completed",
    "complete": "completed",
    "done": "completed",
    "finished": "completed",
    "cancelled": "completed",
    "canceled": "completed",
    "in_progress": "in_progress",
    "in-progress": "in_progress",
    "inprogress": "in_progress",
    "active": "in_progress",
    "doing": "in_progress",
    "started": "in_progress",
    "pending": "pending",
    "todo": "pending",
    "open": "pending",
    "not_started": "pending",
}
_MARK = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}
#: Artifacts only seen (no state of their own), one line per kind.
_SEEN = (
    ("file", "Files seen"),
    ("table", "Tables seen"),
    ("id", "IDs seen"),
    ("url", "URLs seen"),
    ("value", "Values seen"),
)

#: What an assistant sentence says when it states a decision.
_DECISION = re.compile(
    r"\b(?:decided|decide to|chose|choose to|going with|will use|i'll use|we'll use|"
    r"instead of|switch(?:ed)? to|the (?:fix|approach|answer|root cause) is|conclude)\b",
    re.IGNORECASE,
)
#: An intention stated for the next move.
#: (Linear: the spaces it skips are bounded and never newlines, so a long run of
#: blank lines is not rescanned from every position.)
_INTENT = re.compile(
    r"(?:^|\n)[ \t]{0,8}(?:next(?: step)?[ \t]{0,4}[:,-]|next,? i(?:'ll| will)|then i(?:'ll| will)|"
    r"i(?:'ll| will) now)[ \t]{0,8}(?P<what>[^\n]{3,300})",
    re.IGNORECASE,
)
_SQL_TABLE = re.compile(
    r"\b(?:from|join|into|update|table)\s+((?:[\"`]?[A-Za-z_][\w$]{0,80}[\"`]?\.){0,2}"
    r"[\"`]?[A-Za-z_][\w$]{0,80}[\"`]?)",
    re.IGNORECASE,
)
_SQL_WORDS = frozenset({"select", "where", "the", "a", "an", "each", "as", "lateral", "unnest"})
_READ_VERBS = ("read", "view", "cat", "open", "get", "show", "list", "ls", "head", "tail")
_EDIT_VERBS: tuple[str, ...] = (
    "write",
    "edit",
    "replace",
    "patch",
    "create",
    "insert",
    "update",
    "modify",
    "append",
    "apply",
    "save",
    "sed",
    "mv",
    "cp",
    "touch",
    "mkdir",
)
_DELETE_VERBS = ("delete", "remove", "rm", "cancel", "drop")
_QUERY_VERBS = ("sql", "query", "select", "search", "find", "grep", "lookup", "fetch")


@dataclass
class Todo:
    """One item of the agent's plan: its text and ``pending``/``in_progress``/``completed``."""

    text: str
    status: str = "pending"


@dataclass
class Artifact:
    """Something the task touched (``kind``: file, table, id, url) and its latest state."""

    name: str
    kind: str
    state: str


@dataclass
class OpenError:
    """An error a call reported, open until a later call of the same ``source`` succeeds."""

    text: str
    source: str


@dataclass
class Result:
    """A small computed result kept whole: the call that made it and its text."""

    call: str
    text: str


@dataclass
class TaskState:
    """Everything the ledger knows, as plain data (what :meth:`ProgressLedger.to_dict`
    persists)."""

    goal: str | None = None
    instructions: list[str] = field(default_factory=list)
    #: user turns no longer kept (the oldest beyond :data:`MAX_INSTRUCTIONS`)
    instructions_dropped: int = 0
    constraints: list[str] = field(default_factory=list)
    todos: list[Todo] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    artifacts: list[Artifact] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    errors: list[OpenError] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    next_action: str | None = None
    archive: str | None = None
    #: whether the model is offered ``ctx_recall`` (as of the last compaction)
    recall: bool = False
    #: keys of entries said elsewhere in the prompt (as of the last compaction)
    said: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------- helpers
#: The tool a ledger names for reading the archive, when the model is offered it.
RECALL_TOOL = "ctx_recall"


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> set[str]:
    """Names of the tools a request offers (OpenAI ``{"function": {"name"}}``, plain
    ``{"name"}`` as Anthropic's and the adapters' counting lists hold them)."""
    out: set[str] = set()
    for t in tools or ():
        if not isinstance(t, Mapping):
            continue
        fn = t.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else t.get("name")
        if isinstance(name, str):
            out.add(name)
    return out


def todo_list(name: str, args: Any) -> list[Todo] | None:
    """The plan a call of the agent's own todo/plan tool writes (the whole list: these
    tools rewrite it each time), or None when ``name`` is not such a tool or its
    arguments hold no list of items."""
    if re.sub(r"[^a-z]", "", name.lower()) not in TODO_TOOLS or not isinstance(args, Mapping):
        return None
    items = next((args[k] for k in _TODO_LIST_KEYS if isinstance(args.get(k), list)), None)
    if items is None:
        return None
    out: list[Todo] = []
    for it in items[:_MAX_PER_LIST]:
        if isinstance(it, str):
            text, status = it, "pending"
        elif isinstance(it, Mapping):
            text = next((it[k] for k in _TODO_TEXT_KEYS if isinstance(it.get(k), str)), "")
            raw = it.get("status", it.get("state"))
            if isinstance(raw, str):
                status = _STATUS.get(raw.strip().lower().replace(" ", "_"), "pending")
            elif it.get("done") is True or it.get("completed") is True:
                status = "completed"
            else:
                status = "pending"
        else:
            continue
        text = short(text, 300)
        if text:
            out.append(Todo(text=text, status=status))
    return out


def _has_todo_call(u: Unit) -> bool:
    for m in u.messages:
        for tc in tool_calls(m):
            if todo_list(call_name(tc), _args(call_arguments(tc))) is not None:
                return True
    return False


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        if len(raw) > 200_000:
            return {}
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"arguments": raw}
    return raw if isinstance(raw, Mapping) else {}


def _calls_by_id(u: Unit) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in u.messages:
        for tc in tool_calls(m):
            out[call_id(tc)] = describe_call(tc, 100)
    return out


def _verb(name: str, args: Any) -> str:
    words = [name.lower()]
    if isinstance(args, Mapping):
        for k in ("command", "cmd", "action"):
            if isinstance(args.get(k), str):
                words.append(args[k].split(" ", 1)[0].lower())
    joined = " ".join(words)
    if any(v in joined for v in _DELETE_VERBS):
        return "deleted"
    if any(v in joined for v in _EDIT_VERBS):
        return "edited"
    if any(v in joined for v in _QUERY_VERBS):
        return "queried"
    if any(v in joined for v in _READ_VERBS):
        return "read"
    return "used"


def _tables(sql: str) -> list[str]:
    """Table names a SQL text reads or writes (``FROM``/``JOIN``/``INTO``/``UPDATE``)."""
    if not sql or len(sql) > 20_000:
        return []
    out: list[str] = []
    for m in _SQL_TABLE.finditer(sql):
        t = m.group(1).replace('"', "").replace("`", "")
        if t.lower() not in _SQL_WORDS and t not in out and not t.isdigit():
            out.append(t)
    return out[:20]


def _id_kind(x: str) -> str:
    return "url" if "://" in x else "id"


_VALUE = re.compile(r"^\$?\d[\d.,]*\s?\S{0,8}$|^[\w.-]+=")


def _fact_kind(f: str) -> str:
    """``file``, ``url``, ``value`` (a number with its unit, a ``name=value``) or ``id``."""
    if is_path(f):
        return "file"
    if "://" in f:
        return "url"
    return "value" if _VALUE.match(f) else "id"


def _is_table(text: str) -> bool:
    """A small computed result: at most :data:`RESULT_LINES` non-empty lines and
    :data:`RESULT_CHARS` characters, two or more lines sharing a column delimiter
    (``|``, tab, ``,``) or a JSON array of rows; no error line."""
    if not text or len(text) > RESULT_CHARS or "\n" not in text.strip():
        return False
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2 or len(lines) > RESULT_LINES:
        return False
    if error_lines(text, limit=1):
        return False
    s = text.lstrip()
    if s.startswith("[{") or s.startswith("[["):
        return True
    for delim in ("|", "\t", ","):
        counts = [ln.count(delim) for ln in lines]
        if counts[0] and sum(1 for c in counts if c == counts[0]) >= max(2, len(lines) * 3 // 4):
            return True
    return False


def _first_user_text(units: Iterable[Unit]) -> str | None:
    for u in units:
        if u.kind == "user":
            for m in u.messages:
                if m.get("role") == "user":
                    text = content_text(m.get("content"))
                    if text.strip():
                        return text
    return None


def _is_done(st: TaskState, action: str) -> bool:
    a = action.strip().lower().rstrip(".")
    if any(t.status == "completed" and t.text.strip().lower().rstrip(".") == a for t in st.todos):
        return True
    return any(a and a in d.lower() for d in st.done)


def _verbatim_in(turn: str, text: str) -> bool:
    """Whether a user turn as kept (whole, or its head when it was longer) is in ``text``."""
    return turn.removesuffix(INSTRUCTION_CUT) in text


def _call_part(done: str) -> str:
    """The call of a done entry (``step N: name(args) → outcome [ref]``), at most 60
    characters without the ellipsis: what a summary's own line for it starts with."""
    call = done.split(": ", 1)[-1] if done.startswith("step ") else done
    call = call.split(" → ", 1)[0].split(" [", 1)[0]
    return short(call, 60).rstrip("…")


def _artifact_line(a: Artifact) -> str:
    return f"{a.name}: {a.state}" if a.kind != "table" else f"table {a.name}: {a.state}"


def _bullet(text: str) -> str:
    return "- " + text  # verbatim: a turn's own lines follow as written


def _key(kind: str, text: str) -> str:
    return f"{kind}:{text}"


def _trim(parts: dict[str, list[Any]], excess_chars: float) -> bool:
    """Drop the oldest entries (longest list of :data:`_TRIM_ORDER` first; then
    completed plan items, then instructions) until about ``excess_chars`` are gone.
    False when nothing is left to drop."""
    removed = 0.0
    did = False
    while removed < excess_chars:
        # the newest small result stays whole (it is most often what answers the task)
        filled = [n for n in _TRIM_ORDER if len(parts[n]) > (1 if n == "results" else 0)]
        if filled:
            name = max(filled, key=lambda n: len(parts[n]))
            gone = parts[name].pop(0)
        elif any(t.status == "completed" for t in parts["todos"]):
            i = next(i for i, t in enumerate(parts["todos"]) if t.status == "completed")
            gone = parts["todos"].pop(i)
        elif parts["instructions"]:
            gone = parts["instructions"].pop(0)
        else:
            return did
        did = True
        removed += len(str(gone)) + 3
    return did


def _opt(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int:
    return v if type(v) is int and v >= 0 else 0


def _strs(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else []


def _maps(v: Any, keys: Sequence[str]) -> list[Mapping[str, Any]]:
    if not isinstance(v, list):
        return []
    return [x for x in v if isinstance(x, Mapping) and all(k in x for k in keys)]
