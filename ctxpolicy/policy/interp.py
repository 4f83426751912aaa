"""Environment interpolation in string values: ``${NAME}``, ``${NAME:-default}``, ``${env:NAME}``.

Only string values are interpolated (never keys), and the result is always the
string as substituted: nothing is evaluated, split or resolved, so
``${HOME}/../..`` stays the literal path text it expands to. ``$${`` writes a
literal ``${``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["InterpProblem", "interpolate", "interpolate_tree"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_BODY_RE = re.compile(rf"^(?:env:)?({_NAME})(?::-(.*))?$", re.S)

PathT = tuple[str | int, ...]


@dataclass(frozen=True)
class InterpProblem:
    """A variable that is not set (``missing``) or a malformed ``${...}``."""

    kind: str  # "missing" | "syntax"
    text: str  # variable name or offending snippet
    message: str


def interpolate(value: str, env: Mapping[str, str]) -> tuple[str, list[InterpProblem]]:
    """Substitute every ``${...}`` of ``value``; unknown names stay as written."""
    if "$" not in value:
        return value, []
    out: list[str] = []
    problems: list[InterpProblem] = []
    i = 0
    n = len(value)
    while i < n:
        c = value[i]
        if c == "$" and value.startswith("$${", i):
            out.append("${")
            i += 3
            continue
        if c == "$" and value.startswith("${", i):
            end = value.find("}", i + 2)
            if end < 0:
                snippet = value[i:]
                problems.append(
                    InterpProblem("syntax", snippet, f"unterminated '${{' in {value!r}")
                )
                out.append(snippet)
                break
            body = value[i + 2 : end]
            m = _BODY_RE.match(body)
            if m is None:
                problems.append(
                    InterpProblem(
                        "syntax",
                        value[i : end + 1],
                        f"invalid interpolation {value[i : end + 1]!r}: use ${{NAME}}, "
                        "${NAME:-default} or ${env:NAME}",
                    )
                )
                out.append(value[i : end + 1])
            else:
                name, default = m.group(1), m.group(2)
                if name in env:
                    out.append(env[name])
                elif default is not None:
                    out.append(default)
                else:
                    problems.append(
                        InterpProblem(
                            "missing",
                            name,
                            f"environment variable {name!r} is not set (in {value!r})",
                        )
                    )
                    out.append(value[i : end + 1])
            i = end + 1
            continue
        out.append(c)
        i += 1
    return "".join(out), problems


def interpolate_tree(
    data: Any, env: Mapping[str, str], path: PathT = ()
) -> tuple[Any, list[tuple[PathT, InterpProblem]]]:
    """A copy of ``data`` with every string value interpolated, and the problems by path."""
    problems: list[tuple[PathT, InterpProblem]] = []
    # iterative to stay clear of recursion limits on odd input
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, PathT]] = [(data, root, 0, path)]
    while stack:
        node, parent, slot, p = stack.pop()
        if isinstance(node, str):
            text, probs = interpolate(node, env)
            problems.extend((p, pr) for pr in probs)
            parent[slot] = text
        elif isinstance(node, dict):
            new: dict[Any, Any] = {}
            parent[slot] = new
            for k, v in node.items():
                new[k] = None
                stack.append((v, new, k, (*p, k)))
        elif isinstance(node, list):
            lst: list[Any] = [None] * len(node)
            parent[slot] = lst
            for idx, v in enumerate(node):
                stack.append((v, lst, idx, (*p, idx)))
        else:
            parent[slot] = node
    problems.sort(key=lambda item: [str(x) for x in item[0]])
    return root[0], problems
