"""The summary prompt, transcript rendering and the live-prefix request.

Used by the ``summarize`` layer (as :attr:`SummaryRequest.instructions`) and by
LLM summarizers to turn a :class:`SummaryRequest` into a prompt: one text with a
transcript (:func:`build_prompt`), or the live prompt itself followed by one
instruction (:func:`prefix_messages`), so the summarizer's input is what the model
last read — a cache read at the provider — instead of a new text.

The summary asks for the sections of the engine's task state (the progress ledger):
goal, the user's instructions verbatim, plan, steps done, artifacts and their latest
state, small results whole, decisions, open errors, next action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.components import SummaryRequest
from ctxpolicy.conversation import content_text
from ctxpolicy.conversation.messages import arguments_text, call_id, call_name, tool_calls

SUMMARY_INSTRUCTIONS = """\
Compress the conversation history into a summary that another model will continue
the task from. Use these sections, in this order, each only when it has content:
Goal: the user's task, in one line.
User instructions (verbatim): every instruction, requirement and constraint the user
  gave, copied exactly as written.
Plan: the agent's plan or todo items, each marked [x] done, [>] in progress, [ ] open.
Done: the steps taken, one line each, with their outcome.
Artifacts (latest state): files, tables, tickets and other IDs touched, each with its
  latest state.
Results (kept whole): small computed results (a table of up to 20 rows) copied exactly.
Decisions: decisions taken, with their reasons.
Open errors: errors not yet resolved, with their exact messages.
Next action: the one next step that is not done yet.
Keep file paths, identifiers, names, values and numbers with their units exactly.
Say each fact once. Do not invent anything. Write plain text, at most {max_tokens}
tokens."""

#: The one instruction after the live prompt (``{where}``: what to fold).
FOLD_INSTRUCTION = """\
Do not continue the task. Summarize {where}: that part of the conversation is about to
be replaced by your summary (any earlier summary in it is replaced too: keep its
content)."""


def transcript(
    messages: Sequence[Mapping[str, Any]], max_chars_per_message: int | None = None
) -> str:
    """Messages as ``[role]: text`` lines, tool calls and results labelled."""
    lines: list[str] = []
    for m in messages:
        role = str(m.get("role", "?"))
        text = content_text(m.get("content"))
        if max_chars_per_message is not None and len(text) > max_chars_per_message:
            text = text[:max_chars_per_message] + " …"
        if role == "tool":
            lines.append(f"[tool result {m.get('tool_call_id', '')}]: {text}")
            continue
        if text:
            lines.append(f"[{role}]: {text}")
        for tc in tool_calls(m):
            args = arguments_text(tc)
            lines.append(f"[{role} calls {call_name(tc) or '?'} ({call_id(tc)})]: {args}")
    return "\n".join(lines)


def _instructions(request: SummaryRequest) -> str:
    instructions = request.instructions or SUMMARY_INSTRUCTIONS
    return instructions.replace("{max_tokens}", str(request.max_tokens))


def _constraints(request: SummaryRequest) -> list[str]:
    if not request.constraints:
        return []
    return ["Constraints (keep verbatim):\n" + "\n".join(f"- {c}" for c in request.constraints)]


def build_prompt(request: SummaryRequest) -> str:
    """One prompt text: instructions, constraints, previous summary, new messages."""
    parts = [_instructions(request), *_constraints(request)]
    parts.append("Existing summary:\n" + (request.previous_summary or "(none)"))
    parts.append("New conversation content:\n" + transcript(request.messages))
    parts.append("Write the updated summary:")
    return "\n\n".join(parts)


def prefix_messages(request: SummaryRequest) -> list[dict[str, Any]]:
    """The live prompt (``request.prefix``, unchanged: the provider reads it from its
    cache) and one user message: what to fold, the instructions, the constraints."""
    prefix = [dict(m) for m in request.prefix or ()]
    end = request.keep_from
    if end is None or end >= len(prefix):
        where = "the whole conversation above"
    else:
        first = " ".join(content_text(prefix[end].get("content")).split())[:120]
        role = prefix[end].get("role", "?")
        where = (
            f"the conversation above up to, and not including, message {end + 1} "
            f"(a {role} message"
            + (f" that begins: «{first}»)" if first else ")")
            + "; the messages from there on stay as they are"
        )
    parts = [FOLD_INSTRUCTION.format(where=where), _instructions(request), *_constraints(request)]
    return [*prefix, {"role": "user", "content": "\n\n".join(parts)}]
