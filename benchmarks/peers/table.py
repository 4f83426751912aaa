"""The peer comparison of bench_quality: jobs, totals, goals and the markdown table.

One job = one trace at one window: ctxpolicy under every shipped policy
(policies/*.yaml and *.toml, every agent) and each LangChain peer configured to the
reference policy's budget at that window (``agents.yaml:coding_agent`` unless told
otherwise), all measured by :func:`benchmarks.peers.runs.run_contestant`.

Goals (issue 18 item 5): no peer row is better than ctxpolicy under the reference
policy on tokens and retention at once, with 0 avoidable overflows and 0 pairing
violations for ctxpolicy; compactions per 100 calls at 32k under coding_agent ≤ 8.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks._common import markdown_table
from benchmarks.peers.catalog import LABELS, PEERS, available_peers

__all__ = [
    "PEER_WINDOWS",
    "REFERENCE",
    "peer_goals",
    "peer_job",
    "peer_markdown",
    "peer_totals",
    "ruler_markdown",
    "ruler_section",
    "shipped_policies",
    "totals_by_window",
    "trace_halves",
]

ROOT = Path(__file__).resolve().parents[2]
PEER_WINDOWS = (16384, 32768)
REFERENCE = "agents.yaml:coding_agent"
#: compactions per 100 calls at 32k under the reference policy (issue 18 item 5),
#: on every trace of at least LONG_TRACE_CALLS calls (shorter ones make the rate noise;
#: a total over all traces would hide the long ones behind the many that never compact)
MAX_COMPACTIONS_32K = 8.0
LONG_TRACE_CALLS = 50
#: what the results keep of a run (beside its retention and policy)
SLIM = (
    "run", "kind", "trace", "window", "steps", "calls", "prompt_tokens", "prompt_tokens_none",
    "overflows", "overflows_unavoidable", "pairing_violations", "compaction_calls",
    "prefix_changes", "compactions_total", "counter", "summaries_written", "billing",
)  # fmt: skip


def _name_hash(name: str) -> bytes:
    import hashlib

    return hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()


def trace_halves(sizes: Mapping[str, int], odd: str = "tune") -> dict[str, str]:
    """``{trace: "tune" | "held_out"}``: two fixed halves of the shared traces.

    The rule (docs/benchmarks.md): traces sorted by size (model calls), then name;
    consecutive pairs; in each pair the trace whose file name has the smaller
    BLAKE2b-64 digest is ``tune``, the other ``held_out`` (an odd last one: ``odd``).
    Deterministic, balanced in size, blind to the traces' contents.
    """
    order = sorted(sizes, key=lambda n: (sizes[n], n))
    out: dict[str, str] = {}
    for i in range(0, len(order), 2):
        pair = sorted(order[i : i + 2], key=_name_hash)
        out[pair[0]] = "tune" if len(pair) > 1 else odd
        if len(pair) > 1:
            out[pair[1]] = "held_out"
    return out


def _halves_of(results: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    sizes: dict[str, int] = {}
    for j in results:
        calls = max((int(r.get("calls", 0)) for r in j["runs"]), default=0)
        sizes[str(j["trace"])] = max(sizes.get(str(j["trace"]), 0), calls)
    return trace_halves(sizes)


def shipped_policies(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """``(label, file, agent)`` for every agent of every policy file in policies/."""
    from ruamel.yaml import YAML

    out: list[tuple[str, str, str]] = []
    for f in sorted((root / "policies").iterdir()):
        if f.suffix in (".yaml", ".yml"):
            data = YAML(typ="safe").load(f.read_text(encoding="utf-8"))
        elif f.suffix == ".toml":
            data = tomllib.loads(f.read_text(encoding="utf-8"))
        else:
            continue
        for agent in (data or {}).get("policies") or {}:
            out.append((f"{f.name}:{agent}", str(f), agent))
    return out


def peer_job(
    trace_path: str,
    window: int,
    specs: Sequence[tuple[str, str, str]],
    reference: str = REFERENCE,
    ruler: bool = False,
) -> dict[str, Any]:
    """Every contestant on one trace at one window (a process-pool work item);
    ``ruler``: each policy also with its own extractive summarizer."""
    from benchmarks._inputs import load_agent
    from benchmarks.peers.runs import EXTRACTIVE, Contestant, run_contestant
    from benchmarks.peers.runs import ruler as ruler_counter
    from ctxpolicy.budget import compute_budget
    from ctxpolicy.sim.replay import load_trace, with_window

    name = Path(trace_path).name
    msgs = load_trace(trace_path)
    counter = ruler_counter()
    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    notes: list[str] = []
    policies: dict[str, Any] = {}
    for label, file, agent in specs:
        policy, note = load_agent(agent, file)
        if note:
            notes.append(note)
        try:
            compute_budget(with_window(policy, window))
        except ValueError:
            skipped.append(label)
            continue
        policies[label] = policy
    contestants = [
        Contestant(f"ctxpolicy {label}", "ctxpolicy", p) for label, p in policies.items()
    ]
    # the ruler's table also shows each policy with its own (extractive) summarizer
    contestants += [
        Contestant(f"ctxpolicy {label} (extractive)", EXTRACTIVE, p)
        for label, p in policies.items()
        if ruler
    ]
    if reference in policies:
        installed, missing = available_peers()
        notes += missing
        contestants += [Contestant(LABELS[k], k, policies[reference]) for k in installed]
    for c in contestants:
        d = run_contestant(msgs, c, window, trace=name, counter=counter)
        slim = {k: d[k] for k in SLIM if k in d}
        slim["retention"] = {k: v for k, v in d["retention"].items() if k != "lost_examples"}
        own = c.kind in ("ctxpolicy", EXTRACTIVE)
        label = c.label.removeprefix("ctxpolicy ").removesuffix(" (extractive)")
        slim["policy"] = label if own else reference
        runs.append(slim)
    return {
        "trace": name,
        "window": window,
        "runs": runs,
        "not_applicable": skipped,
        "notes": notes,
        "seconds": time.perf_counter() - t0,
    }


#: a contestant's sums over its runs: sum -> the path of the number in a run
SUMS = {
    "prompt": ("prompt_tokens",),
    "none": ("prompt_tokens_none",),
    "facts": ("retention", "facts"),
    "in_context": ("retention", "in_context"),
    "recoverable": ("retention", "recoverable"),
    "overflows": ("overflows",),
    "unavoidable": ("overflows_unavoidable",),
    "violations": ("pairing_violations",),
    "calls": ("calls",),
    "compaction_calls": ("compaction_calls",),
    "prefix_changes": ("prefix_changes",),
    "far_facts": ("retention", "far_facts"),
    "far_in_context": ("retention", "far_in_context"),
    "billed": ("billing", "billed_input"),
    "billed_none": ("billing", "billed_input_none"),
    "total": ("billing", "total_cost"),
    "total_none": ("billing", "total_cost_none"),
    "summary_calls": ("billing", "summarizer", "llm_calls"),
}
MONEY = ("billed", "billed_none", "total", "total_none")


def _number(run: Mapping[str, Any], path: Sequence[str]) -> Any:
    x: Any = run
    for key in path:
        x = (x or {}).get(key)
    return x or 0


def _rate(part: float, whole: float, empty: float = 1.0) -> float:
    return part / whole if whole else empty


def peer_totals(runs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Totals per contestant over ``runs`` (order of first appearance kept)."""
    acc: dict[str, dict[str, Any]] = {}
    for r in runs:
        zero = {k: 0.0 if k in MONEY else 0 for k in SUMS}
        a = acc.setdefault(r["run"], {"kind": r.get("kind"), "traces": 0, **zero})
        a["traces"] += 1
        for key, path in SUMS.items():
            a[key] += _number(r, path)
    for a in acc.values():
        a["billed_over_none"] = _rate(a["billed"], a["billed_none"])
        a["total_over_none"] = _rate(a["total"], a["billed_none"])
        a["far_rate"] = _rate(a["far_in_context"], a["far_facts"])
        a["tokens_over_none"] = _rate(a["prompt"], a["none"])
        a["in_context_rate"] = _rate(a["in_context"], a["facts"])
        a["retained_rate"] = _rate(a["in_context"] + a["recoverable"], a["facts"])
        a["avoidable"] = a["overflows"] - a["unavoidable"]
        a["compactions_per_100"] = _rate(100 * a["compaction_calls"], a["calls"], 0.0)
        a["prefix_changes_per_100"] = _rate(100 * a["prefix_changes"], a["calls"], 0.0)
    return acc


def totals_by_window(
    results: Sequence[Mapping[str, Any]], half: str | None = None
) -> dict[int, dict[str, dict[str, Any]]]:
    windows = sorted({int(j["window"]) for j in results})
    halves = _halves_of(results) if half is not None else {}
    return {
        w: peer_totals(
            r
            for j in results
            if int(j["window"]) == w and (half is None or halves.get(str(j["trace"])) == half)
            for r in j["runs"]
        )
        for w in windows
    }


def _ruler_row(name: str, a: Mapping[str, Any]) -> list[Any]:
    return [
        name,
        a["traces"],
        f"{a['total_over_none']:.3f}",
        f"{a['billed_over_none']:.3f}",
        f"{a['tokens_over_none']:.3f}",
        f"{a['in_context_rate']:.1%}",
        f"{a['far_rate']:.1%}",
        f"{a['compactions_per_100']:.1f}",
        f"{a['prefix_changes_per_100']:.1f}",
        a["avoidable"],
        a["summary_calls"],
    ]


def ruler_markdown(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The peer table by the ruler users pay (issue 27), per window and trace half."""
    if not results:
        return []
    of = _halves_of(results)
    halves = {
        h: sorted(n.removesuffix(".jsonl")[-40:] for n, x in of.items() if x == h)
        for h in ("tune", "held_out")
    }
    md = [
        "### Peers by the ruler users pay: both halves of the shared traces",
        "",
        "Billed input under prompt caching (Anthropic price model: cached prefix — the "
        "longest run of whole messages equal to the same system's previous request — at "
        "0.1×, every other input token at 1.25×), the summarizer's LLM calls (input × 1 + "
        "output × 5; every summary is the same deterministic fake, benchmarks/peers/"
        "summary.py), retention and far retention as `ctxpolicy simulate` defines them "
        "(docs/simulate.md: references and recall are not followed). The traces are split "
        "into two fixed halves (`trace_halves`): sorted by size (model calls), consecutive "
        "pairs, in each pair the file name with the smaller BLAKE2b-64 digest is `tune` "
        "(the half shipped policies may be tuned on), the other `held_out` (the half they "
        "are judged on).",
        "",
        "Halves: " + "; ".join(f"{h}: {', '.join(names)}" for h, names in halves.items()),
        "",
    ]
    head = (
        "run | traces | total cost ÷ none | billed ÷ none | tokens ÷ none | retention | "
        "far retention | compactions / 100 | prefix changes / 100 | avoidable overflows | "
        "summarizer calls"
    )
    for half in ("tune", "held_out"):
        for w, totals in totals_by_window(results, half).items():
            if not totals:
                continue
            md += [
                f"#### {half} half, window {w:,}",
                "",
                markdown_table(head, [_ruler_row(n, a) for n, a in totals.items()]),
                "",
            ]
    return md


#: how each peer is configured, for the ruler section (one sentence each)
PEER_NOTES = {
    "langchain": "LangChain 1.x (benchmarks/peers/langchain.py): `SummarizationMiddleware` "
    "(trigger and keep = the policy's trigger and target) alone and with "
    "`ContextEditingMiddleware(ClearToolUsesEdit)` at its warning level.",
    "deepagents": "deepagents (benchmarks/peers/deepagents.py): the `SummarizationMiddleware` "
    "`create_deep_agent` builds (history offloaded to a backend, old tool-call arguments "
    "truncated, no summary-input trim) with its fractions replaced by the policy's trigger "
    "and target, plus `FilesystemMiddleware`'s eviction of tool results over 20,000 tokens.",
    "langmem": "langmem (benchmarks/peers/langmem.py): `summarize_messages` with its "
    "`RunningSummary`, `max_tokens_before_summary` = the policy's trigger, `max_tokens` = "
    "window − reserve_output (langmem has no keep setting).",
    "openhands": "OpenHands' `LLMSummarizingCondenser` is not in this table: it runs in a "
    "Python 3.12 virtualenv of its own (`openhands-sdk` 1.58.2) and is measured per agent "
    "kind by benchmarks/bench_kinds.py --peers (benchmarks/peers/openhands.py).",
}


def ruler_section(data: Mapping[str, Any], command: str) -> str:
    """The ruler's peer table as its own page section (``--results-name`` other than
    ``bench_quality``): heading, how to reproduce, how each peer is configured, tables."""
    results = data.get("peer_results") or []
    ref = data.get("peer_reference", REFERENCE)
    md = [
        "## Peers by the ruler users pay (issue 27)",
        "",
        f"Reproduce: `{command}` ({data['elapsed_s']:.0f} s with {data['jobs']} jobs). Every "
        f"peer is configured to `{ref}`'s budget at the window, decides with its library's "
        "default approximate counter and gets the same deterministic summary as ctxpolicy; "
        "every request is measured with exact cl100k_base.",
        "",
        *[f"- {note}" for note in PEER_NOTES.values()],
        *[f"- Note: {n}" for n in sorted(set(data.get("notes") or ()))],
        "",
    ]
    body = ruler_markdown(results)
    md += body[2:] if body[:1] and body[0].startswith("### ") else body
    return "\n".join(md).rstrip() + "\n"


def _dominated(mine: Mapping[str, Any], totals: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Peers that send fewer tokens AND keep more facts in context than ``mine``."""
    return [
        name
        for name, a in totals.items()
        if a["kind"] in PEERS
        and a["tokens_over_none"] < mine["tokens_over_none"]
        and a["in_context_rate"] > mine["in_context_rate"]
    ]


def peer_goals(results: Sequence[Mapping[str, Any]], reference: str = REFERENCE) -> dict[str, Any]:
    """Issue 18 item 5, per window, for ctxpolicy under ``reference``."""
    out: dict[str, Any] = {"reference": reference, "windows": {}}
    for w, totals in totals_by_window(results).items():
        mine = totals.get(f"ctxpolicy {reference}")
        if mine is None:
            continue
        better = _dominated(mine, totals)
        edit = totals.get(LABELS["langchain_summarize_edit"])
        out["windows"][str(w)] = {
            "dominated_by": better,
            "no_peer_dominates": not better,
            "tokens_le_summarize_edit": edit is None
            or mine["tokens_over_none"] <= edit["tokens_over_none"],
            "retention_ge_summarize_edit": edit is None
            or mine["in_context_rate"] >= edit["in_context_rate"],
            "tokens_over_none": mine["tokens_over_none"],
            "in_context_rate": mine["in_context_rate"],
            "summarize_edit_tokens_over_none": edit["tokens_over_none"] if edit else None,
            "summarize_edit_in_context_rate": edit["in_context_rate"] if edit else None,
            "avoidable_overflows": mine["avoidable"],
            "pairing_violations": mine["violations"],
            "compactions_per_100": mine["compactions_per_100"],
            "prefix_changes_per_100": mine["prefix_changes_per_100"],
        }
        if w in (32768, 32000):
            long = {
                j["trace"]: 100 * r["compaction_calls"] / r["calls"]
                for j in results
                if int(j["window"]) == w
                for r in j["runs"]
                if r["run"] == f"ctxpolicy {reference}" and r["calls"] >= LONG_TRACE_CALLS
            }
            out["compactions_32k_long_traces"] = long
            out["compactions_32k_le_8"] = all(v <= MAX_COMPACTIONS_32K for v in long.values())
    return out


def _row(name: str, a: Mapping[str, Any]) -> list[Any]:
    ctx = a["kind"] in ("ctxpolicy", "ctxpolicy_extractive")
    return [
        name,
        a["traces"],
        f"{a['tokens_over_none']:.3f}",
        f"{a['in_context_rate']:.1%}",
        f"{a['retained_rate']:.1%}" if ctx else "—",
        f"{a['avoidable']} / {a['unavoidable']}",
        a["violations"],
        f"{a['compactions_per_100']:.1f}",
        f"{a['prefix_changes_per_100']:.1f}",
    ]


def peer_markdown(data: Mapping[str, Any]) -> list[str]:
    """The peer section of bench_quality's markdown."""
    results = data.get("peer_results") or []
    if not results:
        return []
    ok = {True: "✓", False: "✗"}
    ref = data.get("peer_reference", REFERENCE)
    md = [
        "### Peers: LangChain 1.x, deepagents and langmem on the same traces",
        "",
        "The real `langchain.agents.middleware` classes, driven call by call as "
        "`create_agent` runs them (benchmarks/peers/langchain.py), beside ctxpolicy under "
        "every shipped policy. One deterministic summary for everyone "
        "(benchmarks/peers/summary.py: ctxpolicy gets it as its `callable` summarizer, "
        "LangChain from a `BaseChatModel` that returns it). LangChain's summary trigger and "
        f"keep are `{ref}`'s trigger and target at the window, `ClearToolUsesEdit` fires at its "
        "warning level; LangChain decides with its default approximate counter. One ruler: "
        "every request is counted with exact cl100k_base. Retention: facts the agent uses "
        "later found in the request (in context) or through a snapshot reference in it. "
        "Overflows: requests over window − reserve_output (avoidable / unavoidable: the "
        "system prompt, task and newest message alone exceed it). A compaction is a call at "
        "which anything was compacted; a prefix change is a request that does not extend "
        "the previous one. deepagents (benchmarks/peers/deepagents.py) and langmem "
        "(benchmarks/peers/langmem.py) are driven the same way, configured to the same "
        "budget; a peer whose package is not installed is skipped with a note.",
        "",
    ]
    goals = data.get("peer_goals") or peer_goals(results, ref)
    for w, totals in totals_by_window(results).items():
        md += [
            f"#### Window {w:,}",
            "",
            markdown_table(
                "run | traces | tokens ÷ none | in context | in context + recoverable | overflows (avoidable / unavoidable) | pairing viol. | compactions / 100 calls | prefix changes / 100 calls",
                [_row(name, a) for name, a in totals.items()],
            ),
            "",
        ]
        g = goals["windows"].get(str(w))
        if g:
            md += [
                f"- ctxpolicy `{ref}` vs peers: "
                + (
                    "no peer sends fewer tokens and keeps more in context at once " + ok[True]
                    if g["no_peer_dominates"]
                    else "better on tokens and retention at once: "
                    + ", ".join(g["dominated_by"])
                    + " "
                    + ok[False]
                )
                + f"; {g['avoidable_overflows']} avoidable overflows, "
                f"{g['pairing_violations']} pairing violations "
                + ok[not g["avoidable_overflows"] and not g["pairing_violations"]],
            ]
            if g["summarize_edit_tokens_over_none"] is not None:
                md += [
                    f"- vs LangChain summarize+edit (issue 18 goal: no more tokens and at least "
                    f"the retention): tokens ÷ none {g['tokens_over_none']:.3f} vs "
                    f"{g['summarize_edit_tokens_over_none']:.3f} "
                    + ok[g["tokens_le_summarize_edit"]]
                    + f", in context {g['in_context_rate']:.1%} vs "
                    f"{g['summarize_edit_in_context_rate']:.1%} "
                    + ok[g["retention_ge_summarize_edit"]],
                ]
            md += [""]
    if "compactions_32k_le_8" in goals:
        g32 = goals["windows"].get("32768") or goals["windows"].get("32000")
        long = goals.get("compactions_32k_long_traces") or {}
        md += [
            f"- Compactions per 100 calls at 32k under `{ref}` (goal ≤ {MAX_COMPACTIONS_32K:g} on "
            f"every trace of ≥ {LONG_TRACE_CALLS} calls): "
            + ", ".join(
                f"{t.removesuffix('.jsonl').rsplit('.', 1)[-1]} {v:.1f}" for t, v in long.items()
            )
            + f"; all traces {g32['compactions_per_100']:.1f} "
            + ok[goals["compactions_32k_le_8"]],
            "",
        ]
    na = sorted({(lbl, j["window"]) for j in results for lbl in j.get("not_applicable", ())})
    if na:
        md += [
            "Not applicable (budget leaves no room): "
            + ", ".join(f"{lbl} @ {w:,}" for lbl, w in na),
            "",
        ]
    return md
