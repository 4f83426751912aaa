"""What the engine modules get instead of a :class:`~ctxpolicy.engine.Session`.

A session is a thin public facade over one :class:`EngineContext`: the policy and
the components it resolved (registry, token counter, snapshot store), the event
function, the persisted :class:`~ctxpolicy.engine.state.SessionState` (``state``,
replaced as a whole on a resume) and the rebuildable
:class:`~ctxpolicy.engine.derived.Derived` (``derived``, emptied by one ``reset``).
Engine modules (pipeline, squeeze, archiving, refs, window, persistence, handover)
read and change only these public fields and methods — never a session's privates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.budget import BudgetState, ToolGrowthEstimator, compute_budget, effective_window
from ctxpolicy.components import Layer, SnapshotStore, Summarizer
from ctxpolicy.conversation import Unit
from ctxpolicy.engine.derived import Derived
from ctxpolicy.engine.ledger import RECALL_TOOL, ProgressLedger, tool_names
from ctxpolicy.engine.own import HANDOVER_MARK, LEDGER_MARK, special_unit
from ctxpolicy.engine.state import SessionState
from ctxpolicy.engine.stored import bounded_problems, verify_learned_window, window_bounds
from ctxpolicy.engine.window import policy_with_window, scaled_growth
from ctxpolicy.events.types import StateInvalid
from ctxpolicy.plugins import Registry
from ctxpolicy.policy.models import Policy, ResolvedStep
from ctxpolicy.policy.scalars import resolve_amount
from ctxpolicy.tokens import TokenCounter

__all__ = ["Emit", "EngineContext"]

#: ``emit(event)`` (an :class:`ctxpolicy.events.types.Event`) or ``emit(type, **fields)``
#: → the event as sent (``conv_id`` and ``ts`` added).
Emit = Callable[..., dict[str, Any]]


@dataclass(eq=False)
class EngineContext:
    """One conversation's engine: configuration, persisted state, derived caches."""

    policy: Policy
    conv_id: str
    registry: Registry
    counter: TokenCounter
    emit: Emit
    #: the snapshot store (None: snapshots disabled or unavailable)
    snapshots: SnapshotStore | None = None
    #: a summarizer given to the session, used instead of the policy's
    summarizer_override: Summarizer | None = None
    state: SessionState = field(init=False)
    derived: Derived = field(init=False)

    def __post_init__(self) -> None:
        self.state = self.new_state()
        self.derived = Derived(self)

    # ------------------------------------------------------------------ state
    @property
    def ledger(self) -> ProgressLedger | None:
        """The progress ledger (persisted in :attr:`state`)."""
        return self.state.ledger

    def new_ledger(self) -> ProgressLedger | None:
        """The empty ledger a new conversation of this policy starts with."""
        if not self.policy.ledger.enabled:
            return None
        window = effective_window(self.policy)
        return ProgressLedger(
            max_tokens=max(64, resolve_amount(self.policy.ledger.max_tokens, window)),
            constraints=tuple(self.policy.constraints),
            count_text=self.counter.count_text,
        )

    def new_state(self) -> SessionState:
        """The state of a new conversation (fresh ledger and growth samples)."""
        return SessionState(ledger=self.new_ledger(), growth=ToolGrowthEstimator(self.policy))

    def restore(self, entries: Mapping[str, Any]) -> None:
        """Put the conversation exactly into a stored state; every derived cache is
        dropped (the next ``prepare`` rebuilds them from the messages)."""
        self.state = SessionState.from_entries(
            entries,
            ledger=self.new_ledger(),
            growth=ToolGrowthEstimator(self.policy),
            count_text=self.counter.count_text,
            bounds=window_bounds(self.policy),
        )
        self.derived.reset()
        for problem in bounded_problems(self.state.problems):
            self.emit(StateInvalid(key=problem.key, reason=problem.reason))

    def sync_ledger(
        self,
        before: Sequence[Unit],
        after: Sequence[Unit],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> None:
        """After a compaction was taken: the ledger keeps the small results a layer
        shortened, leaves out what the rest of the prompt says, and names the recall
        tool only when ``tools`` (what the model is offered) has it."""
        if self.ledger is not None and self.ledger.sync(
            before, after, recall=RECALL_TOOL in tool_names(tools)
        ):
            self.ledger_changed()

    def ledger_changed(self) -> None:
        """Record a change of the ledger (re-rendered, saved with the next commit)."""
        if self.ledger is not None:
            self.derived.ledger_text = self.ledger.render()
            self.state.touch("ledger")

    # ------------------------------------------------------------------ budget
    def budget(self) -> BudgetState:
        """The budget in force now (learned tool growth and learned window included)."""
        if self.state.window_unverified:
            verify_learned_window(self)
        growth = self.state.growth.estimate() if self.state.growth is not None else 0
        learned = self.state.learned_window
        key = (growth, learned)
        budgets = self.derived.budgets
        b = budgets.get(key)
        if b is None:
            b = compute_budget(self.policy, tool_growth=growth)
            if learned is not None and learned < b.window:
                g = scaled_growth(growth, learned, b.window)
                b = compute_budget(policy_with_window(self.policy, learned, b), tool_growth=g)
            if len(budgets) > 64:
                budgets.clear()
            budgets[key] = b
        return b

    # ------------------------------------------------------------------ components
    def summarizer(self, name: str, options: Mapping[str, Any]) -> Summarizer:
        """The summarizer ``name`` with ``options`` (one instance per distinct options),
        or the session's own summarizer when one was given
        (``CompactionContext.summarizer``)."""
        if self.summarizer_override is not None:
            return self.summarizer_override
        okey = (name, repr(sorted(options.items())))
        cache = self.derived.summarizers
        s = cache.get(okey)
        if s is None:
            made = self.registry.create("summarizer", name, options)
            assert isinstance(made, Summarizer)
            cache[okey] = s = made
        return s

    def layer(self, step: ResolvedStep, index: int) -> Layer:
        """The layer instance of pipeline step ``index`` (``-1``: ``on_overflow``)."""
        key = (step.layer, index)
        layers = self.derived.layers
        layer = layers.get(key)
        if layer is None:
            made = self.registry.create("layer", step.layer, step.options)
            assert isinstance(made, Layer)
            layers[key] = layer = made
        return layer

    # ------------------------------------------------------------------ own messages
    def adopted(self) -> tuple[str | None, str | None]:
        """Ledger and handover texts of ours found in the input that this conversation
        does not hold (the agent restarted with the prepared list as its history and no
        state to resume): re-adopted verbatim, so their facts and archive reference
        stay in the context instead of being stripped."""
        ledger = handover = None
        for kind, text in self.derived.caches.own_messages:
            if kind == "ledger" and not self.ledger and text != self.derived.ledger_text:
                ledger = text
            elif kind == "handover" and self.state.handover_text is None:
                handover = text
        return ledger, handover

    def special_units(self) -> list[Unit]:
        """The pinned handover and ledger messages (system role, marked)."""
        adopted, handover = self.adopted()
        texts = (self.state.handover_text or handover, adopted or self.derived.ledger_text)
        made = self.derived.specials
        if made is None or made[0] != texts:  # the same texts: the same (frozen) units
            parts = (("handover", HANDOVER_MARK, texts[0]), ("ledger", LEDGER_MARK, texts[1]))
            units = [special_unit(key, mark, text) for key, mark, text in parts if text]
            made = self.derived.specials = (texts, units)
        return list(made[1])
