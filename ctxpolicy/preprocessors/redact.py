"""``redact``: replace secrets (API keys, tokens, private keys, e-mail addresses).

Used two ways:

* as a preprocessor of its own (``tools: {fetch_env: {preprocess: redact}}``),
  with every built-in pattern or a chosen subset, plus your own regexes;
* by :class:`ctxpolicy.engine.tool_results.ToolResultProcessor`, which applies the
  :data:`DEFAULT_KEYS` patterns (``sk-…``, ``AKIA…``, ``ghp_…`` and friends) to
  every tool result before it enters the context, whatever its preprocessor.

Each match becomes ``[REDACTED:<pattern name>]``. The patterns are regexes from
the policy; they are compiled, never executed as code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from pydantic import Field, field_validator

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions

#: name → regex. Bounded quantifiers only (no catastrophic backtracking).
BUILTIN_PATTERNS: dict[str, str] = {
    "openai_key": r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,200}",
    "aws_access_key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "github_token": r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b|\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,200}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}\b",
    "bearer_token": r"\b[Bb](?:earer|EARER)\s+[A-Za-z0-9._~+/=-]{20,500}",
    "private_key": r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]{0,10000}?-----END [A-Z ]{0,40}PRIVATE KEY-----",
    "email": r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}\b",
}

#: Substrings one of which every match of a built-in pattern contains: a text holding
#: none of them is skipped with a C-speed substring scan instead of a regex pass
#: (every tool result goes through :data:`DEFAULT_KEYS`).
HINTS: dict[str, tuple[str, ...]] = {
    "openai_key": ("sk-",),
    "aws_access_key": ("AKIA", "ASIA"),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "slack_token": ("xox",),
    "google_api_key": ("AIza",),
    "bearer_token": ("earer", "EARER"),
    "private_key": ("PRIVATE KEY-----",),
    "email": ("@",),
}

#: Applied to every tool result by default (keys only: e-mails are often wanted).
DEFAULT_KEYS: tuple[str, ...] = ("openai_key", "aws_access_key", "github_token")


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


def _verbatim(text: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement inserting ``text`` as is (no ``\\1`` group expansion)."""
    return lambda _m: text


class Redactor:
    """Compiled patterns applied one after another; :meth:`redact` returns text and counts.

    A built-in pattern (its regex unchanged) runs only on a text containing one of
    its :data:`HINTS`; other patterns always run.
    """

    def __init__(self, patterns: Mapping[str, str], replacement: str = "[REDACTED:{name}]") -> None:
        self.patterns = [(name, re.compile(rx)) for name, rx in patterns.items()]
        self.hints = [
            HINTS.get(name, ()) if BUILTIN_PATTERNS.get(name) == rx else ()
            for name, rx in patterns.items()
        ]
        self.replacement = replacement

    def redact(self, text: str) -> tuple[str, dict[str, int]]:
        counts: dict[str, int] = {}
        if not text:
            return text, counts
        for (name, rx), hints in zip(self.patterns, self.hints, strict=True):
            if hints and not any(h in text for h in hints):
                continue
            repl = self.replacement.replace("{name}", name)
            text, n = rx.subn(_verbatim(repl), text)
            if n:
                counts[name] = n
        return text, counts


_default: Redactor | None = None


def default_redactor() -> Redactor:
    """The redactor applied to every tool result (:data:`DEFAULT_KEYS`)."""
    global _default
    if _default is None:
        _default = Redactor({k: BUILTIN_PATTERNS[k] for k in DEFAULT_KEYS})
    return _default


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
