"""The simulate figure: every run drawn and named, per-policy limits, aligned axes, legend outside."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ctxpolicy.cli.simulate import simulate

from .conftest import COMPARED, DEMO

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def output() -> dict:
    res = CliRunner().invoke(
        simulate,
        [*DEMO, *COMPARED, "--json"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0
    return json.loads(res.stdout)


@pytest.fixture
def figure(output):
    import matplotlib.pyplot as plt

    from ctxpolicy.sim.plot import build_figure

    fig = build_figure(output)
    yield fig
    plt.close(fig)


def _labels(fig) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_every_run_is_drawn_and_labelled(figure):
    labels = _labels(figure)
    for run in ("coding_agent_16k", "coding_agent"):
        for what in ("tokens sent", "trigger", "target", "window − reserve"):
            assert f"{run}: {what}" in labels  # each policy's own limits
    assert "baseline none (no compaction)" in labels
    assert "baseline observation_mask" in labels
    assert "observation_mask fired" in labels
    ax = figure.axes[0]
    trigger_styles = {
        (line.get_color(), line.get_linestyle())
        for line in ax.get_lines()
        if line.get_linestyle() == "--"
    }
    assert len(trigger_styles) == 2  # one trigger per policy, in that policy's colour


def test_x_axis_is_the_call_number_from_1(figure, output):
    for ax, trace in zip(figure.axes, output["traces"], strict=False):
        n = len(trace["runs"][0]["series"]["used"])
        for line in ax.get_lines():
            x = list(line.get_xdata())
            assert x[0] == 1 and x[-1] == n
        lo, hi = ax.get_xlim()
        assert lo > 0 and lo < 1 and hi > n and hi < n + 1


def test_no_line_runs_off_the_top_without_a_note(figure, output):
    for ax, trace in zip(figure.axes, output["traces"], strict=False):
        top = ax.get_ylim()[1]
        policy = [r for r in trace["runs"] if r["kind"] == "policy"]
        highest = max(max(r["series"]["used"] + r["series"]["hard_limit"]) for r in policy)
        assert highest < top < 1.5 * highest
        clipped = [r for r in trace["runs"] if max(r["series"]["used"]) > top]
        note = " ".join(t.get_text() for t in ax.texts)
        for r in clipped:
            assert f"{r['run']} peaks at {max(r['series']['used']):,}" in note


def test_legend_is_outside_the_data(figure):
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    legend_box = figure.legends[0].get_window_extent(renderer)
    for ax in figure.axes:
        assert legend_box.x0 >= ax.get_window_extent(renderer).x1
    assert legend_box.x1 <= figure.bbox.x1 + 1  # and inside the image


def test_png_has_the_documented_size(output, tmp_path):
    import struct

    from ctxpolicy.sim.plot import figure_size, plot_output

    data = plot_output(output, tmp_path / "p.png")
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == figure_size(len(output["traces"]))


def test_the_line_where_compaction_fires_is_drawn(figure, output):
    """Each policy's firing line (its pipeline's lowest ``at``: warning here), dotted,
    at the tokens of ``series.fires`` (issue 31 item 7)."""
    labels = _labels(figure)
    for run in ("coding_agent_16k", "coding_agent"):
        assert f"{run}: compaction fires" in labels
    runs = [r for r in output["traces"][0]["runs"] if r["kind"] == "policy"]
    fires = {v for r in runs for v in r["series"]["fires"]}
    dotted = [
        line
        for line in figure.axes[0].get_lines()
        if line.get_linestyle() == ":" and len(line.get_ydata())
    ]
    assert fires & {int(y) for line in dotted for y in line.get_ydata()}
    for r in runs:
        s = r["series"]
        assert all(f == w for f, w in zip(s["fires"], s["warning"], strict=True))
