"""The scalar types a policy is written in: the context states (ordered by how full
the context is) and token amounts (an integer, or a percentage of the window), with
:func:`resolve_amount` turning an amount into tokens. Used by the models
(:mod:`ctxpolicy.policy.models`), the budget arithmetic and the engine.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

PERCENT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


class State(StrEnum):
    """Context states, ordered by how full the context is."""

    normal = "normal"
    warning = "warning"
    error = "error"
    critical = "critical"
    overflow = "overflow"

    @property
    def rank(self) -> int:
        return _STATE_ORDER[self]

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return self.rank >= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return self.rank > other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return self.rank <= other.rank

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, State):
            return NotImplemented
        return self.rank < other.rank


_STATE_ORDER = {s: i for i, s in enumerate(State)}

#: A layer can be asked to run from any state but ``overflow`` (that is ``on_overflow``).
TriggerState = Literal["normal", "warning", "error", "critical"]

Percent = Annotated[
    str,
    Field(
        pattern=r"^\s*\d+(\.\d+)?\s*%\s*$",
        description='A share of the context window, e.g. "25%".',
    ),
]
#: Tokens as a non-negative integer, or a percentage of the window.
Amount = Annotated[int, Field(ge=0)] | Percent


def resolve_amount(value: int | str, window: int) -> int:
    """Turn an :data:`Amount` into tokens for a given window (floor)."""
    if isinstance(value, int):
        return value
    m = PERCENT_RE.match(value)
    if m is None:  # pragma: no cover - rejected by validation
        raise ValueError(f"not an amount: {value!r}")
    return int(window * float(m.group(1)) / 100.0)
