"""A ``prepare`` that compacts nothing, this tree vs a baseline tree, in one run.

The per-call replay loop (:func:`benchmarks.peers.replay.replay_ctxpolicy`) under
``coding_agent``, calls that compacted left out, each repeat in a child process per
tree. Default (results ``bench_prepare_calls``): the ``--traces`` longest shared traces;
``--profile`` (results ``bench_call_profile``): Python calls per ``prepare`` on a
synthetic session, first vs last quarter.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import (
    baseline_info,
    eprint,
    in_tree,
    interleaved,
    machine,
    markdown_table,
    parser,
    publish,
    trees,
)
from benchmarks._measure import answer, baseline_note, per_call_median

AGENT = "coding_agent"


def child(steps: int, traces: int, quick: bool, profile: bool) -> dict[str, Any]:
    """Per conversation, per ``prepare``: seconds, compacted or not, messages, and (when
    ``profile``) Python calls in all and per function."""
    import cProfile
    import pstats

    from benchmarks._common import function_name
    from benchmarks._inputs import largest_traces, load_agent, smallest_trace
    from benchmarks.peers.replay import replay_ctxpolicy
    from ctxpolicy import Session  # the measured tree's (PYTHONPATH)
    from ctxpolicy.sim.synth import coding_session

    policy, _ = load_agent(AGENT)
    if steps:
        convs = [("synthetic", coding_session(seed=5, steps=steps))]
    else:
        convs = [smallest_trace()] if quick else largest_traces(traces)
    calls: list[dict[str, Any]] = []
    real = Session.prepare

    def prepare(self: Any, messages: Any, tools: Any = None) -> Any:
        prof = cProfile.Profile() if profile else None
        if prof is not None:
            prof.enable()
        res = real(self, messages, tools)
        if prof is not None:
            prof.disable()
        rec: dict[str, Any] = {
            "compacted": (self.status or {}).get("compact_layer") is not None,  # O(1)
            "messages": len(messages),
        }
        if prof is not None:
            stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
            rec["pycalls"] = sum(v[1] for v in stats.values())
            rec["by_fn"] = {function_name(k): v[1] for k, v in stats.items()}
        calls.append(rec)
        return res

    Session.prepare = prepare  # type: ignore[method-assign]
    out: dict[str, Any] = {}
    try:
        for name, msgs in convs:
            calls.clear()
            prep, _tools = replay_ctxpolicy(policy, msgs, state="memory" if steps else "sqlite")
            out[name] = [{**c, "seconds": s} for c, s in zip(calls, prep, strict=True)]
    finally:
        Session.prepare = real  # type: ignore[method-assign]
    return out


def summarize_traces(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per trace: the median over the plain calls of each call's median over repeats."""
    out: dict[str, Any] = {}
    for name, first in runs[0].items():
        plain = [i for i, c in enumerate(first) if not c["compacted"]]
        ms = per_call_median([[c["seconds"] for c in r[name]] for r in runs], plain)
        median = ms * 1e3 if ms is not None else None
        out[name] = {"calls": len(first), "plain_calls": len(plain), "median_ms": median}
    return out


def summarize_profile(runs: list[dict[str, Any]], profiled: dict[str, Any]) -> dict[str, Any]:
    """First and last quarter of the plain calls (plain in every run): ms (timed runs),
    Python calls and the growing functions (the profiled run)."""
    first = profiled["synthetic"]
    timed = [r["synthetic"] for r in runs]
    n = len(first)
    q = max(1, n // 4)
    plain = [i for i in range(n) if not any(r[i]["compacted"] for r in [*timed, first])]
    early, late = [i for i in plain if i < q], [i for i in plain if i >= n - q]

    def med(idx: list[int], key: str) -> float | None:
        return per_call_median(
            [[c[key] for c in r] for r in ([first] if key == "pycalls" else timed)], idx
        )

    grows: list[tuple[str, float, float]] = []
    if early and late:
        for fn in set().union(*(first[i]["by_fn"] for i in late)):
            a = statistics.median(first[i]["by_fn"].get(fn, 0) for i in early)
            b = statistics.median(first[i]["by_fn"].get(fn, 0) for i in late)
            if b > a:
                grows.append((fn, a, b))
        grows.sort(key=lambda t: (t[1] - t[2], t[0]))  # most growth first, ties by name
    e_ms, l_ms = med(early, "seconds"), med(late, "seconds")
    return {
        "calls": n,
        "plain_calls": len(plain),
        "messages_early": first[early[len(early) // 2]]["messages"] if early else None,
        "messages_late": first[late[len(late) // 2]]["messages"] if late else None,
        "early_ms": e_ms * 1e3 if e_ms is not None else None,
        "late_ms": l_ms * 1e3 if l_ms is not None else None,
        "early_pycalls": med(early, "pycalls"),
        "late_pycalls": med(late, "pycalls"),
        "growing": [{"function": f, "early": a, "late": b} for f, a, b in grows[:12]],
    }


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "–" if v is None else format(v, fmt)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _baseline_line(data: dict[str, Any]) -> list[str]:
    src = data.get("baseline_src")
    return ["", baseline_note(src, data.get("baseline_commit"))] if src else []


def traces_markdown(data: dict[str, Any]) -> str:
    rows = []
    for name, mine in data["this tree"].items():
        b, m = data.get("baseline", {}).get(name, {}).get("median_ms"), mine["median_ms"]
        plain = f"{mine['plain_calls']} of {mine['calls']}"
        rows.append([name.removesuffix(".jsonl"), plain, _f(b), _f(m), _f(_div(m, b), ".2f")])
    return "\n\n".join(
        [
            "## Per-call cost of `prepare` (calls that do not compact)",
            f"The replay loop of the per-call comparison (`add_tool_result` per tool result, "
            f"`prepare` before every assistant message) under `{AGENT}` on the "
            f"{len(data['this tree'])} longest shared traces; {data['repeat']} repeats per "
            "tree, baseline and this tree alternating, each in its own process; per call the "
            "median over the repeats, then the median over the calls that did not compact.",
            markdown_table(
                "trace | plain calls | baseline median ms | this tree median ms | ratio", rows
            ),
            *_baseline_line(data),
            "Reproduce: `.venv/bin/python -m benchmarks run percall --variant calls "
            "--baseline <a checkout of the code before>`",
        ]
    )


def profile_markdown(data: dict[str, Any]) -> str:
    rows = []
    for code in ("baseline", "this tree"):
        if d := data.get(code):
            ec, lc, em, lm = d["early_pycalls"], d["late_pycalls"], d["early_ms"], d["late_ms"]
            rows.append([code, f"{d['plain_calls']} of {d['calls']}"])
            rows[-1] += [f"{d['messages_early']} → {d['messages_late']}"]
            rows[-1] += [f"{_f(ec, '.0f')} → {_f(lc, '.0f')}", _f(_div(lc, ec), ".2f")]
            rows[-1] += [f"{_f(em)} → {_f(lm)}", _f(_div(lm, em), ".2f")]
    lines = [
        f"## A `prepare` that compacts nothing, {data['steps']} calls",
        f"A synthetic coding session of {data['steps']} model calls "
        "(`ctxpolicy.sim.synth.coding_session`) replayed under "
        f"`{AGENT}`; per `prepare` that did not compact: Python function calls in one "
        "profiled replay (deterministic) and wall ms in unprofiled replays "
        f"(median of {data['repeat']} repeats per tree, baseline and this tree "
        "alternating in their own processes). First quarter vs last quarter of the "
        "calls: a ratio above 1 is work that grows with the conversation.",
        markdown_table(
            "tree | plain calls | messages (first → last quarter) | Python calls per plain "
            "prepare | growth | ms per plain prepare | growth",
            rows,
        ),
    ]
    base, mine = data.get("baseline"), data["this tree"]
    if base and base.get("late_ms") and mine.get("late_ms"):
        lines += [
            f"Last quarter, this tree ÷ baseline: {mine['late_ms'] / base['late_ms']:.2f}× ms, "
            f"{mine['late_pycalls'] / base['late_pycalls']:.2f}× Python calls.",
        ]
    for code in ("baseline", "this tree"):
        if (d := data.get(code)) and d["growing"]:
            grow = [[g["function"], g["early"], g["late"]] for g in d["growing"][:8]]
            lines += ["", f"Calls per plain `prepare` that grow ({code}, first → last quarter):"]
            lines += ["", markdown_table("function | first quarter | last quarter", grow)]
    return "\n\n".join(
        [
            *lines,
            *_baseline_line(data),
            "Reproduce: `.venv/bin/python -m benchmarks run percall --variant profile "
            "--baseline <a checkout of the code before>`",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "smallest trace or 20 steps, 1 repeat", baseline=True, child=True)
    ap.add_argument("--profile", action="store_true", help="the profiled synthetic session")
    ap.add_argument("--traces", type=int, default=3)
    ap.add_argument("--steps", type=int, default=400, help="--profile: model calls")
    ap.add_argument("--repeat", type=int, help="repeats per tree (5; --profile: 3)")
    ap.add_argument("--profiled", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    steps = (20 if args.quick else args.steps) if args.profile else 0
    if args.child:
        return answer(child(steps, args.traces, args.quick, args.profiled))
    repeat = 1 if args.quick else args.repeat or (3 if args.profile else 5)
    cargs = ["--profile", "--steps", str(steps)] if args.profile else ["--traces", str(args.traces)]
    cargs += ["--quick"] if args.quick else []
    data: dict[str, Any] = {"machine": machine(["tiktoken"]), "repeat": repeat}
    data |= {"quick": args.quick, **baseline_info(args.baseline)}
    if not args.profile:
        runs = interleaved(__file__, args.baseline, repeat, *cargs)
        data |= {code: summarize_traces(r) for code, r in runs.items()}
        publish("bench_prepare_calls", data, traces_markdown(data))
        return 0
    profiled = {}
    for code, src in trees(args.baseline).items():
        eprint(f"profile: {code}")
        profiled[code] = in_tree(__file__, src, *cargs, "--profiled")
    runs = interleaved(__file__, args.baseline, repeat, *cargs)
    data |= {"steps": steps} | {c: summarize_profile(r, profiled[c]) for c, r in runs.items()}
    publish("bench_call_profile", data, profile_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
