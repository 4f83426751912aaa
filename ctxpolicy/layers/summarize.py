"""``summarize`` — design A L3 / design B L2: older units folded into one summary.

Everything before the ``keep_recent_rounds`` newest rounds (except pinned units)
is folded by a summarizer into one ``summary`` unit placed where the folded region
began. An existing summary in that region is passed as ``previous_summary``:
summaries are merged, never stacked.

The summary call has its own budget: its input is bounded by ``max_input_tokens``
and chunked at unit boundaries when larger (oversized units are head/tail-shortened
in the request only); chunks are folded one by one, each fold receiving the
previous partial summary. Nothing is ever "too big to summarize", and one compaction
makes at most ``max_chunks`` summarizer calls (``auto``: two context windows of
history): of a larger fold (a long history compacted at once) the newest chunks are
read, with the first user message of the older part; the older units are folded
unread (the history archive keeps them, the progress ledger reads its own share).

Failures — an exception, a timeout (``timeout_s``), an empty or non-string result,
a summary longer than ``max_summary_tokens`` or than its input — leave history
untouched (the input units are returned with ``report["failed"]``). After
``max_failures`` consecutive failures the circuit breaker opens (state in
``ctx.memory``; events ``summarizer.failed``, ``breaker.open``, ``breaker.closed``);
``retry_after`` lets it try again after that many skipped runs.

The summary is checked against the task state and repaired deterministically: the
constraints (``ctx.constraints``) and the user's turns it stands for (those it folds
and those of the summaries it merges, verbatim, the newest ``MAX_INSTRUCTIONS``) are
in it, any missing appended as written (:func:`repair`).

A summarizer that continues the live prompt (``uses_prefix``: the built-in ``openai``)
gets it whole — the conversation as the model was about to read it, the fold at its
start — and one instruction, in one call, when the prompt and the summary fit the
window: its input is then a read of the provider's prompt cache, not a new text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from ctxpolicy.components import (
    CompactionContext,
    ComponentOptions,
    Layer,
    LayerResult,
    Summarizer,
    SummaryRequest,
)
from ctxpolicy.conversation import Message, Unit, render
from ctxpolicy.conversation.cut import estimate_tokens, head_tail
from ctxpolicy.conversation.facts import user_instructions
from ctxpolicy.conversation.jsontext import fast_dumps
from ctxpolicy.conversation.messages import with_text
from ctxpolicy.conversation.refs import unit_refs
from ctxpolicy.events.types import (
    BreakerClosed,
    BreakerOpen,
    SummarizerBusy,
    SummarizerFailed,
    SummarizerHung,
)
from ctxpolicy.layers._util import message_text, round_groups
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import TuneRange
from ctxpolicy.policy.scalars import Amount, resolve_amount
from ctxpolicy.summarizers.names import own_texts, rank_written_names
from ctxpolicy.summarizers.prompt import SUMMARY_INSTRUCTIONS

MAX_META_REFS = 100


class SummarizeOptions(ComponentOptions):
    """Options of ``summarize``."""

    summarizer: str = Field(
        default="extractive",
        description="Name of a registered summarizer (`extractive`, `openai`, `callable`, ...).",
    )
    summarizer_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the summarizer, validated by its own model."
    )
    keep_recent_rounds: int = Field(
        default=3,
        ge=0,
        description="Newest rounds kept verbatim (`keep_recent_turns` of a `CompressionConfig`).",
    )
    max_failures: int = Field(
        default=3,
        ge=1,
        description="Consecutive failures that open the circuit breaker (DB-GPT `max_compact_failures`).",
    )
    retry_after: int | None = Field(
        default=None,
        ge=1,
        description="Skipped runs after which an open breaker tries once more (null: stays open for the session).",
    )
    max_summary_tokens: Amount = Field(
        default=1200,
        description='Largest summary accepted, in tokens or a share of the window ("5%").',
    )
    max_input_tokens: int = Field(
        default=16000,
        ge=512,
        description="Budget of one summarizer call (instructions + previous summary + messages); "
        "larger input is chunked.",
    )
    max_chunks: Annotated[int, Field(ge=1)] | Literal["auto"] | None = Field(
        default="auto",
        description="Most summarizer calls of one compaction; of a fold needing more chunks, "
        "the newest are read (opened by the first user message of the older units, which are "
        "folded unread and stay in the history archive). `auto`: as many as two context "
        "windows of history take (a usual fold is at most one window: this binds only when a "
        "longer history is compacted at once, such as an imported conversation). null: every "
        "chunk is read.",
    )
    min_region_tokens: int = Field(
        default=200, ge=0, description="Do nothing when the region to fold is smaller than this."
    )
    timeout_s: float | None = Field(
        default=60.0,
        gt=0,
        description="A summarizer call taking longer is a failure (null: no timeout).",
    )
    instructions: str | None = Field(
        default=None,
        description="Replacement for the built-in summary prompt (`{max_tokens}` is substituted).",
    )
    names: int = Field(
        default=0,
        ge=0,
        description="Up to this many code names (dotted names, snake_case, CamelCase, "
        "camelCase) the agent itself wrote in the folded messages and earlier summaries, "
        "the most often written first, kept with the summary: the ones any summarizer "
        "left out are appended to it on one line (at most half of `max_summary_tokens`). "
        "`0`: none.",
    )


class SummaryFailure(Exception):
    """A summarizer result that cannot be used."""


#: ``json.dumps(m, ensure_ascii=False, sort_keys=True, default=str)`` without building
#: an encoder per message
_json = fast_dumps(sort_keys=True)


def _msg_tokens(m: Mapping[str, Any], ct: Callable[[str], int]) -> int:
    """Tokens of ``m`` as the summary request sends it (its JSON text)."""
    return ct(_json(m))


def _shrink(m: Message, budget: int, ct: Callable[[str], int]) -> Message:
    text = message_text(m)
    tokens = max(1, ct(text))
    chars = max(80, int(len(text) * budget / tokens * 0.9))
    return with_text(m, head_tail(text, chars)) if len(text) > chars else m


def chunk_units(
    units: Sequence[Unit], budget: int, ct: Callable[[str], int]
) -> list[list[Message]]:
    """Messages of ``units`` in chunks of at most ~``budget`` tokens, split at unit
    boundaries; a unit larger than the budget has its messages shortened."""
    return [c.messages for c in _chunk([_sized(u, budget, ct) for u in units], budget)]


class _Sized:
    """A unit's messages as a chunk holds them (shortened when the unit is larger than
    a chunk), their tokens, and the tokens before shortening."""

    __slots__ = ("messages", "raw", "tokens")

    def __init__(self, messages: list[Message], tokens: int, raw: int) -> None:
        self.messages, self.tokens, self.raw = messages, tokens, raw


def _sized(u: Unit, budget: int, ct: Callable[[str], int]) -> _Sized:
    msgs = list(u.messages)
    sizes = [_msg_tokens(m, ct) for m in msgs]
    t = raw = sum(sizes)
    if t > budget:
        per = max(32, budget // max(1, len(msgs)))
        msgs = [_shrink(m, per, ct) if n > per else m for m, n in zip(msgs, sizes, strict=True)]
        t = sum(_msg_tokens(m, ct) for m in msgs)
    return _Sized(msgs, t, raw)


class _Chunk:
    """The sized units of one summarizer call and their tokens (as sent)."""

    __slots__ = ("tokens", "units")

    def __init__(self) -> None:
        self.units: list[_Sized] = []
        self.tokens = 0

    def add(self, u: _Sized) -> None:
        self.units.append(u)
        self.tokens += u.tokens

    @property
    def messages(self) -> list[Message]:
        return [m for u in self.units for m in u.messages]


def _chunk(units: Sequence[_Sized], budget: int) -> list[_Chunk]:
    """Sized units in chunks of at most ~``budget`` tokens, in order (greedy)."""
    chunks: list[_Chunk] = []
    cur = _Chunk()
    for u in units:
        if cur.units and cur.tokens + u.tokens > budget:
            chunks.append(cur)
            cur = _Chunk()
        cur.add(u)
    if cur.units:
        chunks.append(cur)
    return chunks


def _read(
    fold: Sequence[Unit], max_chunks: int | None, budget: int, ct: Callable[[str], int]
) -> tuple[list[list[Message]], int, int]:
    """The chunks of ``fold`` the summarizer reads, the tokens of their messages before
    shortening, and how many of the oldest units are folded unread: beyond
    ``max_chunks`` chunks, the newest are read, the first of them opened by the first
    user message of the unread units (shortened to a quarter of a chunk; the oldest
    units of that chunk go unread too when it would not fit otherwise)."""
    sized = _newest_sized(fold, max_chunks, budget, ct)
    parts = _chunk(sized, budget)
    unread = len(fold) - len(sized)
    if max_chunks is not None and len(parts) > max_chunks:
        unread += sum(len(c.units) for c in parts[:-max_chunks])
        parts = parts[-max_chunks:]
    task = next((m for u in fold[:unread] for m in u.messages if m.get("role") == "user"), None)
    opening: list[Message] = []
    if task is not None:
        task = _shrink(task, budget // 4, ct)
        first, room = parts[0], budget - _msg_tokens(task, ct)
        drop, tokens = 0, first.tokens
        while drop < len(first.units) - 1 and tokens > room:
            tokens -= first.units[drop].tokens
            drop += 1
        if tokens <= room:
            del first.units[:drop]
            first.tokens, unread = tokens, unread + drop
            opening = [task]
    chunks = [c.messages for c in parts]
    if opening:
        chunks[0][:0] = opening
    return chunks, sum(u.raw for c in parts for u in c.units), unread


def _newest_sized(
    units: Sequence[Unit], max_chunks: int | None, budget: int, ct: Callable[[str], int]
) -> list[_Sized]:
    """The units worth chunking, sized, in order: all of them, or (``max_chunks`` set)
    the newest that hold more than twice ``max_chunks`` chunks' budget, which make more
    than ``max_chunks`` chunks when no unit is larger than a chunk (one that is, even
    shortened, makes a chunk of its own: fewer units may then be read). Linear in what
    it reads, each unit sized once."""
    if max_chunks is None:
        return [_sized(u, budget, ct) for u in units]
    limit = 2 * max_chunks * budget
    out: list[_Sized] = []
    total = 0
    for u in reversed(units):
        if total > limit:
            break
        out.append(_sized(u, budget, ct))
        total += out[-1].tokens
    out.reverse()
    return out


#: Heads the user's turns the ``summarize`` layer appends to a summary that dropped
#: them (verbatim, one per ``- `` item; a turn's own lines follow as written).
REPAIR_HEADER = "[User instructions, verbatim]"


def repair(
    summary: str,
    constraints: Sequence[str],
    turns: Sequence[str],
    budget: int | None = None,
    count: Callable[[str], int] = estimate_tokens,
) -> str:
    """``summary`` checked against the task state: every constraint and every user turn
    it stands for is in it verbatim, the missing ones appended (in their order).
    The turns appended take at most ``budget`` tokens, the newest first; the older
    ones are named by count (the ledger and the history archive keep them).
    Deterministic; a summary that holds them all is returned unchanged."""
    missing_c = [c for c in constraints if c not in summary]
    if missing_c:
        summary += "\nConstraints (verbatim):\n" + "\n".join(f"- {c}" for c in missing_c)
    missing = [t for t in turns if t not in summary]
    if not missing:
        return summary
    kept: list[str] = []
    used = 0
    for t in reversed(missing):
        n = count(t) + 2
        if budget is not None and used + n > budget:
            break
        kept.append(t)
        used += n
    kept.reverse()
    lines = [REPAIR_HEADER]
    if len(kept) < len(missing):
        lines.append(
            f"- ({len(missing) - len(kept)} earlier user turns are in the compacted history)"
        )
    lines.extend(f"- {t}" for t in kept)
    return summary + "\n" + "\n".join(lines)


def strip_repair(summary: str) -> str:
    """``summary`` without the blocks :func:`with_names` and :func:`repair` appended
    (the names and the turns are carried in the summary unit's ``meta`` and appended
    again when missing)."""
    at = summary.rfind("\n" + NAMES_HEADER + " ")
    summary = summary[:at] if at >= 0 else summary
    at = summary.rfind("\n" + REPAIR_HEADER + "\n")
    return summary[:at] if at >= 0 else summary


#: The line :func:`with_names` appends.
NAMES_HEADER = "[Names the agent worked with]"


def with_names(summary: str, names: Sequence[str], budget: int, count: Callable[[str], int]) -> str:
    """``summary`` with the ``names`` it does not hold appended on one line, in their
    order, as many as fit ``budget`` tokens. Deterministic; unchanged when it holds
    them all."""
    missing = [n for n in names if n not in summary]
    if not missing:
        return summary
    kept: list[str] = []
    used = count(NAMES_HEADER) + 1
    for n in missing:
        cost = count(n) + 1
        if used + cost > budget:
            break
        kept.append(n)
        used += cost
    return f"{summary}\n{NAMES_HEADER} {', '.join(kept)}" if kept else summary


def _live_prefix(
    summarizer: Summarizer,
    units: Sequence[Unit],
    boundary: int,
    ctx: CompactionContext,
    reserve: int,
) -> tuple[list[Message], int | None] | None:
    """The live prompt and the index of its first message kept after the fold, for a
    summarizer that continues it (``uses_prefix``) when the prompt and the summary fit
    the window; else None (the fold is chunked into transcripts)."""
    if not getattr(summarizer, "uses_prefix", False):
        return None
    if ctx.count(units) + reserve > ctx.window:
        return None
    prefix = render(units)
    keep_from = sum(len(u.messages) for u in units[:boundary])
    return prefix, (keep_from if keep_from < len(prefix) else None)


class Summarize(Layer):
    name = "summarize"
    description = "Fold older units into one merged summary (own budget, chunked, circuit breaker)."
    Options = SummarizeOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "keep_recent_rounds": TuneRange(low=1, high=8),
        "max_summary_tokens": TuneRange(low=256, high=4000, log=True),
    }
    options: SummarizeOptions

    # ------------------------------------------------------------------ breaker
    def _breaker_allows(self, ctx: CompactionContext) -> bool:
        mem = ctx.memory
        if not mem.get("open"):
            return True
        mem["skipped"] = int(mem.get("skipped", 0)) + 1
        ra = self.options.retry_after
        if ra is not None and mem["skipped"] >= ra:
            mem["skipped"] = 0
            return True  # half-open: one try
        return False

    def _failed(self, ctx: CompactionContext, units: Sequence[Unit], reason: str) -> LayerResult:
        mem = ctx.memory
        mem["failures"] = int(mem.get("failures", 0)) + 1
        SummarizerFailed(
            summarizer=self.options.summarizer, reason=reason, failures=mem["failures"]
        ).send(ctx.emit)
        if mem["failures"] >= self.options.max_failures and not mem.get("open"):
            mem["open"] = True
            mem["skipped"] = 0
            BreakerOpen(summarizer=self.options.summarizer, failures=mem["failures"]).send(ctx.emit)
        return LayerResult(
            units=list(units), report={"failed": reason, "failures": mem["failures"]}
        )

    def _succeeded(self, ctx: CompactionContext) -> None:
        mem = ctx.memory
        was_open = bool(mem.get("open"))
        mem["failures"] = 0
        mem["open"] = False
        mem["skipped"] = 0
        if was_open:
            BreakerClosed(summarizer=self.options.summarizer).send(ctx.emit)

    # ------------------------------------------------------------------ call
    def _call(self, summarizer: Summarizer, req: SummaryRequest, ctx: CompactionContext) -> Any:
        """One summarizer call, bounded by ``timeout_s`` (:func:`ctxpolicy.layers.bounded.call_bounded`:
        a hung call keeps one daemon thread per summarizer; later calls fail fast). A
        summarizer that runs in process (``Summarizer.in_process``) cannot hang on I/O:
        it is called directly, without a thread per call."""
        timeout = self.options.timeout_s
        if timeout is None or summarizer.in_process:
            return summarizer.summarize(req)
        from ctxpolicy.layers.bounded import CallBusy, CallTimeout, call_bounded

        try:
            return call_bounded(
                summarizer, lambda: summarizer.summarize(req), timeout, name="summary"
            )
        except CallTimeout as exc:
            SummarizerHung(summarizer=self.options.summarizer, timeout_s=timeout).send(ctx.emit)
            raise SummaryFailure(str(exc)) from None
        except CallBusy as exc:
            SummarizerBusy(
                summarizer=self.options.summarizer, hung_for_s=round(exc.hung_for, 3)
            ).send(ctx.emit)
            raise SummaryFailure(str(exc)) from None

    # ------------------------------------------------------------------ apply
    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        opts = self.options
        ct = ctx.count_text or estimate_tokens
        groups = round_groups(units)
        n_fold = max(0, len(groups) - opts.keep_recent_rounds)
        if n_fold == 0:
            return LayerResult(units=list(units), report={"skipped": "no old rounds"})
        boundary = groups[n_fold][0] if n_fold < len(groups) else groups[-1][-1] + 1
        region = [
            i
            for i, u in enumerate(units[:boundary])
            if not u.pinned and u.kind in ("step", "user", "other", "orphan", "summary")
        ]
        fold = [units[i] for i in region if units[i].kind != "summary"]
        old_summaries = [units[i] for i in region if units[i].kind == "summary"]
        if not fold:
            return LayerResult(units=list(units), report={"skipped": "nothing new to fold"})
        region_tokens = ctx.count([units[i] for i in region])
        if region_tokens < opts.min_region_tokens:
            return LayerResult(units=list(units), report={"skipped": "region too small"})
        if not self._breaker_allows(ctx):
            return LayerResult(units=list(units), report={"skipped": "breaker_open"})

        max_summary = max(1, resolve_amount(opts.max_summary_tokens, ctx.window))
        instructions = (opts.instructions or SUMMARY_INSTRUCTIONS).replace(
            "{max_tokens}", str(max_summary)
        )
        previous = (
            "\n\n".join(
                strip_repair(str(u.meta.get("summary_text") or message_text(u.messages[0])))
                for u in old_summaries
            )
            or None
        )
        # the user's turns this summary stands for: those of the earlier summaries it
        # merges, then those of the units it folds (verbatim, the newest kept)
        turns = user_instructions(
            [
                *(
                    {"role": "user", "content": t}
                    for u in old_summaries
                    for t in u.meta.get("user_turns", ())
                    if isinstance(t, str)
                ),
                *(m for u in fold for m in u.messages),
            ]
        )
        fixed = ct(instructions) + sum(ct(c) for c in ctx.constraints) + max_summary + 64
        chunk_budget = max(256, opts.max_input_tokens - fixed)
        cap = opts.max_chunks
        if cap == "auto":
            cap = max(1, -(-2 * ctx.window // chunk_budget))  # two windows, rounded up
        chunks, input_tokens, unread = _read(fold, cap, chunk_budget, ct)
        if previous:
            input_tokens += ct(previous)

        try:
            summarizer = ctx.summarizer(opts.summarizer, opts.summarizer_options)
        except Exception as exc:
            return self._failed(ctx, units, f"summarizer unavailable: {exc!r}")
        summary = previous
        requests: list[SummaryRequest] = []
        request = functools.partial(
            SummaryRequest,
            max_tokens=max_summary,
            instructions=instructions,
            constraints=tuple(ctx.constraints),
            count_text=ct,
            user_turns=tuple(turns),
        )
        live = _live_prefix(summarizer, units, boundary, ctx, max_summary + ct(instructions))
        if live is not None:
            # one call that continues the live prompt: the provider reads it from its cache
            prefix, keep_from = live
            chunks = [[m for u in fold for m in u.messages]]
            input_tokens = ctx.count(units)
            requests.append(
                request(
                    messages=chunks[0], previous_summary=None, prefix=prefix, keep_from=keep_from
                )
            )
        elif summary is not None and ct(summary) > max_summary:
            # an oversized previous summary is folded as input, not passed on as is
            chunks[0] = [{"role": "user", "content": summary}, *chunks[0]]
            summary = None
        for i, chunk in enumerate(chunks):
            req = requests[i] if requests else request(messages=chunk, previous_summary=summary)
            try:
                out = self._call(summarizer, req, ctx)
            except SummaryFailure as exc:
                return self._failed(ctx, units, str(exc))
            except Exception as exc:
                return self._failed(ctx, units, f"{type(exc).__name__}: {exc}")
            if not isinstance(out, str):
                return self._failed(
                    ctx, units, f"summarizer returned {type(out).__name__}, not str"
                )
            if not out.strip():
                return self._failed(ctx, units, "empty summary")
            if ct(out) > max_summary:
                return self._failed(
                    ctx, units, f"summary of {ct(out)} tokens > max_summary_tokens {max_summary}"
                )
            summary = out.strip()
        assert summary is not None
        names = (
            rank_written_names(
                own_texts([m for u in fold for m in u.messages]),
                opts.names,
                previous=[
                    str(x)
                    for u in old_summaries
                    for x in u.meta.get("names", ())
                    if isinstance(x, str)
                ],
            )
            if opts.names
            else []
        )
        summary = repair(summary, ctx.constraints, turns, max(64, max_summary // 2), ct)
        summary = with_names(summary, names, max(16, max_summary // 2), ct)
        seen_refs: dict[str, None] = {}  # first occurrence of each, in order
        for u in [*old_summaries, *fold]:
            for r in u.meta.get("refs", []) if u.kind == "summary" else unit_refs(u):
                seen_refs.setdefault(str(r))
        refs = list(seen_refs)
        replaced = [units[i] for i in region]
        new = Unit.summary(
            summary,
            replaced,
            meta={
                "summary_text": summary,
                "summarizer": opts.summarizer,
                "folded_units": len(replaced),
                "chunks": len(chunks),
                "refs": refs[-MAX_META_REFS:],
                "user_turns": turns,
                **({"names": names} if names else {}),
            },
        )
        new_tokens, old_tokens = ctx.count([new]), ctx.count(replaced)
        if new_tokens >= old_tokens:
            return self._failed(
                ctx,
                units,
                f"summary ({new_tokens} tokens) not shorter than its input ({old_tokens})",
            )
        self._succeeded(ctx)
        region_set = set(region)
        out_units: list[Unit] = []
        for i, u in enumerate(units):
            if i == region[0]:
                out_units.append(new)
            if i not in region_set:
                out_units.append(u)
        return LayerResult(
            units=out_units,
            dropped=replaced,
            report={
                "summarized_units": len(replaced),
                "merged_summaries": len(old_summaries),
                "chunks": len(chunks),
                "summary_tokens": ct(summary),
                "input_tokens": input_tokens,
                **({"unread_units": unread} if unread else {}),
            },
        )


@hookimpl
def ctxpolicy_register_layers(register):  # type: ignore[no-untyped-def]
    register(Summarize)
