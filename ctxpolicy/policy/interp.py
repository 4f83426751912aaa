"""Environment interpolation in string values: ``${NAME}``, ``${NAME:-default}``, ``${env:NAME}``.

Only string values are interpolated (never keys), and the result is always the
string as substituted: nothing is evaluated, split or resolved, so
``${HOME}/../..`` stays the literal path text it expands to. ``$${`` writes a
literal ``${``.

Two guarantees for what users see:

* **bounded size**: the text a document expands to is limited to
  :data:`MAX_INTERPOLATED` characters in total (a ``${BIG}`` repeated in a file
  cannot amplify into gigabytes); the substitution that would exceed it is not made
  and reported as a ``size`` problem;
* **no value in diagnostics**: every substitution is recorded in a :class:`Redactor`,
  which turns any text that carries a substituted value back into the ``${NAME}`` the
  user wrote (diagnostic messages, hints, ``explain`` output).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxpolicy.policy.source import PathT

__all__ = ["MAX_INTERPOLATED", "InterpProblem", "Redactor", "interpolate", "interpolate_tree"]

#: Upper bound of the characters a document's string values expand to, in total
#: (the file itself is limited to 1 MiB; this keeps an expanded document as small).
MAX_INTERPOLATED = 1024 * 1024

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_BODY_RE = re.compile(rf"^(?:env:)?({_NAME})(?::-(.*))?$", re.S)


@dataclass(frozen=True)
class InterpProblem:
    """A variable that is not set (``missing``) or a malformed ``${...}``."""

    kind: str  # "missing" | "syntax" | "size"
    text: str  # variable name or offending snippet (as written, never a value)
    message: str


#: Values this short are only redacted where they stand alone (a quoted or whole
#: value), not inside other words: a variable set to ``1`` must not turn every
#: ``1`` of a message into ``${NAME}``.
_SHORT = 4


class Redactor:
    """Maps interpolated text back to what the user wrote.

    :meth:`record` is called for every string value that contained a substitution
    from the environment (value → as written) and for every variable used (its value
    → ``${NAME}``). :meth:`redact` replaces each recorded value in a text by its
    written form, also in the escaped forms ``repr`` and JSON give it, longest first;
    text that is already as written stays as it is, so redacting twice changes nothing.
    Linear in the text and the values (no regex of the values is ever compiled).
    """

    def __init__(self) -> None:
        self._pairs: dict[str, str] = {}  # value -> written
        self._forms: list[tuple[str, str]] | None = None

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def record(self, value: str, written: str) -> None:
        if value and value != written and value not in self._pairs:
            self._pairs[value] = written
            self._forms = None

    def _sorted_forms(self) -> list[tuple[str, str]]:
        if self._forms is None:
            forms: dict[str, str] = {}
            for value, written in self._pairs.items():
                forms.setdefault(written, written)  # as written: kept as it is
                for form in (value, repr(value)[1:-1], _json_inner(value)):
                    forms.setdefault(form, written)
            self._forms = sorted(forms.items(), key=lambda kv: len(kv[0]), reverse=True)
        return self._forms

    def redact(self, text: str) -> str:
        if not self._pairs or not text:
            return text
        # two passes through placeholders that no value can contain (NUL: environment
        # values and policy text never hold one), so a replacement is never replaced again
        shown: list[str] = []
        for form, written in self._sorted_forms():
            if not form or form not in text:
                continue
            mark = _mark(len(shown))
            if len(form) >= _SHORT:
                text = text.replace(form, mark)
            else:  # short: only where it stands alone between quotes
                for q in ("'", '"'):
                    text = text.replace(f"{q}{form}{q}", f"{q}{mark}{q}")
            shown.append(written)
        for i, written in enumerate(shown):
            text = text.replace(_mark(i), written)
        return text


def _mark(i: int) -> str:
    # NUL + a private-use character: no form (a value, never containing NUL) matches
    # inside or across a mark
    return f"\x00{chr(0xF0000 + i)}\x00"


def _json_inner(value: str) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)[1:-1]


class _Budget:
    """Characters an interpolation may still add (shared by one document)."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.exceeded = False


def interpolate(
    value: str,
    env: Mapping[str, str],
    *,
    redactor: Redactor | None = None,
    budget: _Budget | None = None,
) -> tuple[str, list[InterpProblem]]:
    """Substitute every ``${...}`` of ``value``; unknown names stay as written.

    Each substitution is recorded in ``redactor``; a substitution that would take
    the document past ``budget`` is not made (a ``size`` problem, once).
    """
    if "$" not in value:
        return value, []
    out: list[str] = []
    problems: list[InterpProblem] = []
    from_env = False
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
                written = value[i : end + 1]
                sub = env.get(name, default)
                if sub is not None and budget is not None and len(sub) > budget.left:
                    if not budget.exceeded:
                        budget.exceeded = True
                        problems.append(
                            InterpProblem(
                                "size",
                                written,
                                f"interpolating {written} would make the policy larger than "
                                f"{MAX_INTERPOLATED} characters; left as written",
                            )
                        )
                    out.append(written)
                elif sub is not None:
                    if budget is not None:
                        budget.left -= len(sub)
                    if redactor is not None and name in env:
                        redactor.record(sub, "${" + name + "}")
                        from_env = True
                    out.append(sub)
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
    text = "".join(out)
    if redactor is not None and from_env:  # defaults alone are the file's own text
        redactor.record(text, value)
    return text, problems


def interpolate_tree(
    data: Any,
    env: Mapping[str, str],
    path: PathT = (),
    *,
    redactor: Redactor | None = None,
    limit: int = MAX_INTERPOLATED,
) -> tuple[Any, list[tuple[PathT, InterpProblem]]]:
    """A copy of ``data`` with every string value interpolated, and the problems by path.

    The whole tree may grow by at most ``limit`` characters; substitutions go into
    ``redactor``.
    """
    problems: list[tuple[PathT, InterpProblem]] = []
    budget = _Budget(limit)
    # iterative to stay clear of recursion limits on odd input
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, PathT]] = [(data, root, 0, path)]
    while stack:
        node, parent, slot, p = stack.pop()
        if isinstance(node, str):
            text, probs = interpolate(node, env, redactor=redactor, budget=budget)
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
