"""cProfile results as table rows, for the benchmark reports (bench_engine, peers.timing)."""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["function_name", "profile_rows", "short_path"]


def short_path(file: str) -> str:
    """``ctxpolicy/engine.py`` for a file of the package, ``pkg/mod.py`` for an installed
    one, ``built-in`` for C functions."""
    if file == "~":
        return "built-in"
    for marker in ("/ctxpolicy/", "/site-packages/"):
        if marker in file:
            tail = file.split(marker, 1)[1]
            return ("ctxpolicy/" if marker == "/ctxpolicy/" else "") + tail
    return Path(file).name if "/" in file else file


def function_name(key: tuple[str, int, str]) -> str:
    """``module:line(function)`` of a pstats key (the bare name of a C function)."""
    file, line, fn = key
    return fn if file == "~" else f"{short_path(file)}:{line}({fn})"


def profile_rows(prof: cProfile.Profile) -> tuple[float, list[dict[str, Any]]]:
    """Total own seconds and one row per profiled function (unsorted): ``function``,
    ``module``, ``calls``, ``tottime_s``, ``cumtime_s``, ``own_share``, ``cum_share``."""
    entries: Mapping[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values())
    rows = []
    for key, (_cc, nc, tt, ct, _callers) in entries.items():
        rows.append(
            {
                "function": function_name(key),
                "module": short_path(key[0]),
                "calls": nc,
                "tottime_s": tt,
                "cumtime_s": ct,
                "own_share": tt / total if total else 0.0,
                "cum_share": ct / total if total else 0.0,
            }
        )
    return total, rows
