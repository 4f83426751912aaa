"""Old import paths of modules that moved in 0.2, kept for one release.

``import ctxpolicy.store_names`` (and every other old path below) still works and
gives the module at its new home — the very same module object, so monkeypatching
either name patches both — with a :class:`DeprecationWarning` naming the new path.
Nothing here is imported eagerly: a finder on ``sys.meta_path`` answers only for
these names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: old dotted name -> new dotted name (removed in the release after 0.2)
MOVED: dict[str, str] = {
    "ctxpolicy.fsspec_store": "ctxpolicy.snapshots.fsspec_store",
    "ctxpolicy.snapshot_doc": "ctxpolicy.snapshots.document",
    "ctxpolicy.store_names": "ctxpolicy.snapshots.names",
    "ctxpolicy.retention": "ctxpolicy.snapshots.retention",
    "ctxpolicy.archive": "ctxpolicy.snapshots.archive",
    "ctxpolicy.recall": "ctxpolicy.snapshots.recall",
    "ctxpolicy.facts": "ctxpolicy.conversation.facts",
    "ctxpolicy.repair": "ctxpolicy.conversation.repair",
    "ctxpolicy.jsontext": "ctxpolicy.conversation.jsontext",
    "ctxpolicy.handover": "ctxpolicy.engine.handover",
    "ctxpolicy.ledger": "ctxpolicy.engine.ledger",
    "ctxpolicy.toolresults": "ctxpolicy.engine.tool_results",
    "ctxpolicy.engine.persist": "ctxpolicy.engine.persistence",
    "ctxpolicy.engine.caches": "ctxpolicy.engine.derived",
    "ctxpolicy.engine.runner": "ctxpolicy.engine.pipeline",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        warnings.warn(
            f"{name} moved to {self.target}; the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        sys.modules[name] = importlib.import_module(self.target)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
