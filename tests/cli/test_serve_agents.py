"""``ctxpolicy serve`` starts with the agents that resolve and names the others; it
refuses only when none does."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import subprocess_env

pytest.importorskip("uvicorn")

GOOD = """ctxpolicy: 1
policies:
  good: {model: gpt-4o}
  also_good: {model: gpt-4o-mini}
"""
BAD = "  broken: {model: gpt4o-mini}\n"


def _serve(policy: Path, timeout: float = 60) -> tuple[int | None, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxpolicy.cli",
            "serve",
            "--policy",
            str(policy),
            "--port",
            "0",
            "--upstream",
            "http://127.0.0.1:9",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if " on http://" in line:
                return None, "".join(lines)  # started
        return proc.wait(timeout=10), "".join(lines)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


def test_serves_the_agents_that_resolve_and_names_the_others(tmp_path: Path) -> None:
    policy = tmp_path / "agents.yaml"
    policy.write_text(GOOD + BAD)
    code, err = _serve(policy)
    assert code is None, err  # it started
    assert "CTX208 unknown model 'gpt4o-mini'" in err
    assert "not serving broken (errors above); serving also_good, good" in err
    assert "agents also_good, good on http://" in err


def test_refuses_when_no_agent_resolves(tmp_path: Path) -> None:
    policy = tmp_path / "agents.yaml"
    policy.write_text("ctxpolicy: 1\npolicies:\n" + BAD)
    code, err = _serve(policy)
    assert code == 1
    assert "no agent resolves without errors" in err
