"""Every peer of the comparison: its label, the package it needs, how to build it.

Importing this module imports no peer library: :func:`available_peers` finds which
are installed and says why the others are skipped, so the benchmark (and the smoke
test, which does not install the ``bench`` extra) runs the peers it can.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__all__ = ["INSTALL_HINT", "LABELS", "PACKAGES", "PEERS", "available_peers", "build_peer"]

#: peer kind -> label in the tables
LABELS = {
    "langchain_summarize": "LangChain SummarizationMiddleware",
    "langchain_summarize_edit": "LangChain Summarization + ContextEditing(ClearToolUsesEdit)",
    "deepagents": "deepagents (create_deep_agent's summarization + filesystem eviction)",
    "langmem": "langmem summarize_messages (running summary)",
}
#: peer kind -> its strategy: ``module:class``, the module under benchmarks.peers
#: named after the package it drives
_STRATEGIES = {
    "langchain_summarize": "langchain:LangChainStrategy",
    "langchain_summarize_edit": "langchain:LangChainStrategy",
    "deepagents": "deepagents:DeepAgentsStrategy",
    "langmem": "langmem:LangMemStrategy",
}
PEERS = tuple(LABELS)
PACKAGES = {kind: strategy.split(":")[0] for kind, strategy in _STRATEGIES.items()}
INSTALL_HINT = "pip install -e '.[langchain,bench]'"


def available_peers(kinds: tuple[str, ...] = PEERS) -> tuple[list[str], list[str]]:
    """``(installed kinds, reasons for the skipped ones)``."""
    ok = [k for k in kinds if importlib.util.find_spec(PACKAGES[k]) is not None]
    skipped = [
        f"peer {LABELS[k]} skipped: package {PACKAGES[k]!r} is not installed ({INSTALL_HINT})"
        for k in kinds
        if k not in ok
    ]
    return ok, skipped


def build_peer(kind: str, policy: Any, *, count: Any) -> Any:
    """The replay strategy of peer ``kind`` configured to ``policy``'s budget; ``count``
    is the ruler's exact ``count_text``, used by the deterministic summary only."""
    module, cls = _STRATEGIES[kind].split(":")
    mod = importlib.import_module(f"benchmarks.peers.{module}")
    return getattr(mod, cls)(kind, policy, count=count)
