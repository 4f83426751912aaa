"""ctxpolicy.sim.parallel: ordered results on worker processes, identical to inline."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli.simulate import simulate
from ctxpolicy.resolve.load import load_policy
from ctxpolicy.sim.parallel import Replayer, ReplayMemo, default_workers, map_ordered
from ctxpolicy.sim.prepared import ruler_plan

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


# --------------------------------------------------------------------------- the memo


def test_the_memo_is_keyed_by_trace_policy_and_window():
    pol = load_policy(POLICY, "coding_agent")
    target = 0.55 if pol.budget.target != 0.55 else 0.5
    other = pol.model_copy(update={"budget": pol.budget.model_copy(update={"target": target})})
    memo = ReplayMemo()
    key = ("a.jsonl", ReplayMemo.policy_key(pol), 8192)
    memo.put(key, {"run": "x", "prompt_tokens": 7, "nested": {"n": 1}})
    assert memo.get(key, "y") == {"run": "y", "prompt_tokens": 7, "nested": {"n": 1}}
    # an equal policy (another object) is the same key; any other field is not
    assert ReplayMemo.policy_key(pol.model_copy()) == key[1]
    assert ReplayMemo.policy_key(other) != key[1]
    for miss in (
        ("b.jsonl", key[1], 8192),
        ("a.jsonl", ReplayMemo.policy_key(other), 8192),
        ("a.jsonl", key[1], 16384),
        ("a.jsonl", key[1], None),
    ):
        assert memo.get(miss, "y") is None
    assert (memo.hits, memo.misses) == (1, 4)


def test_the_memo_hands_out_copies_and_is_bounded():
    memo = ReplayMemo(maxsize=2)
    metrics = {"run": "x", "nested": {"n": 1}}
    memo.put(("a", "p", 1), metrics)
    metrics["nested"]["n"] = 2  # the caller's dict changes after put: not the entry
    got = memo.get(("a", "p", 1), "x")
    assert got == {"run": "x", "nested": {"n": 1}}
    got["nested"]["n"] = 3  # nor when a copy handed out changes
    assert memo.get(("a", "p", 1), "x") == {"run": "x", "nested": {"n": 1}}
    memo.put(("b", "p", 1), {"run": "b"})
    memo.get(("a", "p", 1), "x")  # a is now the most recently used
    memo.put(("c", "p", 1), {"run": "c"})
    assert len(memo) == 2
    assert memo.get(("b", "p", 1), "b") is None  # least recently used: dropped
    assert memo.get(("a", "p", 1), "x") is not None
    off = ReplayMemo(maxsize=0)
    off.put(("a", "p", 1), {"run": "x"})
    assert len(off) == 0 and off.get(("a", "p", 1), "x") is None
    with pytest.raises(ValueError):
        ReplayMemo(maxsize=-1)


def test_the_replayer_replays_a_job_once_and_answers_the_same():
    pol = load_policy(POLICY, "coding_agent")
    small = pol.model_copy(update={"agent": "small"})
    runs: list[int] = []
    with Replayer(DEMO, workers=1) as rp, Replayer(DEMO, workers=1, memo_size=0) as fresh:
        jobs = [
            (n, p, 8192, lbl)
            for p, lbl in ((pol, "a"), (pol, "b"), (small, None))
            for n in rp.names
        ]
        first = rp.run(jobs, progress=lambda d, t, n: runs.append(t))
        # 2 policies × the traces replayed; the second "pol" jobs are copies
        assert len(runs) == 2 * len(rp.names) and set(runs) == {2 * len(rp.names)}
        again = rp.run(jobs, progress=lambda d, t, n: runs.append(t))
        assert len(runs) == 2 * len(rp.names)  # nothing replayed the second time
        expected = fresh.run(jobs)
    assert first == again == expected
    assert [d["run"] for d in first] == ["a"] * 2 + ["b"] * 2 + ["small"] * 2
    assert [d["trace"] for d in first] == [j[0] for j in jobs]
    assert rp.memo.hits == len(jobs) and len(rp.memo) == 2 * len(rp.names)
    first[0]["prompt_tokens"] = -1  # results are the caller's: the memo is untouched
    assert first[1]["prompt_tokens"] > 0


def test_each_trace_is_prepared_once_from_its_own_messages():
    with Replayer(DEMO, workers=1) as rp:
        a, b = rp.names
        assert rp.prepared(a) is rp.prepared(a)
        assert rp.prepared(a).messages == rp.messages(a)
        assert rp.prepared(b).messages == rp.messages(b)
        assert rp.prepared(a).ruler == ruler_plan(rp.messages(a)) != rp.prepared(b).ruler
