"""ctxpolicy.sim.parallel: ordered results on worker processes, identical to inline."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ctxpolicy.cli.simulate import simulate
from ctxpolicy.policy.resolve import load_policy
from ctxpolicy.sim.parallel import Replayer, default_workers, map_ordered

from .conftest import ROOT

POLICY = ROOT / "policies" / "agents.yaml"
DEMO = sorted(str(p) for p in (ROOT / "examples" / "traces").glob("*.jsonl"))


def _square(x: int) -> int:
    return x * x


def test_map_ordered_keeps_the_order_and_reports_progress():
    seen: list[int] = []
    out = map_ordered(
        _square, [(i,) for i in range(7)], workers=2, progress=lambda d, t, n: seen.append(d)
    )
    assert out == [i * i for i in range(7)]
    assert sorted(seen) == list(range(1, 8))
    assert default_workers() >= 1


def test_replayer_on_two_processes_equals_inline():
    pol = load_policy(POLICY, "coding_agent")
    small = pol.model_copy(update={"agent": "small"})
    with Replayer(DEMO, workers=1) as inline, Replayer(DEMO, workers=2) as pool:
        jobs = [(n, p, 8192, p.agent) for p in (pol, small) for n in inline.names]
        a = inline.run(jobs)
        b = pool.run(jobs)
    assert a == b
    assert [d["trace"] for d in a] == [j[0] for j in jobs]
    assert "series" not in a[0] and a[0]["prompt_tokens"] > 0


def test_simulate_workers_option_gives_the_same_output():
    def out(*extra: str) -> str:
        res = CliRunner().invoke(
            simulate, [*DEMO, "--policy", str(POLICY), "--agent", "coding_agent", "--json", *extra]
        )
        assert res.exit_code in (0, 1), res.output
        return res.output

    assert out("--workers", "2") == out("--workers", "1") == out("--jobs", "1")
    assert Path(DEMO[0]).exists()


def _env(name: str) -> str | None:
    import os

    return os.environ.get(name)


def test_workers_see_the_environment_of_the_call(monkeypatch):
    # the forkserver is started once per process, with the environment of that moment;
    # a policy's ${VAR} (shown in snapshot references, so counted) must resolve in a
    # worker as it does inline
    monkeypatch.setenv("CTXPOLICY_TEST_VAR", "first")
    assert map_ordered(_env, [("CTXPOLICY_TEST_VAR",)] * 2, workers=2) == ["first"] * 2
    monkeypatch.setenv("CTXPOLICY_TEST_VAR", "second, longer")
    assert map_ordered(_env, [("CTXPOLICY_TEST_VAR",)] * 2, workers=2) == ["second, longer"] * 2
