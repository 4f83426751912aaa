"""What per-call cost is left when durability is taken away (issue 32): ctxpolicy with
its shipped defaults, with its state in memory, and with its state in memory and no
snapshots, against LangChain's ``SummarizationMiddleware``, in one run.

Usage::

    python benchmarks/bench_floors.py [--quick] [--repeat 3]

The per-call goal of issue 32 (``prepare`` + ``add_tool_result`` ≤ 1.0× LangChain,
``prepare`` ≤ 0.6×) is stated with durable snapshots and state on. This benchmark
says how far each durable part is from that goal: the same replay as
``bench_engine.py --per-call-only`` (benchmarks/peers/timing.py, ``coding_agent``,
the three longest shared traces; ``--quick``: the smallest, one repeat) with

* ``defaults``: sqlite state, local snapshots (the shipped policy's durability);
* ``one commit per model call (emulated)``: the defaults, ``add_tool_result``'s
  changes saved with the next ``prepare``'s commit (what issue 32 item 2 asked for and
  docs/state.md decided against: a measurement for that decision, not a mode);
* ``memory state``: the memory state store (the state is still encoded and
  committed, nothing reaches a file), local snapshots;
* ``memory state, no snapshots``: that, and ``snapshots.enabled: false``;

and LangChain on the same messages, every variant once per repeat, in turn (drifting
load hits all alike). Median ms per model call over the calls (the median over the
repeats of each call), and each ÷ LangChain's. Needs LangChain (the ``langchain``
extra, in the dev install). Writes benchmarks/results/bench_floors.json and .md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# appended, not inserted: a child measuring a baseline (PYTHONPATH) finds that tree's
# ctxpolicy first, and `benchmarks` is this tree's whatever that tree holds
sys.path.append(str(Path(__file__).resolve().parents[1]))
sys.modules.setdefault("benchmarks", types.ModuleType("benchmarks")).__path__ = [
    str(Path(__file__).resolve().parent)
]

from benchmarks._common import eprint, header_markdown, machine, markdown_table, publish  # noqa: E402

#: variant → (state store, snapshots on, one commit per model call)
VARIANTS = {
    "defaults": ("sqlite", True, False),
    "one commit per model call (emulated)": ("sqlite", True, True),
    "memory state": ("memory", True, False),
    "memory state, no snapshots": ("memory", False, False),
}


@contextlib.contextmanager
def one_commit_per_call(on: bool) -> Iterator[None]:
    """``add_tool_result`` saves nothing: its changes stay marked and go with the next
    ``prepare``'s commit — what merging the two commits of a model call would cost,
    without the guarantees that keep them apart (docs/state.md). Not a mode of the
    engine: a measurement for that decision (issue 32 item 2)."""
    if not on:
        yield
        return
    from ctxpolicy.engine.persistence import Persistence

    real = Persistence.run

    def run(self: Any, what: str, call: Any) -> Any:
        return call() if what == "add_tool_result" else real(self, what, call)

    Persistence.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        Persistence.run = real  # type: ignore[method-assign]


def _per_call(runs: list[list[float]]) -> float:
    """Median over the calls of each call's median over the repeats, in ms."""
    calls = len(runs[0])
    return statistics.median(statistics.median(r[k] for r in runs) for k in range(calls)) * 1e3


def measure(quick: bool, repeat: int) -> dict[str, Any]:
    from benchmarks._inputs import largest_traces, load_agent, smallest_trace
    from benchmarks.peers.timing import _lc_steps, replay_ctxpolicy, replay_langchain
    from ctxpolicy.tokens import get_counter

    policy, note = load_agent("coding_agent")
    policies = {
        True: policy,
        False: policy.model_copy(
            update={"snapshots": policy.snapshots.model_copy(update={"enabled": False})}
        ),
    }
    counter = get_counter(policy.model, model_name=policy.model_name)
    rows = []
    for name, msgs in [smallest_trace()] if quick else largest_traces(3):
        eprint(f"floors: {name} ...")
        steps = _lc_steps(msgs)
        lc: list[list[float]] = []
        both: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
        prep: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
        for _ in range(repeat):
            lc.append(replay_langchain(policy, steps, counter.count_text))
            for v, (state, snapshots, merged) in VARIANTS.items():
                with one_commit_per_call(merged):
                    p, t = replay_ctxpolicy(policies[snapshots], msgs, state=state)
                prep[v].append(p)
                both[v].append([a + b for a, b in zip(p, t, strict=True)])
        lc_ms = _per_call(lc)
        rows.append(
            {
                "trace": name,
                "calls": len(lc[0]),
                "langchain_ms": lc_ms,
                "variants": {
                    v: {
                        "both_ms": _per_call(both[v]),
                        "prepare_ms": _per_call(prep[v]),
                        "both_over_langchain": _per_call(both[v]) / lc_ms,
                        "prepare_over_langchain": _per_call(prep[v]) / lc_ms,
                    }
                    for v in VARIANTS
                },
            }
        )
    return {
        "policy": "policies/agents.yaml:coding_agent",
        "policy_note": note,
        "repeat": repeat,
        "traces": rows,
    }


def to_markdown(data: dict[str, Any]) -> str:
    table = []
    for r in data["traces"]:
        short = r["trace"].split(".")[-2] if r["trace"].count(".") >= 2 else r["trace"]
        for v, x in r["variants"].items():
            table.append(
                [
                    short,
                    v,
                    f"{x['both_ms']:.3f}",
                    f"{x['both_over_langchain']:.2f}×",
                    f"{x['prepare_ms']:.3f}",
                    f"{x['prepare_over_langchain']:.2f}×",
                    f"{r['langchain_ms']:.3f}",
                ]
            )
    return "\n".join(
        [
            "## Per-call cost without durability (issue 32)",
            "",
            header_markdown(data["machine"]),
            "",
            f"`{data['policy']}` on the shared traces, {data['repeat']} repeat(s), every "
            "variant and LangChain's `SummarizationMiddleware` in turn; median ms per "
            "model call. The goal of issue 32 is `prepare` + `add_tool_result` ≤ 1.0× "
            "LangChain and `prepare` ≤ 0.6×, with durable snapshots and state on "
            "(`defaults`). `one commit per model call (emulated)` saves `add_tool_result`'s "
            "changes with the next `prepare`'s commit, for this measurement only "
            "(docs/state.md says why the engine keeps the two commits apart).",
            "",
            markdown_table(
                "trace | ctxpolicy | both calls ms | ÷ LangChain | prepare ms | ÷ LangChain | LangChain ms",
                table,
                align="llrrrrr",
            ),
            "",
            "Reproduce: `.venv/bin/python benchmarks/bench_floors.py`.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the smallest trace, one repeat")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        import langchain  # noqa: F401
    except ImportError:
        eprint("LangChain is not installed: pip install -e '.[langchain]'")
        return 2
    data = measure(args.quick, 1 if args.quick else args.repeat)
    data["machine"] = machine(["langchain", "langchain-core"])
    text = to_markdown(data)
    publish("bench_floors", data, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
