"""Calls bounded by a timeout that neither leak threads nor block interpreter exit.

A Python thread cannot be killed: a call that never returns (a summarizer stuck on a
dead socket) keeps its thread forever. :func:`call_bounded` runs the call in a
*daemon* thread (the interpreter does not wait for it at exit, unlike a
``ThreadPoolExecutor`` worker, which ``atexit`` joins) and keeps at most one call
per *owner* (e.g. one summarizer object) in flight: while an abandoned call still
hangs, later calls of the same owner fail fast with :class:`CallBusy` instead of
starting another thread. When the hung call finally returns, its thread ends and the
owner is usable again. So a process holds at most one hung thread per owner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CallBusy", "CallTimeout", "call_bounded", "hung_calls"]

T = TypeVar("T")

_lock = threading.Lock()
#: id(owner) -> (owner, thread, started): calls still running after their timeout
#: (the owner is held so its id cannot be reused while the entry exists)
_hung: dict[int, tuple[Any, threading.Thread, float]] = {}


class CallTimeout(TimeoutError):
    """The call did not return within its timeout (its thread is left to finish)."""


class CallBusy(RuntimeError):
    """A previous call of the same owner timed out and is still running."""

    def __init__(self, message: str, *, hung_for: float) -> None:
        super().__init__(message)
        self.hung_for = hung_for


def hung_calls() -> int:
    """How many timed-out calls are still running in this process."""
    with _lock:
        return sum(1 for _, t, _ in _hung.values() if t.is_alive())


def call_bounded(owner: Any, fn: Callable[[], T], timeout: float, *, name: str = "call") -> T:
    """``fn()``, or :class:`CallTimeout` after ``timeout`` seconds.

    Raises :class:`CallBusy` without calling ``fn`` while an earlier call of ``owner``
    is still hung. Exceptions of ``fn`` propagate.
    """
    key = id(owner)
    with _lock:
        entry = _hung.get(key)
        if entry is not None:
            if entry[1].is_alive():
                hung_for = time.monotonic() - entry[2]
                raise CallBusy(
                    f"a previous {name} has been running for {hung_for:.0f}s "
                    "(timed out, still hung); not starting another",
                    hung_for=hung_for,
                )
            del _hung[key]
    box: dict[str, Any] = {}
    done = threading.Event()
    finished = threading.Lock()  # held while deciding "timed out" vs "finished"

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        finally:
            with finished:
                done.set()
                with _lock:
                    current = _hung.get(key)
                    if current is not None and current[1] is threading.current_thread():
                        del _hung[key]

    thread = threading.Thread(target=run, name=f"ctxpolicy-{name}", daemon=True)
    started = time.monotonic()
    thread.start()
    if not done.wait(timeout):
        with finished:
            if not done.is_set():
                with _lock:
                    _hung[key] = (owner, thread, started)
                raise CallTimeout(f"timeout after {timeout:g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]
