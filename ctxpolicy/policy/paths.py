"""Store locations in a policy: ``${NAME}`` interpolation of a path and a leading ``~``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["interpolate_path"]

_INTERP_RE = re.compile(r"\$\$\{|\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate_path(path: str, env: Mapping[str, str] | None = None) -> str:
    """``${NAME}``, ``${NAME:-default}``, ``${env:NAME}``, ``$${`` and a leading ``~``.

    Pure string substitution (once, not recursive; nothing is executed); ``:-``
    uses the default when the variable is unset or empty, ``$${`` writes ``${``. A
    missing variable without default raises ``ValueError``. The default may itself
    start with ``~``; ``~`` is expanded after substitution, only at the start, from
    ``env["HOME"]`` when ``env`` has it.
    """
    env = os.environ if env is None else env

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$${":
            return "${"
        name, default = m.group(1), m.group(2)
        val = env.get(name)
        if val is None or (val == "" and default is not None):
            if default is None:
                raise ValueError(f"environment variable {name} is not set (used in snapshots.path)")
            return default
        return val

    out = _INTERP_RE.sub(sub, path)
    if out == "~" or out.startswith("~/"):
        home = env.get("HOME") or os.path.expanduser("~")
        out = home + out[1:]
    return out
