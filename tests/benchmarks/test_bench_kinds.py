"""benchmarks/bench_kinds.py: the jobs of a half, all of them or a quick loop's part."""

from __future__ import annotations

import pytest

from benchmarks.bench_kinds import KINDS, jobs_for
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
    assert all(a == KINDS["swe"][1] for _, a, _, _ in swe)
    quick = jobs_for("tune", quick=True, kinds=["swe"])
    assert len(quick) == 1 and quick[0][3] == KINDS["swe"][2][0]
