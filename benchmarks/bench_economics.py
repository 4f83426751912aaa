"""Compaction economics: how often the engine rewrites what it sent.

The shared traces under ``coding_agent`` (32k) and ``coding_agent_16k`` (16k), shipped
and with the earlier thresholds, replayed as ``ctxpolicy simulate`` does, by this tree
and (``--baseline``) another one in a child process: compactions and prefix changes per
100 calls, tokens sent and the prompt-caching bill ÷ none (the section's table says each).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, SHARED, in_tree, machine, parser, publish, trace_files

TRACES = SHARED / "traces"
#: (agent, window, thresholds or None): the shipped policies, and both with the
#: thresholds coding_agent had before it learned to compact late (warning at 60 % of
#: the trigger): the small early rewrites the economics rule is about
EARLY = {"warning": 0.60, "error": 0.85, "critical": 0.95}
RUNS: tuple[tuple[str, int, dict[str, float] | None], ...] = (
    ("coding_agent", 32768, None),
    ("coding_agent_16k", 16384, None),
    ("coding_agent", 32768, EARLY),
    ("coding_agent_16k", 16384, EARLY),
)


COUNTS = ("calls", "compactions", "prefix_changes", "sent", "none", "overflows", "traces")


def child(quick: bool) -> dict[str, dict[str, float]]:
    """Summed counts per ``agent@window``."""
    from ctxpolicy.sim import replay
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.metrics import price_model

    pm = price_model("anthropic")
    paths = trace_files(2 if quick else 0)  # quick: a smoke run
    out: dict[str, dict[str, float]] = {}
    for agent, window, thresholds in RUNS:
        policy = replay.load_policy_file(str(ROOT / "policies" / "agents.yaml"), agent)
        key = f"{agent}@{window}"
        if thresholds is not None:
            th = policy.thresholds.model_copy(update=thresholds)
            policy = policy.model_copy(update={"thresholds": th})
            key += f" warning {thresholds['warning']:.2f}"
        tot: dict[str, float] = dict.fromkeys(COUNTS, 0)
        # the bill under Anthropic prompt caching, split: cached reads, writes of the
        # appended messages, writes of rewritten prefixes; and none's bill
        tot |= dict.fromkeys(("read", "append", "rewrite", "none_bill", "none_write"), 0.0)
        for path in paths:
            with tempfile.TemporaryDirectory(prefix="ctxpolicy-econ-") as tmp:
                res = replay.replay_trace(
                    load_trace(path), policy, window=window, snapshots_dir=tmp, trace=path.stem
                )
            tot["traces"] += 1
            for s in res.steps:
                tot["calls"] += 1
                tot["compactions"] += bool(s.layers)
                tot["prefix_changes"] += s.prefix_changed
                tot["sent"] += s.used
                tot["none"] += s.none
                tot["overflows"] += s.overflow
                tot["read"] += s.cached * pm.cache_read
                write = (s.used - s.cached) * pm.cache_write
                tot["rewrite" if s.prefix_changed else "append"] += write
                none_write = (s.none - s.none_cached) * pm.cache_write
                tot["none_bill"] += s.none_cached * pm.cache_read + none_write
                tot["none_write"] += none_write
        out[key] = tot
    return out


def run(src: Path, quick: bool) -> dict[str, dict[str, float]]:
    return in_tree(__file__, src, *(["--quick"] if quick else []), check=False)


def rates(t: dict[str, float]) -> dict[str, float]:
    calls = max(1, t["calls"])
    bill = max(1.0, t.get("none_bill", 0.0))
    return {
        "compactions/100": 100 * t["compactions"] / calls,
        "prefix changes/100": 100 * t["prefix_changes"] / calls,
        "tokens ÷ none": t["sent"] / max(1, t["none"]),
        "overflows": float(t["overflows"]),
        "billed ÷ none": sum(t.get(k, 0.0) for k in ("read", "append", "rewrite")) / bill,
        "reads": t.get("read", 0.0) / bill,
        "appended writes": t.get("append", 0.0) / bill,
        "rewrites": t.get("rewrite", 0.0) / bill,
        "none's writes": t.get("none_write", 0.0) / bill,
    }


#: the bill columns (÷ none's bill under Anthropic prompt caching)
BILL = ("billed ÷ none", "reads", "appended writes", "rewrites", "none's writes")


def table(mine: dict[str, Any], base: dict[str, Any] | None) -> str:
    cols = ["compactions/100", "prefix changes/100", "tokens ÷ none", "overflows", *BILL]
    head = "| run | tree | calls | " + " | ".join(cols) + " |"
    lines = [head, "| " + " | ".join(["---"] * (3 + len(cols))) + " |"]
    for key, t in mine.items():
        rows: list[tuple[str, dict[str, float]]] = []
        if base is not None and key in base:
            rows.append(("baseline", base[key]))
        rows.append(("this", t))
        for tree, tt in rows:
            r = rates(tt)
            vals = [f"{r[c]:.3f}" if c in ("tokens ÷ none", *BILL) else f"{r[c]:.1f}" for c in cols]
            lines.append(f"| {key} | {tree} | {int(tt['calls'])} | " + " | ".join(vals) + " |")
        if base is not None and key in base:
            rb, rm = rates(base[key]), rates(t)
            ratio = [f"{rm[c] / rb[c]:.3f}" if rb[c] else "—" for c in cols]
            lines.append(f"| {key} | this ÷ baseline | | " + " | ".join(ratio) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "the 2 smallest traces only", baseline=True, child=True)
    args = ap.parse_args(argv)
    if not TRACES.is_dir():
        print(f"skipped: no shared traces at {TRACES}")
        return 0
    if args.child:
        print(json.dumps(child(args.quick)))
        return 0
    base = run(args.baseline.resolve(), args.quick) if args.baseline is not None else None
    mine = run(ROOT, args.quick)
    traces = next(iter(mine.values()))["traces"]
    text = "\n\n".join(
        [
            "## Compaction economics (issue 27 item 2)",
            f"Shared traces: {traces}; baseline tree: {args.baseline or '—'}. Summed over the"
            " traces; the ratios are this tree ÷ the baseline in the same run.",
            table(mine, base),
            "Reproduce: `python benchmarks/bench_economics.py --baseline DIR"
            + (" --quick`" if args.quick else "`"),
        ]
    )
    data = {"machine": machine(), "quick": args.quick, "this": mine, "baseline": base}
    publish("bench_economics", data, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
