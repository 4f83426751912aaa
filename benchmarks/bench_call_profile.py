"""What a ``prepare`` that compacts nothing costs as the conversation grows (issue 32,
item 3), this tree vs a baseline tree in one run.

Usage::

    python benchmarks/bench_call_profile.py [--baseline SRC] [--steps 400] [--repeat 3]

A synthetic coding session of ``--steps`` model calls (:func:`ctxpolicy.sim.synth.
coding_session`: file reads, searches, test runs, logs) is replayed call by call
under ``coding_agent`` (policies/agents.yaml; snapshots in a temporary directory,
memory state store): ``add_tool_result`` for every tool result, ``prepare`` before
every assistant message. One replay per tree profiles every ``prepare`` on its own
(``cProfile``: Python calls, deterministic); the timed replays run unprofiled. The calls
that compacted (``compact_layer`` set) are left out. Reported per tree:

* Python function calls per plain ``prepare`` (deterministic), median over the first
  and over the last quarter of the calls, and their ratio: work that grows with the
  conversation shows as a ratio above 1;
* median ms per plain call (first quarter, last quarter), median over the repeats;
* the functions whose calls per plain call grow most from the first to the last
  quarter.

Each repeat runs in a child process per tree (the tree first on the path), baseline
and this tree alternating. Writes benchmarks/results/bench_call_profile.json and .md.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

# appended, not inserted: a child measuring a baseline (PYTHONPATH) finds that tree's
# ctxpolicy first, and `benchmarks` is this tree's whatever that tree holds
sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.modules.setdefault("benchmarks", types.ModuleType("benchmarks")).__path__ = [
    str(Path(__file__).resolve().parent)
]

from benchmarks._common import (  # noqa: E402 - after the path is set
    eprint,
    header_markdown,
    in_tree,
    machine,
    markdown_table,
    publish,
    trees,
)

ROOT = Path(__file__).resolve().parents[1]
AGENT = "coding_agent"


def _fn_name(key: tuple[str, int, str]) -> str:
    from benchmarks._profile import short_path

    file, line, fn = key
    return fn if file == "~" else f"{short_path(file)}:{line}({fn})"


def child(steps: int, profile: bool) -> dict[str, Any]:
    """Per ``prepare``: seconds, compacted or not, Python calls, calls per function."""
    from benchmarks._inputs import load_agent
    from ctxpolicy import Session
    from ctxpolicy.sim.replay import _sim_store, call_for
    from ctxpolicy.sim.synth import coding_session
    from ctxpolicy.state.memory import MemoryStateStore

    policy, _ = load_agent(AGENT)
    msgs = coding_session(seed=5, steps=steps)
    tmp = Path(tempfile.mkdtemp(prefix="ctxpolicy-callprof-"))
    calls: list[dict[str, Any]] = []
    try:
        session = Session(
            policy,
            conv_id="callprof",
            snapshot_store=_sim_store(policy, tmp),
            state_store=MemoryStateStore(),
        )
        convo: list[dict[str, Any]] = []
        pending: dict[str, Any] = {}
        for m in msgs:
            role = m.get("role")
            if role == "assistant" and convo:
                prof = cProfile.Profile() if profile else None
                t0 = time.perf_counter()
                if prof is not None:
                    prof.enable()
                session.prepare(convo)
                if prof is not None:
                    prof.disable()
                dt = time.perf_counter() - t0
                rec: dict[str, Any] = {
                    "seconds": dt,
                    "compacted": (session.status or {}).get("compact_layer") is not None,
                    "messages": len(convo),
                }
                if prof is not None:
                    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
                    rec["pycalls"] = sum(v[1] for v in stats.values())
                    rec["by_fn"] = {_fn_name(k): v[1] for k, v in stats.items()}
                calls.append(rec)
            if role == "tool":
                call = call_for(pending, str(m.get("tool_call_id", "")))
                text = session.add_tool_result(call, m.get("content"))
                convo.append({**m, "content": text})
                continue
            if role == "assistant":
                pending = {str(tc.get("id", "")): tc for tc in m.get("tool_calls") or []}
            convo.append(dict(m))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"calls": calls}


def run(src: Path, steps: int, profile: bool = False) -> dict[str, Any]:
    return in_tree(__file__, src, "--steps", str(steps), *(["--profile"] if profile else []))  # type: ignore[no-any-return]


def summarize(runs: list[dict[str, Any]], profiled: dict[str, Any]) -> dict[str, Any]:
    """Early and late quarters of the plain calls: ms (timed runs), Python calls and
    the growing functions (the profiled run)."""
    first = profiled["calls"]
    n = len(first)
    q = max(1, n // 4)
    # a call is plain when it compacted in no repeat
    plain = [i for i in range(n) if not any(r["calls"][i]["compacted"] for r in [*runs, profiled])]
    early = [i for i in plain if i < q]
    late = [i for i in plain if i >= n - q]

    def med(idx: list[int], key: str) -> float | None:
        src = [profiled] if key == "pycalls" else runs
        vals = [statistics.median(r["calls"][i][key] for r in src) for i in idx]
        return statistics.median(vals) if vals else None

    grows: list[tuple[str, float, float]] = []
    if early and late:
        names = set().union(*(first[i]["by_fn"] for i in late))
        for fn in names:
            a = statistics.median(first[i]["by_fn"].get(fn, 0) for i in early)
            b = statistics.median(first[i]["by_fn"].get(fn, 0) for i in late)
            if b > a:
                grows.append((fn, a, b))
        grows.sort(key=lambda t: t[2] - t[1], reverse=True)
    e_ms, l_ms = med(early, "seconds"), med(late, "seconds")
    e_calls, l_calls = med(early, "pycalls"), med(late, "pycalls")
    return {
        "calls": n,
        "plain_calls": len(plain),
        "messages_early": first[early[len(early) // 2]]["messages"] if early else None,
        "messages_late": first[late[len(late) // 2]]["messages"] if late else None,
        "early_ms": e_ms * 1e3 if e_ms is not None else None,
        "late_ms": l_ms * 1e3 if l_ms is not None else None,
        "early_pycalls": e_calls,
        "late_pycalls": l_calls,
        "growing": [{"function": f, "early": a, "late": b} for f, a, b in grows[:12]],
    }


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "–" if v is None else format(v, fmt)


def to_markdown(data: dict[str, Any]) -> str:
    lines = [
        f"## A `prepare` that compacts nothing, {data['steps']} calls (issue 32)",
        "",
        header_markdown(data["machine"]),
        "",
        f"A synthetic coding session of {data['steps']} model calls "
        "(`ctxpolicy.sim.synth.coding_session`) replayed under "
        f"`{AGENT}`; per `prepare` that did not compact: Python function calls in one "
        "profiled replay (deterministic) and wall ms in unprofiled replays "
        f"(median of {data['repeat']} repeats per tree, baseline and this tree "
        "alternating in their own processes). First quarter vs last quarter of the "
        "calls: a ratio above 1 is work that grows with the conversation.",
        "",
    ]
    rows = []
    for code in ("baseline", "this tree"):
        d = data.get(code)
        if not d:
            continue
        ec, lc = d["early_pycalls"], d["late_pycalls"]
        em, lm = d["early_ms"], d["late_ms"]
        rows.append(
            [
                code,
                f"{d['plain_calls']} of {d['calls']}",
                f"{d['messages_early']} → {d['messages_late']}",
                f"{_f(ec, '.0f')} → {_f(lc, '.0f')}",
                _f(lc / ec if ec and lc is not None else None, ".2f"),
                f"{_f(em)} → {_f(lm)}",
                _f(lm / em if em and lm is not None else None, ".2f"),
            ]
        )
    lines.append(
        markdown_table(
            [
                "tree",
                "plain calls",
                "messages (first → last quarter)",
                "Python calls per plain prepare",
                "growth",
                "ms per plain prepare",
                "growth",
            ],
            rows,
        )
    )
    base, mine = data.get("baseline"), data["this tree"]
    if base and base.get("late_ms") and mine.get("late_ms"):
        lines += [
            "",
            f"Last quarter, this tree ÷ baseline: {mine['late_ms'] / base['late_ms']:.2f}× ms, "
            f"{mine['late_pycalls'] / base['late_pycalls']:.2f}× Python calls.",
        ]
    for code in ("baseline", "this tree"):
        d = data.get(code)
        if d and d["growing"]:
            lines += [
                "",
                f"Calls per plain `prepare` that grow ({code}, first → last quarter):",
                "",
            ]
            lines.append(
                markdown_table(
                    ["function", "first quarter", "last quarter"],
                    [[g["function"], g["early"], g["late"]] for g in d["growing"][:8]],
                )
            )
    if data.get("baseline_src"):
        commit = data.get("baseline_commit")  # None: not a git checkout (git archive)
        at = f" (commit {commit})" if commit else ""
        lines += ["", f"Baseline: `{data['baseline_src']}`{at}."]
    lines += [
        "",
        "Reproduce: `.venv/bin/python benchmarks/bench_call_profile.py --baseline <a checkout "
        "of the code before>`",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="source tree measured as the baseline")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.steps, args.profile)))
        return 0
    from benchmarks._common import git_head

    codes = trees(args.baseline, ROOT)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in codes}
    profiled: dict[str, dict[str, Any]] = {}
    for code, src in codes.items():
        eprint(f"profile: {code}")
        profiled[code] = run(src, args.steps, profile=True)
    for i in range(args.repeat):
        for code, src in codes.items():
            eprint(f"repeat {i + 1}/{args.repeat}: {code}")
            runs[code].append(run(src, args.steps))
    data: dict[str, Any] = {
        "machine": machine(["tiktoken"]),
        "steps": args.steps,
        "repeat": args.repeat,
        "baseline_src": str(args.baseline) if args.baseline else None,
        "baseline_commit": git_head(args.baseline) if args.baseline else None,
        **{code: summarize(r, profiled[code]) for code, r in runs.items()},
    }
    publish("bench_call_profile", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
