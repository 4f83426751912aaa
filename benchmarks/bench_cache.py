"""Prompt-cache-aware compaction: shipped policies with and without
``cache: {preserve_prefix: true, min_gain_tokens: N}`` on ../shared/traces.

Every trace × agent × window replayed twice, with N = 25 % of the
policy's trigger at that window. The section says what each column counts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import eprint, machine, markdown_table, parser, publish, run_jobs
from benchmarks._inputs import family, load_agent, matrix

TOLERANCE = 8  # tokens of framing difference still counted as "prefix kept"


def prefix_changes(series: dict[str, list[Any]]) -> int:
    used, cached = series["used"], series["cached"]
    return sum(1 for i in range(1, len(used)) if cached[i] < used[i - 1] - TOLERANCE)


def with_cache(policy: Any, min_gain: int) -> Any:
    spec = policy.cache.model_copy(
        update={"preserve_prefix": True, "min_gain_tokens": int(min_gain)}
    )
    return policy.model_copy(update={"cache": spec})


def job(trace_path: str, agent: str, window: int) -> dict[str, Any]:
    from ctxpolicy.budget import compute_budget
    from ctxpolicy.sim.replay import load_trace, replay_trace, with_window

    name = Path(trace_path).name
    policy, note = load_agent(agent)
    base: dict[str, Any] = {"trace": name, "agent": agent, "window": window, "note": note}
    try:
        trigger = compute_budget(with_window(policy, window)).trigger
    except ValueError as exc:
        return {**base, "applicable": False, "reason": str(exc)}
    n = int(round(0.25 * trigger, -2))  # min_gain_tokens: 25 % of the trigger
    msgs = load_trace(trace_path)
    out = {**base, "applicable": True, "min_gain_tokens": n, "trigger": trigger}
    for label, pol in (("shipped", policy), ("cache", with_cache(policy, n))):
        d = replay_trace(msgs, pol, window=window, trace=name, label=label).to_dict()
        cache, cost = d["cache"], d["cost"]
        out[label] = {k: d[k] for k in ("steps", "prompt_tokens")}
        out[label] |= {k: cache[k] for k in ("cached_tokens", "cached_fraction")}
        out[label] |= {"prefix_changes": prefix_changes(d["series"])}
        out[label] |= {"compactions": d["compactions_total"]}
        out[label] |= {k: d[k] for k in ("overflows", "pairing_violations")}
        out[label] |= {k: cost[k] for k in ("usd", "usd_none", "price_model")}
        out[label] |= {"in_context_rate": d["retention"]["in_context_rate"]}
    return out


SUMMED = "steps prompt_tokens cached_tokens prefix_changes compactions overflows pairing_violations"


def totals(rows: list[dict[str, Any]], label: str) -> dict[str, Any]:
    t: dict[str, Any] = {k: sum(r[label][k] for r in rows) for k in SUMMED.split()}
    t["usd"] = sum(r[label]["usd"] for r in rows)
    t["usd_none"] = sum(r[label]["usd_none"] for r in rows)
    t["cached_fraction"] = t["cached_tokens"] / t["prompt_tokens"] if t["prompt_tokens"] else 0.0
    return t


def _ratio(key: str, fmt: str) -> Any:
    return lambda a, b: f"{b[key] / max(1, a[key]):{fmt}}"


#: a window's table: row label, the key of both totals (and how a cell shows it), the ratio
WINDOW_ROWS: tuple[tuple[str, str, str, Any], ...] = (
    ("prefix changes", "prefix_changes", "", _ratio("prefix_changes", ".2f")),
    ("compactions", "compactions", "", _ratio("compactions", ".2f")),
    ("prompt tokens", "prompt_tokens", "", _ratio("prompt_tokens", ".3f")),
    ("cached-prefix tokens", "cached_tokens", "", _ratio("cached_tokens", ".3f")),
    ("cached fraction of prompt", "cached_fraction", ".1%", None),
    (
        "estimated cost USD",
        "usd",
        ".2f",
        lambda a, b: f"{b['usd'] / a['usd']:.3f}" if a["usd"] else "",
    ),
    ("overflows", "overflows", "", None),
    ("pairing violations", "pairing_violations", "", None),
)


def _cell(v: Any, fmt: str) -> Any:
    return format(v, fmt) if fmt else v


def _by(
    rows: list[dict[str, Any]], key: Any, names: Iterable[str]
) -> Iterator[tuple[str, Any, Any]]:
    """Per name with rows (``key(row) == name``): the name, the shipped and cache totals."""
    for name in names:
        if mine := [r for r in rows if key(r) == name]:
            yield name, totals(mine, "shipped"), totals(mine, "cache")


def to_markdown(data: dict[str, Any]) -> str:
    rows = [r for r in data["results"] if r.get("applicable")]
    ok = {True: "✓", False: "✗"}
    md = [
        "## Prompt-cache-aware compaction",
        f"{data['traces']} traces × {len(data['agents'])} shipped policies at windows "
        f"{', '.join(f'{w:,}' for w in data['windows'])}, each replayed as shipped and with "
        "`cache: {preserve_prefix: true, min_gain_tokens: N}` (N = "
        + ("25 % of the trigger" if data["min_gain"] == "auto" else data["min_gain"])
        + "). Prefix change: a call whose prompt does not begin with the whole previous "
        "prompt. Cost: ctxpolicy/data/prices.json (input / cached input / output per model).",
    ]
    summary_rows = []
    for w in data["windows"]:
        wr = [r for r in rows if r["window"] == w]
        if not wr:
            continue
        a, b = totals(wr, "shipped"), totals(wr, "cache")
        summary_rows.append((w, a, b))
        table = [
            [label, _cell(a[k], fmt), _cell(b[k], fmt), ratio(a, b) if ratio else ""]
            for label, k, fmt, ratio in WINDOW_ROWS
        ]
        fams = sorted({family(r["trace"]) for r in wr})
        per_agent = [
            [agent, x["prefix_changes"], y["prefix_changes"], f"{x['cached_fraction']:.1%}",
             f"{y['cached_fraction']:.1%}", f"{x['usd']:.3f}", f"{y['usd']:.3f}", y["overflows"]]
            for agent, x, y in _by(wr, lambda r: r["agent"], data["agents"])
        ]  # fmt: skip
        fam_rows = [
            [fam, x["prefix_changes"], y["prefix_changes"], f"{x['usd']:.3f}", f"{y['usd']:.3f}"]
            for fam, x, y in _by(wr, lambda r: family(r["trace"]), fams)
        ]
        md += [
            f"### Window {w:,} ({len(wr)} replays per variant)",
            markdown_table(" | as shipped | with cache option | with ÷ without", table),
            markdown_table(
                "policy | prefix changes | with cache | cached | with cache | USD | with cache | "
                "overflows (cache)",
                per_agent,
            ),
            markdown_table(
                "trace family | prefix changes | with cache | USD | with cache", fam_rows
            ),
        ]
    goal_rows = []
    for w, a, b in summary_rows:
        x, y = a["prefix_changes"], b["prefix_changes"]
        got = f"{y} vs {x} ({y / max(1, x):.2f}), {b['overflows']} overflows"
        met = ok[y * 3 <= x and b["overflows"] == 0]
        goal_rows.append([f"prefix changes with ≤ 1/3 of without, no overflow ({w:,})", got, met])
    md += [markdown_table("goal (issue 12) | measured | status", goal_rows, align="llc")]
    if na := sorted(
        {(r["agent"], r["window"]) for r in data["results"] if not r.get("applicable")}
    ):
        md += [
            "Not applicable (budget leaves no room): " + ", ".join(f"{a} @ {w:,}" for a, w in na)
        ]
    quick = " --quick" if data["quick"] else ""
    md += [f"Reproduce: `.venv/bin/python benchmarks/bench_cache.py{quick}`"]
    return "\n\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, jobs=True)
    args = ap.parse_args(argv)
    traces, agents, windows = matrix([32768])
    if not traces:
        return 2
    if args.quick:
        traces = sorted(traces, key=lambda t: Path(t).stat().st_size)[:2]
        agents = agents[:1]
    t0 = time.perf_counter()
    tasks = sorted(
        [(t, a, w) for t in traces for a in agents for w in windows],
        key=lambda x: -Path(x[0]).stat().st_size,
    )
    eprint(f"{len(tasks)} jobs on {args.jobs} processes ...")
    results = run_jobs([(job, t) for t in tasks], args.jobs)
    results.sort(key=lambda r: (r["trace"], r["agent"], r["window"]))
    data: dict[str, Any] = {"machine": machine(["ctxpolicy", "tiktoken", "quicktok-v1"])}
    data["agents"] = agents
    data |= {"windows": windows, "traces": len(traces), "min_gain": "auto", "quick": args.quick}
    data |= {"results": results, "elapsed_s": time.perf_counter() - t0}
    publish("bench_cache", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
