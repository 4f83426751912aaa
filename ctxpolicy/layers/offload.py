"""``offload`` — design B L3: old rounds moved to the snapshot store.

Chooses rounds exactly like ``drop_rounds`` (oldest first, ``keep_recent_rounds``
and ``min_keep_tokens`` kept, stop at the target), writes each dropped round to
the session's snapshot store (``ctx.snapshots.write(conv_id, step, "offload",
document)``) and puts one short pointer unit (a ``summary`` unit with
``meta["offload"]``) in their place, listing the refs so the agent can find them
again with the recall tool. An earlier pointer in the dropped region is merged
into the new one (pointers never stack). Without a store it drops like
``drop_rounds`` and says so in the report; if a write fails, history is left
untouched (``report["failed"]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from ctxpolicy.components import CompactionContext, ComponentOptions, Layer, LayerResult
from ctxpolicy.conversation import Unit
from ctxpolicy.conversation.cut import describe_call, short
from ctxpolicy.conversation.facts import extract
from ctxpolicy.conversation.refs import unit_refs
from ctxpolicy.layers._util import ROUNDS_TUNE_SPACE, plan_rounds, round_groups
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import TuneRange

POINTER_HEADER = (
    "[Offloaded {n} earlier rounds to the snapshot store; search them with the recall tool]"
)


class OffloadOptions(ComponentOptions):
    """Options of ``offload``."""

    keep_recent_rounds: int = Field(default=3, ge=0, description="Newest rounds never offloaded.")
    min_keep_tokens: int = Field(
        default=0,
        ge=0,
        description="A round is only offloaded if at least this many tokens of newer content remain.",
    )
    max_listed_refs: int = Field(
        default=20,
        ge=1,
        description="Refs listed in the pointer (newest first win; older ones are counted).",
    )


class Offload(Layer):
    name = "offload"
    description = "Move old rounds to the snapshot store, leaving a pointer with their refs."
    Options = OffloadOptions
    tune_space: ClassVar[dict[str, TuneRange]] = dict(ROUNDS_TUNE_SPACE)
    options: OffloadOptions

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        opts = self.options
        drop, n, reason = plan_rounds(ctx, units, opts)
        if not drop:
            return LayerResult(
                units=list(units), report={"offloaded_rounds": 0, "stopped_by": reason}
            )
        if ctx.snapshots is None:
            return LayerResult(
                units=[u for i, u in enumerate(units) if i not in drop],
                dropped=[u for i, u in enumerate(units) if i in drop],
                report={
                    "offloaded_rounds": 0,
                    "dropped_rounds": n,
                    "stopped_by": reason,
                    "store": None,
                    "note": "no snapshot store: rounds dropped, not offloaded",
                },
            )
        # old pointers just before/among the dropped rounds are merged
        first = min(drop)
        last = max(drop)
        pointers = [
            i
            for i, u in enumerate(units)
            if u.kind == "summary" and u.meta.get("offload") and not u.pinned and i < last
        ]
        entries: list[str] = []
        total = 0
        for i in pointers:
            entries.extend(str(e) for e in units[i].meta.get("entries", []))
            total += int(units[i].meta.get("offloaded_rounds", 0))
        groups = [g for g in round_groups(units) if g[0] in drop]
        refs: list[str] = []
        for g in groups:
            step_unit = units[g[-1]]
            step_no = step_unit.round if step_unit.round is not None else g[-1]
            doc = _document(ctx.conv_id, step_no, [units[i] for i in g])
            try:
                ref = ctx.snapshots.write(ctx.conv_id, step_no, "offload", doc)
            except Exception as exc:
                return LayerResult(
                    units=list(units),
                    report={"failed": f"snapshot write failed: {type(exc).__name__}: {exc}"},
                )
            uri = getattr(ref, "uri", None) or str(ref)
            refs.append(uri)
            entries.append(f"step {step_no}: {_describe(units[g[-1]])} — {uri}")
        total += len(groups)
        shown = entries[-opts.max_listed_refs :]
        lines = [POINTER_HEADER.format(n=total)]
        if len(entries) > len(shown):
            lines.append(f"(… {len(entries) - len(shown)} older entries not listed)")
        lines.extend(f"- {e}" for e in shown)
        gone = sorted(drop | set(pointers))
        replaced = [units[i] for i in gone]
        pointer = Unit.summary(
            "\n".join(lines),
            replaced,
            meta={"offload": True, "refs": refs, "entries": entries, "offloaded_rounds": total},
        )
        out: list[Unit] = []
        at = min(first, *pointers) if pointers else first
        gone_set = set(gone)
        for i, u in enumerate(units):
            if i == at:
                out.append(pointer)
            if i not in gone_set:
                out.append(u)
        if ctx.count(out) >= ctx.count(units):
            return LayerResult(
                units=list(units), report={"offloaded_rounds": 0, "skipped": "pointer not smaller"}
            )
        return LayerResult(
            units=out,
            dropped=[units[i] for i in sorted(drop)],
            report={"offloaded_rounds": len(groups), "refs": refs, "stopped_by": reason},
        )


def _describe(step: Unit) -> str:
    calls = [describe_call(tc, 60) for tc in step.tool_calls]
    facts = extract(step.text()).paths[:3]
    text = "; ".join(calls) or short(step.text(), 60)
    if facts:
        text += " (" + ", ".join(facts) + ")"
    return short(text, 160)


def _document(conv_id: str, step: int, units: Sequence[Unit]) -> dict[str, Any]:
    step_unit = units[-1]
    calls = step_unit.tool_calls
    return {
        "conv_id": conv_id,
        "step": step,
        "action": "offload",
        "phase": "compaction",
        "action_input": [dict(tc) for tc in calls],
        "thought": next(
            (m.get("content") for m in step_unit.messages if m.get("role") == "assistant"), None
        ),
        "observation": "\n\n".join(u.text() for u in units),
        "messages": [dict(m) for u in units for m in u.messages],
        "unit_keys": [u.key for u in units],
        "refs": [r for u in units for r in unit_refs(u)],
    }


@hookimpl
def ctxpolicy_register_layers(register):  # type: ignore[no-untyped-def]
    register(Offload)
