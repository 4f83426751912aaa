"""Every real trace under every shipped policy at 16k and 32k windows.

A per-kind policy passes ``simulate --check`` (no overflow, pairing violation or alert)
on the traces of the kinds it is for (tests/policy/test_windows.py runs the command at
8k and 128k).

Zero pairing violations and zero prepared contexts above ``window − reserve_output``
wherever the policy's budget fits the window, and hysteresis (docs/engine.md): after
every compaction the context is at or below the target unless the engine reports
that the pinned content and the kept rounds alone exceed it, and no two consecutive
calls compact unless one step alone grew the conversation by more than the
hysteresis band (``warning − target``: every shipped pipeline starts at ``warning``). Where it does not (design B's
absolute 128k numbers on a 16k window), loading it at that window is a clear
CTX201 diagnostic — never a silent fallback; a policy that leaves less than a
quarter of the window for the conversation (e.g. ``default``'s 8000-token reserve and
4000-token margin on 16k: trigger 288) is not meant for that window and is skipped
with its numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxpolicy import load_policy
from ctxpolicy.budget import compute_budget
from ctxpolicy.resolve.checks import check_policy
from ctxpolicy.resolve.load import list_agents
from ctxpolicy.sim.replay import with_window
from ctxpolicy.sim.run import RunSpec, simulate
from tests.shared_data import AGENT_KINDS, kind_traces, shared_traces

POLICY = "policies/agents.yaml"
AGENTS = list_agents(POLICY)


@pytest.mark.slow
@pytest.mark.parametrize("window", [16384, 32768])
@pytest.mark.parametrize("agent", AGENTS)
def test_every_trace_every_shipped_policy(agent: str, window: int, tmp_path: Path) -> None:
    policy = load_policy(POLICY, agent=agent)
    sized = with_window(policy, window)
    try:
        budget = compute_budget(sized)
    except ValueError:
        assert agent not in AGENT_KINDS, f"{agent} is shipped for every window, {window} too"
        codes = [f.code for f in check_policy(sized)]
        assert "CTX201" in codes, f"{agent} does not fit {window} but no diagnostic says so"
        pytest.skip(f"{agent}'s budget does not fit a {window}-token window (CTX201)")
    if budget.trigger < window // 4:
        assert agent not in AGENT_KINDS, f"{agent}: trigger {budget.trigger} on {window}"
        pytest.skip(f"{agent} leaves a trigger of {budget.trigger} tokens on a {window} window")
    out = simulate(
        [str(p) for p in shared_traces()],
        [RunSpec(label=agent, policy=policy, file=POLICY, agent=agent)],
        window=window,
        jobs=2,
        snapshots_dir=tmp_path,
    )
    s = out["summary"][agent]
    assert (s["overflows"], s["pairing_violations"]) == (0, 0), s
    for t in out["traces"]:
        _check_hysteresis(t["trace"], t["runs"][0]["series"])
    if agent in AGENT_KINDS:  # what `simulate --check` says on the traces of its kind
        own = {p.name for p in kind_traces(agent)}
        assert own
        problems = [p for p in out["check"]["problems"] if p["trace"] in own]
        assert not problems, problems[:5]
    if (agent, window) == ("coding_agent", 32768):
        assert s["per_100_calls"]["compactions"] <= 8, s["per_100_calls"]


def _check_hysteresis(trace: str, series: dict[str, list[Any]]) -> None:
    used, none, layers = series["used"], series["none"], series["layers"]
    warning, target, above = series["warning"], series["target"], series["above_target"]
    for i, fired in enumerate(layers):
        if not fired:
            continue
        assert used[i] <= target[i] or above[i], (
            f"{trace} call {i + 1}: compacted to {used[i]} > target {target[i]} silently"
        )
        if i and layers[i - 1]:
            grew = none[i] - none[i - 1]
            assert above[i - 1] or grew > warning[i] - target[i], (
                f"{trace} calls {i}-{i + 1}: compacted twice in a row (step grew {grew})"
            )
