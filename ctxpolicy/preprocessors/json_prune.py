"""``json_prune``: large JSON made small, still valid JSON, same shape.

Long arrays keep their first ``max_array_items`` items followed by one string item
``"… 990 more items"``; long strings are cut to ``max_string_chars`` with
``"… [+N chars]"``; containers deeper than ``max_depth`` become a string such as
``"{… 12 keys}"`` / ``"[… 40 items]"``. Object keys are all kept (they carry the
structure). Output is compact JSON (``ensure_ascii=False``). Text that is not JSON
(or a JSON scalar) is handled like ``head_tail`` with ``fallback_chars``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import Field

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.preprocessors._text import head_tail_chars, never_longer
from ctxpolicy.preprocessors.head_tail import fallback_field


class JsonPruneOptions(ComponentOptions):
    """Options of ``json_prune``."""

    max_array_items: int = Field(default=10, ge=0, description="Items kept per array.")
    max_string_chars: int = Field(default=200, ge=0, description="Characters kept per string.")
    max_depth: int | None = Field(
        default=None, ge=1, description="Containers nested deeper are replaced by a count."
    )
    fallback_chars: int = fallback_field("the text is not JSON")


def prune(value: Any, opts: JsonPruneOptions, depth: int = 1) -> Any:
    if isinstance(value, str):
        n = opts.max_string_chars
        if len(value) > n + 16:
            return value[:n] + f"… [+{len(value) - n} chars]"
        return value
    if isinstance(value, dict):
        if opts.max_depth is not None and depth > opts.max_depth and value:
            return f"{{… {len(value)} keys}}"
        return {k: prune(v, opts, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        if opts.max_depth is not None and depth > opts.max_depth and value:
            return f"[… {len(value)} items]"
        keep = opts.max_array_items
        items = [prune(v, opts, depth + 1) for v in value[:keep]]
        if len(value) > keep:
            items.append(f"… {len(value) - keep} more items")
        return items
    return value


class JsonPrune(Preprocessor):
    name = "json_prune"
    description = "Structure-preserving prune of large JSON (arrays and strings cut with counts)."
    Options = JsonPruneOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "max_array_items": TuneRange(low=2, high=50),
        "max_string_chars": TuneRange(low=50, high=1000, step=50),
    }

    options: JsonPruneOptions

    def process(self, text: str, call: ToolCall | None = None) -> str:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return head_tail_chars(text, self.options.fallback_chars)
        if not isinstance(data, (dict, list)):
            return head_tail_chars(text, self.options.fallback_chars)
        try:
            out = json.dumps(prune(data, self.options), ensure_ascii=False)
        except RecursionError:
            return head_tail_chars(text, self.options.fallback_chars)
        return never_longer(text, out)


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(JsonPrune)
