"""Resolve policy files into :class:`~ctxpolicy.policy.models.Policy` objects.

Pipeline of one call: load the file and everything it ``include:``s (relative
paths, cycles and missing files are diagnostics) → compat readers for the
source-design formats → ``${ENV}`` interpolation of string values → pydantic
validation of each file (strict: a string is never a number) → per agent:
``extends`` chain (cycles, unknown agents), deep merge (maps merge, lists
replace, ``null`` deletes; in ``tools`` a glob new in the child goes before the
parent's first broader glob, so ``*`` stays last), model
catalogue, component lookup in the plugin registry and validation of their
options by the component's own model, then the semantic checks of
:mod:`ctxpolicy.policy.checks`.

Every diagnostic carries the file, line and column of the key it is about, also
for values inherited through ``extends`` from another file. Nothing raises but
:func:`load_policy` (``PolicyError``); internal failures become ``CTX000``.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ctxpolicy.policy.checks import check_policy
from ctxpolicy.policy.compat import CompatFormat, convert, detect_format
from ctxpolicy.policy.diagnostics import (
    Diagnostic,
    PolicyError,
    SchemaFinding,
    dotted,
    make,
    suggestion,
    validation_findings,
)
from ctxpolicy.policy.interp import interpolate_tree
from ctxpolicy.policy.load import LoadedDocument, load_document
from ctxpolicy.policy.models import (
    AgentPolicy,
    ModelSpec,
    Policy,
    PolicyFile,
    ResolvedStep,
)

__all__ = ["list_agents", "load_policy", "resolve_all", "validate_file"]

PathT = tuple[str | int, ...]
Pos = tuple[int, int]

#: Bare encoding names accepted in ``model.tokenizer`` (meaning ``tiktoken:<name>``).
BARE_ENCODINGS = frozenset(
    {"o200k_base", "cl100k_base", "p50k_base", "p50k_edit", "r50k_base", "gpt2"}
)

_AGENT_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


@dataclass
class _Doc:
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


Scope = str | None  # agent name a diagnostic belongs to (None: the file)


@dataclass
class _Merged:
    data: dict[str, Any]
    origins: dict[PathT, tuple[_Doc, PathT]] = field(default_factory=dict)

    def locate(self, path: PathT) -> tuple[_Doc, PathT]:
        for k in range(len(path), -1, -1):
            hit = self.origins.get(path[:k])
            if hit is not None:
                return hit[0], (*hit[1], *path[k:])
        raise KeyError(path)  # pragma: no cover - () is always present


def _strip_nulls(node: Any) -> Any:
    """Mapping values that are null mean "delete"; for validation they are absent."""
    if isinstance(node, dict):
        return {k: _strip_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_strip_nulls(v) for v in node]
    return node


def _agent_display(path: PathT) -> str:
    if len(path) > 2 and path[0] == "policies":
        return dotted(path[2:])
    return dotted(path)


class _Resolver:
    def __init__(self, path: str | os.PathLike[str], env: Mapping[str, str] | None) -> None:
        self.path = os.fspath(path)
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.diags: list[tuple[Diagnostic, Scope]] = []
        self.docs: dict[str, _Doc] = {}
        self.order: list[_Doc] = []
        self.bad_agents: set[tuple[str, str]] = set()
        self.bad_models: set[tuple[str, str]] = set()
        self.agents: dict[str, tuple[_Doc, Any]] = {}
        self.models: dict[str, tuple[_Doc, Any]] = {}
        self._registry: Any = None

    # ------------------------------------------------------------------ helpers
    def emit(
        self,
        doc: _Doc | str,
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

    def _load(self, path: str, chain: list[tuple[str, str]], via: tuple[_Doc, int] | None) -> None:
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
        doc = _Doc(key, loaded, fmt, native, origins)
        for raw_path, message in warnings:
            self.emit(doc, loaded.source_map.position(raw_path), "CTX401", message)
        interpolated, problems = interpolate_tree(native, self.env)
        doc.native = interpolated
        for p, prob in problems:
            scope = p[1] if len(p) > 1 and p[0] == "policies" and isinstance(p[1], str) else None
            if prob.kind == "missing":
                self.emit(
                    doc,
                    doc.pos(p, value=True),
                    "CTX306",
                    prob.message,
                    f"export {prob.text}, or give a default: ${{{prob.text}:-value}}",
                    scope,
                )
            else:
                self.emit(doc, doc.pos(p, value=True), "CTX307", prob.message, None, scope)
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

    def _validate_doc(self, doc: _Doc) -> None:
        data = doc.native
        stripped = dict(data)
        if isinstance(data.get("policies"), dict):
            stripped["policies"] = {k: _strip_nulls(v) for k, v in data["policies"].items()}
        try:
            PolicyFile.model_validate(stripped, strict=True)
        except ValidationError as exc:
            findings = validation_findings(exc.errors(), stripped, PolicyFile, _agent_display)
            for f in findings:
                self._emit_file_finding(doc, f, stripped)

    def _emit_file_finding(self, doc: _Doc, f: SchemaFinding, data: dict[str, Any]) -> None:
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
        if len(path) > 1 and path[0] == "models" and isinstance(path[1], str):
            self.bad_models.add((doc.key, path[1]))
        self.emit(doc, doc.pos(path), f.code, message, f.hint, scope)

    # ------------------------------------------------------------------ agents
    def resolve(self, name: str) -> Policy | None:
        try:
            return self._resolve(name)
        except Exception as exc:  # never a traceback
            root = self.order[0] if self.order else self.path
            self.emit(
                root,
                (1, 1),
                "CTX000",
                f"internal error while resolving agent {name!r}: {type(exc).__name__}: {exc}",
                "please report this with the file attached",
                name,
            )
            return None

    def _chain(self, name: str) -> list[tuple[_Doc, str, dict[str, Any]]] | None:
        chain: list[tuple[_Doc, str, dict[str, Any]]] = []
        names: list[str] = []
        cur = name
        while True:
            doc, raw = self.agents[cur]
            if (doc.key, cur) in self.bad_agents or not isinstance(raw, dict):
                return None
            chain.append((doc, cur, raw))
            names.append(cur)
            parent = raw.get("extends")
            if parent is None:
                return list(reversed(chain))
            if not isinstance(parent, str):
                return None
            if parent not in self.agents:
                self.emit(
                    doc,
                    doc.pos(("policies", cur, "extends")),
                    "CTX301",
                    f"agent {cur!r} extends unknown agent {parent!r}{suggestion(parent, list(self.agents))}",
                    "agents: " + ", ".join(self.agents),
                    name,
                )
                return None
            if parent in names:
                cycle = names[names.index(parent) :]
                for i, member in enumerate(cycle):
                    mdoc, _ = self.agents[member]
                    rot = [*cycle[i:], *cycle[:i], member]
                    self.emit(
                        mdoc,
                        mdoc.pos(("policies", member, "extends")),
                        "CTX302",
                        "extends cycle: " + " → ".join(rot),
                        "one agent of the cycle must not extend another",
                        name,
                    )
                return None
            cur = parent

    def _merge(
        self,
        base: dict[str, Any],
        over: dict[str, Any],
        mpath: PathT,
        doc: _Doc,
        spath: PathT,
        merged: _Merged,
    ) -> dict[str, Any]:
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
                result[k] = self._merge(b, v, p, doc, (*spath, k), merged)
                merged.origins[p] = (doc, (*spath, k))
            else:
                for q in [q for q in merged.origins if len(q) > len(p) and q[: len(p)] == p]:
                    del merged.origins[q]
                merged.origins[p] = (doc, (*spath, k))
                result[k] = copy.deepcopy(v)
        return result

    def _resolve(self, name: str) -> Policy | None:
        chain = self._chain(name)
        if chain is None:
            return None
        own_doc = chain[-1][0]
        merged = _Merged({}, {(): (own_doc, ("policies", name))})
        data: dict[str, Any] = {}
        for doc, agent, raw in chain:
            layer = {k: v for k, v in raw.items() if k != "extends"}
            data = self._merge(data, layer, (), doc, ("policies", agent), merged)
        merged.data = data

        def emit(path: PathT, code: str, message: str, hint: str | None = None) -> None:
            d, raw_path = merged.locate(path)
            self.emit(d, d.pos(raw_path), code, message, hint, name)

        try:
            ap = AgentPolicy.model_validate(data, strict=True)
        except ValidationError as exc:
            for f in validation_findings(exc.errors(), data, AgentPolicy):
                emit(f.path, f.code, f.message, f.hint)
            return None

        # ---- model
        spec: ModelSpec | None
        model_name: str | None = None
        tok_where: tuple[_Doc, PathT]
        if ap.model is None:
            emit(
                (),
                "CTX207",
                f"agent {name!r} has no model",
                "set `model:` to a key of `models:` or to an inline {context_window: ...}",
            )
            return None
        if isinstance(ap.model, str):
            model_name = ap.model
            entry = self.models.get(ap.model)
            if entry is None:
                emit(
                    ("model",),
                    "CTX208",
                    f"unknown model {ap.model!r}{suggestion(ap.model, list(self.models))}",
                    "define it under `models:` (here or in an included file), or inline it",
                )
                return None
            mdoc, mraw = entry
            if (mdoc.key, ap.model) in self.bad_models:
                return None
            try:
                spec = ModelSpec.model_validate(mraw, strict=True)
            except ValidationError:
                return None
            tok_where = (mdoc, ("models", ap.model, "tokenizer"))
        else:
            spec = ap.model
            d, rp = merged.locate(("model", "tokenizer"))
            tok_where = (d, rp)
        self._check_tokenizers(spec, tok_where, name)

        # ---- components
        reg = self.registry
        ok = True
        steps: list[ResolvedStep] = []
        index_map: list[int] = []
        for i, step in enumerate(ap.pipeline):
            opts = self._component(
                "layer", step.layer, step.options, ("pipeline", i), emit, "layer"
            )
            if opts is None:
                ok = False
                continue
            cls = reg.get("layer", step.layer)
            if "summarizer" in getattr(cls.Options, "model_fields", {}):
                sname = opts.get("summarizer")
                if isinstance(sname, str) and reg.get("summarizer", sname) is None:
                    ok = False
                    emit(
                        ("pipeline", i, "options", "summarizer"),
                        "CTX102",
                        f"unknown summarizer {sname!r}{suggestion(sname, reg.names('summarizer'))}",
                        "known summarizers: " + (", ".join(reg.names("summarizer")) or "(none)"),
                    )
            if step.enabled:
                steps.append(ResolvedStep(layer=step.layer, at=step.at, options=opts))
                index_map.append(i)
        ov = ap.on_overflow
        ov_opts = self._component("layer", ov.layer, ov.options, ("on_overflow",), emit, "layer")
        if ov_opts is None:
            ok = False
            ov_opts = {}
        tools = {}
        for glob, rule in ap.tools.items():
            topts = self._component(
                "preprocessor", rule.preprocess, rule.options, ("tools", glob), emit, "preprocess"
            )
            if topts is None:
                ok = False
                topts = {}
            tools[glob] = rule.model_copy(update={"options": topts})
        snap = ap.snapshots
        sopts = self._component(
            "snapshot_store", snap.store, snap.options, ("snapshots",), emit, "store"
        )
        if sopts is None:
            ok = False
            sopts = {}
        st = ap.state
        stopts = self._component("state_store", st.store, st.options, ("state",), emit, "store")
        if stopts is None:
            ok = False
            stopts = {}

        window = (
            spec.context_window
            if ap.budget.window is None
            else min(spec.context_window, ap.budget.window)
        )
        reserve = ap.budget.reserve_output
        if reserve is None:
            reserve = spec.max_output_tokens or 4096
        budget = ap.budget.model_copy(update={"window": window, "reserve_output": reserve})
        policy = Policy(
            agent=name,
            source=self.path,
            description=ap.description,
            model_name=model_name,
            model=spec,
            budget=budget,
            thresholds=ap.thresholds,
            pipeline=steps,
            on_overflow=ResolvedStep(layer=ov.layer, options=ov_opts),
            tools=tools,
            snapshots=snap.model_copy(update={"options": sopts}),
            pinned=ap.pinned,
            ledger=ap.ledger,
            constraints=list(ap.constraints),
            cache=ap.cache,
            state=st.model_copy(update={"options": stopts}),
        )
        for finding in check_policy(policy):
            path = finding.path
            if len(path) > 1 and path[0] == "pipeline" and isinstance(path[1], int):
                path = ("pipeline", index_map[path[1]], *path[2:])
            emit(path, finding.code, finding.message, finding.hint)
        return policy if ok else None

    def _component(
        self,
        kind: Any,
        cname: str,
        options: dict[str, Any],
        base: PathT,
        emit: Any,
        key: str,
    ) -> dict[str, Any] | None:
        reg = self.registry
        cls = reg.get(kind, cname)
        word = {"snapshot_store": "snapshot store", "state_store": "state store"}.get(kind, kind)
        if cls is None:
            names = reg.names(kind)
            emit(
                (*base, key),
                "CTX102",
                f"unknown {word} {cname!r}{suggestion(cname, names)}",
                f"known {word}s: " + (", ".join(names) or "(none registered)"),
            )
            return None
        opath = (*base, "options")
        try:
            model = cls.Options.model_validate(options)
            return dict(model.model_dump(mode="json"))
        except ValidationError as exc:
            for f in validation_findings(
                exc.errors(), options, cls.Options, lambda p: dotted((*opath, *p))
            ):
                emit((*opath, *f.path), f.code, f.message, f.hint)
            return None
        except Exception as exc:
            provider = reg.plugin_of(kind, cname)
            emit(
                opath,
                "CTX103",
                f"options of {word} {cname!r} could not be checked: {type(exc).__name__}: {exc}",
                f"reported by plugin {provider!r}" if provider else None,
            )
            return None

    def _check_tokenizers(self, spec: ModelSpec, where: tuple[_Doc, PathT], scope: str) -> None:
        tok = spec.tokenizer
        if tok is None:
            return
        entries = [tok] if isinstance(tok, str) else list(tok)
        reg = self.registry
        doc, base = where
        for i, entry in enumerate(entries):
            p = base if isinstance(tok, str) else (*base, i)
            backend = entry.split(":", 1)[0].strip() if ":" in entry else entry.strip()
            if ":" not in entry and backend in BARE_ENCODINGS:
                backend = "tiktoken"
            if reg.get("tokenizer", backend) is None:
                names = reg.names("tokenizer")
                self.emit(
                    doc,
                    doc.pos(p),
                    "CTX102",
                    f"unknown tokenizer {backend!r}{suggestion(backend, [*names, *sorted(BARE_ENCODINGS)])}",
                    "use a registered backend (" + ", ".join(names) + ") or an encoding name "
                    "such as o200k_base",
                    scope,
                )

    # ------------------------------------------------------------------ output
    def scoped(self, agents: set[str] | None) -> list[Diagnostic]:
        out = {d for d, s in self.diags if s is None or agents is None or s in agents}
        return sorted(out)

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


def _run(
    path: str | os.PathLike[str], agent: str | None, env: Mapping[str, str] | None
) -> tuple[_Resolver, dict[str, Policy]]:
    r = _Resolver(path, env)
    policies: dict[str, Policy] = {}
    try:
        r.load()
        if not r.order:
            return r, policies
        if agent is not None:
            if agent not in r.agents:
                root = r.order[0]
                known = list(r.agents)
                r.emit(
                    root,
                    (1, 1),
                    "CTX308",
                    f"no agent {agent!r} in this file{suggestion(agent, known)}",
                    "agents: " + (", ".join(known) or "(none)"),
                    agent,
                )
                return r, policies
            names = [agent]
        else:
            names = list(r.agents)
        for name in names:
            pol = r.resolve(name)
            if pol is not None:
                policies[name] = pol
    except Exception as exc:  # pragma: no cover - last resort
        r.emit(
            r.path,
            (1, 1),
            "CTX000",
            f"internal error while reading {r.path}: {type(exc).__name__}: {exc}",
            "please report this with the file attached",
        )
    return r, policies


def validate_file(
    path: str | os.PathLike[str],
    *,
    agent: str | None = None,
    env: Mapping[str, str] | None = None,
    json_schema: bool = False,
) -> list[Diagnostic]:
    """Every diagnostic of a policy file (and its includes): parse, schema, components,
    ``extends``, env, semantics. ``agent`` limits agent checks to that agent (and what it
    extends). ``json_schema`` also validates the file against the published JSON Schema
    (reusing the parsed document); a problem both find is reported once. Sorted,
    without duplicates. Never raises."""
    r, _ = _run(path, agent, env)
    scope = None if agent is None else r.chain_names(agent)
    diags = r.scoped(scope)
    if json_schema and r.order:
        from ctxpolicy.policy.schema import dedupe, schema_diagnostics

        try:
            diags = dedupe(diags, schema_diagnostics(r.order[0].loaded))
        except Exception as exc:  # pragma: no cover - last resort
            diags.append(
                make(os.fspath(path), (1, 1), "CTX000", f"internal error in schema check: {exc!r}")
            )
    return diags


def resolve_all(
    path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Policy], list[Diagnostic]]:
    """All agents that resolve without errors, and every diagnostic of the file."""
    r, policies = _run(path, None, env)
    diags = r.scoped(None)
    good: dict[str, Policy] = {}
    for name, pol in policies.items():
        mine = r.scoped(r.chain_names(name))
        if not any(d.severity == "error" for d in mine):
            good[name] = pol
    return good, diags


def load_policy(
    path: str | os.PathLike[str],
    agent: str = "default",
    *,
    env: Mapping[str, str] | None = None,
) -> Policy:
    """The resolved, frozen policy of ``agent``; raises :class:`PolicyError` carrying
    every diagnostic when any of them is an error (file-level or of this agent's chain)."""
    r, policies = _run(path, agent, env)
    diags = r.scoped(r.chain_names(agent))
    pol = policies.get(agent)
    if pol is None or any(d.severity == "error" for d in diags):
        if not diags:  # pragma: no cover - defensive
            diags = [
                make(os.fspath(path), (1, 1), "CTX000", f"agent {agent!r} could not be resolved")
            ]
        raise PolicyError(diags)
    return pol


def list_agents(path: str | os.PathLike[str]) -> list[str]:
    """Agent names usable with :func:`load_policy` (this file's first, then included ones)."""
    r = _Resolver(path, {})
    try:
        r.load()
    except Exception:  # pragma: no cover - last resort
        return []
    return list(r.agents)
