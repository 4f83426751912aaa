"""Task state after compaction, before → after, on the shared traces of every agent kind.

Each trace under its kind's shipped policy, by the baseline tree and this one (child
processes), measured by the ruler of ``ctxpolicy.sim.metrics`` plus the ledger and
summary share of each request and the ledger lines a summary says too (the section says
each).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import ROOT, in_tree, parser, publish, trace_files
from benchmarks._inputs import tree_policies

LEDGER_MARK = "[ctxpolicy progress ledger]"

#: kind → (file name prefixes, [(agent, window), ...])
KINDS: dict[str, tuple[tuple[str, ...], list[tuple[str, int]]]] = {
    "swe": (
        ("mini-swe-agent", "swe-agent", "openhands"),
        [("coding_agent_16k", 16384), ("coding_agent", 32768)],
    ),
    "customer-service": (
        ("tau-bench", "tau2-bench"),
        [("customer_service_agent", 8192), ("customer_service_agent", 16384)],
    ),
    "multi-tool": (("tapeagents-gaia",), [("default", 16384), ("default", 32768)]),
    "web": (("tapeagents-workarena",), [("default", 16384), ("default", 32768)]),
    "sql": (("spider2",), [("default", 16384), ("default", 24576)]),
}


def kind_of(name: str) -> str | None:
    for kind, (prefixes, _) in KINDS.items():
        if name.startswith(prefixes):
            return kind
    return None


def _norm(line: str) -> str:
    return " ".join(line.strip().removeprefix("- ").split())


def _lines(text: str) -> set[str]:
    """Content lines of ``text``: not headings or labels (``Done:``), not trivial."""
    out = set()
    for raw in text.splitlines():
        line = _norm(raw)
        if len(line) < 6 or line.endswith(":") or line.startswith("["):
            continue
        out.add(line)
    return out


_STEP = re.compile(r"^step \d+: ")
_REF = re.compile(r" \[ctxsnap://[^\]]*\]?$")


def _said(line: str, summary: str) -> bool:
    """Whether a ledger line says what the summary says: the same line, or the same
    tool call (its first 60 characters, without the step number and reference)."""
    if any(line == _norm(s) for s in summary.splitlines()):
        return True
    call = _REF.sub("", _STEP.sub("", line)).split(" → ", 1)[0]
    return "(" in call and len(call) >= 12 and call[:60].rstrip("…") in summary


def request_measures(
    requests: Iterable[list[Mapping[str, Any]]],
    originals: set[str],
    count: Any,
) -> dict[str, Any]:
    """Share of ledger + summary tokens and duplicated lines over the requests."""
    shares: list[float] = []
    dups: list[int] = []
    for req in requests:
        ledger, summaries, total = "", [], 0
        for m in req:
            text = c if isinstance(c := m.get("content"), str) else ""
            n = count(text) if text else 0
            total += n
            if text.startswith(LEDGER_MARK):
                ledger = text
            elif m.get("role") == "user" and text and text not in originals:
                summaries.append(text)
        if not ledger and not summaries:
            continue
        own = count(ledger) + sum(count(s) for s in summaries)
        shares.append(own / total if total else 0.0)
        if ledger and summaries:
            said = "\n".join(summaries)
            dups.append(sum(1 for line in _lines(ledger) if _said(line, said)))
    return {
        "requests": len(shares),
        "share_mean": sum(shares) / len(shares) if shares else 0.0,
        "share_max": max(shares, default=0.0),
        "dup_lines": sum(dups),
        "dup_requests": len(dups),
    }


def child(kinds: list[str], quick: bool, llm: bool = False) -> list[dict[str, Any]]:
    """One row per (trace, agent, window): the ruler's numbers and the request measures."""
    from benchmarks.peers.runs import EXTRACTIVE, Contestant, ruler, run_contestant
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import load_policy_file

    counter = ruler()
    rows: list[dict[str, Any]] = []
    files = trace_files()
    for kind in kinds:
        mine = [p for p in files if kind_of(p.name) == kind]
        if quick:  # a smoke run: the kind's smallest trace at its first window
            mine = sorted(mine, key=lambda p: p.stat().st_size)[:1]
        for agent, window in KINDS[kind][1][:1] if quick else KINDS[kind][1]:
            policy = load_policy_file(str(tree_policies()), agent)
            # the shipped extractive summarizer, or the shared deterministic summary
            # billed as an LLM's (``ctxpolicy``: the peers' table's LLM-summary row)
            c = Contestant(label=agent, kind="ctxpolicy" if llm else EXTRACTIVE, policy=policy)
            for path in mine:
                msgs = load_trace(path)
                users = [m for m in msgs if m.get("role") == "user"]
                originals = {m["content"] for m in users if isinstance(m.get("content"), str)}
                try:
                    d = run_contestant(
                        msgs, c, window, trace=path.stem, counter=counter, record=True
                    )
                except Exception as exc:  # a policy that cannot run at this window
                    error = f"{type(exc).__name__}: {exc}"[:200]
                    rows.append({"kind": kind, "trace": path.stem, "agent": agent} | {
                        "window": window, "error": error})  # fmt: skip
                    continue
                b, ret = d["billing"], d["retention"]
                row = {"kind": kind, "trace": path.stem, "agent": agent, "window": window}
                row |= {
                    "calls": d["calls"],
                    "total": b["total_cost"],
                    "none": b["billed_input_none"],
                }
                row |= {k: ret[k] for k in ("facts", "in_context", "far_facts", "far_in_context")}
                row |= {k: d[k] for k in ("prefix_changes", "overflows")}
                rows.append(row | request_measures(d["requests"], originals, counter.count_text))
                print(f"{kind} {agent}@{window} {path.stem[:50]}", file=sys.stderr, flush=True)
    return rows


#: (agent, window) the SQL agent scenario runs at
SCENARIO_RUNS = [("customer_service_agent", 8192), ("default", 16384), ("coding_agent_16k", 8192)]


def scenario_child() -> list[dict[str, Any]]:
    """The SQL agent scenario (benchmarks/taskstate_sql.py, loaded by path: the tree
    under test need not have it) at each of :data:`SCENARIO_RUNS`."""
    import runpy
    import tempfile

    from ctxpolicy.sim.replay import load_policy_file, with_snapshots, with_window

    mod = runpy.run_path(str(Path(__file__).with_name("taskstate_sql.py")))
    out = []
    for agent, window in SCENARIO_RUNS:
        with tempfile.TemporaryDirectory(prefix="ctxpolicy-taskstate-") as tmp:
            pol = with_snapshots(
                with_window(load_policy_file(str(tree_policies()), agent), window), tmp
            )
            got = mod["run"](pol)
        got.pop("request")
        out.append({"agent": agent, "window": window, **got})
    return out


def scenario_table(base: list[dict[str, Any]], mine: list[dict[str, Any]]) -> str:
    lines = [
        "| policy @ window | ledger+summary tokens / prompt | answer table whole | user turns verbatim "
        "| statistics fragments | names ctx_recall | duplicated lines |",
        "|" + " --- |" * 7,
    ]
    for b, m in zip(base, mine, strict=True):

        def cells(r: Mapping[str, Any]) -> list[str]:
            return [
                f"{r['ledger_summary_tokens']:,} / {r['prompt_tokens']:,} ({r['share']:.0%})",
                "yes" if r["answer_table_whole"] else "no",
                "yes" if r["instructions_verbatim"] else "no",
                str(r["fragments"]),
                "yes" if r["names_recall"] else "no",
                str(r["duplicated_lines"]),
            ]

        row = [f"{x} → {y}" for x, y in zip(cells(b), cells(m), strict=True)]
        lines.append(f"| {b['agent']} @ {b['window'] // 1024}k | " + " | ".join(row) + " |")
    return "\n".join(lines)


#: summed per (kind, agent, window); share_sum is the requests' shares weighted by count
_SUMS = (
    "total", "none", "facts", "in_context", "far_facts", "far_in_context", "calls",
    "prefix_changes", "overflows", "dup_lines", "dup_requests", "requests",
)  # fmt: skip


def aggregate(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, int], dict[str, float]]:
    acc: dict[tuple[str, str, int], dict[str, float]] = {}
    for r in rows:
        if "error" in r:
            continue
        zero = dict.fromkeys([*_SUMS, "share_sum", "share_max"], 0.0)
        a = acc.setdefault((r["kind"], r["agent"], r["window"]), zero)
        for k in _SUMS:
            a[k] += r[k]
        a["share_sum"] += r["share_mean"] * r["requests"]
        a["share_max"] = max(a["share_max"], r["share_max"])
    return acc


def _cell(a: Mapping[str, float]) -> tuple[str, ...]:
    def pct(x: float, y: float) -> str:
        return f"{100 * x / y:.1f} %" if y else "–"

    return (
        f"{a['total'] / a['none']:.3f}" if a["none"] else "–",
        pct(a["in_context"], a["facts"]),
        pct(a["far_in_context"], a["far_facts"]),
        f"{100 * a['prefix_changes'] / a['calls']:.1f}" if a["calls"] else "–",
        pct(a["share_sum"], a["requests"]).replace(" %", " %") if a["requests"] else "–",
        f"{a['share_max']:.0%}",
        f"{a['dup_lines'] / a['dup_requests']:.1f}" if a["dup_requests"] else "0",
    )


def table(base: list[dict[str, Any]], mine: list[dict[str, Any]]) -> str:
    b, m = aggregate(base), aggregate(mine)
    head = (
        "| kind | policy @ window | cost ÷ none | retention | far | pfx /100 | "
        "ledger+summary share (mean) | (max) | duplicated lines / request |"
    )
    lines = [head, "|" + " --- |" * 9]
    for key in sorted(set(b) | set(m), key=lambda k: (list(KINDS).index(k[0]), k[2])):
        kb = _cell(b[key]) if key in b else ("–",) * 7
        km = _cell(m[key]) if key in m else ("–",) * 7
        cells = [f"{x} → {y}" for x, y in zip(kb, km, strict=True)]
        lines.append(f"| {key[0]} | {key[1]} @ {key[2] // 1024}k | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(data: Mapping[str, Any], baseline: str) -> str:
    md = [
        "## Task state after compaction, every agent kind (before → after)",
        f"The same run, two source trees: `{baseline}` (before) and this tree (after), each "
        "replaying every trace of ../shared/traces under the shipped policy of its kind, "
        "measured by the ruler of `ctxpolicy.sim.metrics` (exact cl100k; total cost ÷ sending "
        "everything under prompt caching, retention of facts used later, far retention, "
        "prefix changes per 100 calls), plus the share of each request taken by the ledger "
        "and the summaries (over the requests holding one) and the ledger lines a summary of "
        "the same request says too (the same line or the same tool call).",
    ]
    for key, title in (("extractive", "extractive summarizer (shipped)"), ("llm", "LLM summary (shared deterministic summary, billed)")):  # fmt: skip
        if key in data:
            md += [f"### {title}", "", table(data[key]["baseline"], data[key]["after"]), ""]
    if "scenario" in data:
        md += [
            "### A SQL agent (benchmarks/taskstate_sql.py)",
            "The agent asks which month of 2023 had the highest revenue; a 12-row monthly "
            "table answers it, then more checks run before the user asks for the answer. "
            "The last request, before → after:",
            scenario_table(data["scenario"]["baseline"], data["scenario"]["after"]),
        ]
    md += [
        "Reproduce: `.venv/bin/python benchmarks/bench_taskstate.py --llm --baseline "
        "<a checkout of the code before>`",
    ]
    return "\n\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "one trace per kind", baseline=True, child=True)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--llm", action="store_true", help="also the LLM-summary variant (billed)")
    ap.add_argument("--scenario", action="store_true", help="the SQL agent scenario only")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if args.child:
        rows = scenario_child() if args.scenario else child(kinds, args.quick, args.llm)
        print(json.dumps(rows))
        return 0
    baseline = args.baseline.resolve() if args.baseline is not None else ROOT
    trees = (baseline, ROOT)
    jobs: dict[str, tuple[str, ...]] = {"scenario": ("--scenario",)}
    if not args.scenario:
        quick = ("--quick",) if args.quick else ()
        jobs["extractive"] = ("--kinds", ",".join(kinds), *quick)
        if args.llm:
            jobs["llm"] = ("--kinds", ",".join(kinds), "--llm", *quick)
    data: dict[str, Any] = {}
    # without --baseline both sides are this tree: its rows (no timings) computed once
    sides = list(zip(("baseline", "after"), trees, strict=True))[args.baseline is None :]
    with ThreadPoolExecutor(2) as pool:
        futures = {
            (name, side): pool.submit(in_tree, __file__, tree, *flags)
            for name, flags in jobs.items()
            for side, tree in sides
        }
        for (name, side), f in futures.items():
            rows = f.result()
            data[name] = data.get(name, {}) | ({"baseline": rows} if args.baseline is None else {})
            data[name][side] = rows
    text = markdown(data, "this tree" if args.baseline is None else baseline.name)
    if args.scenario:
        print(text)
        return 0
    publish("bench_taskstate", data, text)
    for name in ("extractive", "llm"):
        for r in [*data.get(name, {}).get("baseline", []), *data.get(name, {}).get("after", [])]:
            if "error" in r:
                where = f"{r['kind']} {r['agent']}@{r['window']} {r['trace']}"
                print(f"error: {name} {where}: {r['error']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
