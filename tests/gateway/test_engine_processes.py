"""``ctxpolicy serve --engine-processes N``: the upstream receives the same bytes as
with the engine in the gateway's threads (each conversation in an engine process from
its first request, compaction and an overflow retry included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpolicy.testing.server import ScriptedLLMServer
from tests.calls.test_pool import history

from .conftest import config_for, run_gateway


def _conversation(tmp_path: Path, processes: int) -> tuple[list[Any], str]:
    with (
        ScriptedLLMServer(window=6000) as srv,
        run_gateway(config_for(tmp_path, srv, engine_processes=processes, recall=True)) as gw,
    ):
        pool = gw.gateway.pool.pool
        assert (pool.processes is not None) == (processes > 0)
        for conv in ("a", "b"):
            headers = {"Authorization": "Bearer k", "X-Ctxpolicy-Conversation": conv}
            for n in (2, 6, 12, 20):
                body = {"model": "m", "messages": history(n)}
                r = httpx.post(
                    gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=60
                )
                assert r.status_code == 200, r.text
        metrics = httpx.get(gw.url + "/metrics").text
        bodies = list(srv.requests)
    compactions = [line for line in metrics.splitlines() if "compaction" in line]
    return bodies, "\n".join(compactions)


def test_the_upstream_gets_the_same_bytes_with_engine_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXPOLICY_ENGINE_HEAVY", "0,0")  # every conversation moves at once
    threads, t_metrics = _conversation(tmp_path / "threads", 0)
    processes, p_metrics = _conversation(tmp_path / "processes", 1)
    assert processes == threads
    assert p_metrics == t_metrics  # the events reached the gateway's metrics
    assert len(threads) >= 8
    assert "ctxpolicy_gateway_compactions_total{" in t_metrics  # compaction ran
