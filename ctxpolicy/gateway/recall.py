"""``--recall``: the gateway offers ``ctx_recall``/``ctx_search`` and answers them itself.

When every tool call of an answer is one of these, the gateway runs them against the
conversation's snapshots (only this conversation's: the session's own store and id),
appends the call and its results, and calls the upstream again — at most
``max_rounds`` times per request. A client that knows nothing of ctxpolicy gets the
model's next real answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.wire import WIRES

__all__ = ["RECALL_NAMES", "anthropic_tools", "is_recall_only", "openai_tools", "with_tools"]

RECALL_NAMES = frozenset({"ctx_recall", "ctx_search"})


def openai_tools() -> list[dict[str, Any]]:
    from ctxpolicy.snapshots.recall import recall_tools

    return recall_tools()


def anthropic_tools() -> list[dict[str, Any]]:
    return WIRES["anthropic"].tools(openai_tools())


def _tool_name(t: Mapping[str, Any]) -> str:
    fn = t.get("function")
    if isinstance(fn, Mapping):
        return str(fn.get("name", ""))
    return str(t.get("name", ""))


def with_tools(tools: Any, extra: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The client's tools plus the recall tools it does not define itself."""
    have = [t for t in tools if isinstance(t, Mapping)] if isinstance(tools, list) else []
    names = {_tool_name(t) for t in have}
    return list(have) + [dict(t) for t in extra if _tool_name(t) not in names]


def is_recall_only(names: Sequence[str]) -> bool:
    return bool(names) and all(n in RECALL_NAMES for n in names)
