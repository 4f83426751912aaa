"""The non-compacting per-call cost of ``prepare`` (issue 21, item 6), this tree vs a
baseline tree, interleaved in one run.

Usage::

    python benchmarks/bench_prepare_calls.py --baseline SRC [--traces 3] [--repeat 5] [--quick]

The replay loop of benchmarks/bench_engine.py's per-call comparison
(:func:`benchmarks.peers.timing.replay_ctxpolicy`: ``add_tool_result`` for every
tool result, ``prepare`` before every assistant message, the policy
``coding_agent`` of policies/agents.yaml, snapshots in a temporary directory) on the
``--traces`` longest shared traces. Each repeat runs in a child process per tree
(the tree first on the path), baseline and this tree alternating; per call the
median over the repeats, then per trace the median over its calls — the calls that
compacted (a ``context.compacted`` event) are left out, so the number is what a
plain call (one or two new messages appended) costs. Writes
benchmarks/results/bench_prepare_calls.json and .md. ``--quick``: the smallest trace,
one repeat.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
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


def child(traces: int, quick: bool) -> dict[str, Any]:
    """Per trace: seconds of every ``prepare``, and which calls compacted."""
    import ctxpolicy.engine.session as session_mod  # the measured tree's (PYTHONPATH)

    # the benchmark code of this tree for both trees (as benchmarks/peers/worker.py):
    # a baseline's own replay loop may differ (its state store, its traces folder)
    sys.path.insert(0, str(ROOT))
    for mod in [m for m in sys.modules if m == "benchmarks" or m.startswith("benchmarks.")]:
        del sys.modules[mod]
    from benchmarks._inputs import largest_traces, load_agent, smallest_trace
    from benchmarks.peers import timing

    policy, _ = load_agent(AGENT)
    out: dict[str, Any] = {}
    compacted: list[bool] = []
    real = session_mod.Session.prepare

    def prepare(self: Any, messages: Any, tools: Any = None) -> Any:
        res = real(self, messages, tools)
        compacted.append((self.status or {}).get("compact_layer") is not None)  # O(1)
        return res

    session_mod.Session.prepare = prepare  # type: ignore[method-assign]
    try:
        for name, msgs in [smallest_trace()] if quick else largest_traces(traces):
            compacted.clear()
            prep, _tools = timing.replay_ctxpolicy(policy, msgs)
            out[name] = {"seconds": prep, "compacted": list(compacted), "messages": len(msgs)}
    finally:
        session_mod.Session.prepare = real  # type: ignore[method-assign]
    return out


def run(src: Path, traces: int, quick: bool) -> dict[str, Any]:
    return in_tree(__file__, src, "--traces", str(traces), *(["--quick"] if quick else []))  # type: ignore[no-any-return]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per trace: median over repeats per call, median over the plain calls."""
    out: dict[str, Any] = {}
    for name in runs[0]:
        first = runs[0][name]
        plain = [i for i, c in enumerate(first["compacted"]) if not c]
        per_call = [statistics.median(r[name]["seconds"][i] for r in runs) for i in plain]
        out[name] = {
            "calls": len(first["seconds"]),
            "plain_calls": len(plain),
            "median_ms": statistics.median(per_call) * 1e3 if per_call else None,
        }
    return out


def to_markdown(data: dict[str, Any]) -> str:
    lines = [
        "## Per-call cost of `prepare` (calls that do not compact)",
        "",
        header_markdown(data["machine"]),
        "",
        f"The replay loop of the per-call comparison (`add_tool_result` per tool result, "
        f"`prepare` before every assistant message) under `{AGENT}` on the "
        f"{len(data['this tree'])} longest shared traces; {data['repeat']} repeats per "
        "tree, baseline and this tree alternating, each in its own process; per call the "
        "median over the repeats, then the median over the calls that did not compact.",
        "",
    ]
    rows = []
    for name, mine in data["this tree"].items():
        base = data.get("baseline", {}).get(name, {})
        b, m = base.get("median_ms"), mine["median_ms"]
        rows.append(
            [
                name.removesuffix(".jsonl"),
                f"{mine['plain_calls']} of {mine['calls']}",
                f"{b:.3f}" if b is not None else "–",
                f"{m:.3f}" if m is not None else "–",
                f"{m / b:.2f}" if b and m is not None else "–",
            ]
        )
    lines.append(
        markdown_table(
            ["trace", "plain calls", "baseline median ms", "this tree median ms", "ratio"], rows
        )
    )
    if data.get("baseline_src"):
        lines += ["", f"Baseline: `{data['baseline_src']}` (commit {data.get('baseline_commit')})."]
    lines += [
        "",
        "Reproduce: `.venv/bin/python benchmarks/bench_prepare_calls.py --baseline <a "
        "checkout of the code before>`",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="source tree measured as the baseline")
    ap.add_argument("--traces", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="the smallest trace, one repeat")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.traces, args.quick)))
        return 0
    if args.quick:
        args.repeat = 1
    from benchmarks._common import git_head

    codes = trees(args.baseline, ROOT)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in codes}
    for i in range(args.repeat):
        for code, src in codes.items():
            eprint(f"repeat {i + 1}/{args.repeat}: {code}")
            runs[code].append(run(src, args.traces, args.quick))
    data: dict[str, Any] = {
        "machine": machine(["tiktoken"]),
        "repeat": args.repeat,
        "quick": args.quick,
        "baseline_src": str(args.baseline) if args.baseline else None,
        "baseline_commit": git_head(args.baseline) if args.baseline else None,
        **{code: summarize(r) for code, r in runs.items()},
    }
    publish("bench_prepare_calls", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
