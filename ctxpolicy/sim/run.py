"""Orchestration of replays: policies × traces × window, baselines, in parallel.

:func:`simulate` is what ``ctxpolicy simulate`` runs: every trace replayed under every
policy run (:func:`ctxpolicy.sim.replay.replay_trace`) and every baseline
(:func:`ctxpolicy.sim.baselines.run_baseline`), fanned out to worker processes
(:func:`ctxpolicy.sim.parallel.map_ordered`), measured by :mod:`ctxpolicy.sim.metrics`,
and the ``--check`` problems collected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxpolicy.events.sinks import export_event
from ctxpolicy.policy.catalogue import load_prices
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.baselines import run_baseline
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.metrics import PriceModel, TraceResult, summarize_results
from ctxpolicy.sim.parallel import map_ordered
from ctxpolicy.sim.replay import _safe, replay_trace, with_window

__all__ = ["RunSpec", "simulate"]


@dataclass
class RunSpec:
    """A policy to replay: its label, the resolved policy, and where it came from."""

    label: str
    policy: Policy
    file: str | None = None
    agent: str | None = None


def _replay_all(
    path: str,
    runs: Sequence[RunSpec],
    baselines: Sequence[str],
    window: int | None,
    snapshots_dir: str | None,
    prices: Mapping[str, Any] | None,
    alert_ratio: float,
    alert_repeats: float,
    price_model: PriceModel | None = None,
    events: bool = False,
) -> dict[str, Any]:
    """Every run and baseline on one trace file (a process-pool work item).

    ``events``: also return the policy runs' engine events, exported (numbers and
    names only, :func:`ctxpolicy.events.sinks.export_event`), each conversation named
    ``RUN/TRACE`` under the agent ``RUN``.
    """
    messages = load_trace(path)
    name = Path(path).name
    results: list[TraceResult] = []
    for i, spec in enumerate(runs):
        snap = None if snapshots_dir is None else str(Path(snapshots_dir) / f"run{i}")
        results.append(
            replay_trace(
                messages,
                spec.policy,
                window=window,
                snapshots_dir=snap,
                trace=name,
                label=spec.label,
            )
        )
    for b in baselines:
        results.append(run_baseline(b, messages, runs[0].policy, window=window, trace=name))
    out_runs = []
    for r in results:
        r.prices = prices
        r.price_model = price_model
        r.alert_ratio = alert_ratio
        r.alert_repeats = alert_repeats
        out_runs.append(r.to_dict())
    out: dict[str, Any] = {
        "trace": name,
        "path": str(path),
        "messages": len(messages),
        "runs": out_runs,
    }
    if events:
        out["events"] = [
            export_event({**e, "conv_id": f"{r.label}/{name}", "agent": r.label})
            for r in results[: len(runs)]
            for e in r.events
        ]
    return out


def simulate(
    paths: Sequence[str | Path],
    runs: Sequence[RunSpec],
    *,
    baselines: Sequence[str] = (),
    window: int | None = None,
    jobs: int = 1,
    snapshots_dir: str | Path | None = None,
    prices: Mapping[str, Any] | None = None,
    prices_source: str = "builtin",
    alert_ratio: float = 0.9,
    alert_repeats: float = 0.3,
    progress: Any = None,
    price_model: PriceModel | None = None,
    on_events: Callable[[list[dict[str, Any]]], None] | None = None,
) -> dict[str, Any]:
    """Replay every trace under every run and baseline; the ``simulate --json`` document.

    ``jobs > 1`` replays traces in worker processes
    (:func:`ctxpolicy.sim.parallel.map_ordered`); the result is identical to a
    sequential run (traces keep their order). ``progress(done, total, name)`` is
    called after each trace. ``price_model`` bills every run (default: each run's
    model's in the model catalogue, :func:`ctxpolicy.sim.metrics.price_model`).
    ``on_events(events)`` receives each trace's exported policy-run events, in trace
    order (the log ``ctxpolicy report`` reads); they are not part of the document.
    """
    if not runs:
        raise ValueError("at least one policy run is needed")
    if prices is None:
        prices = load_prices()
    strs = [str(p) for p in paths]
    snaps = [
        None if snapshots_dir is None else str(Path(snapshots_dir) / f"t{i:04d}_{_safe(p)}")
        for i, p in enumerate(strs)
    ]
    args = [
        (
            p,
            list(runs),
            list(baselines),
            window,
            s,
            prices,
            alert_ratio,
            alert_repeats,
            price_model,
            on_events is not None,
        )
        for p, s in zip(strs, snaps, strict=True)
    ]
    traces: list[dict[str, Any]] = map_ordered(
        _replay_all, args, workers=jobs, progress=progress, names=[Path(p).name for p in strs]
    )
    for t in traces:
        trace_events = t.pop("events", None)
        if on_events is not None and trace_events:
            on_events(trace_events)
    all_runs = [r for t in traces for r in t["runs"]]
    problems: list[dict[str, Any]] = []
    for t in traces:
        for r in t["runs"]:
            if r["kind"] != "policy":
                continue
            if r["overflows"]:
                problems.append(
                    {
                        "trace": t["trace"],
                        "run": r["run"],
                        "code": "overflow",
                        "message": f"{r['overflows']} calls above window − reserve_output (max {r['max_used']} tokens)"
                        + (
                            f"; {n} of them unavoidable: system messages, task and newest message alone exceed it"
                            if (n := r["overflows_unavoidable"])
                            else ""
                        ),
                    }
                )
            if r["pairing_violations"]:
                problems.append(
                    {
                        "trace": t["trace"],
                        "run": r["run"],
                        "code": "pairing",
                        "message": f"{r['pairing_violations']} tool-call pairing violations",
                    }
                )
            for a in r["alerts"]:
                problems.append(
                    {
                        "trace": t["trace"],
                        "run": r["run"],
                        "code": a["code"],
                        "message": a["message"],
                    }
                )
    first = runs[0]
    return {
        "schema": "ctxpolicy-simulate/1",
        "policy": _spec_dict(first, window),
        "compare": [_spec_dict(s, window) for s in runs[1:]],
        "baselines": list(baselines),
        "window_override": window,
        "prices": prices_source,
        "price_model": None if price_model is None else price_model.to_dict(),
        "alert_thresholds": {"ratio": alert_ratio, "repeats": alert_repeats},
        "traces": traces,
        "summary": summarize_results(all_runs),
        "check": {"passed": not problems, "problems": problems},
    }


def _spec_dict(spec: RunSpec, window: int | None) -> dict[str, Any]:
    from ctxpolicy.budget import compute_budget

    pol = with_window(spec.policy, window)
    b = compute_budget(pol)
    return {
        "run": spec.label,
        "file": spec.file,
        "agent": spec.agent or pol.agent,
        "model": pol.model_name,
        "window": b.window,
        "reserve_output": b.reserve_output,
        "trigger": b.trigger,
        "target": b.target,
        "tokenizer": _tokenizer_dict(pol),
    }


def _tokenizer_dict(pol: Policy) -> dict[str, Any]:
    """What counts this policy's tokens: name, exact, wanted, fallback."""
    from ctxpolicy.components import TokenizerUnavailable
    from ctxpolicy.tokens import resolve_tokenizer

    try:
        return resolve_tokenizer(pol.model, pol.model_name).to_dict()
    except TokenizerUnavailable as exc:
        return {"name": None, "exact": False, "wanted": None, "fallback": str(exc)}
