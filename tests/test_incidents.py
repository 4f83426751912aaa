"""Design B's incidents as behaviour tests (the same scenarios as
benchmarks/bench_incidents.py; numbers, never timings, are asserted).

Policies are YAML text written to tmp files and loaded with ``ctxpolicy.load_policy``;
a scripted provider rejects ``prompt + 4000 > 32000`` and the fake summary LLM rejects
a request that does not fit the same window.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_incidents as inc
from tests.engine_helpers import cache_alone


@pytest.fixture(scope="module")
def tmp_policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("incidents")


@pytest.fixture(scope="module")
def a(tmp_policies: Path) -> dict[str, Any]:
    return inc.scenario_a(tmp_policies, quick=True)


@pytest.fixture(scope="module")
def b(tmp_policies: Path) -> dict[str, Any]:
    # the incident as it happened: a compaction weighed by the cache alone (with the
    # price of an optional compaction's lost facts, the fixed 95 % policy asks for no
    # summary at all: the same one rejected call, by the emergency layer)
    with cache_alone():
        return inc.scenario_b(tmp_policies, quick=True)


@pytest.fixture(scope="module")
def c(tmp_policies: Path) -> dict[str, Any]:
    return inc.scenario_c(tmp_policies, quick=True)


def test_policies_are_yaml_loaded_with_the_expected_budgets(tmp_policies: Path) -> None:
    from ctxpolicy.budget import compute_budget

    dyn = compute_budget(inc.load(inc.DYNAMIC, tmp_policies, "budget_dyn"))
    # design B's 32000 − 4000 − 6000 − 2000, with the initial growth capped by what
    # the "*" head_tail rule lets one result bring (budget.rule_bound: 1564 tokens)
    assert (dyn.window, dyn.trigger, dyn.target) == (32000, 32000 - 4000 - 1564 - 2000, 14000)
    fixed = compute_budget(
        inc.load(
            inc.fixed_policy(0.8, "      - {layer: drop_rounds}"), tmp_policies, "budget_fixed"
        )
    )
    assert fixed.trigger == 32000 and fixed.warning_tokens == 25600  # "compress at 80 %"


def test_a_fixed_80_overflows_on_one_big_result_dynamic_does_not(a: dict[str, Any]) -> None:
    assert a["big_result_tokens"] >= 25000
    assert 0.70 * inc.WINDOW <= a["tokens_before_big_result"] < 0.80 * inc.WINDOW
    fixed, dyn = a["fixed_80"], a["dynamic"]
    # the call after the big result needs the last line of defence: a provider
    # rejection, or the emergency layer the engine runs when still above the trigger
    assert fixed["rejected_calls"] >= 1 or fixed["compactions"].get("emergency", 0) >= 1
    assert fixed["series"][-2]["prompt"] + inc.OUTPUT > 0.7 * inc.WINDOW
    assert dyn["rejected_calls"] == 0
    assert dyn["max_prompt_plus_output"] <= inc.WINDOW
    assert dyn["overflow_events"] == 0


def test_a_dynamic_learns_tool_growth(a: dict[str, Any]) -> None:
    # the learned reserve moved the trigger away from the initial 20,000
    assert a["dynamic"]["trigger"] != 20000


def test_b_fixed_95_has_no_room_for_the_summary_call(b: dict[str, Any]) -> None:
    fixed = b["fixed_95"]
    assert fixed["summary_calls"] >= 1
    assert fixed["summary_calls_rejected"] >= 1
    assert fixed["max_summary_request"] > inc.WINDOW


def test_b_ours_reserves_the_summary_budget(b: dict[str, Any]) -> None:
    dyn = b["dynamic"]
    assert dyn["summary_calls"] >= 1
    assert dyn["summary_calls_rejected"] == 0
    assert all(
        int(r["input"]) + int(r["max_tokens"]) <= inc.WINDOW for r in dyn["summary_requests"]
    )
    assert dyn["compactions"].get("summarize", 0) >= 1
    assert dyn["breaker_open"] == 0
    assert dyn["rejected_calls"] == 0


def test_c_fixed_50_no_longer_thrashes_ours_compacts_rarely(c: dict[str, Any]) -> None:
    """The engine's thrash guard holds even a 50 % trigger's compactions until they pay
    or the request would not fit (docs/engine.md, "No thrash")."""
    fixed, dyn = c["fixed_50"], c["dynamic"]
    assert fixed["calls_with_compaction"] <= dyn["calls_with_compaction"] + 1
    assert dyn["rejected_calls"] == 0 and fixed["rejected_calls"] == 0


def test_c_ours_keeps_the_key_value(c: dict[str, Any]) -> None:
    assert c["dynamic"]["key_fact_in_final_context"]
