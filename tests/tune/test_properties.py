"""Invariants of the tuner's building blocks (Hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.policy.models import TuneRange
from ctxpolicy.tune.runner import split_traces
from ctxpolicy.tune.space import Param

names = st.lists(st.text(min_size=1, max_size=8), min_size=0, max_size=30, unique=True)


@given(names, st.floats(0, 0.99), st.integers(0, 10**6))
def test_split_is_a_seeded_partition(traces: list[str], holdout: float, seed: int):
    tuning, held = split_traces(traces, holdout, seed)
    assert sorted(tuning + held) == sorted(traces)
    assert not set(tuning) & set(held)
    assert (tuning, held) == split_traces(traces, holdout, seed)
    if len(traces) >= 2 and holdout > 0:
        assert tuning and held
    else:
        assert held == []


@given(
    st.integers(-1000, 1000),
    st.integers(1, 2000),
    st.one_of(st.none(), st.integers(1, 50)),
    st.floats(-5000, 5000, allow_nan=False),
)
def test_snap_lands_on_the_grid_inside_the_range(low: int, width: int, step, value: float):
    r = TuneRange(low=low, high=low + width, step=step)
    v = Param("x", r, value, "test").snap(value)
    assert low <= v <= low + width
    assert isinstance(v, int)
    if step is not None:
        assert (v - low) % step == 0


@given(st.floats(0.01, 10), st.floats(0.01, 10), st.floats(-100, 100, allow_nan=False))
def test_float_snap_is_clipped(low: float, width: float, value: float):
    r = TuneRange(low=low, high=low + width)
    v = Param("x", r, value, "test").snap(value)
    assert round(low, 6) <= v <= round(low + width, 6) + 1e-9
