"""The policy diff: a small policy file whose agent ``extends`` the original one.

:func:`resolve_body` resolves a candidate (the agent body of :func:`overlay
<ctxpolicy.tune.space.overlay>`) with the project's own resolver, exactly as the
written diff will resolve, so what ``tune`` measured is what the user gets.
:func:`write_diff` renders the body as YAML with a comment on every changed value,
validates the file (every diagnostic, not just errors of this agent) and checks
that it resolves to the measured policy before it replaces the target file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxpolicy.policy.diagnostics import Diagnostic, PolicyError
from ctxpolicy.policy.models import Policy

__all__ = ["DiffError", "render_yaml", "resolve_body", "same_policy", "write_diff"]

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class DiffError(ValueError):
    """The diff file would not validate; carries the diagnostics."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.diagnostics = list(diagnostics)


def _doc(include: str, agent: str, body: Mapping[str, Any]) -> dict[str, Any]:
    return {"ctxpolicy": 1, "include": [include], "policies": {agent: dict(body)}}


def resolve_body(
    body: Mapping[str, Any], *, base_file: str | Path, agent: str, workdir: str | Path
) -> Policy:
    """The policy of an agent with this body, in a file including ``base_file``.

    Raises :class:`ctxpolicy.PolicyError` with the resolver's diagnostics.
    """
    path = Path(workdir) / f"candidate-{os.getpid()}.yaml"
    doc = _doc(str(Path(base_file).resolve()), agent, body)
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")  # JSON is YAML
    from ctxpolicy.resolve.load import load_policy

    return load_policy(path, agent)


def same_policy(a: Policy, b: Policy) -> bool:
    """Equal but for the agent name and source file."""
    skip = {"agent", "source", "description", "tune"}
    return a.model_dump(exclude=skip) == b.model_dump(exclude=skip)


# --------------------------------------------------------------------------- YAML


def _key(k: Any) -> str:
    return k if isinstance(k, str) and _PLAIN_KEY.match(k) else json.dumps(k)


def _scalar(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def render_yaml(
    data: Mapping[str, Any],
    comments: Mapping[tuple[str | int, ...], str] | None = None,
    *,
    indent: int = 0,
    path: tuple[str | int, ...] = (),
) -> list[str]:
    """Block-style YAML lines of ``data`` (JSON scalars), ``comments`` by key path."""
    comments = comments or {}
    pad = " " * indent
    lines: list[str] = []
    for k, v in data.items():
        p = (*path, k)
        note = f"  # {comments[p]}" if p in comments else ""
        if isinstance(v, Mapping) and v:
            lines.append(f"{pad}{_key(k)}:{note}")
            lines.extend(render_yaml(v, comments, indent=indent + 2, path=p))
        elif isinstance(v, list) and v and all(isinstance(x, Mapping) and x for x in v):
            lines.append(f"{pad}{_key(k)}:{note}")
            for i, item in enumerate(v):
                sub = render_yaml(item, comments, indent=indent + 4, path=(*p, i))
                sub[0] = f"{pad}  - {sub[0].lstrip()}"
                lines.extend(sub)
        else:
            lines.append(f"{pad}{_key(k)}: {_scalar(v)}{note}")
    return lines


def write_diff(
    target: str | Path,
    *,
    base_file: str | Path,
    agent: str,
    body: Mapping[str, Any],
    comments: Mapping[tuple[str | int, ...], str],
    header: Sequence[str],
    expected: Policy | None = None,
) -> str:
    """Write the diff file; returns its text.

    The file includes ``base_file`` by a path relative to itself. It is validated
    (any error diagnostic of the file, and ``load_policy`` of ``agent``) and, with
    ``expected``, checked to resolve to that policy, before it replaces ``target``;
    on failure nothing is written and :class:`DiffError` says why.
    """
    from ctxpolicy.resolve.load import load_policy, validate_file

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    include = os.path.relpath(Path(base_file).resolve(), target.parent.resolve())
    doc = _doc(Path(include).as_posix(), agent, body)
    full = {("policies", agent, *k): v for k, v in comments.items()}
    lines = [*(f"# {h}".rstrip() for h in header), *render_yaml(doc, full)]
    text = "\n".join(lines) + "\n"
    tmp = target.with_name(f".{target.stem}.tmp{target.suffix or '.yaml'}")
    tmp.write_text(text, encoding="utf-8")
    try:
        errors = [d for d in validate_file(tmp) if d.severity == "error"]
        if errors:
            raise DiffError(f"{target}: the policy diff does not validate", errors)
        try:
            got = load_policy(tmp, agent)
        except PolicyError as exc:
            raise DiffError(
                f"{target}: the policy diff does not resolve", exc.diagnostics
            ) from None
        if expected is not None and not same_policy(got, expected):
            raise DiffError(f"{target}: the policy diff does not resolve to the measured policy")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return text
