"""Issue 19 item 15: a summarizer that never returns neither piles up threads nor keeps
the process from exiting.

The attack runs in a real subprocess: a session whose summarizer blocks forever on an
Event nobody sets, ``prepare`` called many times, then a normal exit. Before the fix
every call left one more ``ThreadPoolExecutor`` worker behind and ``atexit`` joined
them, so the process never exited.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from ctxpolicy.layers.bounded import CallBusy, CallTimeout, call_bounded, hung_calls

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    from ctxpolicy.engine import Session, economics
    from tests.engine_helpers import conversation, make_policy

    economics.OPTIONAL_SHARE = 0.0  # the cache alone decides: the summary is asked for

    forever = threading.Event()
    calls = []

    def hang(request):
        calls.append(1)
        forever.wait()  # never set: the summary never returns
        return "never"

    policy = make_policy(
        pipeline=[{"layer": "summarize", "at": "warning",
                   "options": {"keep_recent_rounds": 2, "max_failures": 1000,
                               "timeout_s": 0.2}}],
        model={"context_window": 12000, "max_output_tokens": 1000,
               "tokenizer": "cl100k_base"},
    )
    sessions = [Session(policy, summarizer=hang, tool_rules_in_prepare=False) for _ in range(2)]
    baseline = threading.active_count()
    msgs = conversation(6, 3000)
    counts = []
    for _ in range(8):
        for s in sessions:
            assert s.prepare(msgs) == msgs  # a failed summary leaves history untouched
        counts.append(threading.active_count())
    types = [e["type"] for s in sessions for e in s.events]
    print(json.dumps({"baseline": baseline, "threads": counts, "calls": len(calls),
                      "hung": types.count("summarizer.hung"),
                      "busy": types.count("summarizer.busy"),
                      "failed": types.count("summarizer.failed")}))
    sys.stdout.flush()
    """
)


def test_hung_summarizer_does_not_leak_threads_or_block_exit() -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,  # generous: a hang here is the bug (the process cannot exit)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # one hung thread per summarizer (two sessions), however many calls were made
    assert report["threads"] == [report["baseline"] + 2] * 8, report
    assert report["calls"] == 2, "a hung summarizer is never called again while it hangs"
    assert report["hung"] == 2
    assert report["busy"] == 14
    assert report["failed"] == 16
    assert time.monotonic() - started < 110


def test_busy_owner_fails_fast_and_recovers_when_the_call_returns() -> None:
    release = threading.Event()
    owner = object()
    before = hung_calls()
    try:
        call_bounded(owner, release.wait, 0.05)
    except CallTimeout:
        pass
    else:  # pragma: no cover - the call must time out
        raise AssertionError("no timeout")
    assert hung_calls() == before + 1
    t0 = time.monotonic()
    try:
        call_bounded(owner, lambda: "x", 5.0)
    except CallBusy as exc:
        assert exc.hung_for >= 0
    else:  # pragma: no cover
        raise AssertionError("a second call started while the first hangs")
    assert time.monotonic() - t0 < 1.0, "a busy owner fails fast"
    # another owner is not affected
    assert call_bounded(object(), lambda: 42, 5.0) == 42
    release.set()
    deadline = time.monotonic() + 10
    while hung_calls() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hung_calls() == before
    assert call_bounded(owner, lambda: "back", 5.0) == "back"


def test_exceptions_of_the_call_propagate_unchanged() -> None:
    def boom() -> None:
        raise ValueError("provider said no")

    try:
        call_bounded(object(), boom, 5.0)
    except ValueError as exc:
        assert str(exc) == "provider said no"
    else:  # pragma: no cover
        raise AssertionError("exception swallowed")
