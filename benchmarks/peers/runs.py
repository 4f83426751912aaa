"""Every contestant on one trace at one window, measured by one ruler.

A *contestant* is ctxpolicy under a shipped policy (its ``Session`` given the
shared deterministic summary through the ``callable`` summarizer) or a LangChain
peer (:mod:`benchmarks.peers.langchain`). All of them run through
``ctxpolicy.sim.replay.run_strategy`` — the loop ``ctxpolicy simulate`` uses — with
the same exact cl100k counter (:func:`ruler`), so tokens sent, overflows
(> window − reserve_output), pairing violations and fact retention are computed
by the same code for everyone. Two measures are added around the loop:

* **compactions per 100 calls** — model calls at which the context was compacted
  (any layer fired; for LangChain: a summary was written, or the editing middleware
  cleared a tool result it had not cleared in the previous request);
* **prefix changes per 100 calls** — model calls whose request is not an extension
  of the previous request (the previous list of messages is not a prefix of this
  one, compared message by message): the provider's prompt cache is lost.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.peers.catalog import PEERS, build_peer
from benchmarks.peers.summary import ctxpolicy_summary
from ctxpolicy.policy.models import ModelSpec, Policy
from ctxpolicy.sim.metrics import SummaryMeter
from ctxpolicy.sim.replay import PolicyStrategy, run_strategy, with_window
from ctxpolicy.tokens import TokenCounter, get_counter

__all__ = [
    "EXTRACTIVE",
    "Contestant",
    "PrefixWatch",
    "SharedSummaryPolicy",
    "ruler",
    "run_contestant",
]

Message = dict[str, Any]
#: contestant kind: ctxpolicy under a policy with its own summarizer (the extractive
#: one of the shipped policies), not the shared deterministic LLM summary
EXTRACTIVE = "ctxpolicy_extractive"
RULER_SPEC = ModelSpec(context_window=1_000_000, tokenizer=["cl100k_base", "quicktok:cl100k_base"])


def ruler() -> TokenCounter:
    """The exact cl100k_base counter every run is measured with (never the heuristic)."""
    counter = get_counter(RULER_SPEC)
    if counter.approximate or "cl100k_base" not in counter.name:
        raise RuntimeError(f"the ruler must count exactly with cl100k_base, got {counter.name}")
    return counter


@dataclass(frozen=True)
class Contestant:
    """What runs: ``kind`` is ``ctxpolicy`` (with ``policy``) or a LangChain peer name
    (configured to ``policy``'s budget at the window)."""

    label: str
    kind: str
    policy: Policy


class PrefixWatch:
    """Wraps a replay strategy; counts prefix changes between consecutive requests."""

    def __init__(self, inner: Any, *, record: bool = False) -> None:
        self.inner = inner
        self.prefix_changes = 0
        self.calls = 0
        #: every request, when ``record`` (tests look inside them)
        self.requests: list[list[Message]] | None = [] if record else None
        self._previous: list[Message] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        out, layers = self.inner.prepare(convo)
        prev = self._previous
        if prev is not None and (len(out) < len(prev) or out[: len(prev)] != prev):
            self.prefix_changes += 1
        self.calls += 1
        self._previous = list(out)
        if self.requests is not None:
            self.requests.append(self._previous)
        return out, layers


class SharedSummaryPolicy(PolicyStrategy):
    """``PolicyStrategy`` whose ``Session`` writes summaries with ``summarizer``.

    Recalled texts are cached per reference only until the next compaction: an
    append-only history archive keeps one reference whose content grows, so a text
    recalled before a compaction may lack what it archived.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        conv_id: str,
        label: str,
        store: Any,
        summarizer: Callable[..., str],
        meter: SummaryMeter | None = None,
    ) -> None:
        from ctxpolicy import Session
        from ctxpolicy.state.memory import MemoryStateStore

        super().__init__(policy, conv_id=conv_id, label=label, store=store, meter=meter)
        self.session = Session(
            policy,
            conv_id=conv_id,
            on_event=self._events.append,
            snapshot_store=store,
            summarizer=summarizer,
            state_store=MemoryStateStore(),  # each run starts fresh, like simulate's
        )
        self.counter = self.session.counter

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        out, layers = super().prepare(convo)
        if layers:
            self._recalled.clear()
        return out, layers


def _strategy(c: Contestant, window: int, snap_dir: Path, counter: TokenCounter, trace: str) -> Any:
    from ctxpolicy.sim.replay import _safe, _sim_store

    pol = with_window(c.policy, window)
    if c.kind in PEERS:
        strat = build_peer(c.kind, pol, count=counter.count_text)
        strat.label = c.label
        return strat
    if c.kind not in ("ctxpolicy", EXTRACTIVE):
        raise ValueError(f"unknown contestant kind {c.kind!r}")
    # the conversation id shows in snapshot references, so it is the trace's for every
    # contestant (as in ``replay_trace``): no run pays for a longer label
    conv_id = _safe(trace)
    store = _sim_store(pol, snap_dir / conv_id)
    meter = SummaryMeter(counter.count_text)
    if c.kind == EXTRACTIVE:
        return PolicyStrategy(pol, conv_id=conv_id, label=c.label, store=store, meter=meter)
    summarizer = ctxpolicy_summary(counter.count_text, meter)
    return SharedSummaryPolicy(
        pol, conv_id=conv_id, label=c.label, store=store, summarizer=summarizer, meter=meter
    )


def run_contestant(
    messages: Sequence[Mapping[str, Any]],
    contestant: Contestant,
    window: int,
    *,
    trace: str = "trace",
    counter: TokenCounter | None = None,
    record: bool = False,
) -> dict[str, Any]:
    """Replay ``messages`` under ``contestant`` at ``window``; the metrics of
    ``ctxpolicy.sim.metrics.trace_metrics`` plus ``calls``, ``compaction_calls``,
    ``prefix_changes`` and the per-100-calls rates (and, when ``record``, every
    request sent as ``requests``)."""
    counter = counter or ruler()
    tmp = Path(tempfile.mkdtemp(prefix="ctxpolicy-peers-"))
    try:
        watch = PrefixWatch(_strategy(contestant, window, tmp, counter, trace), record=record)
        result = run_strategy(messages, watch, counter=counter, trace=trace)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    d = result.to_dict()
    calls = d["steps"]
    compaction_calls = sum(1 for layers in d["series"]["layers"] if layers)
    d.update(
        kind=contestant.kind,
        run=contestant.label,
        counter=counter.name,
        calls=calls,
        compaction_calls=compaction_calls,
        prefix_changes=watch.prefix_changes,
        compactions_per_100=100 * compaction_calls / calls if calls else 0.0,
        prefix_changes_per_100=100 * watch.prefix_changes / calls if calls else 0.0,
    )
    if hasattr(watch.inner, "summaries"):
        d["summaries_written"] = len(watch.inner.summaries)
    if record:
        d["requests"] = watch.requests
        d["summaries"] = list(getattr(watch.inner, "summaries", ()))
    return d
