"""``observation_mask`` — design A L1 / design B L1 prune.

Tool results of rounds older than ``max_age_rounds`` (counted from the newest
step: the ``max_age_rounds`` newest steps are never touched) are cut to
``max_chars`` characters, head and tail kept with a marker saying how many
characters were removed. A ``[Full detail available at: …]`` reference line is
kept verbatim (or added from ``unit.meta["refs"]``), so the full output stays one
recall away. With ``dedupe`` a tool output identical to a later one is replaced by
``[same output as step N below]``.

Deterministic, idempotent (already-masked results are left alone), never removes
a unit and never touches pinned units.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from ctxpolicy.components import CompactionContext, ComponentOptions, Layer, LayerResult
from ctxpolicy.conversation import Message, Unit
from ctxpolicy.conversation.cut import ELISION, truncate_keep_refs
from ctxpolicy.conversation.messages import result_id, with_text
from ctxpolicy.conversation.refs import meta_ref_for, ref_line, split_refs
from ctxpolicy.layers._util import message_text, step_label
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import TuneRange

SAME_AS = "[same output as step {step} below]"
_SAME_AS_RE = re.compile(r"\[same output as step \S+ below\]")


def _compacted(body: str) -> bool:
    """Already the work of this layer (a dedupe pointer or a cut result): left alone,
    so that a second pass changes nothing."""
    # substring tests first: a C scan instead of a regex pass over every tool result
    if body.startswith("[same output as step ") and _SAME_AS_RE.fullmatch(body):
        return True
    return "chars elided" in body and ELISION.search(body) is not None


class ObservationMaskOptions(ComponentOptions):
    """Options of ``observation_mask``."""

    max_age_rounds: int = Field(
        default=5,
        ge=0,
        description="Steps younger than this (counted from the newest step) keep their "
        "tool results intact; older ones are masked (DB-GPT "
        "`max_observation_age_rounds`).",
    )
    max_chars: int = Field(
        default=200,
        ge=0,
        description="Characters of an old tool result kept (head and tail, plus the "
        "snapshot reference line; DB-GPT `truncated_observation_max_chars`).",
    )
    dedupe: bool = Field(
        default=True,
        description="Replace a tool output identical to a later one with "
        "`[same output as step N below]`, in any round.",
    )


class ObservationMask(Layer):
    name = "observation_mask"
    description = "Truncate tool results of old rounds (keeping snapshot refs) and dedupe repeats."
    Options = ObservationMaskOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "max_age_rounds": TuneRange(low=1, high=12),
        "max_chars": TuneRange(low=50, high=2000, log=True),
    }
    options: ObservationMaskOptions

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        opts = self.options
        steps = [i for i, u in enumerate(units) if u.kind == "step"]
        old = set(steps[: max(0, len(steps) - opts.max_age_rounds)])

        # dedupe: body text -> step label of its last occurrence
        pointer: dict[tuple[int, int], int] = {}
        if opts.dedupe:
            last_seen: dict[str, int] = {}
            for ordinal, i in reversed(list(enumerate(steps))):
                u = units[i]
                for j in range(len(u.messages) - 1, -1, -1):
                    m = u.messages[j]
                    if m.get("role") != "tool":
                        continue
                    body, _ = split_refs(message_text(m))
                    if not body.strip() or _compacted(body):
                        continue
                    if body in last_seen:
                        if not u.pinned:
                            pointer[(i, j)] = last_seen[body]
                    else:
                        last_seen[body] = step_label(u, ordinal)

        with_pointer = {i for i, _ in pointer}
        out: list[Unit] = []
        masked = deduped = saved = 0
        for i, u in enumerate(units):
            if u.kind != "step" or u.pinned or (i not in old and i not in with_pointer):
                out.append(u)
                continue
            new_msgs: list[Message] = []
            changed = False
            for j, m in enumerate(u.messages):
                if m.get("role") != "tool":
                    new_msgs.append(m)
                    continue
                text = message_text(m)
                new_text: str | None = None
                if (i, j) in pointer:
                    _, refs = split_refs(text)
                    cand = "\n".join([SAME_AS.format(step=pointer[(i, j)]), *refs])
                    if len(cand) < len(text):
                        new_text = cand
                        deduped += 1
                if new_text is None and i in old and not _compacted(split_refs(text)[0]):
                    new_text = truncate_keep_refs(text, opts.max_chars)
                    if new_text is not None:
                        _, refs = split_refs(new_text)
                        if not refs:
                            ref = meta_ref_for(u, result_id(m))
                            if ref:
                                new_text += "\n" + ref_line(ref)
                        masked += 1
                if new_text is None or new_text == text:
                    new_msgs.append(m)
                    continue
                saved += len(text) - len(new_text)
                new_msgs.append(with_text(m, new_text))
                changed = True
            if changed:
                meta = dict(u.meta)
                meta["masked"] = True
                out.append(u.replace(messages=new_msgs, meta=meta))
            else:
                out.append(u)
        return LayerResult(
            units=out,
            report={"masked_results": masked, "deduped_results": deduped, "chars_saved": saved},
        )


@hookimpl
def ctxpolicy_register_layers(register):  # type: ignore[no-untyped-def]
    register(ObservationMask)
