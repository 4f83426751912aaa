"""Metrics of replays: per trace (:func:`trace_metrics`) and overall (:func:`summarize_results`).

Definitions (also in docs/simulate.md):

* **prompt tokens** — tokens of every prepared list summed over all calls; *none* is
  the same sum for the uncompacted conversation with raw tool results; **saving** =
  1 − prompt / none;
* **overflow** — a call whose prepared list exceeds ``window − reserve_output``;
* **pairing violations** — :func:`ctxpolicy.conversation.check_messages` problems
  in each prepared list, summed;
* **compression ratio** (design B's ``CompressionMonitor``) — per compaction
  ``(before − after) / before``, averaged over successful compactions; failed
  compactions (``layer.failed``, ``layer.rejected``, ``summarizer.failed``) count in
  the failure rate. Alert when the mean ratio is **above** ``alert_ratio`` (0.9):
  compaction removes almost everything, so key information is probably lost;
* **repeated reads** — a tool call (same name and arguments) issued again while its
  earlier result was not intact in the context the agent saw; alert when repeats
  exceed ``alert_repeats`` (0.3) × the number of compactions (design B: compaction
  came too early or lost what the agent needed);
* **fact retention** — identifiers (``ctxpolicy.conversation.facts.extract``) in each assistant
  message that appeared earlier in the conversation: *in context* when present in
  the prepared list, *recoverable* when a snapshot referenced from the prepared list
  contains it, else *lost*;
* **instruction retention** — every user turn so far (its first 500 characters,
  whitespace as sent) checked at every call: *retained* when the text sent holds it
  verbatim (an instruction or constraint summarized away is lost even when its gist
  survives);
* **ledger + summary share** — tokens of the messages the strategy wrote itself (the
  progress ledger, a summary standing for earlier turns: a system or user message
  that is not in the conversation) over all tokens sent;
* **duplicated lines** — lines (at least 16 characters) of the ledger or a summary
  that are also elsewhere in the same request, or twice in them: said twice;
* **needless compactions** — compacting calls of a trace that sending everything
  would never have overflowed (every call's uncompacted conversation ≤
  ``window − reserve_output``);
* **cached prefix** — tokens of the longest run of leading messages identical to the
  previous call's (what a provider prompt cache can reuse); the estimated cost uses
  the price table: uncached input, cached input and output (the trace's assistant
  messages) per million tokens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.policy.catalogue import (
    catalogue_price_models,
    default_prices,
    price_for,
)

__all__ = [
    "STATES",
    "PriceModel",
    "StepRecord",
    "SummaryMeter",
    "TraceResult",
    "parse_price_model",
    "price_model",
    "price_model_names",
    "summarize_results",
    "trace_metrics",
]

# --------------------------------------------------------------------------- records


@dataclass
class StepRecord:
    """One model call of a replay: what was sent and what happened while preparing it."""

    index: int
    used: int
    none: int
    trigger: int
    target: int
    warning: int
    error: int
    hard_limit: int
    state: str
    layers: list[str] = field(default_factory=list)
    cached: int = 0
    output: int = 0
    violations: int = 0
    #: Tokens of what no strategy can leave out: the leading system messages, the
    #: first user message (the task) and the newest message.
    floor: int = 0
    #: The request is not an extension of the previous one (the provider's prompt
    #: cache of the previous request is lost).
    prefix_changed: bool = False
    #: A compaction ended above the target (pinned content and kept rounds alone
    #: exceed it; the engine's ``context.above_target`` event).
    above_target: bool = False
    #: Cached prefix of the uncompacted conversation (``none``) at this call.
    none_cached: int = 0
    #: Summarizer LLM calls made while preparing this call, and their tokens.
    summary_calls: int = 0
    summary_in: int = 0
    summary_out: int = 0
    #: Tokens and state of the context before this call's compaction (None: nothing
    #: compacted; ``used``/``state`` are then both), so a reader sees the threshold
    #: that was crossed, not only where compaction left the context.
    before: int | None = None
    state_before: str | None = None
    #: Tokens at which the policy's pipeline fires (its lowest ``at`` state; None for
    #: a baseline).
    fires: int | None = None

    @property
    def ratio(self) -> float:
        return self.used / self.trigger if self.trigger else 0.0

    @property
    def overflow(self) -> bool:
        return self.used > self.hard_limit

    @property
    def unavoidable(self) -> bool:
        """An overflow no strategy keeping the task could avoid (the floor alone is above)."""
        return self.overflow and self.floor > self.hard_limit


@dataclass
class TraceResult:
    """Everything measured while replaying one trace under one strategy."""

    trace: str
    strategy: str
    label: str
    kind: str  # "policy" or "baseline"
    model: str | None
    window: int
    reserve_output: int
    steps: list[StepRecord] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    repeated_reads: int = 0
    repeated_examples: list[str] = field(default_factory=list)
    retention: dict[str, int] = field(
        default_factory=lambda: {
            "facts": 0,
            "in_context": 0,
            "recoverable": 0,
            "lost": 0,
            "far_facts": 0,
            "far_in_context": 0,
        }
    )
    lost_examples: list[str] = field(default_factory=list)
    tool_tokens_before: int = 0
    tool_tokens_after: int = 0
    messages: int = 0
    prices: Mapping[str, Any] | None = None
    #: The cache price model billing this replay (:func:`price_model`); ``None``: the
    #: model catalogue's for :attr:`model`.
    price_model: PriceModel | None = None
    none_cached: int = 0
    alert_ratio: float = 0.9
    alert_repeats: float = 0.3
    #: instruction retention: user turns checked at each call, and found verbatim
    instructions: dict[str, int] = field(default_factory=lambda: {"checked": 0, "retained": 0})
    #: tokens of the ledger and summaries the strategy sent (over every call)
    own_tokens: int = 0
    #: lines of the ledger or a summary said twice in the same request (over every call)
    duplicated_lines: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready metrics (schema: schemas/simulate-output.schema.json, ``run``)."""
        return trace_metrics(self)


# --------------------------------------------------------------------------- the ruler


@dataclass(frozen=True)
class PriceModel:
    """How a provider bills input under prompt caching, per token as a multiple of the
    model's uncached input price (``ctxpolicy/data/models.json``, ``price_models``)."""

    name: str
    cache_read: float
    cache_write: float
    summarizer_input: float = 1.0
    summarizer_output: float = 5.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "summarizer_input": self.summarizer_input,
            "summarizer_output": self.summarizer_output,
        }


_PRICE_KEYS = ("cache_read", "cache_write", "summarizer_input", "summarizer_output")


def price_model_names() -> list[str]:
    """Names of the catalogue's price models (``--price-model``)."""
    models, _ = catalogue_price_models()
    return sorted(k for k, v in models.items() if isinstance(v, Mapping))


def price_model(
    spec: str | None = None,
    model: str | None = None,
    overrides: Mapping[str, float] | None = None,
) -> PriceModel:
    """The price model billing a replay.

    ``spec`` names a catalogue price model (``anthropic``, ``openai``, …); ``None``:
    the model catalogue's entry for ``model`` (with its per-model overrides, e.g.
    OpenAI's cached-input discount), else the catalogue's ``default``. ``overrides``
    (``cache_read``, ``cache_write``, ``summarizer_input``, ``summarizer_output``)
    win over both. Raises :class:`ValueError` naming what is unknown or invalid.
    """
    models, by_model = catalogue_price_models()
    per_model: dict[str, Any] = {}
    if spec is None:
        entry = by_model.get(model or "")
        if isinstance(entry, Mapping):
            per_model = {k: v for k, v in entry.items() if k in _PRICE_KEYS}
            spec = str(entry.get("price_model"))
        else:
            spec = str(models.get("default", "anthropic"))
    base = models.get(spec)
    if not isinstance(base, Mapping):
        raise ValueError(
            f"unknown price model {spec!r}; choose from {', '.join(price_model_names())}"
        )
    values: dict[str, float] = {}
    for key in _PRICE_KEYS:
        raw = {**base, **per_model, **dict(overrides or {})}.get(key)
        if raw is None:
            raw = 1.0 if key != "summarizer_output" else 5.0
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 <= raw < 1000:
            raise ValueError(f"price model {spec!r}: {key} must be a number in [0, 1000)")
        values[key] = float(raw)
    unknown = set(overrides or {}) - set(_PRICE_KEYS)
    if unknown:
        raise ValueError(
            f"unknown price model key(s) {', '.join(sorted(unknown))}; use {', '.join(_PRICE_KEYS)}"
        )
    return PriceModel(name=spec, **values)


def parse_price_model(text: str) -> tuple[str | None, dict[str, float]]:
    """``NAME[,key=value...]`` or ``key=value,...`` (the ``--price-model`` option)."""
    name: str | None = None
    overrides: dict[str, float] = {}
    for i, part in enumerate(p.strip() for p in text.split(",")[:16]):
        if not part:
            continue
        if "=" not in part:
            if i:
                raise ValueError(f"{part!r}: expected key=value after the price model name")
            name = part[:64]
            continue
        key, _, value = part.partition("=")
        try:
            overrides[key.strip()[:64]] = float(value)
        except ValueError:
            raise ValueError(f"{key.strip()[:64]}: {value[:32]!r} is not a number") from None
    return name, overrides


class SummaryMeter:
    """Counts a summarizer's LLM calls and their tokens (the ruler bills them).

    Wrap the function an LLM summarizer calls (``meter.record(prompt, reply)``) and
    give the meter to the strategy; :meth:`totals` is what the replay loop reads.
    """

    def __init__(self, count_text: Any) -> None:
        self._count = count_text
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def record(self, prompt: str, reply: str) -> None:
        self.calls += 1
        self.input_tokens += int(self._count(prompt))
        self.output_tokens += int(self._count(reply))

    def totals(self) -> tuple[int, int, int]:
        return self.calls, self.input_tokens, self.output_tokens


STATES = ("normal", "warning", "error", "critical", "overflow")
_FAIL_EVENTS = ("layer.failed", "layer.rejected", "summarizer.failed")
_SUMMARY_LAYERS = ("summarize", "summary_at_fraction")


def _rate(num: float, den: float) -> float | None:
    return round(num / den, 4) if den else None


def trace_metrics(r: TraceResult) -> dict[str, Any]:
    """The JSON-ready metrics of one replay (``run`` in the output schema)."""
    steps = r.steps
    n = len(steps)
    ratios = [s.ratio for s in steps]
    states = Counter(s.state for s in steps)
    prompt = sum(s.used for s in steps)
    none = sum(s.none for s in steps)
    cached = sum(s.cached for s in steps)
    output = sum(s.output for s in steps)
    compactions: Counter[str] = Counter()
    comp_ratios: list[float] = []
    failures = 0
    summarizer_failures = 0
    breaker = 0
    for e in r.events:
        t = e.get("type")
        if t == "context.compacted":
            compactions[str(e.get("layer"))] += 1
            b, a = e.get("before"), e.get("after")
            if isinstance(b, (int, float)) and isinstance(a, (int, float)) and b > 0:
                comp_ratios.append((b - a) / b)
        elif t in _FAIL_EVENTS:
            failures += 1
            if t == "summarizer.failed":
                summarizer_failures += 1
        elif t == "breaker.open":
            breaker += 1
    total_comp = sum(compactions.values())
    summ_ok = sum(compactions[k] for k in _SUMMARY_LAYERS)
    mean_ratio = round(sum(comp_ratios) / len(comp_ratios), 4) if comp_ratios else None
    ret = r.retention
    prices = r.prices if r.prices is not None else default_prices()
    pname, p = price_for(prices, r.model)
    per = float(prices.get("per", 1_000_000))
    usd = ((prompt - cached) * p["input"] + cached * p["cached_input"] + output * p["output"]) / per
    usd_none = (
        (none - r.none_cached) * p["input"]
        + r.none_cached * p["cached_input"]
        + output * p["output"]
    ) / per
    alerts: list[dict[str, Any]] = []
    if mean_ratio is not None and mean_ratio > r.alert_ratio:
        alerts.append(
            {
                "code": "compression_ratio",
                "value": mean_ratio,
                "threshold": r.alert_ratio,
                "message": f"mean compression ratio {mean_ratio:.0%} > {r.alert_ratio:.0%}: "
                "compaction removes almost everything, key facts are probably lost",
            }
        )
    if r.repeated_reads and r.repeated_reads > r.alert_repeats * total_comp:
        alerts.append(
            {
                "code": "repeated_reads",
                "value": r.repeated_reads,
                "threshold": r.alert_repeats,
                "message": f"{r.repeated_reads} repeated reads after {total_comp} compactions "
                f"(> {r.alert_repeats:.0%}): compaction too early or it lost what the agent needed",
            }
        )
    overflows = sum(1 for s in steps if s.overflow)
    unavoidable = sum(1 for s in steps if s.unavoidable)
    fits = all(s.none <= s.hard_limit for s in steps)
    violations = sum(s.violations for s in steps)
    pm = r.price_model if r.price_model is not None else price_model(None, r.model)
    return {
        "trace": r.trace,
        "run": r.label,
        "strategy": r.strategy,
        "kind": r.kind,
        "model": r.model,
        "window": r.window,
        "reserve_output": r.reserve_output,
        "messages": r.messages,
        "steps": n,
        "ratio": {
            "max": round(max(ratios), 4) if ratios else 0.0,
            "mean": round(sum(ratios) / n, 4) if n else 0.0,
        },
        "max_used": max((s.used for s in steps), default=0),
        "states": {s: states.get(s, 0) for s in STATES},
        "prompt_tokens": prompt,
        "prompt_tokens_none": none,
        "overflows_none": sum(1 for s in steps if s.none > s.hard_limit),
        "saving": _rate(none - prompt, none),
        "overflows": overflows,
        "overflows_unavoidable": unavoidable,
        "pairing_violations": violations,
        "steps_with_violations": sum(1 for s in steps if s.violations),
        "compactions": dict(sorted(compactions.items())),
        "compactions_total": total_comp,
        "compacting_calls": sum(1 for s in steps if s.layers),
        "prefix_changes": sum(1 for s in steps if s.prefix_changed),
        "per_100_calls": _per_100(steps),
        "compression": {
            "attempts": total_comp + failures,
            "failures": failures,
            "failure_rate": _rate(failures, total_comp + failures),
            "mean_ratio": mean_ratio,
        },
        "summarizer": {"calls": summ_ok + summarizer_failures, "failures": summarizer_failures},
        "breaker_trips": breaker,
        "tool_tokens": {
            "before": r.tool_tokens_before,
            "after": r.tool_tokens_after,
            "saved": r.tool_tokens_before - r.tool_tokens_after,
        },
        "repeated_reads": r.repeated_reads,
        "repeated_rate": _rate(r.repeated_reads, total_comp),
        "repeated_examples": list(r.repeated_examples),
        "retention": {
            "facts": ret["facts"],
            "in_context": ret["in_context"],
            "recoverable": ret["recoverable"],
            "lost": ret["lost"],
            "in_context_rate": _rate(ret["in_context"], ret["facts"]),
            "retained_rate": _rate(ret["in_context"] + ret["recoverable"], ret["facts"]),
            "far_facts": ret.get("far_facts", 0),
            "far_in_context": ret.get("far_in_context", 0),
            "far_rate": _rate(ret.get("far_in_context", 0), ret.get("far_facts", 0)),
            "lost_examples": list(r.lost_examples),
        },
        "billing": billing(steps, pm),
        "instructions": {
            "checked": r.instructions["checked"],
            "retained": r.instructions["retained"],
            "rate": _rate(r.instructions["retained"], r.instructions["checked"]),
        },
        "ledger_share": _rate(r.own_tokens, prompt) or 0.0,
        "own_tokens": r.own_tokens,
        "duplicated_lines": r.duplicated_lines,
        "fits_uncompacted": fits,
        "needless_compactions": sum(1 for s in steps if s.layers) if fits else 0,
        "cache": {"cached_tokens": cached, "cached_fraction": _rate(cached, prompt)},
        "cost": {
            "price_model": pname,
            "prices": p,
            "input_tokens": prompt - cached,
            "cached_tokens": cached,
            "output_tokens": output,
            "usd": round(usd, 6),
            "usd_none": round(usd_none, 6),
        },
        "alerts": alerts,
        "series": {
            "used": [s.used for s in steps],
            "none": [s.none for s in steps],
            "trigger": [s.trigger for s in steps],
            "target": [s.target for s in steps],
            "warning": [s.warning for s in steps],
            "error": [s.error for s in steps],
            "hard_limit": [s.hard_limit for s in steps],
            "state": [s.state for s in steps],
            "cached": [s.cached for s in steps],
            "layers": [list(s.layers) for s in steps],
            "prefix_changed": [s.prefix_changed for s in steps],
            "above_target": [s.above_target for s in steps],
            "before": [s.used if s.before is None else s.before for s in steps],
            "state_before": [s.state_before or s.state for s in steps],
            **(
                {"fires": [s.fires if s.fires is not None else s.trigger for s in steps]}
                if any(s.fires is not None for s in steps)
                else {}
            ),
        },
    }


def billing(steps: Sequence[StepRecord], pm: PriceModel) -> dict[str, Any]:
    """What the provider bills for ``steps`` under ``pm``, in uncached-input tokens.

    Per call: the cached prefix (whole messages identical to the previous request's,
    :attr:`StepRecord.cached`) at ``cache_read``, every other input token at
    ``cache_write``; ``none`` (send everything) the same way. Total cost adds the
    summarizer's LLM calls: input × ``summarizer_input`` + output × ``summarizer_output``.
    """
    billed = sum(pm.cache_read * s.cached + pm.cache_write * (s.used - s.cached) for s in steps)
    billed_none = sum(
        pm.cache_read * s.none_cached + pm.cache_write * (s.none - s.none_cached) for s in steps
    )
    s_in = sum(s.summary_in for s in steps)
    s_out = sum(s.summary_out for s in steps)
    total = billed + pm.summarizer_input * s_in + pm.summarizer_output * s_out
    return {
        "price_model": pm.to_dict(),
        "billed_input": round(billed, 2),
        "billed_input_none": round(billed_none, 2),
        "summarizer": {
            "llm_calls": sum(s.summary_calls for s in steps),
            "input_tokens": s_in,
            "output_tokens": s_out,
        },
        "total_cost": round(total, 2),
        "total_cost_none": round(billed_none, 2),
        "billed_ratio": _rate(billed, billed_none),
        "total_ratio": _rate(total, billed_none),
        "tokens_ratio": _rate(sum(s.used for s in steps), sum(s.none for s in steps)),
    }


def _sum_billing(ds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    bs = [d["billing"] for d in ds if "billing" in d]
    billed = sum(b["billed_input"] for b in bs)
    none = sum(b["billed_input_none"] for b in bs)
    total = sum(b["total_cost"] for b in bs)
    prompt = sum(d["prompt_tokens"] for d in ds)
    prompt_none = sum(d["prompt_tokens_none"] for d in ds)
    names = sorted({b["price_model"]["name"] for b in bs})
    return {
        "price_model": names[0] if len(names) == 1 else names,
        "billed_input": round(billed, 2),
        "billed_input_none": round(none, 2),
        "summarizer": {
            k: sum(b["summarizer"][k] for b in bs)
            for k in ("llm_calls", "input_tokens", "output_tokens")
        },
        "total_cost": round(total, 2),
        "total_cost_none": round(none, 2),
        "billed_ratio": _rate(billed, none),
        "total_ratio": _rate(total, none),
        "tokens_ratio": _rate(prompt, prompt_none),
    }


def _per_100(steps: Sequence[Any]) -> dict[str, float]:
    """Calls that compacted, and requests that changed the prompt prefix, per 100 calls."""
    n = len(steps)
    if not n:
        return {"compactions": 0.0, "prefix_changes": 0.0}
    return {
        "compactions": round(100 * sum(1 for s in steps if s.layers) / n, 2),
        "prefix_changes": round(100 * sum(1 for s in steps if s.prefix_changed) / n, 2),
    }


def summarize_results(results: Iterable[TraceResult | Mapping[str, Any]]) -> dict[str, Any]:
    """Totals per run (policy label or baseline name) over every trace.

    Accepts :class:`TraceResult` objects or their ``to_dict()``.
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        d = r if isinstance(r, Mapping) else r.to_dict()
        groups.setdefault(str(d["run"]), []).append(d)
    out: dict[str, Any] = {}
    for run, ds in groups.items():
        steps = sum(d["steps"] for d in ds)
        prompt = sum(d["prompt_tokens"] for d in ds)
        none = sum(d["prompt_tokens_none"] for d in ds)
        comp: Counter[str] = Counter()
        for d in ds:
            comp.update(d["compactions"])
        facts = sum(d["retention"]["facts"] for d in ds)
        inc = sum(d["retention"]["in_context"] for d in ds)
        rec = sum(d["retention"]["recoverable"] for d in ds)
        far = sum(d["retention"].get("far_facts", 0) for d in ds)
        far_inc = sum(d["retention"].get("far_in_context", 0) for d in ds)
        total_comp = sum(comp.values())
        repeats = sum(d["repeated_reads"] for d in ds)
        usd = sum(d["cost"]["usd"] for d in ds)
        usd_none = sum(d["cost"]["usd_none"] for d in ds)
        cached = sum(d["cache"]["cached_tokens"] for d in ds)
        out[run] = {
            "run": run,
            "kind": ds[0]["kind"],
            "strategy": ds[0]["strategy"],
            "traces": len(ds),
            "steps": steps,
            "ratio": {
                "max": max((d["ratio"]["max"] for d in ds), default=0.0),
                "mean": round(sum(d["ratio"]["mean"] * d["steps"] for d in ds) / steps, 4)
                if steps
                else 0.0,
            },
            "states": {s: sum(d["states"][s] for d in ds) for s in STATES},
            "prompt_tokens": prompt,
            "prompt_tokens_none": none,
            "overflows_none": sum(d.get("overflows_none", 0) for d in ds),
            "saving": _rate(none - prompt, none),
            "overflows": sum(d["overflows"] for d in ds),
            "overflows_unavoidable": sum(d["overflows_unavoidable"] for d in ds),
            "pairing_violations": sum(d["pairing_violations"] for d in ds),
            "compactions": dict(sorted(comp.items())),
            "compactions_total": total_comp,
            "compacting_calls": sum(d.get("compacting_calls", 0) for d in ds),
            "prefix_changes": sum(d.get("prefix_changes", 0) for d in ds),
            "per_100_calls": {
                "compactions": round(100 * sum(d.get("compacting_calls", 0) for d in ds) / steps, 2)
                if steps
                else 0.0,
                "prefix_changes": round(
                    100 * sum(d.get("prefix_changes", 0) for d in ds) / steps, 2
                )
                if steps
                else 0.0,
            },
            "compression_failures": sum(d["compression"]["failures"] for d in ds),
            "summarizer": {
                "calls": sum(d["summarizer"]["calls"] for d in ds),
                "failures": sum(d["summarizer"]["failures"] for d in ds),
            },
            "breaker_trips": sum(d["breaker_trips"] for d in ds),
            "tool_tokens_saved": sum(d["tool_tokens"]["saved"] for d in ds),
            "repeated_reads": repeats,
            "repeated_rate": _rate(repeats, total_comp),
            "retention": {
                "facts": facts,
                "in_context": inc,
                "recoverable": rec,
                "lost": facts - inc - rec,
                "in_context_rate": _rate(inc, facts),
                "retained_rate": _rate(inc + rec, facts),
                "far_facts": far,
                "far_in_context": far_inc,
                "far_rate": _rate(far_inc, far),
            },
            "billing": _sum_billing(ds),
            "instructions": {
                "checked": (ic := sum(d.get("instructions", {}).get("checked", 0) for d in ds)),
                "retained": (ir := sum(d.get("instructions", {}).get("retained", 0) for d in ds)),
                "rate": _rate(ir, ic),
            },
            "ledger_share": _rate(sum(d.get("own_tokens", 0) for d in ds), prompt) or 0.0,
            "duplicated_lines": sum(d.get("duplicated_lines", 0) for d in ds),
            "needless_compactions": sum(d.get("needless_compactions", 0) for d in ds),
            "avoidable_overflows": sum(d["overflows"] - d["overflows_unavoidable"] for d in ds),
            "cache": {"cached_tokens": cached, "cached_fraction": _rate(cached, prompt)},
            "cost": {
                "usd": round(usd, 6),
                "usd_none": round(usd_none, 6),
                "saving": _rate(usd_none - usd, usd_none),
            },
            "alerts": sum(len(d["alerts"]) for d in ds),
        }
    return out
