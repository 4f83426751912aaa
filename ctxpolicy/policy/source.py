"""What the policy readers share: source positions and the numbers no field can take.

:class:`SourceMap` (1-based positions by data path) is what both readers, YAML
(:mod:`ctxpolicy.policy.load`) and TOML (:mod:`ctxpolicy.policy.load_toml`), produce;
:class:`OddNumber` is how either reports an integer beyond 64 bits, an infinity or a
NaN (one diagnostic, never an exception).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.policy.diagnostics import Diagnostic, dotted, make

__all__ = [
    "INT_MAX",
    "MAX_DEPTH",
    "ODD_HINT",
    "OddNumber",
    "PathT",
    "Pos",
    "SourceMap",
    "odd_diagnostic",
    "odd_message",
    "odd_number",
    "too_deep",
]

#: Nesting deeper than this is a diagnostic (both readers).
MAX_DEPTH = 64

#: A path in a policy document: mapping keys and list indices (the one definition).
PathT = tuple[str | int, ...]
Pos = tuple[int, int]


@dataclass
class SourceMap:
    """1-based positions of keys and values of a loaded document, by data path."""

    keys: dict[PathT, Pos] = field(default_factory=dict)
    values: dict[PathT, Pos] = field(default_factory=dict)

    def position(self, path: tuple[str | int, ...] | list[str | int]) -> tuple[int, int]:
        """Where the entry at ``path`` starts: its key for mapping entries, the item for
        list items. Unknown paths give the nearest known ancestor; ``(1, 1)`` last."""
        p = tuple(path)
        while True:
            if p in self.keys:
                return self.keys[p]
            if p in self.values:
                return self.values[p]
            if not p:
                return (1, 1)
            p = p[:-1]

    def value_position(self, path: tuple[str | int, ...] | list[str | int]) -> tuple[int, int]:
        """Where the value at ``path`` starts (falls back like :meth:`position`)."""
        p = tuple(path)
        if p in self.values:
            return self.values[p]
        return self.position(p)


#: Integers are 64-bit signed (as in TOML); no policy number comes near.
INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class OddNumber:
    """A number no field can take: an integer beyond 64 bits, infinity or NaN.

    The loaders report it (CTX103 at its line:col) and leave the key out, so it is
    one ordinary diagnostic, never an exception or a 5,000-digit message.
    """

    text: str
    problem: str


def odd_number(value: Any) -> OddNumber | None:
    """An :class:`OddNumber` for a parsed value out of range (TOML), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and abs(value) > INT_MAX:
        digits = len(str(abs(value)))
        return OddNumber(str(digits), f"an integer of {digits} digits is out of range")
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return OddNumber(repr(value), f"{value!r} is not a finite number")
    return None


ODD_HINT = "use a number in the field's range (see docs/policy-reference.md)"


def odd_message(path: PathT, odd: OddNumber) -> str:
    return f"{dotted(path)}: {odd.problem}"


def odd_diagnostic(name: str, pos: Pos, path: PathT, odd: OddNumber) -> Diagnostic:
    """CTX103 at ``pos`` of file ``name``: the number at ``path`` no field can take."""
    return make(name, pos, "CTX103", odd_message(path, odd), ODD_HINT)


def too_deep(name: str, pos: Pos) -> Diagnostic:
    """CTX008 at ``pos`` of file ``name``: nesting deeper than :data:`MAX_DEPTH`."""
    return make(
        name,
        pos,
        "CTX008",
        f"nesting deeper than {MAX_DEPTH} levels",
        "policy files are shallow; flatten the structure",
    )
