"""``head_tail_lines``: long files keep their first and last lines, numbered.

Design B's ``read_file`` rule: a result of more than ``min_lines`` (200) lines keeps
its first and last ``lines`` (50) lines, each prefixed with its 1-based line number
(``"12: text"``), and a marker ``... [lines 51-950 omitted (900 of 1000 lines)] ...``
so the agent can ask for exactly that range with ``ctx_recall``.

``max_lines`` (design B's ``read_file.max_lines``), when set, replaces
``min_lines`` as the threshold, and the kept head and tail never exceed it together.
Results at or below the threshold are returned unchanged (no numbers added), and a
result whose lines already carry numbers (``cat -n``, an editor's file view) keeps
those instead of getting a second set.
``outline`` keeps up to that many definition lines of the omitted range (numbered)
after the marker.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.preprocessors._text import (
    OUTLINE_DESCRIPTION,
    already_numbered,
    never_longer,
    number_lines,
    omitted_lines_marker,
    outline,
    own_line_number,
)


class HeadTailLinesOptions(ComponentOptions):
    """Options of ``head_tail_lines``."""

    lines: int = Field(default=50, ge=0, description="Lines kept at the start and at the end.")
    min_lines: int = Field(
        default=200, ge=0, description="Results with more lines than this are cut."
    )
    max_lines: int | None = Field(
        default=None,
        ge=1,
        description="`read_file.max_lines` of a `CompressionConfig`: when set, the threshold instead of "
        "`min_lines`, and an upper bound on the lines kept.",
    )
    outline: int = Field(default=0, ge=0, description=OUTLINE_DESCRIPTION)


class HeadTailLines(Preprocessor):
    name = "head_tail_lines"
    description = (
        "Files over min_lines keep first/last `lines` lines, numbered, with the omitted range."
    )
    Options = HeadTailLinesOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "lines": TuneRange(low=10, high=120, step=5),
    }

    options: HeadTailLinesOptions

    def process(self, text: str, call: ToolCall | None = None) -> str:
        opts = self.options
        threshold = opts.max_lines if opts.max_lines is not None else opts.min_lines
        lines = text.split("\n")
        trailing_newline = len(lines) > 1 and lines[-1] == ""
        if trailing_newline:
            lines.pop()
        total = len(lines)
        if total <= threshold:
            return text
        keep = opts.lines
        if opts.max_lines is not None:
            keep = min(keep, opts.max_lines // 2)
        keep = min(keep, total // 2)
        head = lines[:keep]
        tail_start = total - keep
        tail = lines[tail_start:] if keep else []
        first_omitted, last_omitted = keep + 1, tail_start
        # a result numbered by the tool (`cat -n`, an editor's view) keeps its numbers,
        # and the marker names the omitted range in them
        own = already_numbered(lines)
        shown_total: int | None = total
        if own:
            a, b = own_line_number(lines[keep]), own_line_number(lines[tail_start - 1])
            if a is not None and b is not None and a <= b:
                first_omitted, last_omitted, shown_total = a, b, None
        parts = list(head) if own else number_lines(head, 1)
        parts.append(omitted_lines_marker(first_omitted, last_omitted, shown_total))
        parts.extend(outline(lines[keep:tail_start], first_omitted, opts.outline))
        parts.extend(tail if own else number_lines(tail, tail_start + 1))
        return never_longer(text, "\n".join(parts))


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(HeadTailLines)
