"""benchmarks/bench_kinds.py: the jobs of a half, all of them or a quick loop's part."""

from __future__ import annotations

import pytest

from benchmarks._common import ROOT
from benchmarks._kinds import FIT_SCALES, KINDS, agent_for, fit_window, fits_held
from benchmarks.bench_kinds import fit_jobs, jobs_for, main, totals
from tests.shared_data import SHARED, available

pytestmark = pytest.mark.skipif(
    not available(SHARED / "traces"), reason="shared traces not available"
)


def test_kinds_and_windows_pick_a_part_of_the_half() -> None:
    every = jobs_for("tune", quick=False)
    assert {k for k, *_ in every} <= set(KINDS)
    swe = jobs_for("tune", quick=False, kinds=["swe"], windows=[12288, 24576])
    assert swe and {(k, w) for k, _, _, w in swe} == {("swe", 12288), ("swe", 24576)}
    # the same traces as the full half's, each at the windows asked for
    assert {p for _, _, p, _ in swe} == {p for k, _, p, _ in every if k == "swe"}
    # each window's shipped policy: the 16k one up to 16k, coding_agent above
    assert {(w, a) for _, a, _, w in swe} == {(12288, "coding_agent_16k"), (24576, "coding_agent")}
    assert {(k, w, a) for k, a, _, w in every if k == "swe"} == {
        ("swe", 16384, "coding_agent_16k"),
        ("swe", 32768, "coding_agent"),
    }
    assert all(a == KINDS[k][1] for k, a, _, _ in every if k != "swe")
    # --agents: one policy at every window of the kind
    forced = jobs_for("tune", quick=False, kinds=["swe"], agents={"swe": "coding_agent"})
    assert {a for _, a, _, _ in forced} == {"coding_agent"}
    quick = jobs_for("tune", quick=True, kinds=["swe"])
    assert len(quick) == 1 and quick[0][3] == KINDS["swe"][2][0]


def test_agent_for_picks_the_policy_shipped_for_the_window() -> None:
    assert agent_for("swe", 8192) == agent_for("swe", 16384) == "coding_agent_16k"
    assert agent_for("swe", 16385) == agent_for("swe", 131072) == "coding_agent"
    assert agent_for("swe", 16384, {"swe": "coding_agent"}) == "coding_agent"
    assert agent_for("customer_service", 8192) == "customer_service_agent"


def test_fits_held_is_the_rule_where_sending_everything_fits() -> None:
    row = {"fits": True, "facts": 100, "in_context": 98, "total": 95.0, "none": 100.0}
    row |= dict.fromkeys(("far_facts", "far_in_context", "prefix_changes", "violations"), 0)
    row |= {"calls": 10, "avoidable_overflows": 0}
    assert fits_held(row) is True  # retention 98 %
    assert fits_held({**row, "in_context": 97}) is False
    assert fits_held({**row, "in_context": 97, "total": 84.0}) is True  # the bill paid
    assert fits_held({**row, "facts": 0, "in_context": 0}) is True  # nothing to keep
    assert fits_held({**row, "fits": False, "in_context": 0}) is None  # did not fit
    assert fits_held({"error": "no room"}) is None
    assert totals([row, {**row, "in_context": 50}])["fits_held"] == 1


def test_fit_window_is_the_smallest_window_the_peak_fits() -> None:
    from ctxpolicy.budget import budget_parts
    from ctxpolicy.sim.replay import load_policy_file, with_window

    policy = load_policy_file(str(ROOT / "policies" / "agents.yaml"), "customer_service_agent")

    def room(w: int) -> int:
        return w - budget_parts(with_window(policy, w))[1]

    for peak in (1751, 5066, 33780):
        w = fit_window(policy, peak)
        assert room(w) >= peak > room(w - 1)


def test_fit_jobs_replay_each_trace_where_it_just_fits() -> None:
    jobs = fit_jobs("tune", quick=True, kinds=["customer_service"])
    assert len(jobs) == 1
    job = jobs[0]
    assert job["window"] == round(job["fit_window"] * FIT_SCALES[0]) > job["peak"] > 0
    with pytest.raises(SystemExit):
        main(["--half", "held_out", "--fits"])  # the held-out half is never tuned on
