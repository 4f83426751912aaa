"""The summary prompt (after design B's ``_build_summary_prompt``) and transcript rendering.

Used by the ``summarize`` layer (as :attr:`SummaryRequest.instructions`) and by
LLM summarizers to turn a :class:`SummaryRequest` into one prompt text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.components import SummaryRequest
from ctxpolicy.conversation import content_text

SUMMARY_INSTRUCTIONS = """\
Compress the conversation history below into a concise summary that another model
will continue the task from. Keep, exactly as written:
1. the user's goal and requirements;
2. the exact task state: what is done, what is in progress, what is left;
3. file paths, identifiers (ticket / order / booking IDs, hashes), variable and
   function names, configuration values and numbers with their units;
4. hard constraints and limits (copy them verbatim);
5. errors seen (exact messages) and the direction of the investigation;
6. decisions taken, with their reasons, and the next steps.
Drop redundant intermediate output and repetitions. Do not invent anything.
Write plain text, at most {max_tokens} tokens."""


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
        for tc in m.get("tool_calls") or []:
            if isinstance(tc, Mapping):
                fn = tc.get("function") or {}
                args = fn.get("arguments", "")
                if not isinstance(args, str):
                    args = json.dumps(args, ensure_ascii=False)
                lines.append(f"[{role} calls {fn.get('name', '?')} ({tc.get('id', '')})]: {args}")
    return "\n".join(lines)


def build_prompt(request: SummaryRequest) -> str:
    """One prompt text: instructions, constraints, previous summary, new messages."""
    instructions = request.instructions or SUMMARY_INSTRUCTIONS
    instructions = instructions.replace("{max_tokens}", str(request.max_tokens))
    parts = [instructions]
    if request.constraints:
        parts.append(
            "Constraints (keep verbatim):\n" + "\n".join(f"- {c}" for c in request.constraints)
        )
    parts.append("Existing summary:\n" + (request.previous_summary or "(none)"))
    parts.append("New conversation content:\n" + transcript(request.messages))
    parts.append("Write the updated summary:")
    return "\n\n".join(parts)
