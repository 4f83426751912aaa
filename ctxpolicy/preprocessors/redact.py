"""``redact``: replace secrets (API keys, tokens, private keys, e-mail addresses).

Used two ways:

* as a preprocessor of its own (``tools: {fetch_env: {preprocess: redact}}``),
  with every built-in pattern or a chosen subset, plus your own regexes;
* by the host, which applies the :data:`DEFAULT_KEYS` patterns (``sk-…``, ``AKIA…``,
  ``ghp_…`` and friends) to every tool result before it enters the context,
  whatever its preprocessor: that redaction lives in :mod:`ctxpolicy.conversation.redact`
  (its names are importable from here for one release).

Each match becomes ``[REDACTED:<pattern name>]``. The patterns are regexes from
the policy; they are compiled, never executed as code.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.conversation.redact import (
    BUILTIN_PATTERNS,
    Redactor,
)
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions

__all__ = ["Redact", "RedactOptions"]


class RedactOptions(ComponentOptions):
    """Options of ``redact``."""

    builtin: list[str] = Field(
        default_factory=lambda: list(BUILTIN_PATTERNS),
        description="Built-in patterns to apply: " + ", ".join(BUILTIN_PATTERNS) + ".",
    )
    patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Extra patterns, name → regular expression (Python `re` syntax).",
    )
    replacement: str = Field(
        default="[REDACTED:{name}]",
        max_length=64,
        description="Replacement text; `{name}` is the pattern's name.",
    )

    @field_validator("builtin")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [n for n in v if n not in BUILTIN_PATTERNS]
        if unknown:
            raise ValueError(
                f"unknown built-in pattern(s) {unknown}; known: {sorted(BUILTIN_PATTERNS)}"
            )
        return v

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, v: dict[str, str]) -> dict[str, str]:
        for name, rx in v.items():
            try:
                re.compile(rx)
            except re.error as exc:
                raise ValueError(f"pattern {name!r} is not a valid regex: {exc}") from exc
        return v


class Redact(Preprocessor):
    name = "redact"
    description = (
        "Replace API keys, tokens, private keys and e-mail addresses (patterns configurable)."
    )
    Options = RedactOptions

    options: RedactOptions

    def __init__(self, options: ComponentOptions | None = None) -> None:
        super().__init__(options)
        pats = {n: BUILTIN_PATTERNS[n] for n in self.options.builtin}
        pats.update(self.options.patterns)
        self.redactor = Redactor(pats, self.options.replacement)

    def process(self, text: str, call: ToolCall | None = None) -> str:
        return self.redactor.redact(text)[0]


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(Redact)
