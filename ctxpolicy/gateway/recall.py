"""``--recall``: the gateway offers ``ctx_recall``/``ctx_search`` and answers them itself.

When every tool call of an answer is one of these, the call driver
(:class:`ctxpolicy.calls.CallDriver`) runs them against the conversation's snapshots
(only this conversation's: the session's own store and id), appends the call and its
results, and calls the upstream again — at most ``--recall-rounds`` times per request. A
client that knows nothing of ctxpolicy gets the model's next real answer. This module
only says which tools the gateway offers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.calls.driver import RECALL_NAMES

__all__ = ["RECALL_NAMES", "openai_tools", "with_tools"]


def openai_tools() -> list[dict[str, Any]]:
    from ctxpolicy.snapshots.recall import recall_tools

    return recall_tools()


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
