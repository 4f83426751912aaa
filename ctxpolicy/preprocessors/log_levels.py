"""``log_levels``: only the log lines at the levels that matter, with counts.

Design B's ``search_logs`` rule: keep the lines whose level is in ``levels``
(default ERROR, WARN, FATAL, CRITICAL), at most the ``last`` (50) of them, each
with its 1-based line number, under a header with the total line count and a
count per level. The level is found by ``pattern`` — a regex whose first group
(or group ``level``) is the level name; by default the first level word in the line
(``ERROR``, ``WARN``/``WARNING``, ``INFO``, ...; single letters are not guessed).
Level names compare case-insensitively; ``WARNING`` counts as ``WARN``.
When no line matches, the header is followed by a head/tail of the text.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import ClassVar

from pydantic import Field, field_validator

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.preprocessors._text import head_tail_chars, never_longer
from ctxpolicy.preprocessors.head_tail import fallback_field

DEFAULT_PATTERN = (
    r"(?i)(?<![A-Za-z0-9_])(FATAL|CRITICAL|CRIT|ERROR|ERR|WARNING|WARN|INFO|NOTICE|DEBUG|TRACE)"
    r"(?![A-Za-z0-9_])"
)
ALIASES = {"WARNING": "WARN", "ERR": "ERROR", "CRIT": "CRITICAL"}


class LogLevelsOptions(ComponentOptions):
    """Options of ``log_levels``."""

    levels: list[str] = Field(
        default_factory=lambda: ["ERROR", "WARN", "FATAL", "CRITICAL"],
        min_length=1,
        description="Levels to keep (case-insensitive; WARNING counts as WARN, ERR as ERROR).",
    )
    last: int = Field(
        default=50, ge=1, description="Keep at most this many (the most recent) lines."
    )
    pattern: str = Field(
        default=DEFAULT_PATTERN,
        description="Regex finding a line's level: group `level` or group 1 is the level name.",
    )
    fallback_chars: int = fallback_field("no line is at a kept level")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            rx = re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        if rx.groups < 1:
            raise ValueError("the pattern needs a group capturing the level name")
        return v


def _norm(level: str) -> str:
    up = level.upper()
    return ALIASES.get(up, up)


class LogLevels(Preprocessor):
    name = "log_levels"
    description = (
        "Only ERROR/WARN/... lines (configurable), the last `last` of them, with counts per level."
    )
    Options = LogLevelsOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "last": TuneRange(low=10, high=200, step=10),
    }

    options: LogLevelsOptions

    def __init__(self, options: ComponentOptions | None = None) -> None:
        super().__init__(options)
        self.regex = re.compile(self.options.pattern)
        self.wanted = {_norm(lv) for lv in self.options.levels}
        self.group: int | str = "level" if "level" in self.regex.groupindex else 1

    def level_of(self, line: str) -> str | None:
        for m in self.regex.finditer(line):
            raw = m.group(self.group)
            if raw:
                return _norm(raw)
        return None

    def process(self, text: str, call: ToolCall | None = None) -> str:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        counts: Counter[str] = Counter()
        kept: list[tuple[int, str]] = []
        for n, line in enumerate(lines, 1):
            lv = self.level_of(line[:4000])
            if lv is None or lv not in self.wanted:
                continue
            counts[lv] += 1
            kept.append((n, line))
        total = len(lines)
        order = [lv for lv in (_norm(x) for x in self.options.levels)]
        per = ", ".join(f"{lv}: {counts.get(lv, 0)}" for lv in dict.fromkeys(order))
        if not kept:
            header = f"[log_levels: {total} lines; none at {'/'.join(dict.fromkeys(order))}]"
            return never_longer(
                text, header + "\n" + head_tail_chars(text, self.options.fallback_chars)
            )
        shown = kept[-self.options.last :]
        more = (
            f"; showing the last {len(shown)} of {len(kept)} matching lines"
            if len(shown) < len(kept)
            else f"; {len(kept)} matching lines"
        )
        header = f"[log_levels: {total} lines; {per}{more}]"
        body = "\n".join(
            f"{n}: {line if len(line) <= 2000 else line[:2000] + '…'}" for n, line in shown
        )
        return never_longer(text, header + "\n" + body)


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(LogLevels)
