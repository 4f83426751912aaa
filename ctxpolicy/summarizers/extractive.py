"""``extractive`` — the default summarizer: a structured digest, no LLM.

From the messages to fold it extracts the goal (first user message), constraints
(verbatim), files touched, identifiers (IDs, URLs, settings, numbers with units,
symbols), commands run with their outcome and snapshot ref, error lines still open
(an error of a call that later succeeded is dropped), and the last decisions
(assistant texts). A preprocessor's statistics and the partial lines of a cut are
never read as facts. A previous digest in the same format is parsed
and merged item by item, so summaries are merged, not stacked. The result is
bounded by ``request.max_tokens`` (``request.count_text`` or the script-aware estimate): the oldest
items of the largest of the prose sections (commands, decisions) go first, then of the
largest of the others; constraints are never dropped.
Deterministic: same request, same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from ctxpolicy.components import ComponentOptions, Summarizer, SummaryRequest
from ctxpolicy.conversation import content_text
from ctxpolicy.conversation import messages as chat
from ctxpolicy.conversation.cut import describe_call, estimate_tokens, result_outcome, short
from ctxpolicy.conversation.facts import (
    call_source,
    error_lines,
    extract,
    whole_lines,
    without_derived,
)
from ctxpolicy.conversation.refs import REF_LINE, REF_MARK
from ctxpolicy.plugins import hookimpl
from ctxpolicy.summarizers.names import own_texts, rank_written_names, written_text

HEADER = "[Summary of earlier conversation (extractive digest)]"
SECTIONS = ("Constraints", "Files", "Names", "Identifiers", "Commands", "Errors", "Decisions")
#: Sections trimmed when over budget (never Constraints).
TRIMMABLE = ("Commands", "Identifiers", "Files", "Names", "Decisions", "Errors")
#: Trimmed before the other sections: a command line or a decision mostly repeats, in
#: more tokens, names the other sections list, and the names are what the agent reuses
#: (on the tune half of the shared SWE traces, no fact the agent reused was found
#: only in these two).
PROSE = ("Commands", "Decisions")


class ExtractiveOptions(ComponentOptions):
    """Options of the ``extractive`` summarizer."""

    max_items: int = Field(
        default=40, ge=1, description="Most items kept per section (newest win)."
    )
    goal_chars: int = Field(default=300, ge=20, description="Longest goal line kept.")
    item_chars: int = Field(default=160, ge=20, description="Longest single item kept.")
    names: int = Field(
        default=0,
        ge=0,
        description="A `Names` section: up to this many code names (dotted names, "
        "snake_case, CamelCase and camelCase identifiers) the agent itself wrote in the "
        "folded messages (its replies and tool-call arguments), the most often written "
        "first: the names it worked with, which it is the likeliest to use again; "
        "over budget, the Files and Identifiers it never wrote itself go before the "
        "ones it did. `0`: no such section, no such order.",
    )


class Digest:
    """The structured content of an extractive summary."""

    def __init__(self) -> None:
        self.goal = ""
        self.sections: dict[str, list[str]] = {s: [] for s in SECTIONS}
        # per section: (its list, its length, its items) as of the last add
        self._seen: dict[str, tuple[list[str], int, set[str]]] = {}

    def add(self, section: str, item: str) -> None:
        """Append ``item`` (stripped) to ``section`` unless it is empty or already there."""
        item = item.strip()
        if not item:
            return
        items = self.sections[section]
        memo = self._seen.get(section)
        if memo is None or memo[0] is not items or memo[1] != len(items):
            memo = (items, len(items), set(items))  # changed elsewhere: read it again
        if item not in memo[2]:
            items.append(item)
            memo[2].add(item)
            memo = (items, len(items), memo[2])
        self._seen[section] = memo

    def render(self) -> str:
        lines = [HEADER]
        if self.goal:
            lines.append(f"Goal: {self.goal}")
        for s in SECTIONS:
            items = self.sections[s]
            if not items:
                continue
            lines.append(f"{s}:")
            lines.extend(f"- {i}" for i in items)
        return "\n".join(lines)

    @classmethod
    def parse(cls, text: str) -> Digest | None:
        """Read a digest rendered by :meth:`render`; None for any other text."""
        if not text.startswith(HEADER):
            return None
        d = cls()
        current: str | None = None
        for line in text.splitlines()[1:]:
            if line.startswith("Goal: ") and current is None:
                d.goal = line[len("Goal: ") :]
            elif line.endswith(":") and line[:-1] in SECTIONS:
                current = line[:-1]
            elif not line.startswith("- ") and (line.endswith(":") or line.startswith("[")):
                current = None  # a block appended after the digest (a repair): not ours
            elif line.startswith("- ") and current is not None:
                d.sections[current].append(line[2:])
        return d


class ExtractiveSummarizer(Summarizer):
    name = "extractive"
    description = (
        "Deterministic structured digest (goal, constraints, files, IDs, commands, errors)."
    )
    Options = ExtractiveOptions
    options: ExtractiveOptions
    in_process = True  # no I/O: called without a timeout thread

    def summarize(self, request: SummaryRequest) -> str:
        opts = self.options
        n = opts.item_chars
        d = Digest.parse(request.previous_summary or "") if request.previous_summary else None
        if d is None:
            d = Digest()
            if request.previous_summary:
                d.add("Decisions", "earlier: " + short(request.previous_summary, opts.goal_chars))
        for c in request.constraints:
            d.add("Constraints", c)
        # per call id: the result's text and its whole lines (the last result wins);
        # per tool message: its whole lines
        results: dict[str, tuple[str, str]] = {}
        whole: dict[int, str] = {}
        sources: dict[str, str] = {}  # call id -> what a later success must share
        for i, m in enumerate(request.messages):
            if m.get("role") == "tool":
                raw = content_text(m.get("content"))
                whole[i] = without_derived(whole_lines(raw))
                results[chat.result_id(m)] = (raw, whole[i])
            for tc in chat.tool_calls(m):
                sources[chat.call_id(tc)] = call_source(
                    chat.call_name(tc), _parsed(chat.call_arguments(tc))
                )
        open_errors: dict[str, list[str]] = {}  # source -> errors this request added
        answered = False  # an assistant turn came before: later user text is feedback
        for i, m in enumerate(request.messages):
            role = m.get("role")
            text = whole[i] if role == "tool" else content_text(m.get("content"))
            if (
                role == "user"
                and not d.goal
                and not answered
                and text.strip()
                and not text.startswith("[tool result")
            ):
                d.goal = short(text, opts.goal_chars)
            if role == "assistant":
                answered = True
                for tc in chat.tool_calls(m):
                    out, out_lines = results.get(chat.call_id(tc), ("", ""))
                    item = describe_call(tc, n)
                    outcome = result_outcome(out_lines, n, n // 2)
                    if outcome:
                        item += f" → {outcome}"
                    ref = REF_LINE.search(out) if REF_MARK in out else None
                    if ref:
                        item += f" [{ref.group('uri') or ref.group('path')}]"
                    d.add("Commands", item)
                if text.strip():
                    d.add("Decisions", short(text, n))
            body = REF_LINE.sub("", text) if REF_MARK in text else text
            facts = extract(body + "\n" + chat.calls_arguments_text(m))
            for p in facts.paths:
                d.add("Files", p)
            for x in [*facts.ids, *facts.urls, *facts.settings, *facts.numbers, *facts.symbols]:
                d.add("Identifiers", short(x, n))
            if role in ("tool", "user"):
                errs = error_lines(text, limit=3, max_len=n)
                for e in errs:
                    d.add("Errors", e)
                source = sources.get(chat.result_id(m)) if role == "tool" else None
                if source is not None and errs:
                    open_errors.setdefault(source, []).extend(errs)
                elif source is not None and source in open_errors:
                    # a later success of the same call: its errors are fixed, not open
                    fixed = set(open_errors.pop(source))
                    d.sections["Errors"] = [e for e in d.sections["Errors"] if e not in fixed]
        own = own_texts(request.messages) if opts.names else []
        if opts.names:
            d.sections["Names"] = rank_written_names(
                own, opts.names, max_len=n, previous=d.sections["Names"]
            )
        for s in TRIMMABLE:
            items = d.sections[s]
            if len(items) > opts.max_items:
                d.sections[s] = items[-opts.max_items :]
        _drop_contained(d)
        if opts.names:
            _unwritten_first(d, written_text(own))
        return _bound(d, request.max_tokens, request.count_text or estimate_tokens)


def _unwritten_first(d: Digest, written: str) -> None:
    """Put the Files and Identifiers the agent never wrote itself (a name of an ``ls``
    listing, a number a tool printed) before the ones it did, each group in its order:
    over budget, :func:`_bound` trims a section from its start, so the names the agent
    worked with are the last to go."""
    for s in ("Files", "Identifiers"):
        d.sections[s] = sorted(d.sections[s], key=lambda item: item in written)  # stable


#: Sections whose items are names: one that another item of them spells out whole is
#: said twice (``test_writer.py`` beside ``tests/migrations/test_writer.py``).
NAMED = ("Files", "Names", "Identifiers")


def _drop_contained(d: Digest) -> None:
    """Leave out of :data:`NAMED` every item found inside another of their items (an
    item in both keeps its first place, Files first): the longer one says it already,
    and the room goes to an item not said at all. At most ``max_items`` per section,
    so the check is bounded."""
    seen: set[str] = set()
    items = [i for s in NAMED for i in d.sections[s]]
    keep: dict[str, list[str]] = {s: [] for s in NAMED}
    for s in NAMED:
        for item in d.sections[s]:
            if item in seen:
                continue
            if any(item != other and item in other for other in items):
                continue
            seen.add(item)
            keep[s].append(item)
    for s in NAMED:
        d.sections[s] = keep[s]


def _parsed(args: Any) -> Any:
    if isinstance(args, str) and len(args) <= 100_000:
        try:
            return json.loads(args) if args.strip() else {}
        except ValueError:
            return {}
    return args if isinstance(args, Mapping) else {}


def _bound(d: Digest, max_tokens: int, count: Callable[[str], int]) -> str:
    """``d`` rendered, its largest :data:`PROSE` section losing its oldest item, then,
    once both are empty, its largest other trimmable one (ties: :data:`TRIMMABLE`
    order), then the goal halved, until it counts ``max_tokens`` at
    most. Each step recounts the whole text (a tokenizer need not be additive); the
    section sizes and rendered lines are kept up to date instead of rebuilt."""
    text = d.render()
    if count(text) <= max_tokens:
        return text
    sections = d.sections
    lines = {s: [f"- {i}" for i in sections[s]] for s in SECTIONS}
    sizes = {s: sum(map(len, sections[s])) for s in TRIMMABLE}
    rank = {s: -k for k, s in enumerate(TRIMMABLE)}
    while True:
        filled = [s for s in TRIMMABLE if sections[s]]
        if filled:
            first = [s for s in filled if s in PROSE] or filled
            best = max(first, key=lambda s: (sizes[s], rank[s]))
            sizes[best] -= len(sections[best].pop(0))
            del lines[best][0]
        elif len(d.goal) > 40:
            d.goal = short(d.goal, max(40, len(d.goal) // 2))
        else:
            return text
        out = [HEADER, f"Goal: {d.goal}"] if d.goal else [HEADER]
        for s in SECTIONS:
            if lines[s]:
                out.append(f"{s}:")
                out.extend(lines[s])
        text = "\n".join(out)
        if count(text) <= max_tokens:
            return text


@hookimpl
def ctxpolicy_register_summarizers(register):  # type: ignore[no-untyped-def]
    register(ExtractiveSummarizer)
