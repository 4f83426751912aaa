"""Messages of the engine's own making and small conversions at the session's edges.

The progress ledger and a handover are pinned system messages whose first line is a
marker, so that a prepared list fed back by an agent is recognised (and re-adopted,
not duplicated); dropped messages are archived as plain text transcripts.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any

from ctxpolicy.components import CallableSummarizer, Summarizer, ToolCall
from ctxpolicy.conversation import Unit, pin_units
from ctxpolicy.conversation.messages import call_arguments, call_name

#: First line of the ledger message; lets a re-ingested ledger be recognised.
LEDGER_MARK = "[ctxpolicy progress ledger]"
#: First line of a pinned handover message.
HANDOVER_MARK = "[ctxpolicy handover]"


def own_kind(m: Any) -> str | None:
    """``"ledger"`` / ``"handover"`` for a message of ours an agent fed back, else None."""
    if isinstance(m, Mapping) and m.get("role") == "system":
        text = m.get("content")
        if isinstance(text, str):
            if text.startswith(LEDGER_MARK):
                return "ledger"
            if text.startswith(HANDOVER_MARK):
                return "handover"
    return None


def own_text(m: Mapping[str, Any]) -> str:
    """The body of a ledger/handover message (without its marker line)."""
    text = str(m.get("content") or "")
    return text.split("\n", 1)[1] if "\n" in text else ""


def special_unit(key: str, mark: str, text: str) -> Unit:
    """A pinned message of ours (the ledger or a handover): system role, ``mark`` first."""
    return Unit(
        kind="ledger",
        messages=({"role": "system", "content": f"{mark}\n{text}"},),
        key=key,
        pinned=True,
    )


def insert_specials(view: list[Unit], specials: list[Unit]) -> list[Unit]:
    """``view`` with the ledger/handover units after the system prompt and pinned task:
    chronologically where the compacted history was, and the cached prefix
    [system, task] stays stable when they change."""
    if not specials:
        return view
    i = 0
    while i < len(view) and view[i].kind == "system":
        i += 1
    if i < len(view) and view[i].kind == "user" and view[i].pinned:
        i += 1
    return pin_units(
        [*view[:i], *specials, *view[i:]], system=False, first_user=False, last_user=False
    )


#: What providers' and frameworks' tool call ids look like (OpenAI ``call_…``, Anthropic
#: ``toolu_…``, Bedrock ``tooluse_…``, Responses ``fc_…``, ADK ``adk-…``): a digit in it.
_CALL_ID_RE = re.compile(r"(?:call|toolu|tooluse|fc|adk|tool)[_-][A-Za-z0-9_-]{0,200}")


def check_tool_name(name: str, policy: Any) -> None:
    """Refuse a tool call *id* given where a tool call or a tool name goes
    (``add_tool_result("call_1", out)``): it would silently get the ``"*"`` rule.
    A name some rule of the policy names explicitly is always accepted."""
    if not _CALL_ID_RE.fullmatch(name) or not any(ch.isdigit() for ch in name):
        return
    tools = getattr(policy, "tools", {}) or {}
    if any(p != "*" and fnmatch.fnmatchcase(name, p) for p in tools):
        return
    shown = name if len(name) <= 80 else name[:77] + "..."
    raise ValueError(
        f"add_tool_result got {shown!r}, which looks like a tool call id, not a tool name: "
        "pass the tool call itself (the entry of the assistant message's tool_calls, an "
        "Anthropic tool_use block, or {'id': ..., 'name': ..., 'arguments': ...}) so the "
        "tool's rule applies and the snapshot is linked to the call; a bare tool name "
        "such as 'read_file' also works"
    )


def tool_call_info(tool_call: Any) -> ToolCall:
    """A :class:`ToolCall` from an OpenAI/Anthropic/LangChain call, a dict or a name."""
    if isinstance(tool_call, ToolCall):
        return tool_call
    if isinstance(tool_call, str):
        return ToolCall(name=tool_call)
    if isinstance(tool_call, Mapping):
        fn = tool_call.get("function")
        if isinstance(fn, Mapping):
            return ToolCall(
                name=call_name(tool_call),
                arguments=call_arguments(tool_call),
                id=tool_call.get("id"),
            )
        return ToolCall(
            name=str(tool_call.get("name", "")),
            arguments=tool_call.get("arguments", tool_call.get("input", tool_call.get("args"))),
            id=tool_call.get("id"),
        )
    name = getattr(tool_call, "name", None) or getattr(
        getattr(tool_call, "function", None), "name", ""
    )
    return ToolCall(
        name=str(name),
        arguments=getattr(tool_call, "arguments", None),
        id=getattr(tool_call, "id", None),
    )


def as_summarizer(obj: Summarizer | Callable[..., str] | None) -> Summarizer | None:
    """A :class:`Summarizer` from a summarizer or a plain function (None stays None)."""
    if obj is None or isinstance(obj, Summarizer):
        return obj
    if callable(obj):
        return CallableSummarizer.from_function(obj)
    raise TypeError("summarizer must be a ctxpolicy.Summarizer or a function")
