"""What the steps of resolving a policy file share: the diagnostics found so far (with
the agent each belongs to), the documents read, the agents and models they define,
the plugin registry (built on first use) and the redactor of ``${ENV}`` values.

:class:`ResolverBase` is extended by :class:`~ctxpolicy.resolve.files.FileSteps` (read
a file and its includes, validate each) and
:class:`~ctxpolicy.resolve.agents.AgentSteps` (resolve one agent); :mod:`.load` puts
them together behind ``load_policy``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from ctxpolicy.policy.diagnostics import (
    TYPE_ERRORS,
    Diagnostic,
    data_path,
    make,
)
from ctxpolicy.policy.interp import Redactor
from ctxpolicy.policy.merge import Doc
from ctxpolicy.policy.source import PathT, Pos

#: Said after a model problem: the rest of the agent was checked all the same.
WITHOUT_MODEL = (
    "; the agent's other settings were checked against the built-in defaults, "
    "without the budget checks that need the model's window"
)


Scope = str | None  # agent name a diagnostic belongs to (None: the file)


def _not_dropped(errors: list[Any], data: Any, dropped: set[PathT]) -> list[Any]:
    """Errors but those a key the loader left out causes (its number was out of range,
    already reported at its line:col): "missing" for that key, and type errors of the
    other union branches of a value that contains it."""
    if not dropped:
        return errors
    out = []
    for err in errors:
        path, _ = data_path(err.get("loc", ()), data, err["type"] == "missing")
        if err["type"] == "missing" and path in dropped:
            continue
        if err["type"] in TYPE_ERRORS and any(
            len(d) > len(path) and d[: len(path)] == path for d in dropped
        ):
            continue
        out.append(err)
    return out


class ResolverBase:
    def __init__(self, path: str | os.PathLike[str], env: Mapping[str, str] | None) -> None:
        self.path = os.fspath(path)
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.diags: list[tuple[Diagnostic, Scope]] = []
        self.docs: dict[str, Doc] = {}
        self.order: list[Doc] = []
        self.bad_agents: set[tuple[str, str]] = set()
        self.bad_models: set[tuple[str, str]] = set()
        #: agents whose model problem already says the rest was checked without it
        self._noted: set[tuple[str, str]] = set()
        self.agents: dict[str, tuple[Doc, Any]] = {}
        self.models: dict[str, tuple[Doc, Any]] = {}
        self._registry: Any = None
        #: every ``${NAME}`` substituted, to show it as written in every diagnostic
        self.redactor = Redactor()

    # ------------------------------------------------------------------ helpers
    def emit(
        self,
        doc: Doc | str,
        pos: Pos,
        code: str,
        message: str,
        hint: str | None = None,
        scope: Scope = None,
    ) -> None:
        name = doc if isinstance(doc, str) else doc.name
        self.diags.append((make(name, pos, code, message, hint), scope))

    @property
    def registry(self) -> Any:
        if self._registry is None:
            from ctxpolicy.plugins import get_registry

            self._registry = get_registry()
        return self._registry

    # ------------------------------------------------------------------ output
    def scoped(self, agents: set[str] | None) -> list[Diagnostic]:
        """Diagnostics of the file and of ``agents`` (all when None), each interpolated
        value shown as the ``${NAME}`` it was written as."""
        out = {self._shown(d) for d, s in self.diags if s is None or agents is None or s in agents}
        return sorted(out)

    def _shown(self, d: Diagnostic) -> Diagnostic:
        if not self.redactor:
            return d
        hint = None if d.hint is None else self.redactor.redact(d.hint)
        return dataclasses.replace(d, message=self.redactor.redact(d.message), hint=hint)

    def chain_names(self, name: str) -> set[str]:
        names = {name}
        cur = name
        while cur in self.agents:
            raw = self.agents[cur][1]
            parent = raw.get("extends") if isinstance(raw, dict) else None
            if not isinstance(parent, str) or parent in names:
                break
            names.add(parent)
            cur = parent
        return names
