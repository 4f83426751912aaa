"""The search loop's handling of Ctrl-C around optuna's storage writes."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy import load_policy
from ctxpolicy.tune.runner import TuneConfig, _storage_write, run_tune
from tests.tune.conftest import WASTEFUL


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


def test_ctrl_c_during_a_suggestion_finishes_its_write_and_keeps_the_study(
    traces3: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A trial's suggestions are storage writes too: a Ctrl-C that arrives in one is
    held until the write is done, and the run ends as interrupted with its trials
    (it used to end in optuna's ``StorageInternalError`` and no report)."""
    import optuna

    original = optuna.storages.RDBStorage._set_trial_param
    started: list[int] = []
    finished: list[int] = []

    def interrupted_write(self: Any, trial_id: int, *args: Any, **kwargs: Any) -> Any:
        started.append(trial_id)
        if len(started) == 12:  # a few trials in, like a person at a terminal
            os.kill(os.getpid(), signal.SIGINT)
        out = original(self, trial_id, *args, **kwargs)
        finished.append(trial_id)
        return out

    monkeypatch.setattr(optuna.storages.RDBStorage, "_set_trial_param", interrupted_write)
    cfg = TuneConfig(
        traces=traces3,
        policy_file=str(WASTEFUL),
        agent="wasteful",
        trials=40,
        workers=1,
        storage=f"sqlite:///{tmp_path / 'study.db'}",
        study_name="suggest",
    )
    result = run_tune(cfg, load_policy(WASTEFUL, "wasteful"))
    assert len(started) >= 12
    assert started == finished
    assert result.interrupted
    assert 1 <= len(result.candidates) < 40
    kept = optuna.load_study(study_name="suggest", storage=cfg.storage)
    assert not [t for t in kept.trials if t.state == optuna.trial.TrialState.RUNNING]
