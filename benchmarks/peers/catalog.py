"""Every peer of the comparison: its label, the package it needs, how to build it.

Importing this module imports no peer library: :func:`available_peers` finds which
are installed (``importlib.util.find_spec``) and says why the others are skipped, so
the benchmark (and the smoke test, which does not install the ``bench`` extra) runs
the peers it can and prints a reason for the others.
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
PEERS = tuple(LABELS)
#: peer kind -> (module under benchmarks.peers, factory, importable package it drives)
_BUILD = {
    "langchain_summarize": ("langchain", "langchain_peer", "langchain"),
    "langchain_summarize_edit": ("langchain", "langchain_peer", "langchain"),
    "deepagents": ("deepagents", "deepagents_peer", "deepagents"),
    "langmem": ("langmem", "langmem_peer", "langmem"),
}
PACKAGES = {kind: pkg for kind, (_, _, pkg) in _BUILD.items()}
INSTALL_HINT = "pip install -e '.[langchain,bench]'"


def available_peers(kinds: tuple[str, ...] = PEERS) -> tuple[list[str], list[str]]:
    """``(installed kinds, reasons for the skipped ones)``."""
    ok: list[str] = []
    skipped: list[str] = []
    for kind in kinds:
        pkg = PACKAGES[kind]
        if importlib.util.find_spec(pkg) is None:
            skipped.append(
                f"peer {LABELS[kind]} skipped: package {pkg!r} is not installed ({INSTALL_HINT})"
            )
        else:
            ok.append(kind)
    return ok, skipped


def build_peer(kind: str, policy: Any, *, count: Any) -> Any:
    """The replay strategy of peer ``kind`` configured to ``policy``'s budget."""
    module, factory, _ = _BUILD[kind]
    mod = importlib.import_module(f"benchmarks.peers.{module}")
    return getattr(mod, factory)(kind, policy, count=count)
