"""The Dask path: a real LocalCluster of 2 worker processes gives the same study as 1
local process (traces shipped to the workers, results gathered in order)."""

from __future__ import annotations

import pytest

from ctxpolicy.resolve.load import load_policy
from ctxpolicy.tune.runner import TuneConfig, run_tune

from .conftest import WASTEFUL

distributed = pytest.importorskip("distributed")


def _summary(r):
    return (
        [(c.number, c.state, c.values, c.score) for c in r.candidates],
        r.chosen.values if r.chosen else None,
        r.base_held,
        r.chosen_held,
    )


def test_tune_on_a_local_dask_cluster_matches_one_process(traces3: list[str]):
    base = load_policy(WASTEFUL, "wasteful")
    cfg = dict(traces=traces3, policy_file=str(WASTEFUL), agent="wasteful", trials=4, seed=5)
    local = run_tune(TuneConfig(**cfg, workers=1), base)
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        remote = run_tune(TuneConfig(**cfg, cluster=cluster.scheduler_address), base)
    assert remote.where.startswith("dask cluster") and "2 workers" in remote.where
    assert _summary(remote) == _summary(local)
    assert local.chosen is not None
