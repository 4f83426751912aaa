"""ctxpolicy — keep LLM agents inside their context window, by declared policy.

Public API (everything else is private by convention)::

    policy = ctxpolicy.load_policy("policies/agents.yaml", agent="coding_agent")
    session = ctxpolicy.Session(policy, conv_id="run-42")
    text = session.add_tool_result(call, output)
    messages = session.prepare(messages)

Attributes load lazily so that ``ctxpolicy validate`` does not import the engine
or tiktoken.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "load_policy": "ctxpolicy.resolve.load",
    "PolicyError": "ctxpolicy.policy.diagnostics",
    "Diagnostic": "ctxpolicy.policy.diagnostics",
    "Policy": "ctxpolicy.policy.models",
    "Session": "ctxpolicy.engine",
    "prepare": "ctxpolicy.engine",
    "ContextOverflowError": "ctxpolicy.engine",
    "hookimpl": "ctxpolicy.plugins",
    "Layer": "ctxpolicy.components",
    "LayerResult": "ctxpolicy.components",
    "CompactionContext": "ctxpolicy.components",
    "Preprocessor": "ctxpolicy.components",
    "Summarizer": "ctxpolicy.components",
    "SummaryRequest": "ctxpolicy.components",
    "Tokenizer": "ctxpolicy.components",
    "SnapshotStore": "ctxpolicy.components",
    "SnapshotRef": "ctxpolicy.components",
    "StateStore": "ctxpolicy.components",
    "StoredState": "ctxpolicy.components",
    "StateConflict": "ctxpolicy.components",
    "ToolCall": "ctxpolicy.components",
    "ComponentOptions": "ctxpolicy.components",
    "Unit": "ctxpolicy.conversation",
    "TokenCounter": "ctxpolicy.tokens",
}

__all__ = [
    "CompactionContext",
    "ComponentOptions",
    "ContextOverflowError",
    "Diagnostic",
    "Layer",
    "LayerResult",
    "Policy",
    "PolicyError",
    "Preprocessor",
    "Session",
    "SnapshotRef",
    "SnapshotStore",
    "StateConflict",
    "StateStore",
    "StoredState",
    "Summarizer",
    "SummaryRequest",
    "TokenCounter",
    "Tokenizer",
    "ToolCall",
    "Unit",
    "__version__",
    "hookimpl",
    "load_policy",
    "prepare",
]

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.components import (
        CompactionContext,
        ComponentOptions,
        Layer,
        LayerResult,
        Preprocessor,
        SnapshotRef,
        SnapshotStore,
        StateConflict,
        StateStore,
        StoredState,
        Summarizer,
        SummaryRequest,
        Tokenizer,
        ToolCall,
    )
    from ctxpolicy.conversation import Unit
    from ctxpolicy.engine import ContextOverflowError, Session, prepare
    from ctxpolicy.plugins import hookimpl
    from ctxpolicy.policy.diagnostics import Diagnostic, PolicyError
    from ctxpolicy.policy.models import Policy
    from ctxpolicy.resolve.load import load_policy
    from ctxpolicy.tokens import TokenCounter


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'ctxpolicy' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
