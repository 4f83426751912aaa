"""The progress ledger: facts of compacted history, kept pinned in the context.

Design A keeps a task-progress summary in the system prompt so dropping old rounds
loses no state; design B stores IDs and files in structured fields instead of
relying on a summary. The ledger does both: :meth:`ProgressLedger.update` is fed the units
a layer dropped (``LayerResult.dropped``), :meth:`ProgressLedger.record_facts` the facts a
layer shortened away (the engine's key-facts check after every compaction), and it records

* the goal (first user message seen, shortened),
* constraints (verbatim, never dropped),
* done steps (tool calls with outcome and snapshot refs),
* files, identifiers and errors (:mod:`ctxpolicy.conversation.facts`),
* the next step (last assistant text of the dropped region).

:meth:`render` is bounded by ``max_tokens`` (oldest entries go first, never
constraints); :meth:`unit` is the pinned ``ledger`` unit the engine places in the
context. Deterministic; :meth:`to_dict`/:meth:`from_dict` persist it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxpolicy.conversation import Unit, content_text
from ctxpolicy.conversation.cut import approx_tokens, describe_call, first_meaningful_line, short
from ctxpolicy.conversation.facts import error_lines, extract, is_path
from ctxpolicy.conversation.refs import REF_LINE, REF_MARK, meta_ref_for, unit_refs

HEADER = "[Progress ledger: facts from compacted history — full details in snapshots]"
_LISTS = ("done", "files", "ids", "errors")
#: Trimmed first when over budget (oldest entry of the first non-empty list).
_TRIM_ORDER = ("done", "ids", "files", "errors")
_MAX_PER_LIST = 200
#: Units of one drop :meth:`ProgressLedger.update` reads at most (newest first).
MAX_READ = 2000


class ProgressLedger:
    """Goal, constraints, done steps, files, IDs, errors, next step."""

    def __init__(
        self,
        max_tokens: int = 1500,
        constraints: Sequence[str] = (),
        *,
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.constraints: list[str] = []
        for c in constraints:
            if c not in self.constraints:
                self.constraints.append(c)
        self.goal: str | None = None
        self.done: list[str] = []
        self.files: list[str] = []
        self.ids: list[str] = []
        self.errors: list[str] = []
        self.next_step: str | None = None
        #: Reference of the snapshot holding every compacted message verbatim (set by
        #: the engine); rendered first and never trimmed.
        self.archive: str | None = None
        self._count = count_text or approx_tokens

    # ------------------------------------------------------------------ updates
    def _add(self, name: str, item: str) -> None:
        lst: list[str] = getattr(self, name)
        item = item.strip()
        if not item:
            return
        if item in lst:
            lst.remove(item)  # move to newest
        lst.append(item)
        if len(lst) > _MAX_PER_LIST:
            del lst[0]

    def set_goal(self, text: str) -> None:
        """Set the goal (e.g. from the pinned first user message) unless one is known."""
        if self.goal is None and text.strip():
            self.goal = short(text, 300)

    def record_facts(self, facts: Sequence[str]) -> None:
        """Record facts a compaction took out of the context without dropping a unit
        (a masked or truncated result): paths as files, the rest as identifiers."""
        for f in facts:
            self._add("files" if is_path(f) else "ids", short(f, 120))

    def update(self, dropped_units: Sequence[Unit]) -> None:
        """Record the facts of units removed from the context (in conversation order).

        Each list keeps its newest ``_MAX_PER_LIST`` distinct entries, an entry seen
        again moving to the end: the result is that of adding every entry in order,
        but the units are read newest first and a list stops reading once it has
        all the entries it can keep. Of a drop larger than ``MAX_READ`` units (a long
        conversation compacted at once, not the few rounds of a usual compaction)
        the newest ``MAX_READ`` are read: the archive keeps every one verbatim.
        """
        units = [u for u in dropped_units if u.kind != "ledger"]
        if self.goal is None:
            self.goal = next(
                (
                    short(text, 300)
                    for u in units
                    if u.kind == "user"
                    for m in u.messages
                    if m.get("role") == "user" and (text := content_text(m.get("content"))).strip()
                ),
                None,
            )
        fresh: dict[str, dict[str, None]] = {n: {} for n in _LISTS}  # newest first
        need = set(_LISTS)
        next_step: str | None = None
        for read, u in enumerate(reversed(units)):
            if read == MAX_READ:
                need = set()
            if next_step is None:
                next_step = next(
                    (
                        short(text, 300)
                        for m in reversed(u.messages)
                        if m.get("role") == "assistant"
                        and (text := content_text(m.get("content"))).strip()
                    ),
                    None,
                )
            if need:
                for name, item in reversed(_entries(u, need)):
                    got = fresh[name]
                    if len(got) < _MAX_PER_LIST and (item := item.strip()):
                        got.setdefault(item)
                need = {n for n in need if len(fresh[n]) < _MAX_PER_LIST}
            elif next_step is not None:
                break
        if next_step is not None:
            self.next_step = next_step
        for name in _LISTS:
            if fresh[name]:
                newest = list(reversed(fresh[name]))
                old = [x for x in getattr(self, name) if x not in fresh[name]]
                setattr(self, name, [*old, *newest][-_MAX_PER_LIST:])

    # ------------------------------------------------------------------ output
    def __bool__(self) -> bool:
        return bool(
            self.archive
            or self.goal
            or self.constraints
            or self.next_step
            or any(getattr(self, n) for n in _LISTS)
        )

    def _render(self, lists: Mapping[str, list[str]], goal: str | None) -> str:
        lines = [HEADER]
        if self.archive:
            lines.append(f"Compacted history, verbatim (read with ctx_recall): {self.archive}")
        if goal:
            lines.append(f"Goal: {goal}")
        if self.constraints:
            lines.append("Constraints (verbatim):")
            lines.extend(f"- {c}" for c in self.constraints)
        labels = {"done": "Done", "files": "Files", "ids": "Identifiers", "errors": "Errors"}
        for name in ("done", "files", "ids", "errors"):
            if lists[name]:
                sep = "\n- " if name in ("done", "errors") else ", "
                head = f"{labels[name]}:" + ("\n- " if sep == "\n- " else " ")
                lines.append(head + sep.join(lists[name]))
        if self.next_step:
            lines.append(f"Next step: {self.next_step}")
        return "\n".join(lines)

    def render(self, max_tokens: int | None = None) -> str | None:
        """The ledger as text within ``max_tokens`` (default: the configured bound;
        None when empty). The archive reference and the constraints are never trimmed,
        so the result can stay above a very small bound."""
        if not self:
            return None
        limit = self.max_tokens if max_tokens is None else max_tokens
        lists = {n: list(getattr(self, n)) for n in _LISTS}
        goal = self.goal
        text = self._render(lists, goal)
        # trimming is planned on an estimate (characters per token, 4 until this text
        # is counted, then as counted) and every estimate that fits is checked by one
        # exact count: a long ledger costs a count or two of its bounded text, not one
        # of the whole text and one per batch
        cpt = 4.0
        tokens, exact = math.ceil(len(text) / cpt), False
        while True:
            if tokens <= limit:
                if exact:
                    break
                tokens, exact = self._count(text), True
                cpt = max(1.0, len(text) / max(1, tokens))
                if tokens <= limit:
                    break
            if any(lists[n] for n in _TRIM_ORDER):
                # drop the oldest entries of the longest lists first, in one batch sized
                # by the excess
                excess_chars = (tokens - limit) * cpt
                removed = 0.0
                sizes = {n: len(lists[n]) for n in _TRIM_ORDER}
                while removed < excess_chars:
                    # the longest list; of equal ones the first in _TRIM_ORDER (max
                    # returns the first of equal maxima)
                    name = max(_TRIM_ORDER, key=sizes.__getitem__)
                    if not sizes[name]:
                        break
                    sizes[name] -= 1
                    removed += len(lists[name].pop(0)) + 3
            elif goal and len(goal) > 60:
                goal = short(goal, 60)
            else:
                break
            text = self._render(lists, goal)
            tokens, exact = math.ceil(len(text) / cpt), False
        return text

    def unit(self) -> Unit | None:
        """The pinned ``ledger`` unit (key ``ledger``), or None when empty."""
        text = self.render()
        if text is None:
            return None
        return Unit(
            kind="ledger",
            messages=({"role": "user", "content": text},),
            key="ledger",
            pinned=True,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_tokens": self.max_tokens,
            "constraints": list(self.constraints),
            "goal": self.goal,
            "done": list(self.done),
            "files": list(self.files),
            "ids": list(self.ids),
            "errors": list(self.errors),
            "next_step": self.next_step,
            "archive": self.archive,
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, count_text: Callable[[str], int] | None = None
    ) -> ProgressLedger:
        led = cls(
            int(data.get("max_tokens", 1500)), data.get("constraints", ()), count_text=count_text
        )
        led.goal = data.get("goal")
        for n in _LISTS:  # the newest entries a ledger keeps
            setattr(led, n, [str(x) for x in data.get(n, [])][-_MAX_PER_LIST:])
        led.next_step = data.get("next_step")
        led.archive = data.get("archive")
        return led


#: The fact categories the files and ids lists are made of.
_CATEGORIES = {
    frozenset({"files"}): ("paths",),
    frozenset({"ids"}): ("ids", "urls", "settings"),
    frozenset({"files", "ids"}): ("paths", "ids", "urls", "settings"),
}


def _entries(u: Unit, need: set[str]) -> list[tuple[str, str]]:
    """``(list, entry)`` pairs of one dropped unit, in order, for the lists in ``need``."""
    out: list[tuple[str, str]] = []
    results = (
        {str(m.get("tool_call_id", "")): content_text(m.get("content")) for m in u.tool_messages}
        if "done" in need
        else {}
    )
    for m in u.messages:
        role = m.get("role")
        text = content_text(m.get("content"))
        calls = [tc for tc in m.get("tool_calls") or () if isinstance(tc, Mapping)]
        if role == "assistant" and "done" in need:
            for tc in calls:
                out.append(("done", _done_entry(u, tc, results.get(str(tc.get("id", "")), ""))))
        if not need & {"files", "ids", "errors"}:
            continue
        body = REF_LINE.sub("", text) if REF_MARK in text else text
        if need & {"files", "ids"}:
            args = " ".join(str((tc.get("function") or {}).get("arguments", "")) for tc in calls)
            facts = extract(
                body + "\n" + args, only=_CATEGORIES[frozenset(need & {"files", "ids"})]
            )
            if "files" in need:
                out.extend(("files", p) for p in facts.paths)
            if "ids" in need:
                out.extend(
                    ("ids", short(x, 120)) for x in [*facts.ids, *facts.urls, *facts.settings]
                )
        if role in ("tool", "user") and "errors" in need:
            out.extend(("errors", e) for e in error_lines(body, limit=2, max_len=160))
    if u.kind == "summary" and "done" in need:
        out.extend(("done", f"offloaded: {r}") for r in unit_refs(u))
    return out


def _done_entry(u: Unit, tc: Mapping[str, Any], out: str) -> str:
    """``step N: name(args) → first line of the result [ref]``."""
    entry = describe_call(tc, 100)
    if u.round is not None:
        entry = f"step {u.round}: {entry}"
    outcome = first_meaningful_line(out, 80)
    if outcome:
        entry += f" → {outcome}"
    ref = REF_LINE.search(out)
    meta_ref = meta_ref_for(u, str(tc.get("id", "")))
    if ref:
        entry += f" [{ref.group('uri') or ref.group('path')}]"
    elif meta_ref:
        entry += f" [{meta_ref}]"
    return entry


#: The old name of :class:`ProgressLedger` (it collided with the policy model
#: :class:`ctxpolicy.policy.models.Ledger`), kept for one release.
Ledger = ProgressLedger
