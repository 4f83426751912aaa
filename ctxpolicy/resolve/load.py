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
:mod:`ctxpolicy.resolve.checks`.

Every diagnostic carries the file, line and column of the key it is about, also
for values inherited through ``extends`` from another file. Nothing raises but
:func:`load_policy` (``PolicyError``); internal failures become ``CTX000``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ctxpolicy.policy.diagnostics import (
    Diagnostic,
    PolicyError,
    make,
    suggestion,
)
from ctxpolicy.policy.interp import Redactor
from ctxpolicy.policy.models import (
    Policy,
)
from ctxpolicy.resolve.agents import AgentSteps
from ctxpolicy.resolve.files import FileSteps

__all__ = ["list_agents", "load_policy", "resolve_agent", "resolve_all", "validate_file"]


class _Resolver(FileSteps, AgentSteps):
    """One resolution: the file steps, then the agent steps, on one shared state."""


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
    # without loader errors passes it too (tests/resolve/test_schema.py checks both agree
    # on every corpus file), so only a file with errors pays for the schema pass, which
    # may then find problems that an error kept the loader from reaching.
    if json_schema and r.order and any(d.severity == "error" for d in diags):
        from ctxpolicy.resolve.schema import dedupe, schema_diagnostics

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
    agent: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Policy:
    """The resolved, frozen policy of ``agent`` (unset: the agent ``default``); raises
    :class:`PolicyError` carrying every diagnostic when any of them is an error
    (file-level or of this agent's chain). Without ``agent`` in a file that has no
    ``default``, the error lists the agents it has."""
    pol, diags, _ = resolve_agent(path, agent or "default", env=env)
    if agent is None and pol is None:
        diags = [_no_default(path, d) if d.code == "CTX308" else d for d in diags]
    agent = agent or "default"
    if pol is None or any(d.severity == "error" for d in diags):
        if not diags:  # pragma: no cover - defensive
            diags = [
                make(os.fspath(path), (1, 1), "CTX000", f"agent {agent!r} could not be resolved")
            ]
        raise PolicyError(diags)
    return pol


def _no_default(path: str | os.PathLike[str], diag: Diagnostic) -> Diagnostic:
    agents = list_agents(path)
    names = ", ".join(repr(a) for a in agents) or "(none)"
    example = f"load_policy({os.fspath(path)!r}, agent={agents[0]!r})" if agents else None
    return dataclasses.replace(
        diag,
        message=f"no agent given and this file has no agent 'default'; its agents: {names}",
        hint=f"pass the agent: {example}" if example else "define an agent under `policies:`",
    )


def list_agents(path: str | os.PathLike[str]) -> list[str]:
    """Agent names usable with :func:`load_policy` (this file's first, then included ones)."""
    r = _Resolver(path, {})
    try:
        r.load()
    except Exception:  # pragma: no cover - last resort
        return []
    return list(r.agents)
