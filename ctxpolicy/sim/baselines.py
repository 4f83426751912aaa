"""Baseline strategies, replayed through the same loop as policies.

Each baseline sees the same trace, the same token counter and the same budget
numbers (trigger, hard limit) as the policy it is compared with, so the numbers in
one table are comparable. Tool results enter the conversation unprocessed (none of
these strategies has preprocessors or snapshots, so nothing they cut is recoverable).

* ``none`` — no compaction: the whole conversation every call (the cost reference);
* ``last_n`` — system messages plus the last ``n`` (20) other messages: naive
  trimming by message count that can cut a tool result from its call; its pairing
  violations are counted as they are;
* ``observation_mask`` — "The Complexity Trap" (Lindenbauer et al., arXiv
  2508.21433): tool results older than the last ``m`` (10) assistant turns are
  replaced by a placeholder, always, with no trigger;
* ``summary_at_fraction`` — LangChain ``SummarizationMiddleware`` behaviour: when
  the context exceeds ``fraction`` (0.8) of the window, everything but the last
  ``keep`` (20) messages is folded into one summary (our ``extractive``
  summarizer), the cut moved so no tool call is split from its result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.budget import compute_budget
from ctxpolicy.conversation import content_text
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.replay import TraceResult, run_strategy, with_window
from ctxpolicy.tokens import get_counter

__all__ = ["BASELINES", "BaselineStrategy", "make_baseline", "run_baseline"]

Message = dict[str, Any]
BASELINES = ("none", "last_n", "observation_mask", "summary_at_fraction")
MASK_TEXT = "[Old tool output omitted for brevity]"
SUMMARY_PREFIX = "[Summary of the conversation so far]\n"


class BaselineStrategy:
    """Common parts: budget numbers of the compared policy, raw tool results."""

    kind = "baseline"

    def __init__(self, name: str, policy: Policy) -> None:
        self.name = name
        self.label = name
        self.policy = policy
        self.counter = get_counter(policy.model, model_name=policy.model_name)
        b = compute_budget(policy)
        self._nums = {
            "trigger": b.trigger,
            "target": b.target,
            "warning": b.warning_tokens,
            "error": b.error_tokens,
            "critical": b.critical_tokens,
            "hard_limit": b.window - b.reserve_output,
            "window": b.window,
            "reserve_output": b.reserve_output,
        }
        self._events: list[dict[str, Any]] = []

    def tool_result(self, call: Mapping[str, Any], content: Any, step: int) -> str:
        return content if isinstance(content, str) else content_text(content)

    def budget_numbers(self) -> dict[str, int]:
        return dict(self._nums)

    def recall(self, ref: str) -> str | None:
        return None

    def events(self) -> list[dict[str, Any]]:
        return self._events

    def close(self) -> None:
        return None

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        return list(convo), []

    def _compacted(self, before: list[Message], after: list[Message]) -> list[str]:
        self._events.append(
            {
                "type": "context.compacted",
                "layer": self.name,
                "before": self.counter.count_messages(before),
                "after": self.counter.count_messages(after),
            }
        )
        return [self.name]


class LastN(BaselineStrategy):
    def __init__(self, policy: Policy, n: int = 20) -> None:
        super().__init__("last_n", policy)
        self.n = n
        self._dropped = 0

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        lead = 0
        while lead < len(convo) and convo[lead].get("role") == "system":
            lead += 1
        rest = convo[lead:]
        out = [*convo[:lead], *rest[-self.n :]]
        dropped = max(0, len(rest) - self.n)
        layers: list[str] = []
        if dropped > self._dropped:
            layers = self._compacted(convo, out)
        self._dropped = dropped
        return out, layers


class ObservationMaskBaseline(BaselineStrategy):
    def __init__(self, policy: Policy, m: int = 10) -> None:
        super().__init__("observation_mask", policy)
        self.m = m
        self._masked = 0

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        assistant_idx = [i for i, x in enumerate(convo) if x.get("role") == "assistant"]
        if len(assistant_idx) <= self.m:
            return list(convo), []
        cutoff = assistant_idx[-self.m]
        out: list[Message] = []
        masked = 0
        for i, x in enumerate(convo):
            if i < cutoff and x.get("role") == "tool":
                out.append({**x, "content": MASK_TEXT})
                masked += 1
            else:
                out.append(x)
        layers: list[str] = []
        if masked > self._masked:
            layers = self._compacted(convo, out)
        self._masked = masked
        return out, layers


class SummaryAtFraction(BaselineStrategy):
    def __init__(
        self, policy: Policy, fraction: float = 0.8, keep: int = 20, max_tokens: int = 1000
    ) -> None:
        super().__init__("summary_at_fraction", policy)
        from ctxpolicy.summarizers.extractive import ExtractiveSummarizer

        self.fraction = fraction
        self.keep = keep
        self.max_tokens = max_tokens
        self.summarizer = ExtractiveSummarizer(ExtractiveSummarizer.Options())
        self.summary: str | None = None
        self.upto = 0  # convo[lead:upto] is folded into the summary

    def _view(self, convo: list[Message], lead: int) -> list[Message]:
        view = list(convo[:lead])
        if self.summary:
            view.append({"role": "user", "content": SUMMARY_PREFIX + self.summary})
        view.extend(convo[max(lead, self.upto) :])
        return view

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        from ctxpolicy.components import SummaryRequest

        lead = 0
        while lead < len(convo) and convo[lead].get("role") == "system":
            lead += 1
        self.upto = max(self.upto, lead)
        view = self._view(convo, lead)
        limit = int(self.fraction * self._nums["window"])
        if self.counter.count_messages(view) <= limit:
            return view, []
        cut = max(self.upto, len(convo) - self.keep)
        # never start the kept tail with a tool result (keep its call with it)
        while cut > self.upto and convo[cut].get("role") == "tool":
            cut -= 1
        if cut <= self.upto:
            return view, []
        folded = list(convo[self.upto : cut])
        req = SummaryRequest(
            messages=[dict(x) for x in folded],
            previous_summary=self.summary,
            max_tokens=self.max_tokens,
            instructions="",
            count_text=self.counter.count_text,
        )
        try:
            text = self.summarizer.summarize(req)
        except Exception as exc:
            self._events.append(
                {"type": "summarizer.failed", "layer": self.name, "reason": repr(exc)}
            )
            return view, []
        self.summary = text
        self.upto = cut
        new_view = self._view(convo, lead)
        return new_view, self._compacted(view, new_view)


def make_baseline(name: str, policy: Policy) -> BaselineStrategy:
    """A fresh baseline strategy by name (see :data:`BASELINES`)."""
    if name == "none":
        return BaselineStrategy("none", policy)
    if name == "last_n":
        return LastN(policy)
    if name == "observation_mask":
        return ObservationMaskBaseline(policy)
    if name == "summary_at_fraction":
        return SummaryAtFraction(policy)
    raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(BASELINES)}")


def run_baseline(
    name: str,
    messages: Sequence[Mapping[str, Any]],
    policy: Policy,
    *,
    window: int | None = None,
    trace: str = "trace",
) -> TraceResult:
    """Replay ``messages`` with baseline ``name``, measured against ``policy``'s budget."""
    pol = with_window(policy, window)
    strat = make_baseline(name, pol)
    return run_strategy(messages, strat, counter=strat.counter, trace=trace, model=pol.model_name)
