"""The kinds of agent :mod:`benchmarks.bench_kinds` measures: which shared traces belong
to each, the policy replayed for a kind at a window, the fixed tune / held-out halves,
and the rule checked where sending everything fits (the window it just fits at, and
whether a replay kept the rule)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks._common import SHARED, trace_files
from benchmarks.peers.table import trace_halves

__all__ = [
    "FIT_BILL",
    "FIT_RETENTION",
    "FIT_SCALES",
    "KINDS",
    "WINDOW_AGENTS",
    "agent_for",
    "fit_window",
    "fits_held",
    "half",
    "kind_halves",
    "kind_of",
]

#: kind -> (file-name prefixes, shipped policy, windows)
KINDS: dict[str, tuple[tuple[str, ...], str, tuple[int, ...]]] = {
    "swe": (("swe-agent__", "mini-swe-agent__", "openhands__"), "coding_agent", (16384, 32768)),
    "customer_service": (("tau-bench__", "tau2-bench__"), "customer_service_agent", (8192, 16384)),
    "multi_tool": (("tapeagents-gaia__",), "default", (16384, 32768)),
    "web": (("tapeagents-workarena__",), "default", (16384, 32768)),
    "data_analysis": (("spider2__",), "data_analysis_agent", (16384, 32768)),
}

#: kind -> {window: shipped policy made for windows up to it}, where the kind's policy
#: in :data:`KINDS` is not the one shipped for its smaller windows
WINDOW_AGENTS: dict[str, dict[int, str]] = {"swe": {16384: "coding_agent_16k"}}


def agent_for(kind: str, window: int, agents: Mapping[str, str] | None = None) -> str:
    """The policy replayed for ``kind`` at ``window``: ``agents[kind]`` at every window
    if given, else the :data:`WINDOW_AGENTS` policy of the smallest window there at or
    above ``window``, else the kind's own (:data:`KINDS`)."""
    if agents and kind in agents:
        return agents[kind]
    for upto, agent in sorted(WINDOW_AGENTS.get(kind, {}).items()):
        if window <= upto:
            return agent
    return KINDS[kind][1]


def kind_of(name: str) -> str | None:
    """The kind of a trace file by its name (None: not one of :data:`KINDS`)."""
    for kind, (prefixes, _, _) in KINDS.items():
        if name.startswith(prefixes):
            return kind
    return None


def kind_halves(sizes: Mapping[str, int]) -> dict[str, str]:
    """``{trace: "tune" | "held_out"}``, per kind.

    :func:`benchmarks.peers.table.trace_halves` within each kind (sizes in messages),
    an odd last trace ``held_out`` (a kind with a single trace is all held out: its
    policy is chosen without it).
    """
    out: dict[str, str] = {}
    for kind in KINDS:
        mine = {n: s for n, s in sizes.items() if kind_of(n) == kind}
        out |= trace_halves(mine, odd="held_out")
    return out


def half(which: str) -> dict[str, list[Path]]:
    """``{kind: [trace paths]}`` of one half."""
    files = trace_files()
    if not files:
        raise FileNotFoundError(f"no traces under {SHARED / 'traces'} (set CTXPOLICY_SHARED)")
    sizes = {}
    for p in files:
        with p.open("rb") as f:
            sizes[p.name] = sum(1 for _ in f)
    split = kind_halves(sizes)
    out: dict[str, list[Path]] = {k: [] for k in KINDS}
    for p in files:
        kind = kind_of(p.name)
        if kind is not None and split.get(p.name) == which:
            out[kind].append(p)
    return out


#: ``--fits``: each trace at its fit window (:func:`fit_window`) times these: just
#: fitting, and a quarter to spare
FIT_SCALES = (1.05, 1.25)

#: the rule where sending everything fits: retention at least this …
FIT_RETENTION = 0.98
#: … unless the bill is below this share of sending everything
FIT_BILL = 0.85


def fits_held(row: Mapping[str, Any]) -> bool | None:
    """Whether one replay kept the rule where sending everything fits: retention ≥
    :data:`FIT_RETENTION` (no fact to keep: kept) or a bill below :data:`FIT_BILL` of
    sending everything. None: sending everything did not fit (or the row failed, or
    a tree that does not measure it)."""
    if "error" in row or not row.get("fits"):
        return None
    kept = row["facts"] == 0 or row["in_context"] >= FIT_RETENTION * row["facts"]
    return kept or (row["none"] > 0 and row["total"] < FIT_BILL * row["none"])


def fit_window(policy: Any, peak: int) -> int:
    """The smallest window at which a request of ``peak`` tokens fits under ``policy``:
    ``peak + reserve_output`` (a reserve given as a share of the window grows with it)."""
    from ctxpolicy.budget import budget_parts
    from ctxpolicy.sim.replay import with_window

    w = peak
    for _ in range(64):  # a share below 1 converges in a few steps (integers)
        reserve = budget_parts(with_window(policy, w))[1]
        if peak <= w - reserve:
            return w
        w = peak + reserve
    return w
