"""Every shipped per-kind policy works unchanged at 8k, 16k, 32k and 128k: its budget
validates at each window, and ``ctxpolicy simulate --check`` passes on the shared
traces of its kind there (no overflow, no pairing violation, no alert). At 16k and 32k
tests/test_scenarios.py replays every trace under every policy anyway and makes the same
check on the traces of the policy's kind; here the command itself runs at 8k and 128k."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli.simulate import simulate
from ctxpolicy.cli.validate import validate
from tests.shared_data import AGENT_KINDS, TRACES, available, kind_traces

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "agents.yaml"
WINDOWS = (8192, 16384, 32768, 128000)


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
@pytest.mark.parametrize("window", (8192, 128000))
@pytest.mark.parametrize("agent", sorted(AGENT_KINDS))
def test_validate_and_simulate_check_at_every_window(agent: str, window: int) -> None:
    runner = CliRunner()
    res = runner.invoke(validate, [str(POLICY)])
    assert res.exit_code == 0, res.output
    traces = [str(p) for p in kind_traces(agent)]
    assert traces
    args = ["--policy", str(POLICY), "--agent", agent, "--window", str(window)]
    res = runner.invoke(simulate, [*args, "--check", "--jobs", "1", *traces])
    assert res.exit_code == 0, res.output[-2000:]
