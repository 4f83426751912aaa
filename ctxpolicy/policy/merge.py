"""Deep merge of ``extends`` chains, remembering where every merged value was written.

:class:`Doc` is one loaded policy file (its data converted to the native DSL, and the
map back to the original positions); :class:`Merged` maps each path of a merged agent
policy to the file and raw path that set it, so a diagnostic about an inherited value
points at the file, line and column that wrote it.
"""

from __future__ import annotations

import copy
import fnmatch
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.policy.compat import CompatFormat
from ctxpolicy.policy.load import LoadedDocument
from ctxpolicy.policy.source import PathT, Pos

__all__ = ["Doc", "Merged", "deep_merge", "strip_nulls"]


@dataclass
class Doc:
    """One loaded policy file, in the native DSL."""

    key: str  # real path
    loaded: LoadedDocument
    fmt: CompatFormat
    native: dict[str, Any]
    origins: dict[PathT, PathT]

    @property
    def name(self) -> str:
        return self.loaded.path

    def raw_path(self, path: PathT) -> PathT:
        if not self.origins:
            return path
        for k in range(len(path), -1, -1):
            if path[:k] in self.origins:
                return (*self.origins[path[:k]], *path[k:])
        return ()

    def pos(self, path: PathT, *, value: bool = False) -> Pos:
        raw = self.raw_path(path)
        sm = self.loaded.source_map
        return sm.value_position(raw) if value else sm.position(raw)


@dataclass
class Merged:
    """A merged agent policy and where each of its values came from."""

    data: dict[str, Any]
    origins: dict[PathT, tuple[Doc, PathT]] = field(default_factory=dict)

    def locate(self, path: PathT) -> tuple[Doc, PathT]:
        for k in range(len(path), -1, -1):
            hit = self.origins.get(path[:k])
            if hit is not None:
                return hit[0], (*hit[1], *path[k:])
        raise KeyError(path)  # pragma: no cover - () is always present


def strip_nulls(node: Any) -> Any:
    """Mapping values that are null mean "delete"; for validation they are absent."""
    if isinstance(node, dict):
        return {k: strip_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [strip_nulls(v) for v in node]
    return node


def deep_merge(
    base: dict[str, Any],
    over: dict[str, Any],
    mpath: PathT,
    doc: Doc,
    spath: PathT,
    merged: Merged,
) -> dict[str, Any]:
    """``over`` deep-merged onto ``base`` (maps merge, lists replace, ``None`` deletes;
    in ``tools`` a glob new in ``over`` goes before the first broader glob of ``base``,
    so ``*`` stays last), recording in ``merged.origins`` where each value was written
    (``doc`` at raw path ``spath``)."""
    result: dict[str, Any] = {}
    order = list(base)
    for k in over:
        if k in base:
            continue
        if mpath == ("tools",):
            # a new glob goes before the parent's first broader rule ("*" stays last)
            at = next(
                (
                    j
                    for j, g in enumerate(order)
                    if isinstance(k, str)
                    and isinstance(g, str)
                    and (g == "*" or fnmatch.fnmatchcase(k, g))
                ),
                len(order),
            )
            order.insert(at, k)
        else:
            order.append(k)
    for k in order:
        p = (*mpath, k)
        if k not in over:
            if p not in merged.origins:
                merged.origins[p] = merged.locate(p)
            result[k] = base[k]
            continue
        v = over[k]
        if v is None:
            continue
        b = base.get(k)
        if isinstance(v, dict) and isinstance(b, dict):
            result[k] = deep_merge(b, v, p, doc, (*spath, k), merged)
            merged.origins[p] = (doc, (*spath, k))
        else:
            for q in [q for q in merged.origins if len(q) > len(p) and q[: len(p)] == p]:
                del merged.origins[q]
            merged.origins[p] = (doc, (*spath, k))
            result[k] = copy.deepcopy(v)
    return result
