"""Resolving a policy file, the agent steps: the ``extends`` chain, the deep merge,
schema rounds (each leaves out the values the previous one found wrong), the model
(the file's ``models:``, then the built-in catalogue), the components looked up in the
plugin registry with their options, and the semantic checks.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ctxpolicy.policy.catalogue import builtin_models
from ctxpolicy.policy.diagnostics import (
    Related,
    data_path,
    dotted,
    make,
    suggestion,
    validation_findings,
)
from ctxpolicy.policy.merge import Doc, Merged, deep_merge
from ctxpolicy.policy.models import (
    AgentPolicy,
    ModelSpec,
    Policy,
    PreprocessStep,
    ResolvedStep,
    ToolRule,
)
from ctxpolicy.resolve.base import WITHOUT_MODEL, PathT, ResolverBase, _not_dropped
from ctxpolicy.resolve.checks import check_policy
from ctxpolicy.resolve.lookup import check_component, check_tokenizers, failed_plugins

#: What an agent whose model is missing, unknown or malformed is checked with, so that
#: the model's problem hides none of the agent's others (a findings computed from the
#: window is left out, see ``_TRIGGER_INPUTS``); never part of a resolved policy.
STAND_IN_MODEL = ModelSpec(context_window=128_000)


class AgentSteps(ResolverBase):
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

    def _chain(self, name: str) -> tuple[list[tuple[Doc, str, dict[str, Any]]], bool] | None:
        """The ``extends`` chain of ``name``, root first, and whether an agent of it has
        errors of its own (then the chain is still resolved, to find the problems those
        errors do not touch, but yields no policy). None when there is no chain to
        resolve (an unknown parent, a cycle, an agent that is not a mapping)."""
        chain: list[tuple[Doc, str, dict[str, Any]]] = []
        names: list[str] = []
        degraded = False
        cur = name
        while True:
            doc, raw = self.agents[cur]
            if not isinstance(raw, dict):
                return None
            degraded = degraded or (doc.key, cur) in self.bad_agents
            chain.append((doc, cur, raw))
            names.append(cur)
            parent = raw.get("extends")
            if parent is None:
                return list(reversed(chain)), degraded
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

    def _resolve(self, name: str) -> Policy | None:
        """The steps of one agent: chain → merge → schema → model → components →
        policy → semantic checks. A schema error does not stop the steps after it: the
        values it is about are left out (their defaults apply) and every later finding
        that depends on one of them is dropped, so a type error hides nothing else."""
        found = self._chain(name)
        if found is None:
            return None
        chain, degraded = found
        merged = self._merge(name, chain)
        step = _AgentStep(self, name, merged)
        lost = {
            p[2:]
            for doc, agent, _ in chain
            for p in doc.loaded.dropped
            if len(p) > 2 and p[:2] == ("policies", agent)
        }
        validated = self._validate_agent(step, report_all=not degraded, lost=lost)
        if validated is None:
            return None
        ap, removed = validated
        step.removed = removed
        ok = not degraded and not removed
        model = self._model(step, ap)
        if model is None:
            # the model is missing, unknown or malformed (reported, saying the rest is
            # checked anyway): check the rest against a stand-in, leaving out every
            # finding computed from the model's window
            ok = False
            step.removed.append(("model",))
            spec, model_name = STAND_IN_MODEL, None
        else:
            spec, model_name = model
        parts = self._components(step, ap)
        policy = self._policy(name, ap, spec, model_name, parts)
        self._semantic_checks(step, chain, policy, parts.index_map)
        return policy if ok and parts.ok else None

    def _merge(self, name: str, chain: list[tuple[Doc, str, dict[str, Any]]]) -> Merged:
        """Deep merge of the chain, root first, remembering where each value came from."""
        own_doc = chain[-1][0]
        merged = Merged({}, {(): (own_doc, ("policies", name))})
        data: dict[str, Any] = {}
        for doc, agent, raw in chain:
            layer = {k: v for k, v in raw.items() if k != "extends"}
            data = deep_merge(data, layer, (), doc, ("policies", agent), merged)
        merged.data = data
        return merged

    def _validate_agent(
        self, step: _AgentStep, *, report_all: bool, lost: set[PathT] | None = None
    ) -> tuple[AgentPolicy, list[PathT]] | None:
        """The merged policy as an :class:`AgentPolicy`, and the paths left out to get
        there. Each finding is reported (when the file-level pass already reported the
        chain's own errors, only those it did not); the values they are about are then
        removed and the rest validated again, a few rounds at most. ``lost``: the paths
        the loader left out (already reported at their line:col), never reported again
        as missing."""
        data = step.merged.data
        removed: list[PathT] = []
        reported = {(d.file, d.line, d.col, d.code) for d, _ in self.diags}
        for _ in range(_MAX_ROUNDS):
            try:
                return AgentPolicy.model_validate(data, strict=True), removed
            except ValidationError as exc:
                errors = _not_dropped(exc.errors(), data, lost or set())
                if not errors:
                    return None  # only what the loader left out is missing: reported
                for f in validation_findings(
                    errors, data, AgentPolicy, redact=self.redactor.redact
                ):
                    d, raw_path = step.merged.locate(f.path)
                    line, col = d.pos(raw_path)
                    if report_all or (d.name, max(1, line), max(1, col), f.code) not in reported:
                        message = f.message
                        if f.path[:1] == ("model",) and ("", step.name) not in self._noted:
                            self._noted.add(("", step.name))
                            message += WITHOUT_MODEL
                        step.emit(f.path, f.code, message, f.hint)
                paths = [_removable(e, data) for e in errors]
                cut = [p for p in paths if p]
                if len(cut) < len(paths):
                    return None  # an error about the whole agent: nothing left to check
                data = _without(data, cut)
                removed.extend(cut)
        return None  # pragma: no cover - every round removes at least one key

    def _model(self, step: _AgentStep, ap: AgentPolicy) -> tuple[ModelSpec, str | None] | None:
        """The agent's model (inline, from ``models:`` or the built-in catalogue), its
        catalogue name, and the check of its tokenizers."""
        name = step.name
        merged = step.merged
        spec: ModelSpec
        model_name: str | None = None
        tok_where: tuple[Doc, PathT]
        if ap.model is None:
            if not step.touches([("model",)]):
                step.emit(
                    (),
                    "CTX207",
                    f"agent {name!r} has no model{WITHOUT_MODEL}",
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
                step.emit(
                    ("model",),
                    "CTX208",
                    f"unknown model {ap.model!r}{suggestion(ap.model, known)}{WITHOUT_MODEL}",
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
            tok_where = merged.locate(("model", "tokenizer"))
        tdoc, tbase = tok_where
        check_tokenizers(
            self.registry,
            spec,
            tbase,
            lambda p, code, msg, hint: self.emit(tdoc, tdoc.pos(p), code, msg, hint, name),
        )
        return spec, model_name

    def _components(self, step: _AgentStep, ap: AgentPolicy) -> _Components:
        """Every component the agent names, looked up and its options validated by the
        component's own model (pipeline layers and their summarizers, the overflow
        layer, tool preprocessors, the snapshot and state stores)."""
        reg = self.registry
        emit = step.emit
        parts = _Components()
        for i, s in enumerate(ap.pipeline):
            opts = self._component("layer", s.layer, s.options, ("pipeline", i), emit, "layer")
            if opts is None:
                parts.ok = False
                continue
            cls = reg.get("layer", s.layer)
            if "summarizer" in getattr(cls.Options, "model_fields", {}):
                sname = opts.get("summarizer")
                if isinstance(sname, str) and reg.get("summarizer", sname) is None:
                    parts.ok = False
                    emit(
                        ("pipeline", i, "options", "summarizer"),
                        "CTX102",
                        f"unknown summarizer {sname!r}{suggestion(sname, reg.names('summarizer'))}"
                        + failed_plugins(reg),
                        "known summarizers: " + (", ".join(reg.names("summarizer")) or "(none)"),
                    )
            if s.enabled:
                parts.steps.append(ResolvedStep(layer=s.layer, at=s.at, options=opts))
                parts.index_map.append(i)
        ov = ap.on_overflow
        ov_opts = self._component("layer", ov.layer, ov.options, ("on_overflow",), emit, "layer")
        parts.on_overflow = ResolvedStep(layer=ov.layer, options=parts.checked(ov_opts))
        for glob, rule in ap.tools.items():
            parts.tools[glob] = self._tool_rule(glob, rule, parts, emit)
        snap = ap.snapshots
        sopts = self._component(
            "snapshot_store", snap.store, snap.options, ("snapshots",), emit, "store"
        )
        parts.snapshots = snap.model_copy(update={"options": parts.checked(sopts)})
        st = ap.state
        stopts = self._component("state_store", st.store, st.options, ("state",), emit, "store")
        parts.state = st.model_copy(update={"options": parts.checked(stopts)})
        return parts

    def _policy(
        self,
        name: str,
        ap: AgentPolicy,
        spec: ModelSpec,
        model_name: str | None,
        parts: _Components,
    ) -> Policy:
        """The resolved policy: the reply reserve completed from the model."""
        reserve = ap.budget.reserve_output
        if reserve is None:
            reserve = spec.max_output_tokens or 4096
        # budget.window stays as written: the engine and `explain` take the smaller of it
        # and the model's window (ctxpolicy.budget.effective_window)
        budget = ap.budget.model_copy(update={"reserve_output": reserve})
        return Policy(
            agent=name,
            source=self.path,
            description=ap.description,
            model_name=model_name,
            model=spec,
            budget=budget,
            thresholds=ap.thresholds,
            pipeline=parts.steps,
            on_overflow=parts.on_overflow,
            tools=parts.tools,
            snapshots=parts.snapshots,
            pinned=ap.pinned,
            ledger=ap.ledger,
            constraints=list(ap.constraints),
            cache=ap.cache,
            state=parts.state,
            tune=ap.tune,
        )

    def _semantic_checks(
        self,
        step: _AgentStep,
        chain: list[tuple[Doc, str, dict[str, Any]]],
        policy: Policy,
        index_map: list[int],
    ) -> None:
        """The findings of :func:`~ctxpolicy.resolve.checks.check_policy`, positioned;
        those that depend on a value left out for a schema error are dropped (the
        default that replaced it is not what the user wrote)."""
        for finding in check_policy(policy):
            path = finding.path
            if len(path) > 1 and path[0] == "pipeline" and isinstance(path[1], int):
                path = ("pipeline", index_map[path[1]], *path[2:])
                finding = dataclasses.replace(finding, path=path)
            if step.touches(_depends_on(finding)):
                continue
            if finding.related:
                self._emit_related(step.name, chain, step.merged, finding)
            else:
                step.emit(path, finding.code, finding.message, finding.hint)

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

    def _tool_rule(self, glob: str, rule: ToolRule, parts: _Components, emit: Any) -> ToolRule:
        """A tool rule with its preprocessors' options checked by their own models; each
        item of a chain is checked like a single one, at its own place in the file."""
        base: PathT = ("tools", glob)
        if isinstance(rule.preprocess, str):
            topts = self._component(
                "preprocessor", rule.preprocess, rule.options, base, emit, "preprocess"
            )
            return rule.model_copy(update={"options": parts.checked(topts)})
        steps: list[PreprocessStep] = []
        for i, item in enumerate(rule.preprocess):
            at: PathT = (*base, "preprocess", i)
            if isinstance(item, str):
                # a bare name: its problems are reported at the name itself
                def at_item(path: PathT, *rest: Any, _at: PathT = at) -> None:
                    emit(_at, *rest)

                opts = self._component("preprocessor", item, {}, at, at_item, "name")
                steps.append(PreprocessStep(name=item, options=parts.checked(opts)))
            else:
                opts = self._component("preprocessor", item.name, item.options, at, emit, "name")
                steps.append(item.model_copy(update={"options": parts.checked(opts)}))
        return rule.model_copy(update={"preprocess": steps})

    def _component(
        self, kind: Any, cname: str, options: dict[str, Any], base: PathT, emit: Any, key: str
    ) -> dict[str, Any] | None:
        return check_component(
            self.registry, kind, cname, options, base, key, emit, self.redactor.redact
        )


_MAX_ROUNDS = 8

#: the values the trigger (window − reserve − growth − margin) is computed from
_TRIGGER_INPUTS: tuple[PathT, ...] = (
    ("model",),
    ("budget", "window"),
    ("budget", "reserve_output"),
    ("budget", "tool_growth"),
    ("budget", "safety_margin"),
)


def _depends_on(finding: Any) -> list[PathT]:
    """The values a semantic finding is computed from (beyond its own path)."""
    own: list[PathT] = [finding.path, *finding.related]
    target: list[PathT] = [("budget", "target")]
    extra: dict[str, list[PathT]] = {
        "CTX201": [*_TRIGGER_INPUTS],
        "CTX202": [finding.path, ("thresholds",)],
        "CTX203": [*_TRIGGER_INPUTS, *target],
        "CTX204": [finding.path, *_TRIGGER_INPUTS],
        "CTX209": target,
        "CTX210": [*_TRIGGER_INPUTS, *target, ("thresholds",), ("pipeline",)],
    }
    if finding.code in extra:  # its own path may be a whole section (CTX201: `budget`)
        return [*finding.related, *extra[finding.code]]
    return own


def _removable(err: Mapping[str, Any], data: Any) -> PathT:
    """The data path to leave out so that ``err`` goes away: the key the error is
    about (for a missing key, the mapping that lacks it); () when that is the whole
    agent policy."""
    missing = err["type"] == "missing"
    path, _ = data_path(err.get("loc", ()), data, missing)
    if missing:
        path = path[:-1]
    # cut at the last mapping key: removing a list item would renumber its siblings
    while path and not isinstance(path[-1], str):
        path = path[:-1]
    return path


def _without(data: dict[str, Any], paths: list[PathT]) -> dict[str, Any]:
    """A copy of ``data`` without the values at ``paths``."""
    out = copy.deepcopy(data)
    for path in paths:
        node: Any = out
        for el in path[:-1]:
            try:
                node = node[el]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def _overlaps(a: PathT, b: PathT) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


@dataclasses.dataclass
class _AgentStep:
    """What the steps of one agent's resolution share: its name, its merged data, the
    values left out for schema errors, and an ``emit`` positioned through the merge."""

    resolver: AgentSteps
    name: str
    merged: Merged
    removed: list[PathT] = dataclasses.field(default_factory=list)

    def emit(self, path: PathT, code: str, message: str, hint: str | None = None) -> None:
        d, raw_path = self.merged.locate(path)
        self.resolver.emit(d, d.pos(raw_path), code, message, hint, self.name)

    def touches(self, paths: list[PathT]) -> bool:
        """Whether one of ``paths`` was left out (or lies inside what was)."""
        return any(_overlaps(p, r) for p in paths for r in self.removed)


@dataclasses.dataclass
class _Components:
    """The agent's components, their options validated (``ok`` false when one failed)."""

    ok: bool = True
    steps: list[ResolvedStep] = dataclasses.field(default_factory=list)
    #: pipeline index of each resolved step (disabled steps are not resolved)
    index_map: list[int] = dataclasses.field(default_factory=list)
    on_overflow: ResolvedStep = dataclasses.field(
        default_factory=lambda: ResolvedStep(layer="emergency")
    )
    tools: dict[str, Any] = dataclasses.field(default_factory=dict)
    snapshots: Any = None
    state: Any = None

    def checked(self, options: dict[str, Any] | None) -> dict[str, Any]:
        if options is None:
            self.ok = False
            return {}
        return options
