"""What ``ctxpolicy tune`` shows: the ``--json`` document, the diff comments, the
Pareto plot (PNG, when matplotlib is installed) and a self-contained HTML report."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from typing import Any

from ctxpolicy._install import extra_hint
from ctxpolicy.tune.objectives import Score
from ctxpolicy.tune.runner import Candidate, TuneResult
from ctxpolicy.tune.space import changed, overlay

__all__ = ["diff_comments", "diff_header", "html_report", "pareto_png", "to_dict"]


def _pct(v: float) -> str:
    return f"{v:+.1%}"


def _score_line(s: Score | None) -> dict[str, Any] | None:
    return None if s is None else s.to_dict()


def to_dict(r: TuneResult) -> dict[str, Any]:
    """The ``tune --json`` document (``schema: ctxpolicy-tune/1``)."""
    cfg = r.config
    obj = cfg.objectives
    return {
        "schema": "ctxpolicy-tune/1",
        "policy": cfg.policy_file,
        "agent": cfg.agent,
        "window": cfg.window,
        "seed": cfg.seed,
        "trials": cfg.trials,
        "objectives": obj.model_dump(),
        "where": r.where,
        "interrupted": r.interrupted,
        "traces": {"tuning": r.tuning, "held_out": r.held_out},
        "space": [
            {"path": p.path, "range": p.range.model_dump(exclude_defaults=True), "base": p.base}
            for p in r.params
        ],
        "retention_floor": r.floor,
        "base": {"tuning": _score_line(r.base_tuning), "held_out": _score_line(r.base_held)},
        "chosen": None
        if r.chosen is None
        else {
            "trial": r.chosen.number,
            "changes": {
                p.path: {
                    "base": p.snap(p.base),
                    "value": r.chosen.values[p.path],
                    "written": p.render(r.chosen.values[p.path]),
                }
                for p in changed(r.params, r.chosen.values)
            },
            "tuning": _score_line(r.chosen.score),
            "held_out": _score_line(r.chosen_held),
            "effects": {k: s.to_dict() for k, s in r.effects.items()},
        },
        "held_out_gain": None if r.gain is None else round(r.gain, 6),
        "recommended": r.recommended,
        "reasons": r.reasons,
        "front": r.front,
        "trials_table": [_trial_row(c) for c in r.candidates],
    }


def _trial_row(c: Candidate) -> dict[str, Any]:
    return {
        "trial": c.number,
        "state": c.state,
        "feasible": c.feasible,
        "values": c.values,
        "score": _score_line(c.score),
        "constraints": c.constraints,
        "error": c.error,
    }


def diff_header(r: TuneResult) -> list[str]:
    """Comment lines heading the diff file: provenance and held-out numbers."""
    cfg = r.config
    obj = cfg.objectives
    lines = [
        f"Written by `ctxpolicy tune` for agent {cfg.agent!r} of {cfg.policy_file}",
        f"(seed {cfg.seed}, {len(r.candidates)} trials, window {cfg.window or 'of the policy'}, "
        f"{len(r.tuning)} tuning / {len(r.held_out)} held-out traces).",
    ]
    if r.base_held is not None and r.chosen_held is not None:
        b, c = r.base_held, r.chosen_held
        lines.append(
            f"Held-out: prompt tokens {b.tokens:,} → {c.tokens:,} ({_pct(c.tokens / b.tokens - 1) if b.tokens else 'n/a'}), "
            f"est. cost ${b.usd:.4f} → ${c.usd:.4f}, retention ({obj.retention}) "
            f"{b.retention(obj):.1%} → {c.retention(obj):.1%}, avoidable overflows "
            f"{b.avoidable} → {c.avoidable}."
        )
    lines.append(
        "Comments: the base value, and what reverting this value alone does on the tuning traces."
    )
    return lines


def diff_comments(
    r: TuneResult, base: Any
) -> tuple[dict[str, Any], dict[tuple[str | int, ...], str]]:
    """The chosen agent's body and one comment per changed value (its measured effect)."""
    from ctxpolicy.plugins import get_registry

    assert r.chosen is not None and r.chosen.score is not None
    obj = r.config.objectives
    body, where = overlay(base, r.params, r.chosen.values, registry=get_registry())
    comments: dict[tuple[str | int, ...], str] = {}
    s = r.chosen.score
    for key, p in where:
        note = f"was {p.describe_base()}"
        e = r.effects.get(p.path)
        if e is not None:
            dc = (e.cost(obj) / s.cost(obj) - 1) if s.cost(obj) else 0.0
            dr = (e.retention(obj) - s.retention(obj)) * 100
            note += f"; reverting it alone: {_pct(dc)} {obj.cost}, {dr:+.1f} pt retention"
            if e.avoidable > s.avoidable:
                note += f", {e.avoidable - s.avoidable} avoidable overflow(s)"
        comments[key] = note
    return body, comments


# --------------------------------------------------------------------------- plot


def pareto_png(r: TuneResult) -> bytes:
    """Cost vs retention of every scored trial, the feasible front, base and chosen.

    Raises RuntimeError when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(f"the Pareto plot needs matplotlib: {extra_hint('plot')}") from exc
    obj = r.config.objectives
    scored = [c for c in r.candidates if c.score is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for feasible, color, label in ((False, "#bbbbbb", "infeasible"), (True, "#4477aa", "feasible")):
        pts = [c for c in scored if c.feasible == feasible]
        ax.scatter(
            [c.score.cost(obj) for c in pts if c.score],
            [c.score.retention(obj) for c in pts if c.score],
            s=18,
            c=color,
            label=label,
        )
    front = sorted(
        (c.score.cost(obj), c.score.retention(obj))
        for c in scored
        if c.number in r.front and c.score
    )
    if front:
        ax.plot(*zip(*front, strict=True), color="#4477aa", lw=1, ls="--", label="front")
    b = r.base_tuning
    ax.scatter([b.cost(obj)], [b.retention(obj)], marker="s", s=60, c="#cc6677", label="base")
    if r.chosen is not None and r.chosen.score is not None:
        c = r.chosen.score
        ax.scatter(
            [c.cost(obj)], [c.retention(obj)], marker="*", s=160, c="#228833", label="chosen"
        )
    ax.axhline(r.floor, color="#cc6677", lw=0.8, ls=":", label="retention floor")
    ax.set_xlabel(
        {
            "tokens": "prompt tokens (tuning traces)",
            "usd": "est. USD",
            "billed": "billed input (tuning traces)",
        }.get(obj.cost, "total cost: billed input + summarizer (tuning traces)")
    )
    ax.set_ylabel(f"retention ({obj.retention})")
    ax.set_title(f"ctxpolicy tune: {r.config.agent}")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# --------------------------------------------------------------------------- HTML


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _score_cells(s: Score | None) -> list[Any]:
    if s is None:
        return ["", "", "", "", "", ""]
    return [
        f"{s.tokens:,}",
        f"${s.usd:.4f}",
        f"{s.in_context:.2%}",
        f"{s.retained:.2%}",
        s.avoidable,
        s.pairing,
    ]


_CSS = """body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:right}th{background:#eee}pre{background:#f6f6f6;padding:1em;overflow:auto}
.ok{color:#228833}.no{color:#cc3311}"""


def html_report(r: TuneResult, png: bytes | None, diff_text: str | None) -> str:
    """A self-contained HTML page: verdict, held-out comparison, changes, Pareto
    front, every trial, the diff."""
    cfg = r.config
    esc = html.escape
    cols = [
        "prompt tokens",
        "est. cost",
        "in context",
        "retained",
        "avoidable overflows",
        "pairing",
    ]
    cost = {"total": "total cost", "billed": "billed input", "usd": "USD"}.get(
        cfg.objectives.cost, cfg.objectives.cost
    )
    verdict = (
        '<p class="ok">Recommended: the chosen policy is not worse than the base on held-out traces'
        + (
            f" and lowers its {esc(cost)} (the cost the study minimised) by {r.gain:.1%}."
            if r.gain is not None
            else "."
        )
        + "</p>"
        if r.recommended
        else '<p class="no">No recommendation: ' + esc("; ".join(r.reasons) or "—") + "</p>"
    )
    if 0 < len(r.held_out) < 3:
        verdict += (
            f'<p class="no">Thin evidence: the held-out comparison rests on {len(r.held_out)} '
            "trace(s); give more traces for a saving you can trust.</p>"
        )
    parts = [
        f"<!doctype html><meta charset=utf-8><title>ctxpolicy tune: {esc(cfg.agent)}</title>",
        f"<style>{_CSS}</style>",
        f"<h1>ctxpolicy tune — {esc(cfg.agent)}</h1>",
        f"<p>{esc(cfg.policy_file)}, seed {cfg.seed}, window {cfg.window or 'of the policy'}, "
        f"{len(r.candidates)} trials on {esc(r.where)}"
        + (" — <b>interrupted</b>, best so far" if r.interrupted else "")
        + "</p>",
        verdict,
        "<h2>Held-out comparison</h2>",
        f"<p>{len(r.held_out)} held-out traces: {esc(', '.join(r.held_out) or '(none)')}</p>",
        _table(
            ["policy", *cols],
            [["base", *_score_cells(r.base_held)], ["chosen", *_score_cells(r.chosen_held)]],
        ),
        "<h2>Tuning traces</h2>",
        f"<p>{len(r.tuning)} traces; retention floor {r.floor:.2%}.</p>",
        _table(
            ["policy", *cols],
            [
                ["base", *_score_cells(r.base_tuning)],
                ["chosen", *_score_cells(r.chosen.score if r.chosen else None)],
            ],
        ),
    ]
    if r.chosen is not None:
        rows = []
        for p in changed(r.params, r.chosen.values):
            e = r.effects.get(p.path)
            rows.append(
                [
                    p.path,
                    p.render(p.snap(p.base)),
                    p.render(r.chosen.values[p.path]),
                    *_score_cells(e)[:3],
                ]
            )
        parts += [
            "<h2>Changes</h2><p>Each value reverted alone, on the tuning traces:</p>",
            _table(
                ["parameter", "base", "chosen", "tokens if reverted", "cost", "in context"], rows
            ),
        ]
    if png:
        parts.append(
            "<h2>Pareto front</h2><img alt='Pareto front' src='data:image/png;base64,"
            + base64.b64encode(png).decode()
            + "'>"
        )
    else:
        parts.append("<h2>Pareto front</h2><p>(no plot: matplotlib is not installed)</p>")
    names = [p.path for p in r.params]
    parts += [
        "<h2>Trials</h2>",
        _table(
            ["trial", "state", "front", *cols, *names],
            [
                [
                    c.number,
                    c.state if c.feasible or c.state != "complete" else "infeasible",
                    "●" if c.number in r.front else "",
                    *_score_cells(c.score),
                    *(c.values.get(n, "") for n in names),
                ]
                for c in r.candidates
            ],
        ),
        "<h2>Search space</h2>",
        _table(
            ["parameter", "range", "base", "declared by"],
            [
                [p.path, json.dumps(p.range.model_dump(exclude_defaults=True)), p.base, p.origin]
                for p in r.params
            ],
        ),
    ]
    if diff_text:
        parts += ["<h2>Policy diff</h2>", f"<pre>{esc(diff_text)}</pre>"]
    return "\n".join(parts) + "\n"
