"""Resolve policy files into :class:`~ctxpolicy.policy.models.Policy` objects.

Pipeline of one call: load the file and everything it ``include:``s (relative
paths, cycles and missing files are diagnostics) → compat readers for the
source-design formats → ``${ENV}`` interpolation of string values → pydantic
validation of each file (strict: a string is never a number) → per agent:
``extends`` chain (cycles, unknown agents), deep merge (maps merge, lists
replace, ``null`` deletes; in ``tools`` a glob new in the child goes before the
parent's first broader glob, so ``*`` stays last), model
catalogue (the file's ``models:``, then the built-in
:mod:`~ctxpolicy.policy.catalogue`), component lookup in the plugin registry and validation of their
options by the component's own model, then the semantic checks of
:mod:`ctxpolicy.policy.checks`.

Every diagnostic carries the file, line and column of the key it is about, also
for values inherited through ``extends`` from another file. Nothing raises but
:func:`load_policy` (``PolicyError``); internal failures become ``CTX000``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ctxpolicy.policy.catalogue import builtin_models
from ctxpolicy.policy.checks import check_policy
from ctxpolicy.policy.compat import convert, detect_format
from ctxpolicy.policy.diagnostics import (
    TYPE_ERRORS,
    Diagnostic,
    PolicyError,
    Related,
    SchemaFinding,
    data_path,
    dotted,
    make,
    suggestion,
    validation_findings,
)
from ctxpolicy.policy.interp import Redactor, interpolate_tree
from ctxpolicy.policy.load import load_document
from ctxpolicy.policy.lookup import check_component, check_tokenizers, failed_plugins
from ctxpolicy.policy.merge import Doc, Merged, deep_merge, strip_nulls
from ctxpolicy.policy.models import (
    AgentPolicy,
    ModelSpec,
    Policy,
    PolicyFile,
    ResolvedStep,
)

__all__ = ["list_agents", "load_policy", "resolve_agent", "resolve_all", "validate_file"]

PathT = tuple[str | int, ...]
Pos = tuple[int, int]

_AGENT_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


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


def _agent_display(path: PathT) -> str:
    if len(path) > 2 and path[0] == "policies":
        return dotted(path[2:])
    return dotted(path)


class _Resolver:
    def __init__(self, path: str | os.PathLike[str], env: Mapping[str, str] | None) -> None:
        self.path = os.fspath(path)
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.diags: list[tuple[Diagnostic, Scope]] = []
        self.docs: dict[str, Doc] = {}
        self.order: list[Doc] = []
        self.bad_agents: set[tuple[str, str]] = set()
        self.bad_models: set[tuple[str, str]] = set()
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

    def _chain(self, name: str) -> list[tuple[Doc, str, dict[str, Any]]] | None:
        chain: list[tuple[Doc, str, dict[str, Any]]] = []
        names: list[str] = []
        cur = name
        while True:
            doc, raw = self.agents[cur]
            if not isinstance(raw, dict):
                return None
            # an agent with errors of its own is not resolved, but its `extends` is still
            # checked: one error must not hide another (a typo in the parent's name)
            bad = (doc.key, cur) in self.bad_agents
            chain.append((doc, cur, raw))
            names.append(cur)
            parent = raw.get("extends")
            if parent is None:
                return None if bad else list(reversed(chain))
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
            if bad:
                return None
            cur = parent

    def _resolve(self, name: str) -> Policy | None:
        chain = self._chain(name)
        if chain is None:
            return None
        own_doc = chain[-1][0]
        merged = Merged({}, {(): (own_doc, ("policies", name))})
        data: dict[str, Any] = {}
        for doc, agent, raw in chain:
            layer = {k: v for k, v in raw.items() if k != "extends"}
            data = deep_merge(data, layer, (), doc, ("policies", agent), merged)
        merged.data = data

        def emit(path: PathT, code: str, message: str, hint: str | None = None) -> None:
            d, raw_path = merged.locate(path)
            self.emit(d, d.pos(raw_path), code, message, hint, name)

        try:
            ap = AgentPolicy.model_validate(data, strict=True)
        except ValidationError as exc:
            for f in validation_findings(
                exc.errors(), data, AgentPolicy, redact=self.redactor.redact
            ):
                emit(f.path, f.code, f.message, f.hint)
            return None

        # ---- model
        spec: ModelSpec | None
        model_name: str | None = None
        tok_where: tuple[Doc, PathT]
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
            builtin = builtin_models()
            if entry is None and ap.model in builtin:
                spec = ModelSpec.model_validate(builtin[ap.model], strict=True)
                tok_where = merged.locate(("model",))
            elif entry is None:
                known = [*self.models, *builtin]
                emit(
                    ("model",),
                    "CTX208",
                    f"unknown model {ap.model!r}{suggestion(ap.model, known)}",
                    "define it under `models:` (here or in an included file), inline it, "
                    "or use a model of the built-in catalogue (docs/policy-reference.md"
                    "#built-in-models)",
                )
                return None
            else:
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
        tdoc, tbase = tok_where
        check_tokenizers(
            self.registry,
            spec,
            tbase,
            lambda p, code, msg, hint: self.emit(tdoc, tdoc.pos(p), code, msg, hint, name),
        )

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
                        f"unknown summarizer {sname!r}{suggestion(sname, reg.names('summarizer'))}"
                        + failed_plugins(reg),
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

        reserve = ap.budget.reserve_output
        if reserve is None:
            reserve = spec.max_output_tokens or 4096
        # budget.window stays as written: the engine and `explain` take the smaller of it
        # and the model's window (ctxpolicy.budget.effective_window)
        budget = ap.budget.model_copy(update={"reserve_output": reserve})
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
            tune=ap.tune,
        )
        for finding in check_policy(policy):
            path = finding.path
            if len(path) > 1 and path[0] == "pipeline" and isinstance(path[1], int):
                path = ("pipeline", index_map[path[1]], *path[2:])
            if finding.related:
                self._emit_related(name, chain, merged, finding)
            else:
                emit(path, finding.code, finding.message, finding.hint)
        return policy if ok else None

    def _emit_related(
        self,
        name: str,
        chain: list[tuple[Doc, str, dict[str, Any]]],
        merged: Merged,
        finding: Any,
    ) -> None:
        """A finding about several values: reported at the one the most derived agent of
        the chain sets (the child's override, not the parent's value), naming that agent;
        the others become related locations."""
        rank = {agent: i for i, (_, agent, _) in enumerate(chain)}
        where = []
        for p in (finding.path, *finding.related):
            doc, raw = merged.locate(p)
            owner = raw[1] if len(raw) > 1 and raw[0] == "policies" else None
            where.append(
                (rank.get(owner, -1) if isinstance(owner, str) else -1, p, doc, raw, owner)
            )
        if len({w[4] for w in where}) == 1:  # one agent sets them all: as usual
            _, p, doc, raw, _ = where[0]
            self.emit(doc, doc.pos(raw), finding.code, finding.message, finding.hint, name)
            return
        primary = max(where, key=lambda w: w[0])
        _, ppath, pdoc, praw, powner = primary
        related = []
        notes = []
        for _, p, doc, raw, owner in where:
            if p == ppath:
                continue
            line, col = doc.pos(raw)
            what = f"agent {owner!r} sets {dotted(p)}" if owner else f"{dotted(p)} is set"
            related.append(Related(doc.name, line, col, f"{what} here"))
            notes.append(f"{what} at {doc.name}:{line}:{col}")
        message = finding.message
        if powner is not None:
            message = f"agent {powner!r}: {message}"
            if powner != name:
                message += f" (in the policy of {name!r})"
        hint = "; ".join(filter(None, [*notes, finding.hint])) or None
        diag = make(pdoc.name, pdoc.pos(praw), finding.code, message, hint)
        self.diags.append((dataclasses.replace(diag, related=tuple(related)), name))

    def _component(
        self, kind: Any, cname: str, options: dict[str, Any], base: PathT, emit: Any, key: str
    ) -> dict[str, Any] | None:
        return check_component(
            self.registry, kind, cname, options, base, key, emit, self.redactor.redact
        )

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
    extends). ``json_schema`` also validates a file with errors against the published
    JSON Schema (reusing the parsed document); a problem both find is reported once. Sorted,
    without duplicates. Never raises."""
    r, _ = _run(path, agent, env)
    scope = None if agent is None else r.chain_names(agent)
    diags = r.scoped(scope)
    # The schema is generated from the same models the loader validated with: a file
    # without loader errors passes it too (tests/policy/test_schema.py checks both agree
    # on every corpus file), so only a file with errors pays for the schema pass, which
    # may then find problems that an error kept the loader from reaching.
    if json_schema and r.order and any(d.severity == "error" for d in diags):
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


def resolve_agent(
    path: str | os.PathLike[str],
    agent: str,
    *,
    env: Mapping[str, str] | None = None,
) -> tuple[Policy | None, list[Diagnostic], Redactor]:
    """The policy of ``agent`` (None when it has errors), its diagnostics, and the
    :class:`~ctxpolicy.policy.interp.Redactor` of the substitutions made (to show the
    policy without the environment's values, as ``explain`` does)."""
    r, policies = _run(path, agent, env)
    diags = r.scoped(r.chain_names(agent))
    pol = policies.get(agent)
    if any(d.severity == "error" for d in diags):
        pol = None
    return pol, diags, r.redactor


def load_policy(
    path: str | os.PathLike[str],
    agent: str = "default",
    *,
    env: Mapping[str, str] | None = None,
) -> Policy:
    """The resolved, frozen policy of ``agent``; raises :class:`PolicyError` carrying
    every diagnostic when any of them is an error (file-level or of this agent's chain)."""
    pol, diags, _ = resolve_agent(path, agent, env=env)
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
