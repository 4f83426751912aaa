"""The search space of ``ctxpolicy tune``: which numbers of a policy are searched.

A parameter is addressed by a path:

* ``budget.target``, ``budget.safety_margin``, ``budget.tool_growth`` (a fixed
  amount) or ``budget.tool_growth.initial`` / ``budget.tool_growth.learn.quantile``;
* ``thresholds.warning`` / ``.error`` / ``.critical``;
* ``pipeline[LAYER].OPTION`` and ``pipeline[LAYER].at`` — a step of the pipeline;
* ``tools[GLOB].OPTION`` — the options of a tool rule's preprocessor.

The default space is the budget terms and thresholds below, plus the ``tune_space``
each component declares beside its options model (built-in and third-party alike)
for every pipeline step and every tool rule the tuning traces actually use. The
agent's ``tune:`` section narrows it (``only``/``exclude`` globs over paths, where
``[`` is literal) and overrides or adds ranges (``space``).

:func:`overlay` turns chosen values into the body of an agent that ``extends`` the
base one and sets only what changed (maps merge in ``extends``; the pipeline is a
list, which replaces, so it is restated whole when one of its steps changed).
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxpolicy.policy.models import (
    TUNABLE_POLICY_PATHS,
    TUNE_COMPONENT_PATH,
    Policy,
    ToolGrowth,
    TuneRange,
    TuneSpec,
)
from ctxpolicy.policy.scalars import resolve_amount

__all__ = ["Param", "SpaceError", "build_space", "matches", "overlay"]

_PATH_RE = TUNE_COMPONENT_PATH

#: Budget amounts: searched (and written) as a share of the window in percent.
PERCENT_PATHS = frozenset(
    {
        "budget.safety_margin",
        "budget.reserve_output",
        "budget.tool_growth",
        "budget.tool_growth.initial",
    }
)
#: Budget and threshold ranges searched by default (budget amounts in % of the window).
BUDGET_SPACE: dict[str, TuneRange] = {
    "budget.target": TuneRange(low=0.3, high=0.85, step=0.05),
    "budget.safety_margin": TuneRange(low=0, high=12, step=0.5, percent=True),
    "budget.tool_growth": TuneRange(low=0, high=30, step=1, percent=True),
    "budget.tool_growth.initial": TuneRange(low=0, high=30, step=1, percent=True),
    "budget.tool_growth.learn.quantile": TuneRange(low=0.5, high=1.0, step=0.05),
    "thresholds.warning": TuneRange(low=0.5, high=0.85, step=0.05),
    "thresholds.error": TuneRange(low=0.7, high=0.94, step=0.02),
}


class SpaceError(ValueError):
    """A ``tune:`` section names a parameter that does not exist or cannot be searched."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Param:
    """One searched number: its path, its range, and the base policy's value."""

    path: str
    range: TuneRange
    base: Any
    origin: str
    #: For a component option in tokens searched as a share of the window: the window.
    tokens_of: int = 0

    def snap(self, value: Any) -> Any:
        """``value`` clipped into the range and onto its grid (choices: unchanged)."""
        r = self.range
        if r.choices is not None or not isinstance(value, (int, float)) or isinstance(value, bool):
            return value
        assert r.low is not None and r.high is not None
        v = min(max(value, r.low), r.high)
        if r.step is not None:  # on the grid optuna uses: low + k·step ≤ high
            k = round((v - r.low) / r.step)
            if r.low + k * r.step > r.high:
                k -= 1
            v = r.low + k * r.step
        if r.is_int:
            return round(v)
        return round(float(v), 6)

    def suggest(self, trial: Any) -> Any:
        """Ask an optuna trial for this parameter's value."""
        r = self.range
        if r.choices is not None:
            return trial.suggest_categorical(self.path, list(r.choices))
        assert r.low is not None and r.high is not None
        if r.is_int:
            return trial.suggest_int(
                self.path, int(r.low), int(r.high), step=int(r.step or 1), log=r.log
            )
        return round(
            trial.suggest_float(self.path, float(r.low), float(r.high), step=r.step, log=r.log),
            6,
        )

    def render(self, value: Any) -> Any:
        """The value as written in a policy file: ``"7.5%"`` for budget amounts,
        tokens for a component option searched as a share of the window."""
        if isinstance(value, float):
            value = round(value, 6)
        if self.range.percent and _is_number(value):
            if self.tokens_of:
                return round(self.tokens_of * value / 100)
            return f"{float(value):g}%"
        return value

    def describe_base(self) -> str:
        """The base value for a comment: as the policy has it (tokens, or a share)."""
        if self.range.percent and self.tokens_of and _is_number(self.base):
            return f"{round(self.base * self.tokens_of / 100)}"
        if self.range.percent and _is_number(self.base):
            return f"{self.base:.3g}% of the window"
        return json.dumps(self.render(self.base))


def matches(path: str, pattern: str) -> bool:
    """``pattern`` (``*``/``?`` wildcards, ``[`` literal) matches ``path``."""
    return path == pattern or fnmatch.fnmatchcase(path, pattern.replace("[", "[[]"))


def _percent_of(value: Any, window: int) -> float:
    return 100.0 * resolve_amount(value, window) / window if window else 0.0


def _budget_base(policy: Policy, path: str, window: int) -> Any:
    b = policy.budget
    g = b.tool_growth
    if path == "budget.target":
        t = b.target
        if isinstance(t, float):
            return t
        from ctxpolicy.budget import compute_budget

        trig = compute_budget(policy).trigger
        return int(t) / trig if trig else 0.7  # a "N%" target is a float once validated
    if path == "budget.safety_margin":
        return _percent_of(b.safety_margin, window)
    if path == "budget.reserve_output":
        return _percent_of(b.reserve_output or 0, window)
    if path == "budget.tool_growth":
        return None if isinstance(g, ToolGrowth) else _percent_of(g, window)
    if path.startswith("budget.tool_growth."):
        if not isinstance(g, ToolGrowth):
            return None
        if path == "budget.tool_growth.initial":
            return _percent_of(g.initial, window)
        if path == "budget.tool_growth.learn.quantile":
            return g.learn.quantile
        if path == "budget.tool_growth.learn.window":
            return g.learn.window
        return None
    if path in ("thresholds.warning", "thresholds.error", "thresholds.critical"):
        return getattr(policy.thresholds, path.split(".", 1)[1])
    return None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _searchable(r: TuneRange, base: Any) -> bool:
    """A declared range applies: a numeric value, or one of the declared choices."""
    return base in r.choices if r.choices is not None else _is_number(base)


_STATES = ("normal", "warning", "error", "critical")


def _fits(path: str, r: TuneRange, base: Any) -> bool:
    """A ``tune.space`` range can be searched for a value like ``base``."""
    if path.endswith("].at") and path.startswith("pipeline["):
        return r.choices is not None and all(c in _STATES for c in r.choices)
    if r.choices is not None:
        return all(type(c) is type(base) or (_is_number(c) and _is_number(base)) for c in r.choices)
    return _is_number(base)


def _step(policy: Policy, layer: str) -> Any:
    return next((s for s in policy.pipeline if s.layer == layer), None)


def _base_value(policy: Policy, path: str, window: int) -> tuple[bool, Any]:
    """``(exists, value)`` of a parameter path in the base policy."""
    if path in TUNABLE_POLICY_PATHS:
        v = _budget_base(policy, path, window)
        return v is not None, v
    m = _PATH_RE.match(path)
    if m is None:
        return False, None
    key, opt = m.group("key"), m.group("opt")
    if m.group(1) == "pipeline":
        step = _step(policy, key)
        if step is None:
            return False, None
        if opt == "at":
            return True, step.at
        return opt in step.options, step.options.get(opt)
    rule = policy.tools.get(key)
    if rule is None:
        return False, None
    return opt in rule.options, rule.options.get(opt)


def _widen(r: TuneRange, base: Any) -> TuneRange:
    """A default range stretched to include the base value (so the base is a point)."""
    if r.choices is not None or not _is_number(base):
        return r
    assert r.low is not None and r.high is not None
    low, high = min(r.low, base), max(r.high, base)
    if r.is_int:
        low, high = math.floor(low), math.ceil(high)
    if r.log and low <= 0:
        return r
    if (low, high) == (r.low, r.high):
        return r
    # keep the grid anchored on the old bounds: whole steps beyond them
    if r.step is not None:
        low = r.low - math.ceil((r.low - low) / r.step) * r.step
        high = r.high + math.ceil((high - r.high) / r.step) * r.step
    return r.model_copy(update={"low": low, "high": high})


def _option(path: str, r: TuneRange, base: Any, origin: str, win: int, widen: bool) -> Param:
    """A component option; a ``percent`` range searches tokens as a share of the window."""
    if r.percent and _is_number(base) and win:
        pct = 100.0 * base / win
        return Param(path, _widen(r, pct) if widen else r, pct, origin, tokens_of=win)
    return Param(path, _widen(r, base) if widen else r, base, origin)


def build_space(
    policy: Policy,
    *,
    registry: Any,
    spec: TuneSpec | None = None,
    window: int | None = None,
    tool_names: Iterable[str] = (),
) -> list[Param]:
    """The parameters searched for ``policy`` (sorted by path).

    ``tool_names``: the tools called in the tuning traces; only the rules they
    select contribute their preprocessor's space. Raises :class:`SpaceError` for a
    ``tune.space`` path that does not exist in the policy.
    """
    from ctxpolicy.budget import compute_budget
    from ctxpolicy.engine.tool_results import select_rule
    from ctxpolicy.sim.replay import with_window

    spec = spec if spec is not None else policy.tune
    win = compute_budget(with_window(policy, window)).window
    found: dict[str, Param] = {}
    for path, r in BUDGET_SPACE.items():
        ok, base = _base_value(policy, path, win)
        if ok:
            found[path] = Param(path, _widen(r, base), base, "budget")
    for step in policy.pipeline:
        cls = registry.get("layer", step.layer)
        for opt, r in dict(getattr(cls, "tune_space", {}) or {}).items():
            base = step.options.get(opt)
            if _searchable(r, base):
                path = f"pipeline[{step.layer}].{opt}"
                found[path] = _option(path, r, base, f"layer {step.layer}", win, True)
    used = {sel[0] for name in tool_names if (sel := select_rule(policy.tools, name)) is not None}
    for glob, rule in policy.tools.items():
        if glob not in used or not isinstance(rule.preprocess, str):
            continue  # a chain's options are its items' own (not searched)
        cls = registry.get("preprocessor", rule.preprocess)
        for opt, r in dict(getattr(cls, "tune_space", {}) or {}).items():
            base = rule.options.get(opt)
            if _searchable(r, base):
                path = f"tools[{glob}].{opt}"
                origin = f"preprocessor {rule.preprocess}"
                found[path] = _option(path, r, base, origin, win, True)
    for path, r in spec.space.items():
        ok, base = _base_value(policy, path, win)
        if not ok:
            raise SpaceError(
                f"tune.space: {path!r} is not a parameter of agent {policy.agent!r} "
                "(paths: budget.target, thresholds.warning, pipeline[LAYER].OPTION, "
                "tools[GLOB].OPTION; the layer or tool rule must exist)",
                path,
            )
        if not _fits(path, r, base):
            raise SpaceError(
                f"tune.space: {path!r} of agent {policy.agent!r} is {base!r}: "
                + (
                    "`at` takes `choices` of the states normal, warning, error, critical"
                    if path.endswith("].at")
                    else "a numeric range needs a numeric value (or give `choices`)"
                ),
                path,
            )
        if path in PERCENT_PATHS:
            found[path] = Param(path, r.model_copy(update={"percent": True}), base, "tune.space")
        elif path.startswith(("budget.", "thresholds.")):
            found[path] = Param(path, r, base, "tune.space")
        else:
            found[path] = _option(path, r, base, "tune.space", win, False)
    out = [
        p
        for path, p in sorted(found.items())
        if (not spec.only or any(matches(path, g) for g in spec.only))
        and not any(matches(path, g) for g in spec.exclude)
    ]
    return out


# --------------------------------------------------------------------------- overlay


def _set(tree: dict[str, Any], keys: list[str], value: Any) -> None:
    for k in keys[:-1]:
        tree = tree.setdefault(k, {})
    tree[keys[-1]] = value


def _non_default(registry: Any, layer: str, options: Mapping[str, Any]) -> dict[str, Any]:
    cls = registry.get("layer", layer)
    try:
        defaults = cls.Options().model_dump(mode="json")
    except Exception:
        return dict(options)
    return {k: v for k, v in options.items() if k not in defaults or defaults[k] != v}


def changed(params: Iterable[Param], values: Mapping[str, Any]) -> list[Param]:
    """The parameters whose value differs from the base policy's (after snapping)."""
    return [p for p in params if p.path in values and values[p.path] != p.snap(p.base)]


def overlay(
    policy: Policy, params: Iterable[Param], values: Mapping[str, Any], *, registry: Any
) -> tuple[dict[str, Any], list[tuple[tuple[str | int, ...], Param]]]:
    """The agent body that ``extends`` ``policy.agent`` and sets only what changed.

    Returns the body and, for each changed value, its key path inside the body
    (for comments) and its parameter.
    """
    body: dict[str, Any] = {"extends": policy.agent}
    where: list[tuple[tuple[str | int, ...], Param]] = []
    steps: dict[str, dict[str, Any]] = {}
    for p in changed(params, values):
        v = p.render(values[p.path])
        m = _PATH_RE.match(p.path)
        if m is None:
            keys = p.path.split(".")
            _set(body, keys, v)
            where.append((tuple(keys), p))
        elif m.group(1) == "tools":
            keys = ["tools", m.group("key"), "options", m.group("opt")]
            _set(body, keys, v)
            where.append((tuple(keys), p))
        else:
            steps.setdefault(m.group("key"), {})[m.group("opt")] = (v, p)
    if steps:
        pipeline: list[dict[str, Any]] = []
        for i, step in enumerate(policy.pipeline):
            new = steps.get(step.layer, {})
            at = new["at"][0] if "at" in new else step.at
            opts = dict(step.options)
            opts.update({k: v for k, (v, _) in new.items() if k != "at"})
            entry: dict[str, Any] = {"layer": step.layer, "at": at}
            nd = _non_default(registry, step.layer, opts)
            kept = {k: v for k, v in opts.items() if k in nd or k in new}  # changed: always shown
            if kept:
                entry["options"] = kept
            pipeline.append(entry)
            for k, (_, p) in new.items():
                where.append(
                    (("pipeline", i, k) if k == "at" else ("pipeline", i, "options", k), p)
                )
        body["pipeline"] = pipeline
    return body, where
