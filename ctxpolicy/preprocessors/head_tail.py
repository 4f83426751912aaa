"""``head_tail``: keep the start and the end of a result (the default preprocessor).

Design B's default: results over ``max_chars`` (3000) keep their first and last
halves with a marker saying how many characters were left out. ``max_tokens``
budgets by an estimated token count instead (script-aware, no tokenizer import).
``outline`` keeps up to that many definition lines of the omitted part (numbered)
after the marker, so an agent reading a long source file still sees what is in it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.conversation.cut import estimate_tokens
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.preprocessors._text import (
    OUTLINE_DESCRIPTION,
    cut_middle,
    head_tail_chars,
    tokens_to_chars,
)

#: Characters a head/tail keeps unless told otherwise: ``head_tail``'s ``max_chars``
#: and the ``fallback_chars`` of the preprocessors that fall back to a head/tail.
DEFAULT_CHARS = 3000


def fallback_field(when: str) -> Any:
    """The ``fallback_chars`` option of a preprocessor that keeps a head/tail of the
    text ``when`` (its format is not recognised)."""
    return Field(default=DEFAULT_CHARS, ge=0, description=f"Head/tail kept when {when}.")


class HeadTailOptions(ComponentOptions):
    """Options of ``head_tail``."""

    max_chars: int = Field(
        default=DEFAULT_CHARS, ge=0, description="Characters kept in total (half head, half tail)."
    )
    max_tokens: int | None = Field(
        default=None,
        ge=0,
        description="If set, budget by estimated tokens instead of characters "
        "(half head, half tail); `max_chars` is then ignored.",
    )
    outline: int = Field(default=0, ge=0, description=OUTLINE_DESCRIPTION)


class HeadTail(Preprocessor):
    name = "head_tail"
    description = "First and last part of the result, by characters (max_chars) or tokens."
    Options = HeadTailOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "max_chars": TuneRange(low=500, high=12000, log=True),
    }

    options: HeadTailOptions

    def process(self, text: str, call: ToolCall | None = None) -> str:
        opts = self.options
        if opts.max_tokens is None:
            return head_tail_chars(text, opts.max_chars, opts.outline)
        if estimate_tokens(text) <= opts.max_tokens:
            return text
        head_n = tokens_to_chars(text, opts.max_tokens - opts.max_tokens // 2)
        tail_n = tokens_to_chars(text[head_n:], opts.max_tokens // 2, from_end=True)
        return cut_middle(text, head_n, tail_n, opts.outline)


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(HeadTail)
