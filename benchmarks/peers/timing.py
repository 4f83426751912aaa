"""Per model call: ctxpolicy's path vs LangChain ``SummarizationMiddleware`` and the peers.

Each long trace replayed call by call, interleaved in one run
(:mod:`benchmarks.peers.replay`): ctxpolicy's ``add_tool_result`` per tool result
(booked on the call it precedes) and ``prepare`` before every assistant message; each
peer's middleware on an agent state updated by LangGraph's reducer; the floor, one
tiktoken pass over the final conversation ÷ calls. The section
(:func:`per_call_markdown`) says what each column is; :func:`profile_calls` returns
ctxpolicy's hot spots.
"""

from __future__ import annotations

import cProfile
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks._common import SHARED, eprint, markdown_table, profile_rows
from benchmarks._inputs import message_texts
from benchmarks.peers.catalog import available_peers
from benchmarks.peers.others import PEER_REPLAYS, langchain_steps
from benchmarks.peers.parts import parts_markdown, per_call_parts, summarize
from benchmarks.peers.replay import STATE, replay_ctxpolicy
from benchmarks.peers.worker import ROOT, Worker

__all__ = ["per_call", "per_call_markdown", "per_call_section", "profile_calls"]

#: ctxpolicy's variants: its two entry points and their sum per call
OURS = ("prepare", "add_tool_result", "ctxpolicy")


def one_pass(msgs: Sequence[Mapping[str, Any]], tokenizer: Any) -> float:
    """Seconds of one exact pass over every text of the conversation."""
    texts = [t for m in msgs for t in message_texts(m)]
    t0 = time.perf_counter()
    for t in texts:
        tokenizer.count(t)
    return time.perf_counter() - t0


def _ctxpolicy_runs(
    policy: Any,
    msgs: Sequence[Mapping[str, Any]],
    workers: Mapping[str, Worker] | None,
    request: Mapping[str, Any],
    turn: int,
) -> dict[str, tuple[list[float], list[float]]]:
    """One replay per tree: in this process, or (``workers``) one per worker process,
    the order alternating with ``turn`` so that drifting load hits both alike."""
    if not workers:
        return {"": replay_ctxpolicy(policy, msgs)}
    runs = {}
    for name in list(workers) if turn % 2 == 0 else list(workers)[::-1]:
        answer = workers[name].ask(cmd="replay", **request)
        runs[name] = (answer["prepare"], answer["add_tool_result"])
    return runs


def per_call(
    label: str,
    msgs: Sequence[Mapping[str, Any]],
    policy: Any,
    repeat: int,
    *,
    workers: Mapping[str, Worker] | None = None,
    request: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Interleaved repeats of every variant on one trace; medians and ratios.

    With ``workers`` (``{"": this tree, "baseline": another}``, see
    :mod:`benchmarks.peers.worker`) ctxpolicy runs in those processes, each tree in
    turn, and the baseline's variants are reported as ``baseline_*``; ``request``
    names the trace file and the agent for them.
    """
    from ctxpolicy.tokens import get_counter

    counter = get_counter(policy.model, model_name=policy.model_name)
    steps = langchain_steps(msgs)
    peers = ["langchain", *available_peers(("deepagents", "langmem"))[0]]
    series: dict[str, list[list[float]]] = {v: [] for v in (*OURS, "langchain")}
    series |= {f"{tree}_{v}": [] for tree in workers or () if tree for v in OURS}
    series |= {p: [] for p in peers}
    passes: list[float] = []
    for turn in range(repeat):  # load changes hit every variant alike
        runs = _ctxpolicy_runs(policy, msgs, workers, request or {}, turn)
        for tree, (prep, tools) in runs.items():
            pre = f"{tree}_" if tree else ""
            series[f"{pre}prepare"].append(prep)
            series[f"{pre}add_tool_result"].append(tools)
            series[f"{pre}ctxpolicy"].append([a + b for a, b in zip(prep, tools, strict=True)])
        for peer in peers:
            series[peer].append(PEER_REPLAYS[peer](policy, steps, counter.count_text))
        passes.append(one_pass(msgs, counter.tokenizer))
    calls = len(series["prepare"][0])
    floor = statistics.median(passes)
    floor_call = floor / calls if calls else 0.0
    out: dict[str, Any] = {
        "trace": label,
        "calls": calls,
        "tokens": sum(counter.tokenizer.count(t) for m in msgs for t in message_texts(m)),
        "counter": counter.name,
        "repeat": repeat,
        "one_pass_ms": floor * 1e3,
        "floor_per_call_ms": floor_call * 1e3,
        "variants": {},
    }
    for v, runs_of in series.items():
        per = [statistics.median(r[k] for r in runs_of) for k in range(calls)]
        med = statistics.median(per) if per else 0.0
        total = statistics.median(sum(r) for r in runs_of)
        out["variants"][v] = {
            "median_ms": med * 1e3,
            "p95_ms": sorted(per)[min(len(per) - 1, int(0.95 * len(per)))] * 1e3 if per else 0.0,
            "total_ms": total * 1e3,
            "median_over_floor_per_call": med / floor_call if floor_call else None,
            "total_over_one_pass": total / floor if floor else None,
        }
    ms = {v: x["median_ms"] for v, x in out["variants"].items()}
    out["ctxpolicy_over_langchain"] = _ratio(ms["ctxpolicy"], ms["langchain"])
    out["goal_le_langchain"] = ms["langchain"] > 0 and ms["ctxpolicy"] <= ms["langchain"]
    out["peers"] = peers
    out["over_peer"] = {p: {v: _ratio(ms[v], ms[p]) for v in OURS} for p in peers}
    if "baseline_ctxpolicy" in ms:
        out["over_baseline"] = {v: _ratio(ms[v], ms[f"baseline_{v}"]) for v in OURS}
        out["baseline_over_langchain"] = _ratio(ms["baseline_ctxpolicy"], ms["langchain"])
    return out


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def profile_calls(
    policy: Any, traces: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], top: int = 20
) -> dict[str, Any]:
    """cProfile of ``prepare`` + ``add_tool_result`` over ``traces``: the top functions
    by own time, and own time per ctxpolicy module."""
    prof = cProfile.Profile()
    for _, msgs in traces:
        replay_ctxpolicy(policy, msgs, profiler=prof)
    total, rows = profile_rows(prof)
    modules: dict[str, float] = {}
    for r in rows:
        modules[r["module"]] = modules.get(r["module"], 0.0) + r["tottime_s"]
    return {
        "traces": [t for t, _ in traces],
        "total_s": total,
        "top_own": sorted(rows, key=lambda r: -r["tottime_s"])[:top],
        "top_cumulative_ctxpolicy": sorted(
            (r for r in rows if r["module"].startswith("ctxpolicy/")),
            key=lambda r: -r["cumtime_s"],
        )[:top],
        "modules": [
            {"module": k, "own_s": v, "share": v / total if total else 0.0}
            for k, v in sorted(modules.items(), key=lambda kv: -kv[1])[:top]
        ],
    }


def per_call_section(
    agent: str,
    *,
    quick: bool,
    traces: int,
    repeat: int,
    policy_file: str,
    baseline: str | None = None,
) -> dict[str, Any]:
    """Per model call vs LangChain on the ``traces`` longest shared traces (the smallest
    one when ``quick``), then a profile of ctxpolicy's per-call path on them.

    ``baseline``: another source tree (e.g. a checkout of main) timed in the same
    run; both trees then run in worker processes, in turn."""
    from benchmarks._inputs import largest_traces, load_agent, smallest_trace
    from ctxpolicy.budget import compute_budget

    policy, note = load_agent(agent)
    window = compute_budget(policy).window
    chosen = [smallest_trace()] if quick else largest_traces(traces)
    workers = {"": Worker(ROOT), "baseline": Worker(baseline)} if baseline else None
    rows = []
    try:
        for name, msgs in chosen:
            eprint(f"per call vs LangChain: {name} ...")
            request = {"trace": str(SHARED / "traces" / name), "agent": agent}
            rows.append(per_call(name, msgs, policy, repeat, workers=workers, request=request))
        eprint("parts of the per-call path and their floors ...")
        name, msgs = chosen[0]
        if workers:
            request = {"trace": str(SHARED / "traces" / name), "agent": agent}
            parts = {"trace": name, **_parts_of_both(workers, request, max(2, repeat // 2))}
        else:
            parts = {"trace": name, **per_call_parts(policy, msgs)}
    finally:
        for w in (workers or {}).values():
            w.close()
    eprint("profiling prepare + add_tool_result ...")
    return {
        "policy": f"{policy_file}:{agent}",
        "policy_note": note,
        "window": window,
        "baseline": baseline,
        "durability": _durability(policy),
        "traces": rows,
        "parts": parts,
        "profile": profile_calls(policy, chosen),
    }


def _parts_of_both(
    workers: Mapping[str, Worker], request: Mapping[str, Any], turns: int
) -> dict[str, Any]:
    """The parts of this tree (``""``) and of the baseline, the trees in turn."""
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in workers}
    for turn in range(turns):
        for k in list(workers) if turn % 2 == 0 else list(workers)[::-1]:
            samples[k].append(workers[k].ask(cmd="parts", repeat=1, **request))
    return {**summarize(samples[""]), "baseline": summarize(samples["baseline"])}


def _durability(policy: Any) -> str:
    from ctxpolicy.snapshots import LocalOptions

    return str(LocalOptions.model_validate(dict(policy.snapshots.options)).durability)


PEER_LABELS = {
    "langchain": "LangChain `SummarizationMiddleware`",
    "deepagents": "deepagents `SummarizationMiddleware`",
    "langmem": "langmem `summarize_messages`",
}
LABELS = {
    "langchain": "LangChain `SummarizationMiddleware.before_model`",
    "prepare": "ctxpolicy `prepare`",
    "add_tool_result": "ctxpolicy `add_tool_result` (booked per call)",
    "ctxpolicy": "ctxpolicy `prepare` + `add_tool_result`",
}


def _short(trace: str) -> str:
    return trace.removesuffix(".jsonl")[-40:]


def _ms(r: Mapping[str, Any], v: str) -> float:
    return float(r["variants"][v]["median_ms"])


def per_call_markdown(data: Mapping[str, Any]) -> list[str]:
    """The per-call section of bench_engine's markdown."""
    rows = data.get("traces") or []
    if not rows:
        return []
    ok = {True: "✓", False: "✗"}
    md = [
        "### Per model call: ctxpolicy vs LangChain `SummarizationMiddleware`",
        "",
        f"Policy `{data['policy']}` at {data['window']:,} tokens; LangChain's trigger and keep "
        "are its trigger and target; one deterministic summary for both "
        "(benchmarks/peers/timing.py). ctxpolicy counts exactly, writes a snapshot of every "
        f"tool result to a local store (`durability: {data.get('durability', 'flush')}`), "
        f"saves its state after every call ({STATE} store, the shipped default) and runs the "
        "key-facts check and the ledger; LangChain counts approximately. Floor per call: one "
        "exact tiktoken pass over the final conversation ÷ calls. Medians of "
        f"{rows[0]['repeat']} interleaved runs.",
        "",
        markdown_table(
            [
                "trace",
                "calls",
                "tokens",
                *[f"{LABELS[v]} median ms (× floor/call)" for v in LABELS],
                "ctxpolicy ÷ LangChain",
                "goal ≤ LangChain",
            ],
            [
                [
                    _short(r["trace"]),
                    r["calls"],
                    r["tokens"],
                    *[
                        f"{_ms(r, v):.3f} ({r['variants'][v]['median_over_floor_per_call']:.2f}×)"
                        for v in LABELS
                    ],
                    f"{r['ctxpolicy_over_langchain']:.1f}×",
                    ok[r["goal_le_langchain"]],
                ]
                for r in rows
            ],
        ),
        "",
        markdown_table(
            ["trace", "one pass ms", *[f"{LABELS[v]} total ÷ one pass" for v in LABELS]],
            [
                [
                    _short(r["trace"]),
                    r["one_pass_ms"],
                    *[f"{r['variants'][v]['total_over_one_pass']:.2f}" for v in LABELS],
                ]
                for r in rows
            ],
        ),
        "",
    ]
    peers = [p for p in PEER_LABELS if all(p in r["variants"] for r in rows)]
    if len(peers) > 1:
        md += [
            "#### Per call against each peer (same run)",
            "",
            "Median ms per call of each peer's own work (deepagents and langmem replayed "
            "like LangChain, benchmarks/peers/others.py: the policy's trigger and target, "
            "the same deterministic summary model, each library's default token counter; "
            "the packages are the `bench` extra), and ctxpolicy's `prepare` + `add_tool_result` "
            "(and `prepare` alone) ÷ that median.",
            "",
            markdown_table(
                [
                    "trace",
                    *[f"{PEER_LABELS[p]} ms" for p in peers],
                    "ctxpolicy ms (`prepare` ms)",
                    *[f"÷ {p}" for p in peers],
                    *[f"`prepare` ÷ {p}" for p in peers],
                ],
                [
                    [
                        _short(r["trace"]),
                        *[f"{_ms(r, p):.3f}" for p in peers],
                        f"{_ms(r, 'ctxpolicy'):.3f} ({_ms(r, 'prepare'):.3f})",
                        *[
                            f"{_ms(r, v) / _ms(r, p):.2f}×"
                            for v in ("ctxpolicy", "prepare")
                            for p in peers
                        ],
                    ]
                    for r in rows
                ],
            ),
            "",
        ]
    missing = [PEER_LABELS[p] for p in PEER_LABELS if p not in peers]
    if missing:
        md += [
            f"Not measured in this run: {', '.join(missing)} (not installed: the `bench` extra).",
            "",
        ]
    md += _goals_markdown(rows)
    md += _why_missed(data, rows)
    if data.get("baseline"):
        md += [
            f"#### This tree vs the baseline `{data['baseline']}` (same run, interleaved)",
            "",
            "Both trees run the replay above in their own worker process, in turn "
            "(benchmarks/peers/worker.py); median ms per call, before → after (after ÷ before).",
            "",
            markdown_table(
                "trace | `prepare` | `add_tool_result` (booked per call) | `prepare` + "
                "`add_tool_result` | LangChain | ÷ LangChain before → after",
                [
                    [
                        _short(r["trace"]),
                        *[
                            f"{_ms(r, f'baseline_{v}'):.3f} → {_ms(r, v):.3f} "
                            f"({r['over_baseline'][v]:.2f}×)"
                            for v in OURS
                        ],
                        f"{_ms(r, 'langchain'):.3f}",
                        f"{r['baseline_over_langchain']:.1f}× → {r['ctxpolicy_over_langchain']:.1f}×",
                    ]
                    for r in rows
                ],
            ),
            "",
        ]
    if parts := data.get("parts"):
        lc = next((_ms(r, "langchain") for r in rows if r["trace"] == parts["trace"]), None)
        md += parts_markdown(_short(parts["trace"]), parts, lc, parts.get("baseline"))
    if prof := data.get("profile"):
        md += [
            f"#### Where ctxpolicy's per-call time goes (cProfile, {len(prof['traces'])} traces, "
            f"{prof['total_s']:.2f} s profiled)",
            "",
            markdown_table(
                "function (cumulative, ctxpolicy) | calls | cum s | share",
                [
                    [r["function"], r["calls"], r["cumtime_s"], f"{r['cum_share']:.0%}"]
                    for r in prof["top_cumulative_ctxpolicy"][:15]
                ],
            ),
            "",
            markdown_table(
                "function (own time) | calls | own s | share",
                [
                    [r["function"], r["calls"], r["tottime_s"], f"{r['own_share']:.0%}"]
                    for r in prof["top_own"][:12]
                ],
            ),
            "",
        ]
    return md


def _goals_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The per-call goals against LangChain, each trace: by how much they are missed (a
    ratio above the goal) in this run."""
    out = []
    for r in rows:
        lc = _ms(r, "langchain")
        if not lc:
            continue
        prep, both = _ms(r, "prepare") / lc, _ms(r, "ctxpolicy") / lc
        out.append(
            [
                _short(r["trace"]),
                f"{prep:.2f}× ({'met' if prep <= 0.6 else f'missed by {prep / 0.6:.1f}×'})",
                f"{both:.2f}× ({'met' if both <= 1.0 else f'missed by {both:.1f}×'})",
            ]
        )
    if not out:
        return []
    return [
        "Issue 32's goals per call, ÷ LangChain in this run (`prepare` ≤ 0.6×, `prepare` + "
        "`add_tool_result` ≤ 1.0×):",
        "",
        markdown_table("trace | `prepare` | `prepare` + `add_tool_result`", out),
        "",
    ]


def _why_missed(data: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What of a model call alone exceeds LangChain's whole call (the parts of the
    first trace, memory store): the state saves (1 + k compare-and-set commits, one
    per state-changing call, docs/state.md) and the rest of ``prepare``."""
    parts = (data.get("parts") or {}).get("parts") or {}
    trace = (data.get("parts") or {}).get("trace")
    lc = next((_ms(r, "langchain") for r in rows if r["trace"] == trace), 0)
    save, prep = parts.get("state save"), parts.get("prepare (whole)")
    if not (trace and lc and save and prep):
        return []
    saves_us = save["median_us"] * save["per_call"]
    rest_us = prep["median_us"] - save["median_us"]
    return [
        f"Where it goes on {_short(trace)} (parts below, memory store): "
        f"the state saves alone, {save['per_call']:.2f} per model call (one per "
        "state-changing call: `prepare` and each `add_tool_result` commit their own "
        f"changes, docs/state.md), take {saves_us:.0f} µs per call, "
        f"{saves_us / (lc * 1000):.2f}× LangChain's whole call, before a sqlite commit adds "
        f"its own time; `prepare` without its save is about {rest_us:.0f} µs "
        "(exact counts and content keys of the new messages, the comparison of the input "
        "with the previous call's, the grouping and the view): "
        f"{rest_us / (lc * 1000):.2f}× LangChain's call.",
        "",
    ]
