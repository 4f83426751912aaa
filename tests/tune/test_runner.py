"""The search loop's handling of Ctrl-C around optuna's storage writes."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from ctxpolicy.tune.runner import _storage_write


@pytest.fixture(autouse=True)
def _python_ctrl_c() -> Iterator[None]:
    """Ctrl-C as in a program run from a terminal: pytest-xdist's workers ignore SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_inside_a_storage_write_is_raised_after_it():
    written: list[str] = []
    with pytest.raises(KeyboardInterrupt), _storage_write():
        os.kill(os.getpid(), signal.SIGINT)
        written.append("commit")  # the write was not cut short
    assert written == ["commit"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_no_ctrl_c_no_interrupt_and_the_handler_is_restored():
    with _storage_write():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_ctrl_c_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _storage_write():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_it_does_nothing():
    seen: list[object] = []

    def work() -> None:
        with _storage_write():
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]
