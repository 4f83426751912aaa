"""Every shipped per-kind policy works unchanged at 8k, 16k, 32k and 128k: its budget
validates at each window, and ``ctxpolicy simulate --check`` passes on the shared
traces of its kind there (no overflow, no pairing violation, no alert)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli.simulate import simulate
from ctxpolicy.cli.validate import validate
from tests.shared_data import TRACES, available

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "agents.yaml"
WINDOWS = (8192, 16384, 32768, 128000)

#: the trace files of each kind of agent (../shared/traces/SOURCES.md)
KINDS = {
    "swe": ("swe-agent__", "mini-swe-agent__", "openhands__"),
    "customer_service": ("tau-bench__", "tau2-bench__"),
    "multi_tool": ("tapeagents-gaia__", "tapeagents-workarena__"),
    "data_analysis": ("spider2__",),
}
#: each shipped policy, on the traces of the agents it is for
AGENT_KINDS = {
    "default": ("multi_tool", "data_analysis"),
    "coding_agent": ("swe",),
    "code_review_agent": ("swe",),
    "customer_service_agent": ("customer_service",),
    "data_analysis_agent": ("data_analysis", "multi_tool"),
    "support_agent": ("customer_service",),
}


def _traces(kinds: tuple[str, ...]) -> list[str]:
    prefixes = tuple(p for k in kinds for p in KINDS[k])
    return [str(p) for p in sorted(TRACES.glob("*.jsonl")) if p.name.startswith(prefixes)]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("agent", sorted(AGENT_KINDS))
def test_budget_fits_every_window(agent: str, window: int) -> None:
    from ctxpolicy.budget import compute_budget
    from ctxpolicy.resolve.checks import check_policy
    from ctxpolicy.resolve.load import load_policy
    from ctxpolicy.sim.replay import with_window

    policy = with_window(load_policy(str(POLICY), agent), window)
    assert not [f for f in check_policy(policy)], (agent, window)
    b = compute_budget(policy)
    # the trigger leaves most of the window to the conversation, compaction stops
    # below where it starts, and what drop_rounds keeps fits below the target
    assert b.trigger >= 0.6 * b.window, (agent, window, b.trigger)
    assert b.target < b.warning_tokens
    for step in policy.pipeline:
        keep = step.options.get("min_keep_tokens")
        if isinstance(keep, int):
            assert keep < b.target, (agent, window, step.layer, keep, b.target)


@pytest.mark.skipif(not available(TRACES), reason="../shared/traces not available")
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("agent", sorted(AGENT_KINDS))
def test_validate_and_simulate_check_at_every_window(agent: str, window: int) -> None:
    runner = CliRunner()
    res = runner.invoke(validate, [str(POLICY)])
    assert res.exit_code == 0, res.output
    traces = _traces(AGENT_KINDS[agent])
    assert traces
    args = ["--policy", str(POLICY), "--agent", agent, "--window", str(window)]
    res = runner.invoke(simulate, [*args, "--check", "--jobs", "1", *traces])
    assert res.exit_code == 0, res.output[-2000:]
