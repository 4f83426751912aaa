"""``emergency`` — design A L4, the reactive layer run on a context-overflow error.

Keeps the system message, every pinned unit (first and last user turn, the ledger),
the newest summary (``keep_summary``) and the last ``keep_recent_rounds`` rounds;
everything else is dropped (and goes to the ledger through ``LayerResult.dropped``).
If the result still counts above the target, tool results of the kept rounds
longer than ``max_result_chars`` are head/tail-truncated (reference lines kept) —
a single huge tool result is the usual cause of an overflow (design B incident 1) —
and, while it is still above, one round fewer is kept, down to ``min_recent_rounds``.
``retries`` is read by the engine.

This module also holds the overflow-error detector used by ``Session.on_error``:
:func:`is_context_overflow` and :func:`parse_limit`, driven by a pattern table
that applications and plugins extend with :func:`register_overflow_pattern`.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ctxpolicy.components import CompactionContext, ComponentOptions, Layer, LayerResult
from ctxpolicy.conversation import Message, Unit
from ctxpolicy.layers._util import (
    Tally,
    message_text,
    round_groups,
    truncate_keep_refs,
    with_text,
)
from ctxpolicy.plugins import hookimpl

__all__ = [
    "Emergency",
    "EmergencyOptions",
    "OverflowPattern",
    "is_context_overflow",
    "overflow_patterns",
    "parse_limit",
    "register_overflow_pattern",
]

# --------------------------------------------------------------------------- detector

_N = r"(?P<limit>\d[\d,_]*)"


@dataclass(frozen=True)
class OverflowPattern:
    """One way a provider says "the prompt does not fit".

    ``regex`` is searched (case-insensitive) in every text found on the error; a
    named group ``limit`` in it, when matched, is the real context limit.
    """

    provider: str
    regex: re.Pattern[str]


def _p(provider: str, regex: str) -> OverflowPattern:
    return OverflowPattern(provider, re.compile(regex, re.IGNORECASE))


#: Patterns with a ``limit`` group come first so :func:`parse_limit` finds the limit.
_BUILTIN: tuple[OverflowPattern, ...] = (
    # OpenAI / Azure OpenAI / Groq / vLLM (OpenAI-compatible):
    # "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens."
    _p("openai", rf"maximum context length is {_N}\s*tokens"),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    _p("anthropic", rf"prompt is too long:\s*\d[\d,]*\s*tokens\s*>\s*{_N}\s*maximum"),
    # Anthropic: "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000"
    _p("anthropic", rf"exceed context limit:\s*\d[\d,]*\s*\+\s*\d[\d,]*\s*>\s*{_N}"),
    # vLLM: "The prompt (total length 5000) is too long to fit into the model (context length 4096)"
    _p("vllm", rf"too long to fit into the model \(context length {_N}\)"),
    # vLLM: "Input prompt (5000 tokens) is too long and exceeds limit of 4096"
    _p("vllm", rf"is too long and exceeds limit of {_N}"),
    # vLLM / SGLang: "... longer than the model's context length (4096 tokens)"
    _p("sglang", rf"longer than the model'?s context length \({_N}\s*tokens?\)"),
    # SGLang: "Requested token count exceeds the model's maximum context length of 4096 tokens"
    _p("sglang", rf"exceeds the model'?s maximum context length of {_N}"),
    # Mistral: "Prompt contains 40000 tokens ..., too large for model with 32768 maximum context length"
    _p("mistral", rf"too large for model with {_N} maximum context length"),
    # Gemini: "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576)."
    _p(
        "gemini",
        rf"input token count \(?\d[\d,]*\)? exceeds the maximum number of tokens allowed \({_N}\)",
    ),
    # llama.cpp server: "the request exceeds the available context size (4096 tokens)"
    _p("llama.cpp", rf"exceeds the available context size(?:,| \(){_N}"),
    # Ollama / generic: "input length exceeds the context length (4096)"
    _p("ollama", rf"exceeds (?:the )?(?:maximum )?context (?:length|window)(?: of)? \(?{_N}"),
    # code-only / limit-less forms
    _p("openai", r"context_length_exceeded"),
    _p("openai", r"maximum context length"),
    _p("anthropic", r"prompt is too long"),
    _p("litellm", r"ContextWindowExceededError"),
    _p("design-a", r"context_too_long"),
    _p("azure", r"tokens_limit_reached|The input or output tokens must be reduced"),
    _p("vllm", r"too long to fit into the model|exceeds the max(?:imum)? model length"),
    _p("ollama", r"exceeds the (?:maximum )?context (?:length|window|size)"),
    _p("gemini", r"exceeds the maximum number of tokens allowed"),
    _p("llama.cpp", r"exceeds the available context size"),
    _p("bedrock", r"input is too long for requested model|too many input tokens"),
    _p("generic", r"context[ _]window[ _](?:exceeded|is full)|context length exceeded"),
    _p("generic", r"reduce the length of the (?:messages|prompt|input)"),
)

_lock = threading.Lock()
_extra: list[OverflowPattern] = []

#: Exception class names (anywhere in the MRO) that mean an overflow.
_CLASS_NAMES = {"ContextWindowExceededError", "ContextLengthExceededError", "ContextTooLongError"}
#: Error codes (``code``/``type`` fields) that mean an overflow.
_CODES = {
    "context_length_exceeded",
    "context_too_long",
    "context_window_exceeded",
    "string_above_max_length_tokens",
}


def register_overflow_pattern(
    regex: str | re.Pattern[str], provider: str = "custom"
) -> OverflowPattern:
    """Add a pattern (searched case-insensitively) recognising an overflow error.

    A named group ``limit`` lets :func:`parse_limit` read the real limit. Patterns
    registered at run time are tried before the built-in table.
    """
    rx = regex if isinstance(regex, re.Pattern) else re.compile(regex, re.IGNORECASE)
    pat = OverflowPattern(provider, rx)
    with _lock:
        _extra.insert(0, pat)
    return pat


def unregister_overflow_pattern(pattern: OverflowPattern) -> None:
    """Undo :func:`register_overflow_pattern`."""
    with _lock:
        if pattern in _extra:
            _extra.remove(pattern)


def overflow_patterns() -> list[OverflowPattern]:
    """The pattern table in the order it is tried."""
    with _lock:
        return [*_extra, *_BUILTIN]


def _json_texts(obj: Any, out: list[str], depth: int = 0) -> None:
    if depth > 6:
        return
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, Mapping):
        for k in sorted(obj, key=str):
            if k in (
                "message",
                "code",
                "type",
                "error",
                "detail",
                "details",
                "reason",
                "status",
                "msg",
            ):
                _json_texts(obj[k], out, depth + 1)
    elif isinstance(obj, list | tuple):
        for v in obj[:20]:
            _json_texts(v, out, depth + 1)


def _texts(exc: Any) -> tuple[list[str], set[str]]:
    """Texts found on an error (or a message), and the class names in its chain."""
    texts: list[str] = []
    names: set[str] = set()
    seen: set[int] = set()
    cur: Any = exc
    while cur is not None and id(cur) not in seen and len(seen) < 8:
        seen.add(id(cur))
        if isinstance(cur, str):
            texts.append(cur)
            break
        if isinstance(cur, Mapping):
            _json_texts(cur, texts)
            break
        names.update(c.__name__ for c in type(cur).__mro__)
        for attr in ("code", "type", "message", "body", "detail"):
            try:
                v = getattr(cur, attr, None)
            except Exception:  # pragma: no cover - odd properties
                continue
            if isinstance(v, str | Mapping | list):
                _json_texts(v, texts)
        resp = getattr(cur, "response", None)
        if resp is not None:
            try:
                _json_texts(resp.json(), texts)
            except Exception:
                with contextlib.suppress(Exception):
                    t = getattr(resp, "text", None)
                    if isinstance(t, str):
                        texts.append(t[:4000])
        with contextlib.suppress(Exception):
            texts.append(str(cur))
        cur = cur.__cause__ or cur.__context__
    return texts, names


def _maybe_json(texts: list[str]) -> list[str]:
    out = list(texts)
    for t in texts:
        s = t.strip()
        if s.startswith("{") and len(s) < 100_000:
            with contextlib.suppress(ValueError):
                _json_texts(json.loads(s), out)
    return out


def is_context_overflow(exc_or_message: Any) -> bool:
    """True when an exception, error body or message says the prompt exceeds the context.

    Looks at the exception class names (e.g. LiteLLM ``ContextWindowExceededError``),
    ``code``/``type``/``message``/``body`` attributes, the HTTP response's JSON,
    ``str(exc)`` and the exception chain, against :func:`overflow_patterns`.
    """
    if exc_or_message is None:
        return False
    texts, names = _texts(exc_or_message)
    if names & _CLASS_NAMES:
        return True
    texts = _maybe_json(texts)
    if any(t.strip().lower() in _CODES for t in texts):
        return True
    pats = overflow_patterns()
    return any(p.regex.search(t) for t in texts for p in pats)


def parse_limit(exc_or_message: Any) -> int | None:
    """The real context limit (tokens) stated in an overflow error, or None."""
    if exc_or_message is None:
        return None
    texts, _ = _texts(exc_or_message)
    texts = _maybe_json(texts)
    for p in overflow_patterns():
        if "limit" not in p.regex.groupindex:
            continue
        for t in texts:
            m = p.regex.search(t)
            if m and m.group("limit"):
                try:
                    value = int(m.group("limit").replace(",", "").replace("_", ""))
                except ValueError:  # pragma: no cover
                    continue
                if value > 0:
                    return value
    return None


# --------------------------------------------------------------------------- layer


class EmergencyOptions(ComponentOptions):
    """Options of ``emergency``."""

    keep_recent_rounds: int = Field(
        default=2, ge=0, description="Newest rounds kept (design A: the last 2 rounds)."
    )
    retries: int = Field(
        default=1,
        ge=0,
        le=10,
        description="How many times the engine retries the model call after this layer ran.",
    )
    min_recent_rounds: int | None = Field(
        default=None,
        ge=0,
        description="While the result is still above the target, keep one round fewer, "
        "down to this many (1: the newest round, whose results the model is about to "
        "read). null: never fewer than keep_recent_rounds.",
    )
    keep_summary: bool = Field(
        default=True, description="Also keep the newest summary unit, if there is one."
    )
    max_result_chars: int | None = Field(
        default=4000,
        ge=0,
        description="If still above the target, tool results of kept rounds longer than "
        "this are head/tail-truncated (reference lines kept). null: never truncate.",
    )


class Emergency(Layer):
    name = "emergency"
    description = (
        "On a context-overflow error keep only system, pinned, ledger and the last rounds."
    )
    Options = EmergencyOptions
    options: EmergencyOptions

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        opts = self.options
        groups = round_groups(units)
        last_group_end = groups[-1][-1] if groups else -1
        newest_summary = max((i for i, u in enumerate(units) if u.kind == "summary"), default=None)
        always = [
            i
            for i, u in enumerate(units)
            if u.pinned
            or u.kind in ("system", "ledger")
            or i > last_group_end
            or (opts.keep_summary and i == newest_summary)
        ]
        # keep_recent_rounds first; while the result is still above the target, one
        # round fewer, down to min_recent_rounds
        fewest = opts.keep_recent_rounds
        if opts.min_recent_rounds is not None:
            fewest = min(opts.min_recent_rounds, fewest)
        plan = _Plan(ctx, units, groups, always, opts.max_result_chars)
        rounds, truncate = plan.choose(opts.keep_recent_rounds, fewest)
        kept, keep, truncated = plan.build(rounds, truncate)
        used = ctx.count(kept)
        if used > ctx.target and (rounds > fewest or (truncated is None and plan.can_truncate)):
            # the estimate was low (a counter that is not additive): the same search,
            # counted exactly, from where it stopped
            for r in range(rounds, fewest - 1, -1):
                kept, keep, truncated = plan.build(r, False)
                used = ctx.count(kept)
                if plan.can_truncate and used > ctx.target:
                    kept, keep, truncated = plan.build(r, True)
                    used = ctx.count(kept)
                if r == fewest or used <= ctx.target:
                    break
        dropped = [u for i, u in enumerate(units) if i not in keep]
        report: dict[str, object] = {
            "dropped_units": len(dropped),
            "kept_rounds": plan.kept_rounds,
        }
        if truncated is not None:
            report["truncated_results"] = truncated
        return LayerResult(units=kept, dropped=dropped, report=report)


class _Plan:
    """The candidates of :class:`Emergency` (the always-kept units plus the newest
    ``r`` rounds, their tool results truncated or not), estimated with each unit
    counted once (:class:`~ctxpolicy.layers._util.Tally`): choosing ``r`` is
    linear in the number of units, whatever ``keep_recent_rounds`` is."""

    def __init__(
        self,
        ctx: CompactionContext,
        units: Sequence[Unit],
        groups: list[list[int]],
        always: list[int],
        max_chars: int | None,
    ) -> None:
        self.ctx, self.units, self.groups, self.always = ctx, units, groups, always
        self.max_chars = max_chars
        self.can_truncate = max_chars is not None
        self.kept_rounds = 0
        self.tally = Tally(ctx, units)
        #: unit index → (the unit with its results truncated, results cut, its tokens)
        self._short: dict[int, tuple[Unit, int, int]] = {}

    def _shortened(self, i: int) -> tuple[Unit, int, int]:
        if i not in self._short:
            u = self.units[i]
            if u.kind != "step" or u.pinned or self.max_chars is None:
                self._short[i] = (u, 0, self.tally.each[i])
            else:
                short, cut = _truncate_unit(u, self.max_chars)
                tokens = self.ctx.unit_counts([short])[0] if cut else self.tally.each[i]
                self._short[i] = (short, cut, tokens)
        return self._short[i]

    def choose(self, most: int, fewest: int) -> tuple[int, bool]:
        """Rounds to keep and whether to truncate, from the estimate."""
        target, tally = self.ctx.target, self.tally
        first = self._first(most)  # kept rounds: groups[first:]
        plain = tally.base + tally.of(self.always)
        plain += sum(tally.of(g) for g in self.groups[first:])
        shortened: int | None = None  # the same with results truncated, once needed
        rounds, truncate = most, False
        for rounds in range(most, fewest - 1, -1):
            while first < self._first(rounds):  # one round fewer: the oldest kept leaves
                plain -= tally.of(self.groups[first])
                if shortened is not None:
                    shortened -= sum(self._shortened(i)[2] for i in self.groups[first])
                first += 1
            truncate = self.can_truncate and plain > target
            est = plain
            if truncate:
                if shortened is None:
                    shortened = plain + sum(
                        self._shortened(i)[2] - tally.each[i]
                        for g in self.groups[first:]
                        for i in g
                    )
                est = shortened
            if rounds == fewest or est <= target:
                break
        return rounds, truncate

    def _first(self, rounds: int) -> int:
        """Index of the oldest group kept with ``rounds`` rounds."""
        return max(0, len(self.groups) - rounds) if rounds else len(self.groups)

    def build(self, rounds: int, truncate: bool) -> tuple[list[Unit], set[int], int | None]:
        """The kept units, their indices, and how many results were truncated (None:
        no truncation)."""
        kept_groups = self.groups[self._first(rounds) :]
        self.kept_rounds = len(kept_groups)
        keep = set(self.always).union(i for g in kept_groups for i in g)
        kept: list[Unit] = []
        cut = 0
        for i, u in enumerate(self.units):
            if i not in keep:
                continue
            if truncate:
                u, n, _ = self._shortened(i)
                cut += n
            kept.append(u)
        return kept, keep, cut if truncate else None


def _truncate_unit(u: Unit, max_chars: int) -> tuple[Unit, int]:
    """``u`` with its tool results longer than ``max_chars`` head/tail-truncated (the
    reference lines kept), and how many were."""
    msgs: list[Message] = []
    cut = 0
    for m in u.messages:
        new = truncate_keep_refs(message_text(m), max_chars) if m.get("role") == "tool" else None
        if new is None:
            msgs.append(m)
        else:
            msgs.append(with_text(m, new))
            cut += 1
    return (u.replace(messages=msgs, meta={**u.meta, "masked": True}) if cut else u), cut


@hookimpl
def ctxpolicy_register_layers(register):  # type: ignore[no-untyped-def]
    register(Emergency)
