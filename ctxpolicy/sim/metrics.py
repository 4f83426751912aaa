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
* **cached prefix** — tokens of the longest run of leading messages identical to the
  previous call's (what a provider prompt cache can reuse); the estimated cost uses
  the price table: uncached input, cached input and output (the trace's assistant
  messages) per million tokens.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "STATES",
    "StepRecord",
    "TraceResult",
    "load_prices",
    "price_for",
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
        default_factory=lambda: {"facts": 0, "in_context": 0, "recoverable": 0, "lost": 0}
    )
    lost_examples: list[str] = field(default_factory=list)
    tool_tokens_before: int = 0
    tool_tokens_after: int = 0
    messages: int = 0
    prices: Mapping[str, Any] | None = None
    none_cached: int = 0
    alert_ratio: float = 0.9
    alert_repeats: float = 0.3

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready metrics (schema: schemas/simulate-output.schema.json, ``run``)."""
        return trace_metrics(self)


STATES = ("normal", "warning", "error", "critical", "overflow")
_FAIL_EVENTS = ("layer.failed", "layer.rejected", "summarizer.failed")
_SUMMARY_LAYERS = ("summarize", "summary_at_fraction")


def load_prices(path: str | Path | None = None) -> dict[str, Any]:
    """The price table: the packaged one, or ``path`` (same shape)."""
    if path is None:
        text = resources.files("ctxpolicy").joinpath("data/prices.json").read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    data = json.loads(text)
    models = data.get("models") if isinstance(data, Mapping) else None
    if not isinstance(models, Mapping) or not models:
        raise ValueError(
            f'{path or "prices.json"}: expected {{"models": {{name: {{input, cached_input, output}}}}}}'
        )
    for name, p in models.items():
        if not isinstance(p, Mapping) or not all(
            isinstance(p.get(k), (int, float)) for k in ("input", "output")
        ):
            raise ValueError(
                f"{path or 'prices.json'}: model {name!r} needs numeric input and output prices"
            )
    return dict(data)


@functools.lru_cache(maxsize=1)
def _default_prices() -> dict[str, Any]:
    return load_prices()


def price_for(prices: Mapping[str, Any], model: str | None) -> tuple[str, dict[str, float]]:
    """``(name used, {input, cached_input, output})`` for a model (``default`` if unknown)."""
    models = prices["models"]
    if model is not None and model in models:
        name: str = model
    else:
        name = "default" if "default" in models else next(iter(models))
    p = models[name]
    return name, {
        "input": float(p["input"]),
        "cached_input": float(p.get("cached_input", p["input"])),
        "output": float(p["output"]),
    }


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
    prices = r.prices if r.prices is not None else _default_prices()
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
    violations = sum(s.violations for s in steps)
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
            "lost_examples": list(r.lost_examples),
        },
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
        },
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
            },
            "cache": {"cached_tokens": cached, "cached_fraction": _rate(cached, prompt)},
            "cost": {
                "usd": round(usd, 6),
                "usd_none": round(usd_none, 6),
                "saving": _rate(usd_none - usd, usd_none),
            },
            "alerts": sum(len(d["alerts"]) for d in ds),
        }
    return out
