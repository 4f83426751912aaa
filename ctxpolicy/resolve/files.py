"""Resolving a policy file, the file steps: read the file and everything it
``include:``s (relative paths, cycles and missing files are diagnostics), the compat
readers, ``${ENV}`` interpolation, and pydantic validation of each file; collect the
agents and models the files define.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import ValidationError

from ctxpolicy.policy.compat import convert, detect_format
from ctxpolicy.policy.diagnostics import (
    SchemaFinding,
    dotted,
    validation_findings,
)
from ctxpolicy.policy.interp import interpolate_tree
from ctxpolicy.policy.load import load_document
from ctxpolicy.policy.merge import Doc, strip_nulls
from ctxpolicy.policy.models import (
    PolicyFile,
)
from ctxpolicy.resolve.base import WITHOUT_MODEL, PathT, ResolverBase, Scope, _not_dropped

_AGENT_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


def _agent_display(path: PathT) -> str:
    if len(path) > 2 and path[0] == "policies":
        return dotted(path[2:])
    return dotted(path)


class FileSteps(ResolverBase):
    # ------------------------------------------------------------------ files
    def load(self) -> None:
        self._load(self.path, [], None)
        for doc in self.order:
            self._validate_doc(doc)
        for doc in self.order:
            policies = doc.native.get("policies")
            if isinstance(policies, dict):
                for name, raw in policies.items():
                    if isinstance(name, str):
                        self.agents.setdefault(name, (doc, raw))
            models = doc.native.get("models")
            if isinstance(models, dict):
                for name, raw in models.items():
                    if isinstance(name, str):
                        self.models.setdefault(name, (doc, raw))

    def _load(self, path: str, chain: list[tuple[str, str]], via: tuple[Doc, int] | None) -> None:
        key = os.path.realpath(path)
        if any(k == key for k, _ in chain):
            assert via is not None
            names = [n for _, n in chain[[k for k, _ in chain].index(key) :]]
            parent, idx = via
            self.emit(
                parent,
                parent.pos(("include", idx), value=True),
                "CTX305",
                "include cycle: " + " → ".join([*names, path]),
                "remove one of the includes",
            )
            return
        if key in self.docs:
            return
        if via is not None:
            parent, idx = via
            where = parent.pos(("include", idx), value=True)
            if not os.path.exists(path):
                self.emit(
                    parent,
                    where,
                    "CTX303",
                    f"included file {path!r} not found",
                    "include paths are relative to the including file",
                )
                return
            if not os.path.isfile(path):
                self.emit(parent, where, "CTX304", f"included path {path!r} is not a file")
                return
        loaded, diags = load_document(path)
        self.diags.extend((d, None) for d in diags)
        if loaded is None:
            return
        fmt = detect_format(loaded.data)
        native, origins, warnings = convert(loaded.data, fmt)
        doc = Doc(key, loaded, fmt, native, origins)
        for raw_path, message in warnings:
            self.emit(doc, loaded.source_map.position(raw_path), "CTX401", message)
        interpolated, problems = interpolate_tree(native, self.env, redactor=self.redactor)
        _keep_store_paths(native, interpolated)
        doc.native = interpolated
        for p, prob in problems:
            scope = p[1] if len(p) > 1 and p[0] == "policies" and isinstance(p[1], str) else None
            code, hint = {
                "missing": (
                    "CTX306",
                    f"export {prob.text}, or give a default: ${{{prob.text}:-value}}",
                ),
                "size": (
                    "CTX309",
                    "environment variables in a policy hold names, paths and numbers, "
                    "not documents",
                ),
            }.get(prob.kind, ("CTX307", None))
            self.emit(doc, doc.pos(p, value=True), code, prob.message, hint, scope)
        self.docs[key] = doc
        self.order.append(doc)
        includes = interpolated.get("include")
        if isinstance(includes, list):
            base = os.path.dirname(path)
            broken = {p[1] for p, _ in problems if len(p) == 2 and p[0] == "include"}
            for i, inc in enumerate(includes):
                if isinstance(inc, str) and inc.strip() and i not in broken:
                    child = os.path.normpath(os.path.join(base, inc))
                    self._load(child, [*chain, (key, path)], (doc, i))

    def _validate_doc(self, doc: Doc) -> None:
        data = doc.native
        stripped = dict(data)
        if isinstance(data.get("policies"), dict):
            stripped["policies"] = {k: strip_nulls(v) for k, v in data["policies"].items()}
        try:
            PolicyFile.model_validate(stripped, strict=True)
        except ValidationError as exc:
            self.bad_agents.update(
                (doc.key, p[1])
                for p in doc.loaded.dropped
                if len(p) > 1 and p[0] == "policies" and isinstance(p[1], str)
            )
            findings = validation_findings(
                _not_dropped(exc.errors(), stripped, doc.loaded.dropped),
                stripped,
                PolicyFile,
                _agent_display,
                redact=self.redactor.redact,
            )
            for f in findings:
                self._emit_file_finding(doc, f, stripped)

    def _emit_file_finding(self, doc: Doc, f: SchemaFinding, data: dict[str, Any]) -> None:
        path = f.path
        message = f.message
        if not path and "agent name" in message:
            message = message.removeprefix("(top level): ")
            for name in data.get("policies") or {}:
                if not (isinstance(name, str) and _AGENT_NAME_RE.fullmatch(name)):
                    path = ("policies", name)
                    break
        scope: Scope = None
        if len(path) > 1 and path[0] == "policies" and isinstance(path[1], str):
            scope = path[1]
            self.bad_agents.add((doc.key, path[1]))
            if path[2:3] == ("model",) and (doc.key, path[1]) not in self._noted:
                self._noted.add((doc.key, path[1]))
                message += WITHOUT_MODEL
        if len(path) > 1 and path[0] == "models" and isinstance(path[1], str):
            noted = (doc.key, path[1]) in self.bad_models
            self.bad_models.add((doc.key, path[1]))
            message += (
                ""
                if noted
                else (
                    f"; the agents that use model {path[1]!r} were checked against the built-in "
                    "defaults, without the budget checks that need its window"
                )
            )
        self.emit(doc, doc.pos(path), f.code, message, f.hint, scope)


def _keep_store_paths(raw: Any, interpolated: Any) -> None:
    """``snapshots.path`` and ``state.options.path``/``dsn`` stay as written: the
    session interpolates them with its own ``env=`` when it opens the store (problems
    are still reported at load time), so no secret from the environment ends up in
    the resolved policy."""
    policies = raw.get("policies") if isinstance(raw, dict) else None
    if not isinstance(policies, dict) or not isinstance(interpolated.get("policies"), dict):
        return
    for name, agent in policies.items():
        snaps = agent.get("snapshots") if isinstance(agent, dict) else None
        target = interpolated["policies"].get(name)
        if (
            isinstance(snaps, dict)
            and isinstance(snaps.get("path"), str)
            and isinstance(target, dict)
            and isinstance(target.get("snapshots"), dict)
        ):
            target["snapshots"]["path"] = snaps["path"]
        # the state store's path and dsn too (a dsn may carry a password from ${...})
        state = agent.get("state") if isinstance(agent, dict) else None
        options = state.get("options") if isinstance(state, dict) else None
        tstate = target.get("state") if isinstance(target, dict) else None
        toptions = tstate.get("options") if isinstance(tstate, dict) else None
        if isinstance(options, dict) and isinstance(toptions, dict):
            for key in ("path", "dsn"):
                if isinstance(options.get(key), str):
                    toptions[key] = options[key]
