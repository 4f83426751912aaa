"""Diagnostics: every problem a user sees, with file, line and column.

Codes are stable and documented in docs/diagnostics.md (a test keeps the two in
sync with :data:`CODES`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

Severity = Literal["error", "warning"]

#: code -> (severity, one-line summary). Extended by the checks that emit them.
CODES: dict[str, tuple[Severity, str]] = {}


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem in one file. ``line``/``col`` are 1-based (line 1 col 1 when unknown)."""

    file: str
    line: int
    col: int
    code: str
    severity: Severity
    message: str
    hint: str | None = None

    def format(self) -> str:
        """``path:line:col: CODE message`` (+ an indented hint line)."""
        text = f"{self.file}:{self.line}:{self.col}: {self.code} {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class PolicyError(Exception):
    """A policy could not be loaded; carries every diagnostic found."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics = sorted(diagnostics)
        super().__init__("\n".join(d.format() for d in self.diagnostics) or "invalid policy")
