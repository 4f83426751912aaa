"""Every kind of agent on its held-out traces: ctxpolicy before and after, one ruler.

The shared traces split by kind into two fixed halves (:func:`kind_halves`); each
trace replayed under its kind's shipped policy for each of its windows (:func:`agent_for`:
``coding_agent_16k`` for SWE at 16k) by this tree and the
``--baseline`` tree (child processes, same run), with the extractive and the LLM-summary
summarizer; ``--peers``: OpenHands' condenser on the same jobs. The section's note
says what each cell is.

``--fits`` (the tune half only): each trace of every kind at the windows where sending
everything just fits (:func:`fit_jobs`: its uncompacted peak plus the policy's reply
reserve, times :data:`FIT_SCALES`), and whether the rule "where sending everything fits,
retention ≥ 98 % unless the bill drops below 0.85 of sending everything" held
(:func:`fits_held`), per trace.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import (
    ROOT,
    eprint,
    in_tree,
    machine,
    markdown_table,
    parser,
    publish,
)
from benchmarks._inputs import tree_policies
from benchmarks._kinds import (
    FIT_SCALES,
    KINDS,
    agent_for,
    fit_window,
    fits_held,
    half,
)

# --------------------------------------------------------------------------- one tree


def replay_one(policy_file: str, agent: str, path: str, window: int) -> dict[str, Any]:
    """One trace under one policy at one window: the numbers of the table (only APIs
    both trees have: this runs in the baseline tree's process too)."""
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import load_policy_file, replay_trace

    policy = load_policy_file(policy_file, agent)
    with tempfile.TemporaryDirectory(prefix="ctxpolicy-kinds-") as tmp:
        try:
            res = replay_trace(
                load_trace(path), policy, window=window, snapshots_dir=tmp, trace=Path(path).stem
            ).to_dict()
        except ValueError as exc:  # the policy's budget leaves no room at this window
            return {"error": str(exc)[:200]}
    return _numbers(res)


def replay_llm(policy_file: str, agent: str, path: str, window: int) -> dict[str, Any]:
    """:func:`replay_one` with the LLM-summary variant: the policy's summaries are the
    shared deterministic digest billed as an LLM call's (input ×1, output ×5, the
    peers' table's ``ctxpolicy`` row), through the same loop and counter."""
    from benchmarks.peers.runs import SharedSummaryPolicy
    from benchmarks.peers.summary import SummaryMeter, ctxpolicy_summary
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import (
        _safe,
        _sim_store,
        load_policy_file,
        run_strategy,
        with_window,
    )

    policy = with_window(load_policy_file(policy_file, agent), window)
    trace = Path(path).stem
    with tempfile.TemporaryDirectory(prefix="ctxpolicy-kinds-") as tmp:
        try:
            store = _sim_store(policy, Path(tmp) / _safe(trace))
            counters: list[Any] = []  # the session's own counter, once it exists

            def count(text: str) -> int:
                return int(counters[0].count_text(text))

            meter = SummaryMeter(count)
            strat = SharedSummaryPolicy(
                policy,
                conv_id=_safe(trace),
                label=agent,
                store=store,
                summarizer=ctxpolicy_summary(count, meter),
                meter=meter,
            )
            counters.append(strat.counter)
            res = run_strategy(
                load_trace(path), strat, counter=strat.counter, trace=trace, model=policy.model_name
            ).to_dict()
        except ValueError as exc:  # the policy's budget leaves no room at this window
            return {"error": str(exc)[:200]}
    return _numbers(res)


def replay_peer(policy_file: str, agent: str, path: str, window: int) -> dict[str, Any]:
    """One trace under OpenHands' condenser configured to the policy's budget at the
    window, through the same loop, counter and price model as :func:`replay_one`."""
    from benchmarks.peers.openhands import OpenHandsStrategy
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import load_policy_file, run_strategy, with_window

    policy = with_window(load_policy_file(policy_file, agent), window)
    strat = OpenHandsStrategy(policy)  # summaries billed with the policy's counter
    try:
        res = run_strategy(
            load_trace(path),
            strat,
            counter=strat.counter,
            trace=Path(path).stem,
            model=policy.model_name,
        ).to_dict()
    finally:
        strat.close()
    return _numbers(res)


def _numbers(res: Mapping[str, Any]) -> dict[str, Any]:
    b, r = res["billing"], res["retention"]
    return {
        "calls": res["steps"],
        "total": b["total_cost"],
        "none": b["total_cost_none"],
        "facts": r["facts"],
        "in_context": r["in_context"],
        "far_facts": r["far_facts"],
        "far_in_context": r["far_in_context"],
        "prefix_changes": res["prefix_changes"],
        "avoidable_overflows": res["overflows"] - res["overflows_unavoidable"],
        "violations": res["pairing_violations"],
        "compacting_calls": res["compacting_calls"],
        # the newer ruler (absent from a tree that does not measure it)
        "instr_checked": (res.get("instructions") or {}).get("checked"),
        "instr_retained": (res.get("instructions") or {}).get("retained"),
        "own_tokens": res.get("own_tokens"),
        "prompt_tokens": res["prompt_tokens"],
        "duplicated_lines": res.get("duplicated_lines"),
        "needless": res.get("needless_compactions"),
        "fits": res.get("fits_uncompacted"),
    }


def jobs_for(
    which: str,
    quick: bool,
    kinds: Sequence[str] | None = None,
    windows: Sequence[int] | None = None,
    agents: Mapping[str, str] | None = None,
) -> list[tuple[str, str, str, int]]:
    """``(kind, agent, trace path, window)`` of a half (agent: :func:`agent_for`);
    ``kinds``: only these; ``windows``: these instead of each kind's own; ``agents``:
    ``{kind: policy}`` at every window instead of :func:`agent_for`'s choice."""
    out: list[tuple[str, str, str, int]] = []
    for kind, paths in half(which).items():
        if kinds and kind not in kinds:
            continue
        own = KINDS[kind][2]
        windows_here = tuple(windows or own)
        if quick:
            paths = sorted(paths, key=lambda p: p.stat().st_size)[:1]  # the smallest trace
            windows_here = windows_here[:1]
        for p in paths:
            for w in windows_here:
                out.append((kind, agent_for(kind, w, agents), str(p), w))
    return out


def run_tree(
    which: str,
    quick: bool,
    peers: bool = False,
    kinds: Sequence[str] | None = None,
    windows: Sequence[int] | None = None,
    agents: Mapping[str, str] | None = None,
    fit: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every job of the half (:func:`jobs_for`) in this process (the tree first on
    ``sys.path``); with ``peers``, OpenHands' condenser on the same jobs too (rows with
    ``peer``); ``fit``: these jobs instead (:func:`fit_jobs`; their other fields copied
    into the rows)."""
    out = []
    runs: list[tuple[str | None, str, Any]] = [
        (None, "extractive", replay_one),
        (None, "llm", replay_llm),
    ]
    if peers:
        runs.append(("openhands", "llm", replay_peer))
    jobs: list[Mapping[str, Any]] = (
        list(fit)
        if fit is not None
        else [
            {"kind": k, "agent": a, "path": p, "window": w}
            for k, a, p, w in jobs_for(which, quick, kinds, windows, agents)
        ]
    )
    for job in jobs:
        kind, agent, path, window = job["kind"], job["agent"], job["path"], job["window"]
        for peer, summarizer, fn in runs:
            t0 = time.perf_counter()
            row = fn(str(tree_policies()), agent, path, window)
            row.update({k: v for k, v in job.items() if k != "path"})
            row.update(
                kind=kind, agent=agent, trace=Path(path).stem, window=window, summarizer=summarizer
            )
            if peer is not None:
                row["peer"] = peer
            row["seconds"] = round(time.perf_counter() - t0, 2)
            out.append(row)
    return out


def run_child(
    src: Path,
    which: str,
    quick: bool,
    peers: bool = False,
    only: Sequence[str] = (),
    fit: Path | None = None,
) -> list[dict[str, Any]]:
    """:func:`run_tree` measuring tree ``src`` (its policies/agents.yaml too); ``only``:
    the ``--kinds``/``--windows`` flags passed on; ``fit``: the file of
    :func:`fit_jobs` to replay instead."""
    flags = [
        "--half",
        which,
        *(["--quick"] if quick else []),
        *(["--peers"] if peers else []),
        *(["--fit-jobs", str(fit)] if fit is not None else []),
        *only,
    ]
    rows: list[dict[str, Any]] = in_tree(__file__, src, *flags)
    return rows


def fit_jobs(which: str, quick: bool, kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``{kind, agent, path, window, scale, fit_window, peak}`` of ``--fits``: every trace
    of the half at its fit window (:func:`fit_window` of its uncompacted peak, measured
    by replaying it with nothing compacted) times each of :data:`FIT_SCALES`; computed
    once, by this tree, so both trees replay the same windows."""
    from ctxpolicy.sim.baselines import run_baseline
    from ctxpolicy.sim.importers import load_trace
    from ctxpolicy.sim.replay import load_policy_file

    out: list[dict[str, Any]] = []
    for kind, paths in half(which).items():
        if kinds and kind not in kinds:
            continue
        if quick:
            paths = sorted(paths, key=lambda p: p.stat().st_size)[:1]
        for p in paths:
            probe = load_policy_file(str(tree_policies()), KINDS[kind][1])
            res = run_baseline("none", load_trace(str(p)), probe, window=1 << 24, trace=p.stem)
            peak = max((s.none for s in res.steps), default=0)
            if peak <= 0:
                continue
            own = load_policy_file(str(tree_policies()), agent_for(kind, peak))
            base = fit_window(own, peak)
            scales = FIT_SCALES[:1] if quick else FIT_SCALES
            for scale in scales:
                window = round(base * scale)
                agent = agent_for(kind, window)
                out.append(
                    {
                        "kind": kind,
                        "agent": agent,
                        "path": str(p),
                        "window": window,
                        "scale": scale,
                        "fit_window": base,
                        "peak": peak,
                    }
                )
    return out


# --------------------------------------------------------------------------- the table


def totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return {"error": rows[0].get("error") if rows else "no traces"}

    def s(k: str) -> int | float:
        return sum(r[k] for r in ok)

    calls = s("calls")
    held = [h for h in map(fits_held, ok) if h is not None]
    extra: dict[str, Any] = {}
    if all(r.get("instr_checked") is not None for r in ok):
        checked = s("instr_checked")
        extra = {
            "instructions": round(100 * s("instr_retained") / checked, 1) if checked else None,
            "ledger_share": round(100 * s("own_tokens") / s("prompt_tokens"), 1),
            "duplicated_lines": s("duplicated_lines"),
            "needless": s("needless"),
        }
    return {
        **extra,
        "traces": len(ok),
        "calls": calls,
        "cost": round(s("total") / s("none"), 3) if s("none") else None,
        "retention": round(100 * s("in_context") / s("facts"), 1) if s("facts") else None,
        "far": round(100 * s("far_in_context") / s("far_facts"), 1) if s("far_facts") else None,
        "pfx": round(100 * s("prefix_changes") / calls, 1) if calls else 0.0,
        "ovf": s("avoidable_overflows"),
        "violations": s("violations"),
        "fits_held": sum(held),
        "fits": len(held),
    }


def _held(t: Mapping[str, Any]) -> str:
    """``held/fits`` of :func:`totals` (``–``: no trace fits uncompacted)."""
    return f"{t['fits_held']}/{t['fits']}" if t.get("fits") else "–"


def _fmt(t: Mapping[str, Any]) -> str:
    if "error" in t:
        return f"n/a ({str(t['error'])[:60]})"
    ret = "–" if t["retention"] is None else f"{t['retention']} %"
    far = "–" if t["far"] is None else f"{t['far']} %"
    return f"{t['cost']} / {ret} / {far} / pfx {t['pfx']} / ovf {t['ovf']}"


def table(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    peers: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    def key(r: Mapping[str, Any]) -> tuple[str, int, str]:
        return (r["kind"], r["window"], r.get("summarizer", "extractive"))

    keys = sorted(
        {key(r) for r in after},
        key=lambda k: (list(KINDS).index(k[0]), k[1], SUMMARIZERS.index(k[2])),
    )
    rows = []
    for kind, window, summarizer in keys:
        b = [r for r in before if key(r) == (kind, window, summarizer)]
        a = [r for r in after if key(r) == (kind, window, summarizer)]
        p = [r for r in peers if (r["kind"], r["window"]) == (kind, window)]
        ta = totals(a)
        ruler = (
            f"{ta['instructions']} % / {ta['ledger_share']} % / {ta['duplicated_lines']} / "
            f"{ta['needless']} / {_held(ta)}"
            if "instructions" in ta
            else "–"
        )
        agent = ", ".join(sorted({r["agent"] for r in a}))
        was = ", ".join(sorted({r["agent"] for r in b}))
        row = [
            f"{kind} ({ta.get('traces', 0)} traces), {window // 1024}k",
            f"{agent}{f' (before: {was})' if b and was != agent else ''}, {summarizer}",
            _fmt(totals(b)) if b else "–",
            _fmt(ta),
        ]
        if peers:
            row.append(_fmt(totals(p)) if p else "–")
        rows.append([*row, ruler])
    head = ["set, window", "policy, summarizer", "before (main)", "after"]
    if peers:
        head.append("OpenHands condenser (same run)")
    return [
        markdown_table(
            [*head, "after: instr / own / dup / needless / fits rule"],
            rows,
            align="l" * (len(head) + 1),
        ),
        "",
        "Each cell: cost ÷ sending everything / retention / far retention / prefix "
        "rewrites per 100 calls / avoidable overflows. Last column (this tree's ruler): "
        "user turns still sent verbatim / ledger + summary share of the prompt / lines "
        "said twice / compactions of conversations sending everything never overflowed / "
        "traces where sending everything fits that kept retention ≥ 98 % or a bill below "
        "0.85 of sending everything (held of such traces). "
        "Policy: the kind's shipped policy for the window (SWE: `coding_agent_16k` at "
        "16k, `coding_agent` at 32k), the same in both columns unless the cell says what "
        "the before column replayed; the OpenHands column is configured to the after "
        "column's policy. "
        "Summarizer: `extractive` is the policy's own (no LLM call, free); `llm` has the "
        "policy's summaries written by the shared deterministic digest and billed as an "
        "LLM call's (input ×1, output ×5), as in the peers' table; the OpenHands column "
        "is the same on both rows.",
    ]


def fits_table(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[str]:
    """``--fits``: per kind × scale × summarizer, the totals before and after and the
    rule's count (:func:`fits_held`), then every replay where the rule failed."""

    def key(r: Mapping[str, Any]) -> tuple[str, float, str]:
        return (r["kind"], r["scale"], r["summarizer"])

    keys = sorted(
        {key(r) for r in after},
        key=lambda k: (list(KINDS).index(k[0]), k[1], SUMMARIZERS.index(k[2])),
    )
    rows = []
    for k in keys:
        b = [r for r in before if key(r) == k]
        a = [r for r in after if key(r) == k]
        tb, ta = totals(b) if b else {}, totals(a)
        agents = ", ".join(sorted({r["agent"] for r in a}))
        rows.append(
            [
                f"{k[0]} ({ta.get('traces', 0)} traces), fit × {k[1]}",
                f"{agents}, {k[2]}",
                _fmt(tb) if b else "–",
                _fmt(ta),
                f"{_held(tb) if b else '–'} → {_held(ta)}",
                f"{tb.get('needless', '–') if b else '–'} → {ta.get('needless', '–')}",
            ]
        )
    out = [
        markdown_table(
            [
                "set, window",
                "policy, summarizer",
                "before",
                "after",
                "fits rule held",
                "needless compactions",
            ],
            rows,
            align="llllll",
        ),
        "",
        "Each trace at the window where sending everything just fits (its uncompacted "
        "peak + the policy's reply reserve) times the scale. Cells as above; fits rule: "
        "replays that kept retention ≥ 98 % or a bill below 0.85 of sending everything, "
        "of those where sending everything fits.",
    ]
    was = {(r["trace"], r["window"], r["summarizer"]): r for r in before}
    failed = [r for r in after if fits_held(r) is False]
    if failed:
        out += ["", "Where the rule failed (after; before in brackets):", ""]
        for r in failed:
            old = was.get((r["trace"], r["window"], r["summarizer"]))
            out.append(
                f"- {r['trace'][:70]} @ {r['window']} ({r['agent']}, {r['summarizer']}): "
                f"{_one(r)}" + (f" [{_one(old)}]" if old else "")
            )
    errors = [r for r in after if "error" in r]
    for r in errors:
        out.append(f"- {r['trace'][:70]} @ {r['window']}: n/a ({str(r['error'])[:80]})")
    return out


def _one(r: Mapping[str, Any]) -> str:
    """One replay: cost / retention / needless compactions."""
    if "error" in r:
        return f"n/a ({str(r['error'])[:60]})"
    ret = 100 * r["in_context"] / r["facts"] if r["facts"] else 100.0
    return (
        f"{r['total'] / r['none']:.3f} / {ret:.1f} % / needless {r.get('needless')}"
        f" / pfx {r['prefix_changes']} of {r['calls']}"
    )


#: the summarizers every kind × window runs with: the policy's own (extractive, free)
#: and the LLM-summary variant (the shared deterministic digest, billed)
SUMMARIZERS = ("extractive", "llm")

#: how the peer column was measured (printed above the table when it is there)
PEER_NOTE = [
    "OpenHands' own `LLMSummarizingCondenser` (`openhands-sdk` 1.58.2, in a Python 3.12 "
    "virtualenv built from `pyenv root`'s 3.12: benchmarks/peers/openhands.py) replays the "
    "same traces in the same run through the same replay loop, token counter and price "
    "model: `max_tokens` is the kind's policy trigger at the window (it then forgets down to "
    "half of it), `max_size` 80 events and `keep_first` 4 are its defaults, and its summary "
    "LLM is a real litellm call to a loopback endpoint answering with the shared "
    "deterministic digest of the events OpenHands renders into its summary prompt, billed "
    "like every summary (input ×1, output ×5).",
    "",
]


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, baseline=True, child=True)
    ap.add_argument("--half", choices=("held_out", "tune"), default="held_out")
    ap.add_argument(
        "--peers", action="store_true", help="OpenHands' condenser on the same jobs too"
    )
    ap.add_argument(
        "--kinds",
        type=lambda v: [k for k in v.split(",") if k],
        help="only these kinds (comma-separated, e.g. swe): a quick loop, printed, not saved",
    )
    ap.add_argument(
        "--windows",
        type=lambda v: [int(w) for w in v.split(",") if w],
        help="these windows instead of each kind's own (comma-separated tokens): printed, "
        "not saved",
    )

    def kind_agents(v: str) -> dict[str, str]:
        pairs = [p.split("=", 1) for p in v.split(",") if p]
        if any(len(p) != 2 or p[0] not in KINDS for p in pairs):
            raise ValueError(v)
        return dict((k, a) for k, a in pairs)

    ap.add_argument(
        "--agents",
        type=kind_agents,
        help="KIND=POLICY,...: this policy at every window of the kind instead of its "
        "shipped policy for each window: printed, not saved",
    )
    ap.add_argument(
        "--baseline-agents",
        type=kind_agents,
        help="--agents for the --baseline tree only (e.g. swe=coding_agent: the policy "
        "replayed at every window before the per-window choice)",
    )
    ap.add_argument(
        "--fits",
        action="store_true",
        help="the tune half only: each trace at the windows where sending everything just "
        "fits, and whether retention stayed ≥ 98 %% unless the bill fell below 0.85: printed, "
        "not saved",
    )
    ap.add_argument("--fit-jobs", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        fit = json.loads(args.fit_jobs.read_text()) if args.fit_jobs else None
        rows = run_tree(
            args.half, args.quick, args.peers, args.kinds, args.windows, args.agents, fit
        )
        print(json.dumps(rows))
        return 0
    if args.fits:
        return fits_main(args)
    only = [
        *(["--kinds", ",".join(args.kinds)] if args.kinds else []),
        *(["--windows", ",".join(map(str, args.windows))] if args.windows else []),
    ]

    def agents_flag(agents: Mapping[str, str] | None) -> list[str]:
        return ["--agents", ",".join(f"{k}={a}" for k, a in agents.items())] if agents else []

    t0 = time.perf_counter()
    before: list[dict[str, Any]] = []
    if args.baseline is not None:
        eprint(f"before: {args.baseline}")
        before = run_child(
            args.baseline.resolve(),
            args.half,
            args.quick,
            only=[*only, *agents_flag(args.baseline_agents or args.agents)],
        )
    eprint("after: this tree")
    rows = run_child(
        ROOT, args.half, args.quick, args.peers, only=[*only, *agents_flag(args.agents)]
    )
    after = [r for r in rows if "peer" not in r]
    peers = [r for r in rows if "peer" in r]
    elapsed = time.perf_counter() - t0
    if only or args.agents:  # a part or a variant: shown, never published over a full run's
        print("\n".join(table(before, after, peers)))
        return 0
    split = {k: [p.name for p in v] for k, v in half(args.half).items()}
    data = {
        "machine": machine(),
        "half": args.half,
        "quick": args.quick,
        "baseline": args.baseline.name if args.baseline is not None else None,
        "baseline_agents": args.baseline_agents,
        "split": split,
        "elapsed_s": round(elapsed, 1),
        "before": before,
        "after": after,
        "peers": peers,
    }
    name = "bench_kinds" if args.half == "held_out" else "bench_kinds_tune"
    md = [
        f"## Every kind of agent, {args.half.replace('_', '-')} half",
        "",
        f"Reproduce: `python benchmarks/bench_kinds.py --baseline <a checkout before>"
        f"{' --quick' if args.quick else ''}{' --half tune' if args.half == 'tune' else ''}"
        f"{' --peers' if args.peers else ''}"
        f"{''.join(f' --baseline-agents {v}' for v in agents_flag(args.baseline_agents)[1:])}`"
        f" ({elapsed:.0f} s).",
        "",
        *(PEER_NOTE if peers else []),
        *table(before, after, peers),
    ]
    publish(name, data, "\n".join(md))
    return 0


def fits_main(args: argparse.Namespace) -> int:
    """``--fits``: :func:`fit_jobs` of the tune half, replayed by the ``--baseline`` tree
    and this one, printed (:func:`fits_table`)."""
    if args.half != "tune":
        raise SystemExit("--fits replays the tune half only (--half tune)")
    jobs = fit_jobs(args.half, args.quick, args.kinds)
    with tempfile.TemporaryDirectory(prefix="ctxpolicy-fits-") as tmp:
        path = Path(tmp) / "jobs.json"
        path.write_text(json.dumps(jobs))
        before: list[dict[str, Any]] = []
        if args.baseline is not None:
            eprint(f"before: {args.baseline}")
            before = run_child(args.baseline.resolve(), args.half, args.quick, fit=path)
        eprint("after: this tree")
        after = run_child(ROOT, args.half, args.quick, fit=path)
    print("\n".join(fits_table(before, after)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
