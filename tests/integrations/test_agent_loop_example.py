"""examples/agent_loop.py runs against the scripted server it starts itself."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip(
    "openai", reason="the 'openai' extra is not installed (pip install 'ctxpolicy[openai]')"
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def test_agent_loop_example_runs(capsys):
    spec = importlib.util.spec_from_file_location("agent_loop_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--steps", "12", "--window", "9000"]) == 0
    out = capsys.readouterr().out
    assert "answer: I have read the files I needed. Done." in out
    assert "rejected as too long" in out
