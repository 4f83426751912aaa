"""What ``ctxpolicy tune`` optimises, computed from ``simulate``'s own metrics.

Every number comes from :func:`ctxpolicy.sim.metrics.summarize_results` over the
per-trace metrics of :func:`ctxpolicy.sim.metrics.trace_metrics`, so a tuned policy
scores exactly what ``ctxpolicy simulate`` would print for it:

* cost — by default the **total cost**: billed input under prompt caching plus the
  summarizer's LLM calls (``simulate``'s price model, ``billing.total_cost``); or the
  billed input alone (``billed``), prompt tokens summed over every call (``tokens``),
  or the estimated USD (``usd``, the price table);
* retention — by default the ruler's retention: facts reused by the agent that were
  in the text sent (``in_context``); far retention (``far``); or in context or
  recoverable from a referenced snapshot (``retained``); or instruction retention
  (``instructions``: the user's turns still sent verbatim);
* also reported (``Score``): the ledger + summary share of the prompt, duplicated
  lines and compactions of traces that sending everything never overflowed;
* hard constraints — no avoidable overflow (an overflow the task and the newest
  message alone would not cause), no tool-call pairing violation, retention not
  below the floor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxpolicy.policy.models import TuneObjectives

__all__ = ["Score", "constraint_values", "score"]


@dataclass(frozen=True)
class Score:
    """A policy's totals over a set of traces."""

    traces: int
    steps: int
    tokens: int
    tokens_none: int
    usd: float
    facts: int
    in_context: float
    retained: float
    overflows: int
    unavoidable: int
    pairing: int
    compactions: int
    #: The ruler (``billing`` and ``retention.far_rate`` of simulate's summary).
    total: float = 0.0
    total_none: float = 0.0
    billed: float = 0.0
    far: float = 1.0
    #: the user's turns still sent verbatim, the ledger + summary share of the prompt,
    #: lines said twice, compactions of conversations that would have fit
    instructions: float = 1.0
    ledger_share: float = 0.0
    duplicated_lines: int = 0
    needless_compactions: int = 0

    @property
    def avoidable(self) -> int:
        """Overflows some policy keeping the task could have avoided."""
        return self.overflows - self.unavoidable

    def cost(self, obj: TuneObjectives) -> float:
        """The minimised objective."""
        if obj.cost == "tokens":
            return float(self.tokens)
        if obj.cost == "usd":
            return self.usd
        return self.billed if obj.cost == "billed" else self.total

    def retention(self, obj: TuneObjectives) -> float:
        """The maximised objective."""
        if obj.retention == "far":
            return self.far
        if obj.retention == "instructions":
            return self.instructions
        return self.in_context if obj.retention == "in_context" else self.retained

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "avoidable_overflows": self.avoidable}


def score(metrics: Sequence[Mapping[str, Any]]) -> Score:
    """Totals of one policy's per-trace metrics (``simulate``'s summary)."""
    from ctxpolicy.sim.metrics import summarize_results

    if not metrics:
        return Score(0, 0, 0, 0, 0.0, 0, 1.0, 1.0, 0, 0, 0, 0)
    labels = {str(m["run"]) for m in metrics}
    if len(labels) != 1:
        raise ValueError(f"metrics of several runs: {sorted(labels)}")
    s = next(iter(summarize_results(metrics).values()))
    ret = s["retention"]
    return Score(
        traces=s["traces"],
        steps=s["steps"],
        tokens=s["prompt_tokens"],
        tokens_none=s["prompt_tokens_none"],
        usd=float(s["cost"]["usd"]),
        facts=ret["facts"],
        # no fact reused: nothing could be lost
        in_context=1.0 if ret["in_context_rate"] is None else float(ret["in_context_rate"]),
        retained=1.0 if ret["retained_rate"] is None else float(ret["retained_rate"]),
        total=float(s["billing"]["total_cost"]),
        total_none=float(s["billing"]["total_cost_none"]),
        billed=float(s["billing"]["billed_input"]),
        far=1.0 if ret["far_rate"] is None else float(ret["far_rate"]),
        instructions=1.0
        if (s.get("instructions") or {}).get("rate") is None
        else float(s["instructions"]["rate"]),
        ledger_share=float(s.get("ledger_share") or 0.0),
        duplicated_lines=int(s.get("duplicated_lines") or 0),
        needless_compactions=int(s.get("needless_compactions") or 0),
        overflows=s["overflows"],
        unavoidable=s["overflows_unavoidable"],
        pairing=s["pairing_violations"],
        compactions=s["compactions_total"],
    )


def constraint_values(s: Score, obj: TuneObjectives, floor: float) -> list[float]:
    """Optuna constraints (feasible when every value ≤ 0): avoidable overflows,
    pairing violations, retention below the floor."""
    return [float(s.avoidable), float(s.pairing), round(floor - s.retention(obj), 6)]
