"""Budget arithmetic, states at exact boundaries, learned tool growth (property tests)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.budget import (
    BudgetState,
    ToolGrowthEstimator,
    compute_budget,
    quantile,
)
from ctxpolicy.policy.models import Policy
from ctxpolicy.policy.scalars import State
from tests.engine_helpers import bare_policy


def make_policy(model: dict[str, Any] | None = None, **sections: Any) -> Policy:
    return bare_policy(model=model or {"context_window": 120000}, **sections)


# --------------------------------------------------------------------------- table


def test_design_a_defaults():
    # max_context_tokens=120000, reserved_tokens=4096 → effective_budget 115904
    b = compute_budget(make_policy(budget={"reserve_output": 4096}))
    assert (b.window, b.reserve_output, b.tool_growth, b.safety_margin) == (120000, 4096, 0, 0)
    assert b.trigger == b.budget == 115904


def test_design_a_reserve_default_is_4096_without_max_output():
    assert compute_budget(make_policy()).trigger == 115904


def test_design_a_with_model_context_length():
    # the model's context_length 32768 is smaller than max_context_tokens 120000
    p = make_policy({"context_window": 32768}, budget={"window": 120000, "reserve_output": 4096})
    b = compute_budget(p)
    assert b.window == 32768 and b.trigger == 28672


def test_design_b_article_example():
    p = make_policy(
        {"context_window": 32000},
        budget={"reserve_output": 4000, "tool_growth": 6000, "safety_margin": 2000, "target": 0.7},
    )
    b = compute_budget(p)
    assert b.trigger == 20000
    assert b.target == 14000


def test_reserve_defaults_to_model_max_output():
    b = compute_budget(make_policy({"context_window": 128000, "max_output_tokens": 16384}))
    assert b.reserve_output == 16384 and b.trigger == 128000 - 16384


def test_percentages_are_of_the_window():
    p = make_policy(
        {"context_window": 100000},
        budget={"reserve_output": "25%", "tool_growth": "10%", "safety_margin": "2.5%"},
    )
    b = compute_budget(p)
    assert (b.reserve_output, b.tool_growth, b.safety_margin) == (25000, 10000, 2500)
    assert b.trigger == 62500


def test_absolute_target_and_clamp():
    p = make_policy({"context_window": 32000}, budget={"reserve_output": 4000, "target": 14000})
    assert compute_budget(p).target == 14000
    p = make_policy({"context_window": 32000}, budget={"reserve_output": 4000, "target": 90000})
    assert compute_budget(p).target == 28000  # never above the trigger


def test_no_room_is_an_error_but_learned_growth_is_cut():
    p = make_policy({"context_window": 8000}, budget={"reserve_output": 4000, "tool_growth": 5000})
    with pytest.raises(ValueError, match="no room"):
        compute_budget(p)
    ok = make_policy({"context_window": 8000}, budget={"reserve_output": 4000})
    b = compute_budget(ok, tool_growth=10_000)
    assert b.trigger == 1 and b.tool_growth == 3999


def test_override_tool_growth():
    p = make_policy(budget={"reserve_output": 4096, "tool_growth": 6000})
    assert compute_budget(p).trigger == 109904
    assert compute_budget(p, tool_growth=30000).trigger == 85904


# --------------------------------------------------------------------------- states


@pytest.fixture
def b10k() -> BudgetState:
    return compute_budget(make_policy({"context_window": 14096}, budget={"reserve_output": 4096}))


def test_state_boundaries(b10k: BudgetState):
    assert b10k.trigger == 10000
    cases = {
        0: State.normal,
        6999: State.normal,  # ratio 0.6999
        7000: State.warning,  # 0.70
        8999: State.warning,
        9000: State.error,  # 0.90
        9499: State.error,
        9500: State.critical,  # 0.95
        9999: State.critical,
        10000: State.overflow,  # 1.0
        25000: State.overflow,
    }
    for used, state in cases.items():
        assert b10k.state_for(used) is state, used
        assert b10k.state_for_ratio(used / 10000) is state, used


def test_ratio_boundaries_direct(b10k: BudgetState):
    assert b10k.state_for_ratio(0.6999) is State.normal
    assert b10k.state_for_ratio(0.70) is State.warning
    assert b10k.state_for_ratio(0.8999) is State.warning
    assert b10k.state_for_ratio(0.90) is State.error
    assert b10k.state_for_ratio(0.95) is State.critical
    assert b10k.state_for_ratio(0.99999) is State.critical
    assert b10k.state_for_ratio(1.0) is State.overflow


@given(trigger=st.integers(min_value=1, max_value=2_000_000), used=st.integers(0, 3_000_000))
@settings(max_examples=300, deadline=None)
def test_state_for_agrees_with_ratio(trigger: int, used: int):
    p = make_policy({"context_window": trigger + 4096}, budget={"reserve_output": 4096})
    b = compute_budget(p)
    assert b.trigger == trigger
    assert b.state_for(used) is b.state_for_ratio(b.ratio(used))


def test_custom_thresholds_and_tokens_for(b10k: BudgetState):
    p = make_policy(
        {"context_window": 14096},
        budget={"reserve_output": 4096},
        thresholds={"warning": 0.5, "error": 0.8, "critical": 0.9},
    )
    b = compute_budget(p)
    assert (b.warning_tokens, b.error_tokens, b.critical_tokens) == (5000, 8000, 9000)
    assert b.tokens_for("overflow") == 10000 and b.tokens_for(State.normal) == 0
    d = b.to_dict()
    assert d["trigger"] == 10000 and d["thresholds"]["warning"] == 0.5


def test_state_of_design_a_default_boundaries():
    b = compute_budget(make_policy(budget={"reserve_output": 4096}))
    w = b.warning_tokens
    assert w / 115904 >= 0.70 > (w - 1) / 115904
    assert b.state_for(w - 1) is State.normal and b.state_for(w) is State.warning
    assert b.state_for(115903) is State.critical and b.state_for(115904) is State.overflow


# --------------------------------------------------------------------------- tool growth


def learned(quantile_: float = 0.95, window: int = 20, **kw: Any) -> Policy:
    growth = {"learn": {"quantile": quantile_, "window": window}, **kw}
    return make_policy(budget={"reserve_output": 4096, "tool_growth": growth})


def test_fixed_growth_is_constant():
    est = ToolGrowthEstimator(make_policy(budget={"tool_growth": 6000}))
    est.observe("sql", 30000)
    assert est.estimate() == 6000 and est.estimate(["sql"]) == 6000


def test_initial_before_any_observation():
    est = ToolGrowthEstimator(learned(initial=6000))
    assert est.estimate() == 6000
    assert compute_budget(learned(initial=6000)).tool_growth == 6000


def test_quantile_nearest_rank():
    assert quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95) == 10
    assert quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.5) == 5
    assert quantile([7], 0.1) == 7
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_big_sql_results_get_a_bigger_reserve_than_tiny_ones():
    big, small = ToolGrowthEstimator(learned()), ToolGrowthEstimator(learned())
    for _ in range(10):
        big.observe("query_database", 30000)
        small.observe("ls", 200)
    assert big.estimate() == 30000
    assert small.estimate() == 200
    assert (
        compute_budget(learned(), tool_growth=big.estimate()).trigger
        < compute_budget(learned(), tool_growth=small.estimate()).trigger
    )


def test_pending_tool_history_is_considered():
    est = ToolGrowthEstimator(learned(quantile_=0.5, window=10))
    est.observe("query_database", 20000)
    for _ in range(9):
        est.observe("ls", 100)
    assert est.estimate() == 100
    assert est.estimate(["query_database"]) == 20000
    assert est.estimate(["never_seen"]) == 100


def test_default_max_is_half_the_window_and_min_applies():
    est = ToolGrowthEstimator(learned(min=1000))
    est.observe("x", 10)
    assert est.estimate() == 1000
    est.observe("x", 10_000_000)
    assert est.estimate(["x"]) == 60000


sizes = st.lists(st.integers(min_value=0, max_value=500_000), max_size=60)


@given(
    obs=sizes,
    q=st.floats(min_value=0.01, max_value=1.0),
    window=st.integers(1, 30),
    lo=st.integers(0, 5000),
    hi=st.integers(0, 80000),
)
@settings(max_examples=200, deadline=None)
def test_estimate_within_bounds(obs: list[int], q: float, window: int, lo: int, hi: int):
    hi = max(hi, lo)
    est = ToolGrowthEstimator(learned(quantile_=q, window=window, min=lo, max=hi, initial=lo))
    for i, s in enumerate(obs):
        est.observe(f"t{i % 3}", s)
        for pending in ((), ("t0",), ("t1", "t2")):
            assert lo <= est.estimate(pending) <= hi


@given(
    small=st.lists(st.integers(0, 1000), min_size=0, max_size=40),
    window=st.integers(1, 25),
    big=st.integers(20000, 50000),
)
@settings(max_examples=200, deadline=None)
def test_reacts_to_a_burst_within_window(small: list[int], window: int, big: int):
    """After `window` large results in a row, the estimate is at least the smallest of them."""
    est = ToolGrowthEstimator(learned(quantile_=0.5, window=window))
    for s in small:
        est.observe("ls", s)
    for i in range(window):
        est.observe("query_database", big + i)
    assert est.estimate() >= big
    assert est.estimate() <= 60000


@given(window=st.integers(2, 25), big=st.integers(20000, 50000))
@settings(max_examples=50, deadline=None)
def test_one_big_result_moves_the_top_quantile_immediately(window: int, big: int):
    est = ToolGrowthEstimator(learned(quantile_=1.0, window=window))
    for _ in range(window):
        est.observe("ls", 100)
    est.observe("query_database", big)
    assert est.estimate() == big
    for _ in range(window):  # and it ages out after `window` more results
        est.observe("ls", 100)
    assert est.estimate() == 100
    assert est.estimate(["query_database"]) == big  # that tool's own history remembers


# --------------------------------------------------------------------------- explain


@given(obs=sizes, q=st.floats(min_value=0.01, max_value=1.0), window=st.integers(1, 30))
@settings(max_examples=100, deadline=None)
def test_remembered_quantile_is_always_the_current_one(obs: list[int], q: float, window: int):
    """The quantile kept between observations is the one a fresh estimator computes."""
    est = ToolGrowthEstimator(learned(quantile_=q, window=window))
    for i, s in enumerate(obs):
        est.estimate()
        est.observe(f"t{i % 3}", s)
        fresh = ToolGrowthEstimator(learned(quantile_=q, window=window))
        fresh.load_dict(est.to_dict())
        for pending in ((), ("t0",), ("t1", "t2")):
            assert est.estimate(pending) == fresh.estimate(pending)
    est.load_dict({"recent": [1, 2, 3]})
    fresh = ToolGrowthEstimator(learned(quantile_=q, window=window))
    fresh.load_dict({"recent": [1, 2, 3]})
    assert est.estimate() == fresh.estimate()
