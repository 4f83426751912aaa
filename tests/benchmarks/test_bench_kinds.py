"""benchmarks/bench_kinds.py: the jobs of a half, all of them or a quick loop's part."""

from __future__ import annotations

import pytest

from benchmarks.bench_kinds import KINDS, agent_for, jobs_for
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
