"""Handover between agents (design B): what the next agent must know, as data.

``session.handover()`` builds a :class:`Handover` from the progress ledger and
the current context; ``handover.as_message()`` renders it for the next agent;
``Session(policy, handover=h)`` (a Handover, its dict or its JSON) starts a
sub-agent or a resumed run with it pinned, constraints verbatim.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ctxpolicy.conversation import content_text

if TYPE_CHECKING:
    from ctxpolicy.engine.context import EngineContext


class Decision(BaseModel):
    """A decision taken, with its reason."""

    model_config = ConfigDict(extra="forbid")

    decision: str
    reason: str | None = None


class Handover(BaseModel):
    """The state an agent hands to the next one."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    agent: str | None = Field(default=None, description="Agent type that wrote it.")
    conv_id: str | None = None
    created_at: float = Field(default_factory=lambda: round(time.time(), 3))
    goal: str | None = None
    constraints: list[str] = Field(default_factory=list, description="Kept verbatim.")
    progress: list[str] = Field(default_factory=list, description="Done steps, oldest first.")
    decisions: list[Decision] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    identifiers: list[str] = Field(default_factory=list)
    open_errors: list[str] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)
    snapshot_refs: list[str] = Field(default_factory=list)

    def as_text(self) -> str:
        lines = [f"Handover from agent {self.agent or '?'} (conversation {self.conv_id or '?'})."]
        if self.goal:
            lines.append(f"Goal: {self.goal}")
        if self.constraints:
            lines.append("Constraints (verbatim):")
            lines += [f"- {c}" for c in self.constraints]
        sections = (
            ("Progress", self.progress),
            (
                "Decisions",
                [
                    d.decision + (f" (because {d.reason})" if d.reason else "")
                    for d in self.decisions
                ],
            ),
            ("Files", self.files),
            ("Identifiers", self.identifiers),
            ("Open errors", self.open_errors),
            ("Next steps", self.next_steps),
            ("Snapshots (full originals, by reference)", self.snapshot_refs),
        )
        for title, items in sections:
            if items:
                lines.append(f"{title}:")
                lines += [f"- {x}" for x in items]
        return "\n".join(lines)

    def as_message(self, role: str = "user") -> dict[str, Any]:
        """An OpenAI chat message for the next agent."""
        return {"role": role, "content": self.as_text()}


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in items if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


def build_handover(ctx: EngineContext, *, limit: int = 40) -> Handover:
    """A handover from the session's ledger and its last prepared context."""
    from ctxpolicy.conversation.facts import error_lines, extract
    from ctxpolicy.engine.tool_results import parse_reference

    led = ctx.state.ledger
    data: dict[str, Any] = (
        {
            "goal": led.goal,
            "constraints": list(led.constraints),
            "instructions": list(led.instructions),
            "done": list(led.done),
            "files": led.files,
            "ids": led.ids,
            "errors": led.errors,
            "next_step": led.next_step,
            "plan": [t.text for t in led.todos if t.status != "completed"],
            "decisions": list(led.state.decisions),
        }
        if led is not None
        else {}
    )
    units = list(ctx.derived.last_units)
    texts = [u.text() for u in units if u.kind not in ("system", "ledger")]
    facts = extract("\n".join(texts))
    refs: list[str] = []
    errors: list[str] = list(data.get("errors", []))
    for u in units:
        for m in u.tool_messages:
            body = content_text(m.get("content"))
            refs.extend(parse_reference(body))
            errors.extend(error_lines(body, limit=2))
    goal = data.get("goal")
    if goal is None:
        first_user = next((u for u in units if u.kind == "user"), None)
        if first_user is not None:
            goal = content_text(first_user.messages[0].get("content"))[:500]
    next_steps: list[str] = []
    last_assistant = next(
        (
            m
            for u in reversed(units)
            for m in reversed(u.messages)
            if m.get("role") == "assistant" and content_text(m.get("content")).strip()
        ),
        None,
    )
    if last_assistant is not None:
        next_steps.append(content_text(last_assistant.get("content")).strip()[:500])
    elif data.get("next_step"):
        next_steps.append(str(data["next_step"]))
    constraints = _dedupe(
        [*ctx.policy.constraints, *data.get("constraints", []), *data.get("instructions", [])]
    )
    if data.get("plan"):
        next_steps = _dedupe([*data["plan"], *next_steps])
    return Handover(
        agent=ctx.policy.agent,
        conv_id=ctx.conv_id,
        goal=goal,
        constraints=constraints,
        progress=list(data.get("done", []))[-limit:],
        decisions=[Decision(decision=d) for d in data.get("decisions", [])][-limit:],
        files=_dedupe([*data.get("files", []), *facts.paths])[-limit:],
        identifiers=_dedupe([*data.get("ids", []), *facts.ids])[-limit:],
        open_errors=_dedupe(errors)[-10:],
        next_steps=next_steps,
        snapshot_refs=_dedupe(refs)[-limit:],
    )
