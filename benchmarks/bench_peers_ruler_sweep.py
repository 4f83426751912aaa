"""The shipped coding policies against small changes of their knobs, on the tune half only.

``coding_agent`` at 32k and ``coding_agent_16k`` at 16k, as shipped and with one knob
changed, on the tune half of the shared traces (:func:`benchmarks.peers.table.trace_halves`),
measured by the ruler users pay (:mod:`benchmarks.peers.runs`). The section says when a
variant replaces the shipped one.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, SHARED, machine, parser, publish, trace_files

POLICIES = ROOT / "policies" / "agents.yaml"
#: (agent, window) → the knob changes tried (``{}``: as shipped)
GRID: dict[tuple[str, int], list[dict[str, float]]] = {
    ("coding_agent", 32768):
        [{}, {"target": 0.3}, {"target": 0.5}, {"warning": 0.9}, {"cap": 3000}, {"cap": 6000}],
    ("coding_agent_16k", 16384):
        [{}, {"target": 0.3}, {"target": 0.5}, {"cap": 1500}, {"cap": 3000}, {"lines": 20}],
}  # fmt: skip


def variant(agent: str, knobs: Mapping[str, float]) -> Any:
    """The shipped policy ``agent`` with ``knobs`` changed."""
    from benchmarks._inputs import load_agent

    pol, _ = load_agent(agent, str(POLICIES))
    upd: dict[str, Any] = {}
    if "warning" in knobs:
        w = knobs["warning"]
        th = pol.thresholds
        upd["thresholds"] = th.model_copy(
            update={"warning": w, "error": max(w, th.error), "critical": max(w, th.critical)}
        )
    if "target" in knobs:
        upd["budget"] = pol.budget.model_copy(update={"target": knobs["target"]})
    tools = dict(pol.tools)
    for knob, glob, option in (("cap", "*", "max_chars"), ("lines", "read_file", "lines")):
        if knob in knobs:
            rule = tools[glob]
            tools[glob] = rule.model_copy(
                update={"options": {**rule.options, option: int(knobs[knob])}}
            )
            upd["tools"] = tools
    return pol.model_copy(update=upd)


def one(agent: str, window: int, knobs: dict[str, float], trace: str) -> dict[str, Any]:
    """One variant on one trace (a process-pool work item)."""
    from benchmarks.peers.runs import EXTRACTIVE, Contestant, ruler, run_contestant
    from ctxpolicy.sim.replay import load_trace

    c = Contestant("sweep", EXTRACTIVE, variant(agent, knobs))
    d = run_contestant(load_trace(trace), c, window, trace=Path(trace).name, counter=ruler())
    b, r = d["billing"], d["retention"]
    out = {"agent": agent, "window": window, "knobs": json.dumps(knobs, sort_keys=True)}
    out |= {"cost": b["total_cost"], "none": b["total_cost_none"], "facts": r["facts"]}
    out |= {"kept": r["in_context"], "far": r["far_facts"], "far_kept": r["far_in_context"]}
    out |= {k: d[k] for k in ("prefix_changes", "calls")}
    return out | {"avoidable": d["overflows"] - d["overflows_unavoidable"]}


def tune_half(traces: list[str]) -> list[str]:
    """The ``tune`` half of ``traces`` (the split of the ruler's peer table)."""
    from benchmarks.peers.table import trace_halves
    from ctxpolicy.sim.replay import load_trace

    sizes = {
        Path(t).name: sum(1 for m in load_trace(t) if m.get("role") == "assistant") for t in traces
    }
    split = trace_halves(sizes)
    return [t for t in traces if split.get(Path(t).name) == "tune"]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "one trace, two variants", jobs=True)
    args = ap.parse_args(argv)
    traces = [str(p) for p in trace_files()]
    if not traces:
        print(f"skipped: no shared traces under {SHARED / 'traces'}")
        return 0
    tune = tune_half(traces)
    grid = GRID
    if args.quick:
        tune = sorted(tune, key=lambda t: Path(t).stat().st_size)[:1]
        grid = {k: v[:2] for k, v in list(GRID.items())[1:]}
    jobs = [(a, w, k, t) for (a, w), ks in grid.items() for k in ks for t in tune]
    t0 = time.perf_counter()
    acc: dict[tuple[str, int, str], Counter[str]] = defaultdict(Counter)
    summed = ("cost", "none", "facts", "kept", "far", "far_kept", "prefix_changes", "calls")
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for d in pool.map(one, *zip(*jobs, strict=True)):
            acc[d["agent"], d["window"], d["knobs"]].update(
                {k: d[k] for k in (*summed, "avoidable")}
            )
    rows = [
        {"agent": agent, "window": window, "knobs": json.loads(knobs),
         "total_over_none": round(a["cost"] / max(1.0, a["none"]), 4),
         "retention": round(a["kept"] / max(1, a["facts"]), 4),
         "far_retention": round(a["far_kept"] / max(1, a["far"]), 4),
         "prefix_changes_per_100": round(100 * a["prefix_changes"] / max(1, a["calls"]), 2),
         "avoidable_overflows": int(a["avoidable"])}
        for (agent, window, knobs), a in acc.items()
    ]  # fmt: skip
    elapsed = time.perf_counter() - t0
    data = {"machine": machine(), "quick": args.quick, "traces": tune, "rows": rows}
    data |= {"elapsed_s": elapsed, "jobs": args.jobs}
    publish("bench_peers_ruler_sweep", data, to_markdown(data))
    return 0


def to_markdown(data: dict[str, Any]) -> str:
    lines = [
        "## The shipped coding policies against one-knob changes, tune half (issue 27)",
        "",
        f"{len(data['traces'])} traces of the tune half; extractive summaries; the ruler users "
        "pay (Anthropic prompt caching). `{}`: as shipped.",
        "",
        "| policy @ window | change | total cost ÷ none | retention | far retention "
        "| prefix changes / 100 | avoidable overflows |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['agent']} @ {r['window']:,} | `{json.dumps(r['knobs'])}` | "
        f"{r['total_over_none']:.3f} | {r['retention']:.1%} | {r['far_retention']:.1%} | "
        f"{r['prefix_changes_per_100']:.1f} | {r['avoidable_overflows']} |"
        for r in data["rows"]
    ]
    quick = " --quick" if data["quick"] else ""
    took = f" ({data['elapsed_s']:.0f} s with {data['jobs']} jobs)" if "jobs" in data else ""
    lines += ["", f"Reproduce: `python benchmarks/bench_peers_ruler_sweep.py{quick}`{took}"]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
