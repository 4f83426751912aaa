"""Secret redaction the host applies whatever the policy says.

Every tool result passes through :func:`default_redactor` (the :data:`DEFAULT_KEYS`
patterns: ``sk-…``, ``AKIA…``, ``ghp_…`` and friends) before it enters the context
(:class:`ctxpolicy.engine.tool_results.ToolResultProcessor`), and so does every
answer of the recall tool; the event export (:func:`ctxpolicy.events.sinks.redact_text`)
applies every built-in pattern. The ``redact`` preprocessor
(:mod:`ctxpolicy.preprocessors.redact`) is built on the same :class:`Redactor`.

Each match becomes ``[REDACTED:<pattern name>]``. The patterns are regexes from
the policy or from here; they are compiled, never executed as code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

__all__ = ["BUILTIN_PATTERNS", "DEFAULT_KEYS", "HINTS", "Redactor", "default_redactor"]

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


def _verbatim(text: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement inserting ``text`` as is (no ``\\1`` group expansion)."""
    return lambda _m: text


class Redactor:
    """Compiled patterns applied one after another; :meth:`redact` returns text and counts.

    A built-in pattern (its regex unchanged) runs only on a text containing one of
    its :data:`HINTS`; other patterns always run. The hints are looked for only in a
    text that has a punctuation character they all have (:func:`_sign`), and hints
    that share a substring (the ``gh`` of ``ghp_``, ``gho_``…, the ``IA`` of ``AKIA``
    and ``ASIA``) only in a text that has it: one scan instead of one a hint.
    """

    def __init__(self, patterns: Mapping[str, str], replacement: str = "[REDACTED:{name}]") -> None:
        self.patterns = [(name, re.compile(rx)) for name, rx in patterns.items()]
        self.hints = [
            HINTS.get(name, ()) if BUILTIN_PATTERNS.get(name) == rx else ()
            for name, rx in patterns.items()
        ]
        self.replacement = replacement
        self._plan = [
            (
                name,
                rx,
                _verbatim(replacement.replace("{name}", name)),
                _sign(hints),
                _gates(hints),
            )
            for (name, rx), hints in zip(self.patterns, self.hints, strict=True)
        ]

    def redact(self, text: str) -> tuple[str, dict[str, int]]:
        counts: dict[str, int] = {}
        if not text:
            return text, counts
        for name, rx, repl, sign, gates in self._plan:
            if gates and ((sign and sign not in text) or not _holds_one(text, gates)):
                continue
            text, n = rx.subn(repl, text)
            if n:
                counts[name] = n
        return text, counts


Gates = tuple[tuple[str, re.Pattern[str] | None], ...]


def _holds_one(text: str, gates: Gates) -> bool:
    """Whether ``text`` contains one of the hints grouped in ``gates`` (:func:`_gates`)."""
    for gate, members in gates:
        if gate in text and (members is None or members.search(text) is not None):
            return True
    return False


#: Upper-case letters, the rarest in English text first.
_RARE_FIRST = "ZQJXKVBPGWYFMCULDHRSNIOATE"


def _sign(hints: tuple[str, ...]) -> str:
    """A character every hint has, looked for first (a ``memchr``: several times
    cheaper than a substring search, and tool output often lacks it): punctuation
    (``-`` of ``sk-``, ``_`` of the GitHub prefixes), else the rarest upper-case letter
    (``I`` of ``AKIA``/``ASIA``); ``""`` when they share neither."""
    if not hints:
        return ""
    common = set(hints[0]).intersection(*hints[1:])
    for ch in hints[0]:
        if ch in common and not ch.isalnum() and not ch.isspace():
            return ch
    for ch in _RARE_FIRST:
        if ch in common:
            return ch
    return ""


def _gates(hints: tuple[str, ...]) -> Gates:
    """``hints`` grouped by a shared substring of 2 characters or more: ``(gate,
    members)`` pairs, where a text holds a member only if it holds the gate, and
    ``members`` finds any of them in one pass (an alternation of the literal hints);
    a hint alone is its own gate (``members`` None)."""
    return tuple(
        (gate, None if members == (gate,) else re.compile("|".join(map(re.escape, members))))
        for gate, members in _groups(hints)
    )


def _groups(hints: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``hints`` grouped by a shared substring of 2 characters or more (the one most
    of them share, the longest of those): ``(gate, members)`` pairs."""
    rest = list(hints)
    groups: list[tuple[str, tuple[str, ...]]] = []
    while rest:
        best, members = rest[0], [rest[0]]
        for hint in rest:
            for size in range(len(hint), 1, -1):
                for start in range(len(hint) - size + 1):
                    piece = hint[start : start + size]
                    have = [h for h in rest if piece in h]
                    if len(have) > len(members) or (
                        len(have) == len(members) > 1 and len(piece) > len(best)
                    ):
                        best, members = piece, have
        groups.append((best, tuple(members)))
        rest = [h for h in rest if h not in members]
    return tuple(groups)


_default: Redactor | None = None


def default_redactor() -> Redactor:
    """The redactor applied to every tool result (:data:`DEFAULT_KEYS`)."""
    global _default
    if _default is None:
        _default = Redactor({k: BUILTIN_PATTERNS[k] for k in DEFAULT_KEYS})
    return _default
