"""A trace with what every replay of it computes the same way, computed once.

A replay's work splits in two: what the policy decides (the engine's ``prepare`` and
tool-result path, the text sent, its tokens) and what depends on the trace alone.
The second part is the retention ruler's side: which facts each assistant message
reuses from earlier messages, and which of them are *far* (absent from the 6
messages before the call) — :meth:`ctxpolicy.sim.rulers.RetentionRuler.facts_of`,
a regex pass over every message and a search of the history per fact. ``tune``
replays the same traces under every candidate, so it computes that once per trace
(:func:`prepare_trace`) and gives the replay the :class:`PreparedTrace`
(:func:`ctxpolicy.sim.replay.replay_trace` accepts one wherever it accepts messages).
A replay of a prepared trace gives exactly the metrics of a replay of its messages.

The facts travel with the messages they were computed from (one immutable object):
a replay can never use another trace's facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxpolicy.sim.rulers import RetentionRuler

__all__ = ["PreparedTrace", "prepare_trace", "ruler_plan"]

#: message index → the ruler's ``((fact, far), ...)`` for that assistant message
RulerPlan = Mapping[int, tuple[tuple[str, bool], ...]]


@dataclass(frozen=True)
class PreparedTrace:
    """The messages of one trace and the ruler's facts per assistant message.

    Read-only by contract: the messages must not be changed after preparing (the
    replay loop never changes them; it copies what it appends).
    """

    messages: Sequence[Mapping[str, Any]]
    #: message index of each assistant message measured → its ``((fact, far), ...)``
    ruler: RulerPlan

    def __len__(self) -> int:
        return len(self.messages)


def ruler_plan(messages: Sequence[Mapping[str, Any]]) -> dict[int, tuple[tuple[str, bool], ...]]:
    """What the replay loop's ruler finds for each assistant message after the first
    message: the same calls in the same order as :func:`ctxpolicy.sim.replay.run_strategy`
    makes them (``facts_of`` before the message is added, ``add`` after)."""
    ruler = RetentionRuler()
    plan: dict[int, tuple[tuple[str, bool], ...]] = {}
    for index, m in enumerate(messages):
        if index and m.get("role") == "assistant":
            plan[index] = ruler.facts_of(m)
        ruler.add(m)
    return plan


def prepare_trace(messages: Sequence[Mapping[str, Any]]) -> PreparedTrace:
    """``messages`` with their ruler plan (one pass of the ruler over the trace)."""
    msgs = list(messages)
    return PreparedTrace(messages=msgs, ruler=ruler_plan(msgs))
