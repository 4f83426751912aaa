"""Many sessions on threads and processes sharing one policy and snapshot store."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from pathlib import Path
from typing import Any

from ctxpolicy.conversation import check_messages
from ctxpolicy.engine import Session
from ctxpolicy.snapshots import LocalStore
from tests.engine_helpers import call, make_policy

THREADS = 16
STEPS = int(os.environ.get("CTXPOLICY_CONCURRENCY_STEPS", "200"))


def _policy(root: Path) -> Any:
    return make_policy(
        snapshots={"path": str(root), "enabled": True},
        model={"context_window": 6000, "max_output_tokens": 500, "tokenizer": "cl100k_base"},
        pipeline=[
            {"layer": "observation_mask", "at": "warning", "options": {"max_age_rounds": 2}},
            {
                "layer": "drop_rounds",
                "at": "warning",
                "options": {"keep_recent_rounds": 2, "min_keep_tokens": 300},
            },
        ],
    )


def _run(policy: Any, conv_id: str, steps: int) -> dict[str, Any]:
    s = Session(policy, conv_id=conv_id)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": f"task {conv_id}"},
    ]
    bad = 0
    for i in range(steps):
        c = call(f"{conv_id}-{i}", "run", i=i)
        msgs.append({"role": "assistant", "content": f"step {i}", "tool_calls": [c]})
        text = s.add_tool_result(c, f"{conv_id} output {i} " * (20 + i % 50), step=i + 1)
        msgs.append({"role": "tool", "tool_call_id": c["id"], "content": text})
        out = s.prepare(msgs)
        bad += bool(check_messages(out))
    assert s.status is not None
    return {"conv_id": conv_id, "bad": bad, "used": s.status["used"], "msgs": msgs}


def test_threads_share_policy_and_store(tmp_path: Path) -> None:
    policy = _policy(tmp_path / "snaps")
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            results.append(_run(policy, f"conv-{n}", STEPS))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == THREADS
    for r in results:
        assert r["bad"] == 0
        store = LocalStore(root=str(tmp_path / "snaps"))
        refs = store.list(r["conv_id"])  # records of its segments, and any files
        assert len([x for x in refs if x.name.endswith("_run")]) == STEPS  # none lost or doubled
        for ref in refs:  # tool results and history archives
            assert store.read(ref.uri)["conv_id"] == r["conv_id"]
        # counts are consistent: a fresh single-threaded session sees the same numbers
        fresh = Session(policy, conv_id=r["conv_id"] + "-check", snapshot_store=None)
        fresh.prepare(r["msgs"])
        assert fresh.status is not None
        assert fresh.status["tokens_in"] >= fresh.status["used"]


def _proc(root: str, n: int, steps: int, q: Any) -> None:
    policy = _policy(Path(root))
    s = Session(policy, conv_id="shared")
    for i in range(steps):
        s.add_tool_result(call(f"p{n}-{i}", "run"), f"process {n} step {i} " * 200, step=i + 1)
    q.put(n)


def test_processes_writing_one_conv_id(tmp_path: Path) -> None:
    steps = 25
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_proc, args=(str(tmp_path), n, steps, q)) for n in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = LocalStore(root=str(tmp_path))
    refs = store.list("shared")
    assert len(refs) == 4 * steps  # no name collision lost a snapshot
    seen = set()
    for ref in refs:
        doc = store.read(ref.uri)  # never partial
        obs = doc["observation"]
        first = obs.split(" ")[1]
        assert obs == f"process {first} step {obs.split(' ')[3]} " * 200  # never interleaved
        seen.add((first, doc["step"]))
    assert len(seen) == 4 * steps
    assert not list((tmp_path / "shared").glob("*.tmp*"))
