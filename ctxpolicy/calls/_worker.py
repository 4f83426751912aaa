"""An engine worker process: ``python -m ctxpolicy.calls._worker`` (started by
:class:`ctxpolicy.calls.processes.EngineProcesses`, never by hand).

It reads the pool's spec, builds its own :class:`~ctxpolicy.calls.SessionPool` (its
own sessions, its own handle on the state store), loads what a first step would, says
it is ready, then runs each step it receives in one of a few threads and answers it
with the step's events. It exits when its parent closes the pipe (or dies).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from ctxpolicy.calls.pool import _PRIVATE, SessionPool
from ctxpolicy.calls.processes import (
    MAX_FRAME_BYTES,
    WORKER_THREADS,
    error_out,
    read_frame,
    received,
    write_frame,
)

__all__ = ["main"]


class _Worker:
    """The loop of one worker process: a pool of its conversations, steps in threads."""

    def __init__(self, out: BinaryIO, spec: dict[str, Any]) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.local = threading.local()
        self.stray: list[tuple[str, dict[str, Any]]] = []
        self.stray_lock = threading.Lock()
        self.pool = SessionPool(
            spec["policies"],
            max_sessions=spec["max_sessions"],
            stored_id=spec["stored_id"],
            events_for=self._events_for,
            **spec["options"],
        )
        self.threads = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="ctxpolicy-engine")

    def warm(self) -> None:
        """Load what a first step would (plugins, each policy's tokenizer): a throwaway
        session in memory prepares one message per policy."""
        from ctxpolicy.engine import Session
        from ctxpolicy.state.memory import MemoryStateStore

        for policy in self.pool.policies.values():
            with contextlib.suppress(Exception):
                s = Session(policy, state_store=MemoryStateStore())
                s.prepare([{"role": "user", "content": "warm"}])
                s.close()

    def _events_for(self, agent: str) -> Callable[[dict[str, Any]], None]:
        def emit(event: dict[str, Any]) -> None:
            bucket = getattr(self.local, "events", None)
            if bucket is not None:
                bucket.append((agent, event))
            else:  # outside a step (a session closed on eviction): with the next answer
                with self.stray_lock:
                    self.stray.append((agent, event))

        return emit

    def _run(self, key: tuple[str, str, str, bool], fn: Callable[..., Any], args: Any) -> Any:
        """``fn(session, *args)`` on the conversation's session, which no other
        thread's step evicts meanwhile."""
        agent, tenant, conversation, private = key
        if private:
            with self.pool.using(conversation, agent=agent, tenant=_PRIVATE):
                return fn(self.pool.private(conversation, agent=agent), *received(args))
        with self.pool.using(conversation, agent=agent, tenant=tenant):
            return fn(self.pool.get(conversation, agent=agent, tenant=tenant), *received(args))

    def step(self, rid: int, op: str, key: Any, payload: Any) -> None:
        events: list[tuple[str, dict[str, Any]]] = []
        self.local.events = events
        result: tuple[str, Any]
        try:
            if op == "run":
                fn, args = payload
                result = ("ok", self._run(key, fn, args))
            elif op == "drop":
                agent, tenant, conversation, private = key
                if private:
                    self.pool.close_private(conversation, agent=agent)
                else:
                    self.pool.discard(conversation, agent=agent, tenant=tenant)
                result = ("ok", None)
            else:  # pragma: no cover - the parent sends only these
                result = ("error", ("other", f"unknown step {op!r}"))
        except BaseException as exc:  # every failure travels back
            result = ("error", error_out(exc))
        finally:
            self.local.events = None
        with self.stray_lock:
            stray, self.stray = self.stray, []
        self.answer(rid, result, stray + events)

    def answer(self, rid: int, result: tuple[str, Any], events: list[Any]) -> None:
        try:
            data = pickle.dumps((rid, result, events), protocol=pickle.HIGHEST_PROTOCOL)
            if len(data) > MAX_FRAME_BYTES:
                raise ValueError(f"an answer of {len(data):,} bytes is over the limit")
        except Exception as exc:
            bad = ("error", ("other", f"the answer could not travel back: {exc}"))
            data = pickle.dumps((rid, bad, events), protocol=pickle.HIGHEST_PROTOCOL)
        with contextlib.suppress(OSError):  # the parent is gone: nobody to answer
            write_frame(self.out, self.lock, data)

    def serve(self, inp: BinaryIO) -> None:
        while True:
            frame = read_frame(inp)
            if frame is None:
                return  # the parent is gone or closed the pipe
            rid, op, key, payload = pickle.loads(frame)
            if op == "stop":
                return
            self.threads.submit(self.step, rid, op, key, payload)

    def close(self) -> None:
        self.threads.shutdown(wait=True)
        self.pool.close()


def main() -> int:
    """The worker's life: spec, warm up, ready, steps until the pipe closes."""
    # the pipe to the parent is the original stdout; anything else printed goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
    inp = sys.stdin.buffer
    frame = read_frame(inp)
    if frame is None:
        return 0
    worker = _Worker(out, pickle.loads(frame))
    worker.warm()
    write_frame(out, worker.lock, pickle.dumps("ready"))
    try:
        worker.serve(inp)
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
