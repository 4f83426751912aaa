"""Token plots of replays (matplotlib, extra ``plot``; Agg backend, imported lazily).

One panel per trace: tokens sent per call for the policy (and the ``--compare``
policy, dashed), the uncompacted conversation (grey), the trigger, target,
warning/error boundaries and the hard limit (``window − reserve_output``), and a
marker wherever a layer fired.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DPI", "MAX_PANELS", "figure_size", "plot_output"]

DPI = 100
WIDTH_IN = 11.0
PANEL_IN = 3.0
EXTRA_IN = 0.6
MAX_PANELS = 24
_MARKERS = {
    "observation_mask": "o",
    "drop_rounds": "s",
    "summarize": "D",
    "offload": "^",
    "emergency": "X",
    "squeeze": "v",
}
_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]


def figure_size(panels: int) -> tuple[int, int]:
    """Pixel size ``(width, height)`` of a plot with ``panels`` traces."""
    n = max(1, min(panels, MAX_PANELS))
    return round(WIDTH_IN * DPI), round((EXTRA_IN + PANEL_IN * n) * DPI)


def _require_matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("plots need matplotlib: pip install 'ctxpolicy[plot]'") from exc
    return plt


def plot_output(output: Mapping[str, Any], path: str | Path | None = None) -> bytes:
    """PNG of a ``simulate`` output (its ``traces``); written to ``path`` if given."""
    plt = _require_matplotlib()
    traces: Sequence[Mapping[str, Any]] = list(output.get("traces", []))[:MAX_PANELS]
    n = max(1, len(traces))
    w, h = figure_size(n)
    fig, axes = plt.subplots(n, 1, figsize=(w / DPI, h / DPI), dpi=DPI, squeeze=False)
    try:
        for ax, tr in zip(axes[:, 0], traces or [{}], strict=False):
            _panel(ax, tr)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    data = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(data)
    return data


def _panel(ax: Any, trace: Mapping[str, Any]) -> None:
    runs = [r for r in trace.get("runs", []) if r.get("kind") == "policy"]
    none_run = next((r for r in trace.get("runs", []) if r.get("strategy") == "none"), None)
    ax.set_title(str(trace.get("trace", "")), fontsize=9, loc="left")
    ax.set_xlabel("call", fontsize=8)
    ax.set_ylabel("tokens sent", fontsize=8)
    ax.tick_params(labelsize=7)
    if not runs:
        ax.text(0.5, 0.5, "no policy run", ha="center", va="center", transform=ax.transAxes)
        return
    main = runs[0]["series"]
    x = list(range(len(main["used"])))
    top = max([*main["hard_limit"], *main["used"], 1]) * 1.12
    for r in runs[1:]:
        top = max(
            top,
            max(r["series"]["used"] or [0]) * 1.12,
            max(r["series"]["hard_limit"] or [0]) * 1.12,
        )
    nx = none_run["series"]["none"] if none_run is not None else main["none"]
    ax.plot(x, nx[: len(x)], color="#999999", lw=1, label="no compaction")
    ax.step(
        x, main["hard_limit"], where="post", color="black", lw=1, ls="-", label="window − reserve"
    )
    ax.step(x, main["trigger"], where="post", color="#d62728", lw=1, ls="--", label="trigger")
    ax.step(x, main["error"], where="post", color="#ff7f0e", lw=0.8, ls=":", label="error")
    ax.step(x, main["warning"], where="post", color="#bcbd22", lw=0.8, ls=":", label="warning")
    ax.step(x, main["target"], where="post", color="#2ca02c", lw=1, ls="-.", label="target")
    for i, r in enumerate(runs):
        s = r["series"]
        rx = list(range(len(s["used"])))
        color = _COLORS[i % len(_COLORS)]
        ax.plot(
            rx, s["used"], color=color, lw=1.6, ls="-" if i == 0 else "--", label=str(r.get("run"))
        )
        fired: dict[str, list[int]] = {}
        for step, layers in enumerate(s["layers"]):
            for layer in dict.fromkeys(layers):
                fired.setdefault(layer, []).append(step)
        for layer, steps in fired.items():
            ax.scatter(
                steps,
                [s["used"][k] for k in steps],
                marker=_MARKERS.get(layer, "*"),
                s=28,
                color=color,
                edgecolors="black",
                linewidths=0.5,
                zorder=5,
                label=f"{r.get('run')}: {layer}",
            )
    ax.set_ylim(0, top)
    ax.set_xlim(-0.5, max(len(x) - 0.5, 0.5))
    ax.grid(alpha=0.25)
    ax.legend(fontsize=6, loc="upper left", ncol=4, framealpha=0.8)
