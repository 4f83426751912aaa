"""Build docs/benchmarks.md from the results files alone (benchmarks/results/*.json, .md).

Every suite writes ``results/<name>.json`` (its data) and ``results/<name>.md`` (its
section, rendered by the suite from that data; see :mod:`benchmarks.suites`). The page
is: a summary and a table of every goal, computed here from the JSON files; then each
section in :data:`ORDER` (other results files after them, alphabetically), its
"Reproduce" command written as the runner's (``python -m benchmarks run SUITE``); a plot
of the engine benchmark's per-step times (docs/img/engine_per_step.png). Nothing is
measured while the page is built.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import RESULTS, ROOT, eprint, markdown_table
from benchmarks.peers.table import totals_by_window
from benchmarks.suites import SUITES, command_for

#: the sections of the page, in this order (results files not listed follow, by name)
ORDER = (
    "bench_engine", "bench_floors", "bench_quality", "bench_simulate", "bench_peers_ruler",
    "bench_economics", "bench_peers_ruler_sweep", "bench_peers_ruler_before", "bench_incidents",
    "bench_cache", "bench_validate", "bench_tokens", "bench_tokens_verify", "bench_state",
    "bench_tune", "bench_tune_speed", "bench_prepare_calls", "bench_call_profile",
    "bench_scaling", "bench_facts", "bench_otel", "bench_dashboard", "bench_store",
    "bench_gateway", "bench_frontdoor_blocking", "bench_kinds", "bench_kinds_tune",
    "bench_taskstate", "bench_preprocessors",
)  # fmt: skip
MAX_PNG = 200_000
#: the sections the page's contents line links to
CONTENTS = (
    "Engine overhead", "Compaction quality", "Simulations", "Incident scenarios",
    "Prompt-cache-aware compaction", "Validator", "Token counting benchmark", "Preprocessors",
)  # fmt: skip


def slug(title: str) -> str:
    """GitHub's heading anchor."""
    keep = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return keep.replace(" ", "-")


def engine_plot(results: Path, img: Path, out_rel: Path) -> list[str]:
    """Per-step time of every variant of the engine benchmark (log scale)."""
    f = results / "bench_engine.json"
    if not f.exists():
        return []
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        return ["_(matplotlib missing: engine plot skipped)_"]
    data = json.loads(f.read_text(encoding="utf-8"))
    convs = data.get("conversations") or []
    if not convs:
        return []
    labels = {
        "floor": "one tiktoken pass (floor)",
        "ctxpolicy": "ctxpolicy prepare",
        "naive": "naive recount",
        "lc_count": "LangChain count_tokens_approximately",
        "lc_trim": "LangChain trim_messages",
    }
    fig, axes = plt.subplots(1, len(convs), figsize=(11, 3.2), dpi=90, squeeze=False)
    for ax, c in zip(axes[0], convs, strict=True):
        k = int(c.get("naive_sample_every") or 1)
        for v, series in c["per_step_series_ms"].items():
            total, xs, ys = 0.0, [], []
            for i, y in enumerate(series):
                if y is None:
                    continue
                # a sampled naive step stands for the k steps starting at it
                total += y / 1e3 * (k if v == "naive" and c.get("sampled", {}).get("naive") else 1)
                xs.append(i)
                ys.append(total)
            if xs:
                ax.plot(xs, ys, label=labels.get(v, v), lw=1.4)
        ax.set_yscale("log")
        title = c["conversation"].replace("mini-swe-agent__20251118_gemini-3-pro-74pct.", "")
        ax.set_title(title[:58], fontsize=8)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("cumulative seconds", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    png = img / "engine_per_step.png"
    fig.savefig(png, dpi=90)
    plt.close(fig)
    rel = png.relative_to(out_rel) if png.is_relative_to(out_rel) else png
    return [
        f"![cumulative engine time per step]({rel.as_posix()})",
        "",
        "Cumulative time over the steps of each conversation (log scale; naive on the "
        "synthetic sessions extrapolated from the sampled steps).",
        "",
    ]


def _load(results: Path, name: str) -> dict[str, Any] | None:
    f = results / f"{name}.json"
    return json.loads(f.read_text(encoding="utf-8")) if f.exists() else None


def _short(conversation: str) -> str:
    name = conversation.split(" (")[0].replace("mini-swe-agent__20251118_gemini-3-pro-74pct.", "")
    return name.removesuffix(".jsonl")


Row = tuple[str, str, str, bool | str | None]  # goal, case, measured, met (or a mark)
WITH_TOOL = "engine: prepare + add_tool_result ≤"


def _windows(d: dict[str, Any]) -> list[tuple[int, Any]]:
    return sorted((int(w), x) for w, x in d.items())


def _engine(e: dict[str, Any]) -> Iterator[Row]:
    convs = e["conversations"]
    for c in convs:
        goal, ratio = "engine: ctxpolicy ≤ 1.5 × one tiktoken pass", c["ctxpolicy_over_floor"]
        yield goal, _short(c["conversation"]), f"{ratio:.2f}×", c["goal_floor"]
    for c in convs:
        goal = "engine: naive recount ≥ 20 × ctxpolicy at ≥ 200 steps"
        case, got = f"{_short(c['conversation'])}, {c['steps']} steps", c["naive_over_ctxpolicy"]
        yield goal, case, f"{got:.1f}×", c["goal_naive"]
    if m := e.get("memory"):
        fit = m["fit"]
        got = f"{fit.get('bytes_per_token', 0):.1f} B/token, "
        got += f"residual {fit.get('max_rel_residual', 0):.0%}"
        yield "engine: memory growth linear", "tracemalloc peak, 1–8 parts", got, m["goal_linear"]
    for c in (e.get("per_call") or {}).get("traces", []):
        ms = {k: x["median_ms"] for k, x in c["variants"].items()}
        mine, lc, trace = ms["ctxpolicy"], ms["langchain"], _short(c["trace"])
        got = f"{mine:.3f} vs {lc:.3f} ms ({c['ctxpolicy_over_langchain']:.1f}×)"
        yield f"{WITH_TOOL} LangChain per call", trace, got, c["goal_le_langchain"]
        if lc:
            r = ms["prepare"] / lc
            got = f"{ms['prepare']:.3f} vs {lc:.3f} ms ({r:.2f}×)"
            yield "engine: prepare ≤ 0.6× LangChain per call", trace, got, r <= 0.6
        for peer in ("deepagents", "langmem"):
            if ms.get(peer):
                got = f"{mine:.3f} vs {ms[peer]:.3f} ms ({mine / ms[peer]:.1f}×)"
                yield f"{WITH_TOOL} {peer} per call", trace, got, mine <= ms[peer]


def _scaling(sc: dict[str, Any]) -> Iterator[Row]:
    """100k tiny messages in ≤ 3 s; growth from 8k to 100k ≤ 13× (linear: 12.5×)."""
    runs = {r["n"]: r["seconds"] for r in sc.get("runs", {}).get("this tree", [])}
    big, mid = runs.get(100_000), runs.get(8_000)
    if big is not None:
        goal = "engine: prepare of 100k tiny messages ≤ 3 s"
        yield goal, "bench_scaling", f"{big:.2f} s", big <= 3
        if mid:
            got = f"{big / mid:.1f}× (linear 12.5×)"
            yield "engine: growth 8k → 100k messages ≤ 13×", "bench_scaling", got, big / mid <= 13


def _store(st: dict[str, Any]) -> Iterator[Row]:
    """One snapshot write ≤ 1.5× a bare append of the same bytes, at flush and fsync."""
    for k in ("flush", "fsync") if st.get("append") else ():
        a = st["append"][k]
        goal = f"snapshots: one snapshot write ≤ 1.5× a bare append of the same bytes, `{k}`"
        case = f"bench_store, {a['record_bytes'] / 1000:.1f} KB records"
        yield goal, case, f"{a['ratio']:.2f}×", a["ratio"] <= 1.5


def _peers(q: dict[str, Any]) -> Iterator[Row]:
    pg = q.get("peer_goals") or {}
    ref = pg.get("reference", "")
    for w, g in _windows(pg.get("windows") or {}):
        case = f"{ref} @ {w:,}"
        best = "none" if g["no_peer_dominates"] else ", ".join(g["dominated_by"])
        goal = "quality: no LangChain peer better on tokens and retention at once"
        yield goal, case, best, g["no_peer_dominates"]
        if g.get("summarize_edit_tokens_over_none") is not None:
            got = (
                f"tokens ÷ none {g['tokens_over_none']:.3f} vs "
                f"{g['summarize_edit_tokens_over_none']:.3f}, in context "
                f"{g['in_context_rate']:.1%} vs {g['summarize_edit_in_context_rate']:.1%}"
            )
            met = g["tokens_le_summarize_edit"] and g["retention_ge_summarize_edit"]
            yield "quality: tokens ≤ and retention ≥ LangChain summarize+edit", case, got, met
        bad = g["avoidable_overflows"], g["pairing_violations"]
        goal = "quality: 0 avoidable overflows, 0 pairing violations"
        yield goal, case, f"{bad[0]} / {bad[1]}", not any(bad)
    if "compactions_32k_le_8" in pg:
        g32 = pg["windows"].get("32768") or pg["windows"].get("32000") or {}
        long = pg.get("compactions_32k_long_traces") or {}
        got = ", ".join(f"{v:.1f}" for v in long.values())
        got += f" (all traces {g32.get('compactions_per_100', 0):.1f})"
        goal, case = "quality: compactions per 100 calls at 32k ≤ 8", f"{ref}, traces of ≥ 50 calls"
        yield goal, case, got, pg["compactions_32k_le_8"]


def _quality(q: dict[str, Any]) -> Iterator[Row]:
    yield from _peers(q)
    if not q.get("results"):
        return
    g = q["goals"]
    got = f"{len(g['overflow_or_violation_cases'])} cases"
    if n := len(g.get("unavoidable_overflow_cases", ())):
        got += f" (+ {n} unavoidable: the task alone exceeds the limit)"
    goal = "quality: 0 overflows, 0 pairing violations (ctxpolicy)"
    yield goal, "every trace × policy × window", got, g["no_overflow_no_violation"]
    for w, sv in _windows(g["saving_by_window"]):
        at32 = w == 32768
        goal = "quality: cost saving vs none" + (" ≥ 40 % at 32k" if at32 else "")
        yield goal, f"window {w:,}", f"{sv:.1%}", sv >= 0.4 if at32 else "—"
    got = f"{len(g['retention_worse_cases'])} of {g['retention_comparisons']} worse"
    goal = "quality: retention ≥ every baseline at ≤ cost"
    yield goal, "per trace × policy × window", got, g["retention_ge_baselines_at_le_cost"]
    got = f"{(g['retained_rate'] or 0):.2%}"
    yield "quality: in context + recoverable = 100 %", "all runs", got, g["recoverable_100pct"]


def _validate(v: dict[str, Any]) -> Iterator[Row]:
    if (r := v.get("ctxpolicy_over_check_jsonschema_cold")) is not None:
        goal, case = "validator: ctxpolicy cold ≤ check-jsonschema cold", v.get("case")
        yield goal, case or "policies/*.yaml", f"{r:.2f}×", v["goal_cold_le_check_jsonschema"]


def _incidents(i: dict[str, Any]) -> Iterator[Row]:
    a, b, c = (i["scenarios"][k] for k in "abc")
    x, y = a["fixed_80"]["rejected_calls"], a["dynamic"]["rejected_calls"]
    case = "provider rejections fixed vs ours"
    yield "incident (a): 80 % + 25k result", case, f"{x} vs {y}", x > 0 and y == 0
    x, y = b["fixed_95"]["summary_calls_rejected"], b["dynamic"]["summary_calls_rejected"]
    got = f"{x} vs {y} (ours max {b['dynamic']['max_summary_request']:,} ≤ {i['window']:,})"
    case = "rejected summary calls fixed vs ours"
    yield "incident (b): 95 %, summary call", case, got, x > 0 and y == 0
    x, y = c["fixed_50"]["calls_with_compaction"], c["dynamic"]["calls_with_compaction"]
    got, case = f"{x} vs {y} of {c['dynamic']['calls']}", "calls that compacted fixed vs ours"
    yield "incident (c): 50 % thrash", case, got, y * 2 <= x


def _cache(k: dict[str, Any]) -> Iterator[Row]:
    for w in k["windows"]:
        wr = [r for r in k["results"] if r.get("applicable") and r["window"] == w]
        x = sum(r["shipped"]["prefix_changes"] for r in wr)
        y = sum(r["cache"]["prefix_changes"] for r in wr)
        ov = sum(r["cache"]["overflows"] for r in wr)
        got = f"{y} vs {x} ({y / max(1, x):.2f}), {ov} overflows"
        goal = "cache: prefix changes with ≤ 1/3 without, no overflow"
        yield goal, f"window {w:,}", got, y * 3 <= x and ov == 0


def _tune(t: dict[str, Any]) -> Iterator[Row]:
    for w, d in _windows(t["windows"]):
        gain, rec = d.get("gain"), bool(d.get("recommended"))
        got = f"{gain:+.1%} tokens saved" if rec else "shipped kept"
        goal = "tune: tuned coding_agent ≥ 10 % fewer tokens, held-out"
        yield goal, f"window {w:,}", got, rec and (gain or 0) >= 0.10
    sp = t.get("scaling") or {}
    if sp.get("speedup_2_vs_1") is not None:
        got = f"{sp['speedup_2_vs_1']:.2f}×, same choice: {sp.get('same_choice')}"
        yield "tune: 2 workers vs 1", f"{t['trials']} trials", got, "—"


def _tune_speed(sp: dict[str, Any]) -> Iterator[Row]:
    """The same 50-trial study on 1 worker ≥ 2× faster than the baseline tree, with an
    identical output."""
    for w, d in _windows(sp.get("windows") or {}):
        same = d["identical"]
        got = f"{d['speedup']:.2f}×, output " + ("identical" if same else "differs")
        met = d["speedup"] >= 2.0 and same and sp["trials"] >= 50 and not sp.get("quick")
        case = f"window {w:,}, {sp['trials']} trials"
        yield "tune: 50-trial tune ≥ 2× faster on 1 worker", case, got, met


#: results file → its rows of the goals table, in the table's order
GOALS = {
    "bench_engine": _engine,
    "bench_scaling": _scaling,
    "bench_store": _store,
    "bench_quality": _quality,
    "bench_validate": _validate,
    "bench_incidents": _incidents,
    "bench_cache": _cache,
    "bench_tune": _tune,
    "bench_tune_speed": _tune_speed,
}


def headline(results: Path) -> list[str]:
    """One table of every goal, read from the results JSON files."""
    mark = {True: "✓", False: "✗", None: "n/a"}
    rows = [
        (goal, case, got, met if isinstance(met, str) else mark[met])
        for name, rows_of in GOALS.items()
        if (data := _load(results, name))
        for goal, case, got, met in rows_of(data)
    ]
    if not rows:
        return []
    return [
        "## Goals at a glance",
        "",
        "Every goal the engine, the cache, the peers comparison and the tuner were held to, read from the results below.",
        "",
        markdown_table("goal | case | measured | status", rows, align="lllc"),
        "",
    ]


# --------------------------------------------------------------------------- summary

#: peers of the one-screen summary, in this order (run name prefix -> shown name)
SUMMARY_PEERS = (
    ("LangChain SummarizationMiddleware", "LangChain summarization"),
    ("LangChain Summarization + ContextEditing", "LangChain summarization + context editing"),
    ("deepagents", "deepagents"),
    ("langmem", "langmem"),
)


def _gateway_rows(results: Path) -> list[tuple[str, str, str]]:
    """(scenario, overhead p50, overhead p99) of bench_gateway, ms (a run compared with
    another checkout: this tree's)."""
    scenarios = (_load(results, "bench_gateway") or {}).get("scenarios") or {}
    return [
        (name.removesuffix(" [this tree]"), f"{(r['g50'] - r['d50']) * 1e3:.2f}",
         f"{(r['g99'] - r['d99']) * 1e3:.2f}")
        for name, r in scenarios.items()
        if "[baseline]" not in name and name.startswith(("sequential", "streaming", "real "))
    ]  # fmt: skip


def summary(results: Path) -> list[str]:
    """The one-screen summary at the top of the page: what ctxpolicy costs and keeps
    against each peer, and its per-call and gateway overhead, from the results files."""
    md = ["## Summary", ""]
    peers = _load(results, "bench_peers_ruler")
    if peers:
        ref = f"ctxpolicy {peers.get('peer_reference', 'agents.yaml:coding_agent')}"
        by_window = totals_by_window(peers.get("peer_results") or [])
        n = len({e["trace"] for e in peers.get("peer_results") or []})
        md += [
            f"What an agent pays and keeps on {n} real agent traces (both halves, summed), "
            f"with the shipped `{ref.removeprefix('ctxpolicy ')}` against each peer configured "
            "to the same budget. **Cost** is the bill under prompt caching plus the "
            "summarizer's calls, as a share of sending everything; **kept** is the share of "
            "the conversation's facts still in context at each call (the rest is recoverable "
            "through references or lost). Lower cost and higher kept are better. Sending "
            "everything is the unit, not an option: on the longer traces many of its "
            "requests do not fit the window.",
            "",
        ]
        table = []
        for w, totals in by_window.items():
            mine = totals.get(ref)
            if not mine or not mine["total_none"]:
                continue
            rows = [(ref.replace("ctxpolicy ", "ctxpolicy `") + "`", mine)]
            for prefix, shown in SUMMARY_PEERS:
                run = next((r for r in totals if r.startswith(prefix)), None)
                if run is not None and (
                    prefix != "LangChain SummarizationMiddleware" or run == prefix
                ):
                    rows.append((shown, totals[run]))
            for shown, acc in rows:
                cost = acc["total"] / acc["total_none"] if acc["total_none"] else float("nan")
                kept = acc["in_context"] / acc["facts"] if acc["facts"] else float("nan")
                vs = "—" if acc is mine else f"{mine['total'] / acc['total']:.2f}"
                table.append([f"{w:,}", shown, f"{cost:.3f}", f"{kept:.1%}", vs])
        head = "window | run | cost ÷ send everything | kept in context | ctxpolicy's cost ÷ this"
        md += [markdown_table(head, table, align="rlrrr"), ""]
    e = _load(results, "bench_engine")
    per_call = (e or {}).get("per_call") or {}
    traces = per_call.get("traces") or []
    if traces:
        ours = [t["variants"]["ctxpolicy"]["median_ms"] for t in traces]
        theirs = [t["variants"]["langchain"]["median_ms"] for t in traces]
        md += [
            f"**Per model call** (`prepare` + `add_tool_result`, median over {len(traces)} "
            f"traces' calls, {per_call.get('window', 0):,}-token window, state saved after "
            f"every call): {min(ours):.2f}–{max(ours):.2f} ms, against "
            f"{min(theirs):.2f}–{max(theirs):.2f} ms for LangChain's summarization middleware, "
            "which counts approximately and saves nothing.",
            "",
        ]
    gw = _gateway_rows(results)
    if gw:
        parts = [f"{name}: +{p50} ms at the median, +{p99} ms at p99" for name, p50, p99 in gw]
        md += [
            "**Gateway** (`ctxpolicy serve` between a client and the model, loopback, a call "
            "that compacts nothing): " + "; ".join(parts) + ".",
            "",
        ]
    md += [
        "Everything below is the lab notebook these numbers come from: how each was "
        "measured, the goals they were held to, and the runs before and after a change.",
        "",
    ]
    return md


_ISSUE_CITE = re.compile(r"\s*\((?:see |from |since |for )?issues? \d+[^()]*\)", re.I)
_ISSUE_OWN = re.compile(r"\b(i)ssues? \d+'s ", re.I)
_ISSUE_WORDS = re.compile(r"\b(i)ssues? \d+(?: items?(?:,? (?:and )?\d+(?:[–-]\d+)?)+)?", re.I)
_MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|home|Users)/[^\s`'\")|,;]+")


def for_users(text: str) -> str:
    """The notebook in the user's words: no issue numbers, no path of the machine it
    was measured on (a baseline checkout is named as such)."""
    text = re.sub(r" \(design [AB]\)", "", text)
    text = _ISSUE_CITE.sub("", text)
    text = _ISSUE_OWN.sub(lambda m: "The " if m.group(1) == "I" else "the ", text)
    text = _ISSUE_WORDS.sub(lambda m: "The change" if m.group(1) == "I" else "the change", text)
    return _MACHINE_PATH.sub("<baseline checkout>", text)


_SCRIPT_CMD = re.compile(r"python benchmarks/(\w+)\.py([^`]*)`")


def runner_command(name: str, text: str) -> str:
    """``python benchmarks/<script>.py ARGS`` of a section written as the runner's command
    (``python -m benchmarks run SUITE [--variant V] ARGS``, the variant's own arguments
    dropped from ARGS); a script no suite runs is left as it is."""

    def repl(m: re.Match[str]) -> str:
        script, rest = m.group(1), m.group(2)
        every = [(s, v) for s in SUITES for v in s.variants]
        cands = [c for c in every if c[1].script == script]
        own = [c for c in every if c[1].results == name and script == name]  # a merged script
        if not cands and not own:
            return m.group(0)
        s, v = next(
            (c for c in cands if c[1].args and f" {c[1].results}" in rest),
            next((c for c in cands + own if c[1].results == name), (cands + own)[0]),
        )
        args = list(v.args)
        while args:  # the variant's own options (a flag and its value) are implied
            n = 2 if len(args) > 1 and not args[1].startswith("--") else 1
            rest = rest.replace(" " + " ".join(args[:n]), "", 1)
            del args[:n]
        one = "" if len(s.variants) == 1 else f" --variant {v.name}"
        return f"python -m benchmarks run {s.name}{one}{rest}`"

    return _SCRIPT_CMD.sub(repl, text)


def section(name: str, text: str, data: dict[str, Any] | None) -> list[str]:
    text = text.strip()
    if text.startswith("# "):  # one results file titles itself as a page: a section here
        text = "#" + text
    md = [runner_command(name, text), ""]
    if data and data.get("quick"):
        md.insert(0, "> **Quick run** (`--quick`, smoke-test size): not representative numbers.\n")
    if "Reproduce" not in text:
        cmd = command_for(name) or f"python benchmarks/{name}.py"
        md += [f"Reproduce: `.venv/bin/{cmd}`", ""]
    return md


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--img", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args(argv)
    args.img.mkdir(parents=True, exist_ok=True)
    out_rel = args.out.parent
    machines = [
        (_load(args.results, j.stem) or {}).get("machine") for j in args.results.glob("*.json")
    ]
    dates = sorted(m["date"] for m in machines if isinstance(m, dict) and m.get("date"))
    md = [
        "# Benchmarks",
        "",
        "<!-- generated from benchmarks/results by `python -m benchmarks render` (`make docs`); "
        "do not edit by hand -->",
        "",
        "Measured numbers, reproducible with one command: `make bench` runs every registered "
        "suite (`python -m benchmarks run all`; `python -m benchmarks list` names them), each "
        "writing `benchmarks/results/<name>.json` and `.md`; `make docs` builds this page and "
        "the engine plot in `docs/img/` from those files alone. "
        "The machine is shared and noisy, so every comparison is a ratio measured within one "
        "run; absolute times are for context only. Goals are marked ✓ met / ✗ missed, "
        "never hidden.",
        "",
        "Traces: the real third-party agent conversations in `../shared/traces` (MIT, see its "
        "SOURCES.md; read from there, not copied here). Synthetic sessions: `ctxpolicy.sim.synth`.",
        "",
        f"Measured from {dates[0][:10]} to {dates[-1][:10]}; each section names its machine, "
        "load and package versions."
        if dates
        else "No results yet.",
        "",
        "Contents: " + ", ".join(f"[{t}](#{slug(t)})" for t in CONTENTS),
        "",
    ]
    md[4:4] = summary(args.results)
    md += headline(args.results)
    files = {p.stem: p for p in sorted(args.results.glob("*.md"))}
    names = [n for n in ORDER if n in files] + sorted(n for n in files if n not in ORDER)
    for name in names:
        md += section(name, files[name].read_text(encoding="utf-8"), _load(args.results, name))
        if name == "bench_engine":
            md += engine_plot(args.results, args.img, out_rel)
    big = [p for p in args.img.glob("*.png") if p.stat().st_size >= MAX_PNG]
    for p in big:
        eprint(f"warning: {p} is {p.stat().st_size:,} bytes (≥ {MAX_PNG:,})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(for_users("\n".join(md)).rstrip() + "\n", encoding="utf-8")
    eprint(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
