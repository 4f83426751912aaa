"""Worker processes of the concurrency tests (importable by ``spawn``)."""

from __future__ import annotations

import random
import time
from typing import Any

from ctxpolicy.components import StateConflict
from ctxpolicy.plugins import get_registry


def interleaved_writer(
    kind: str,
    options: dict[str, Any],
    conv_id: str,
    worker: str,
    n: int,
    barrier: Any,
    results: Any,
) -> None:
    """``n`` read-modify-write commits, each retried on StateConflict.

    Puts ``(worker, conflicts)`` on ``results``.
    """
    cls = get_registry().get("state_store", kind)
    assert cls is not None
    store = cls(cls.Options.model_validate(options))
    rng = random.Random(worker)
    conflicts = 0
    barrier.wait(timeout=60)
    try:
        for i in range(n):
            while True:
                state = store.load(conv_id)  # type: ignore[attr-defined]
                counter = state.entries.get("counter", 0)
                log = state.entries.get("log", [])
                time.sleep(rng.random() * 0.002)  # widen the race window
                try:
                    store.commit(  # type: ignore[attr-defined]
                        conv_id,
                        expected_version=state.version,
                        put={
                            "counter": counter + 1,
                            "log": [*log, f"{worker}-{i}"],
                            f"item/{worker}/{i}": {"seen_counter": counter},
                        },
                    )
                    break
                except StateConflict:
                    conflicts += 1
    finally:
        store.close()  # type: ignore[attr-defined]
    results.put((worker, conflicts))
