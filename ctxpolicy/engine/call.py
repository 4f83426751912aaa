"""What one ``prepare`` call carries through the pipeline, the squeeze and the report.

``Session.prepare`` makes one :class:`Call` once the conversation's view is known:
the view and its tokens (changed by each layer that is taken and by the squeeze), the
budget in force, the count of a candidate view, whether the call is the reactive
path, and the numbers its ``context.status`` reports. "Is this call done?" is decided
in one place, :meth:`Call.at_target`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxpolicy.budget import BudgetState
from ctxpolicy.conversation import Unit

__all__ = ["Call", "Count"]

#: Tokens of a candidate view as the request would send it (calibrated, tools included).
Count = Callable[[Sequence[Unit]], int]


@dataclass(eq=False)
class Call:
    """One ``prepare`` call (see the module docstring)."""

    #: the units to send
    view: list[Unit]
    #: their tokens (``count(view)``)
    used: int
    budget: BudgetState
    count: Count
    #: the reactive path (``on_error``): ``on_overflow`` runs, the pipeline does not
    forced: bool
    #: tokens when the call started: its entry state decides which layers may run
    entry_used: int
    #: ``time.perf_counter()`` when the call started
    started: float
    #: messages in the input (messages of ours fed back left out) and their tokens
    messages_in: int = 0
    tokens_in: int = 0
    #: the last layer that changed the view (``"squeeze"`` for the last resort)
    compact_layer: str | None = None
    #: the view is not the conversation as decided before this call
    changed: bool = False
    #: set once the list to send is final: its messages and its uncalibrated tokens
    messages: int = 0
    used_raw: int = 0

    @property
    def hard_limit(self) -> int:
        """What a request may hold: ``window − reserve_output``."""
        return self.budget.window - self.budget.reserve_output

    def at_target(self) -> bool:
        """The view is at or below the budget's target: no layer needs to run."""
        return self.used <= self.budget.target
