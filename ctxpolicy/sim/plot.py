"""Token plots of replays (matplotlib, extra ``plot``; Agg backend, imported lazily).

One panel per trace, x = call number (1-based, the numbering of ``--steps``),
y = tokens sent. Every run of the output is drawn and named in the legend: the policy
and each ``--compare`` policy (solid, one colour each), each baseline (dotted; ``none``,
the uncompacted conversation, in grey). Each policy's own limits are drawn in its colour:
``window − reserve_output`` (thin solid), trigger (dashed), target (dash-dot) and the
line where compaction fires (dotted: the tokens of the pipeline's lowest ``at`` state).
Markers show where a layer fired (shape per layer). The y-axis is scaled to the policy
runs and their limits; a baseline that rises above it is clipped and its peak written
in the panel. The legend sits right of the panels, outside the data.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxpolicy._install import extra_hint

__all__ = ["DPI", "MAX_PANELS", "build_figure", "figure_size", "plot_output"]

DPI = 100
WIDTH_IN = 13.0
PANEL_IN = 3.2
EXTRA_IN = 0.7
LEGEND_FRACTION = 0.24  # of the width, right of the panels
MAX_PANELS = 24
HEADROOM = 1.2  # y-limit = this × the highest policy value or limit

_MARKERS = {
    "observation_mask": "o",
    "drop_rounds": "s",
    "summarize": "D",
    "offload": "^",
    "emergency": "X",
    "squeeze": "v",
}
_POLICY_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
_BASELINE_COLORS = ["#ff7f0e", "#17becf", "#bcbd22", "#7f7f7f"]
_NONE_COLOR = "#9e9e9e"
_NONE_STYLE: dict[str, Any] = {"color": _NONE_COLOR, "lw": 2.4, "alpha": 0.55, "zorder": 1}


def figure_size(panels: int) -> tuple[int, int]:
    """Pixel size ``(width, height)`` of a plot with ``panels`` traces."""
    n = max(1, min(panels, MAX_PANELS))
    return round(WIDTH_IN * DPI), round((EXTRA_IN + PANEL_IN * n) * DPI)


def _require_matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(f"matplotlib is not installed: {extra_hint('plot')}") from exc
    return plt


def plot_output(output: Mapping[str, Any], path: str | Path | None = None) -> bytes:
    """PNG of a ``simulate`` output (its ``traces``); written to ``path`` if given."""
    plt = _require_matplotlib()
    fig = build_figure(output)
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    data = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def build_figure(output: Mapping[str, Any]) -> Any:
    """The matplotlib figure of :func:`plot_output` (the caller closes it)."""
    plt = _require_matplotlib()
    traces: Sequence[Mapping[str, Any]] = list(output.get("traces", []))[:MAX_PANELS]
    n = max(1, len(traces))
    w, h = figure_size(n)
    fig, axes = plt.subplots(n, 1, figsize=(w / DPI, h / DPI), dpi=DPI, squeeze=False)
    try:
        colors = _run_colors(output)
        legend: dict[str, Any] = {}
        for ax, tr in zip(axes[:, 0], traces or [{}], strict=False):
            _panel(ax, tr, colors, legend)
        fig.suptitle(_title(output), x=0.01, ha="left", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1 - LEGEND_FRACTION, 1 - 0.3 / (h / DPI)))
        if legend:
            fig.legend(
                list(legend.values()),
                list(legend),
                loc="upper left",
                bbox_to_anchor=(1 - LEGEND_FRACTION + 0.01, 1 - 0.1 / (h / DPI)),
                fontsize=8,
                frameon=False,
                borderaxespad=0,
            )
    except Exception:
        plt.close(fig)
        raise
    return fig


def _title(output: Mapping[str, Any]) -> str:
    pol = output.get("policy") or {}
    runs = [str(pol.get("run", "?")), *(str(c.get("run")) for c in output.get("compare") or [])]
    text = f"ctxpolicy simulate · {pol.get('file', '')} · " + " vs ".join(runs)
    if output.get("baselines"):
        text += " · baselines: " + ", ".join(output["baselines"])
    if len(output.get("traces", [])) > MAX_PANELS:
        text += f" · first {MAX_PANELS} of {len(output['traces'])} traces"
    return text


def _run_colors(output: Mapping[str, Any]) -> dict[str, str]:
    """One colour per run, the same in every panel (policies first, then baselines)."""
    colors: dict[str, str] = {}
    p = b = 0
    for tr in output.get("traces", []):
        for r in tr.get("runs", []):
            name = str(r.get("run"))
            if name in colors:
                continue
            if r.get("kind") == "policy":
                colors[name] = _POLICY_COLORS[p % len(_POLICY_COLORS)]
                p += 1
            elif r.get("strategy") == "none":
                colors[name] = _NONE_COLOR
            else:
                colors[name] = _BASELINE_COLORS[b % len(_BASELINE_COLORS)]
                b += 1
    return colors


def _calls(series: Sequence[Any]) -> list[int]:
    return list(range(1, len(series) + 1))


def _panel(
    ax: Any, trace: Mapping[str, Any], colors: Mapping[str, str], legend: dict[str, Any]
) -> None:
    all_runs = list(trace.get("runs", []))
    runs = [r for r in all_runs if r.get("kind") == "policy"]
    baselines = [r for r in all_runs if r.get("kind") != "policy"]
    ax.set_title(str(trace.get("trace", "")), fontsize=9, loc="left")
    ax.set_xlabel("call (as numbered by --steps)", fontsize=8)
    ax.set_ylabel("tokens sent", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.yaxis.set_major_formatter(_thousands())
    if not runs:
        ax.text(0.5, 0.5, "no policy run", ha="center", va="center", transform=ax.transAxes)
        return
    main = runs[0]["series"]
    top = max(max([*r["series"]["used"], *r["series"]["hard_limit"], 1]) for r in runs) * HEADROOM

    def keep(label: str, handle: Any) -> None:
        legend.setdefault(label, handle)

    # the uncompacted conversation: from the `none` baseline, else the policy's own series
    if not any(r.get("strategy") == "none" for r in baselines):
        (h,) = ax.plot(_calls(main["none"]), main["none"], **_NONE_STYLE)
        keep("no compaction (uncompacted conversation)", h)
    off_scale: list[str] = []
    for r in baselines:
        s, name = r["series"], str(r.get("run"))
        if r.get("strategy") == "none":
            (h,) = ax.plot(_calls(s["used"]), s["used"], **_NONE_STYLE)
            keep("baseline none (no compaction)", h)
        else:
            (h,) = ax.plot(_calls(s["used"]), s["used"], color=colors[name], lw=1.4, ls=":")
            keep(f"baseline {name}", h)
        peak = max(s["used"] or [0])
        if peak > top:
            at = s["used"].index(peak) + 1
            off_scale.append(f"{name} peaks at {peak:,} (call {at})")
    for r in runs:
        s, name = r["series"], str(r.get("run"))
        c, x = colors[name], _calls(r["series"]["used"])
        (h,) = ax.step(x, s["hard_limit"], where="post", color=c, lw=0.9, alpha=0.8)
        keep(f"{name}: window − reserve", h)
        (h,) = ax.step(x, s["trigger"], where="post", color=c, lw=1.0, ls="--", alpha=0.8)
        keep(f"{name}: trigger", h)
        (h,) = ax.step(x, s["target"], where="post", color=c, lw=1.0, ls="-.", alpha=0.6)
        keep(f"{name}: target", h)
        if s.get("fires") and s["fires"] != s["trigger"]:
            (h,) = ax.step(x, s["fires"], where="post", color=c, lw=1.0, ls=":", alpha=0.9)
            keep(f"{name}: compaction fires", h)
        (h,) = ax.plot(x, s["used"], color=c, lw=1.8)
        keep(f"{name}: tokens sent", h)
        fired: dict[str, list[int]] = {}
        for step, layers in enumerate(s["layers"], start=1):
            for layer in dict.fromkeys(layers):
                fired.setdefault(layer, []).append(step)
        for layer, steps in fired.items():
            h = ax.scatter(
                steps,
                [s["used"][k - 1] for k in steps],
                marker=_MARKERS.get(layer, "*"),
                s=30,
                color=c,
                edgecolors="black",
                linewidths=0.5,
                zorder=5,
            )
            keep(f"{layer} fired", _marker_handle(layer))
    if off_scale:
        ax.text(
            0.995,
            0.97,
            "clipped ↑ " + "; ".join(off_scale),
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=7,
            color="#555555",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )
    n = max(len(main["used"]), 1)
    ax.set_ylim(0, top)
    ax.set_xlim(0.5, n + 0.5)
    if n <= 30:
        ax.set_xticks(range(1, n + 1, 1 if n <= 15 else 2))
    ax.grid(alpha=0.25)


def _marker_handle(layer: str) -> Any:
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        ls="",
        marker=_MARKERS.get(layer, "*"),
        markersize=6,
        markerfacecolor="white",
        markeredgecolor="black",
    )


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:,.0f}")
