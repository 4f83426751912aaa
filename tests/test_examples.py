"""The examples print the numbers their pages quote (docs/integrations/openai.md,
anthropic.md, index.md for examples/agent_loop.py): each is run as a user would."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _complete_example(page: str) -> str:
    text = (REPO / "docs" / "integrations" / page).read_text(encoding="utf-8")
    section = text.split("## Complete example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _run(args: list[str]) -> str:
    proc = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=180, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_openai_page(tmp_path: Path) -> None:
    page = (REPO / "docs" / "integrations" / "openai.md").read_text(encoding="utf-8")
    script = tmp_path / "openai_example.py"
    script.write_text(_complete_example("openai.md"))
    out = _run([str(script)])
    assert "1 rejection(s); 8000 tokens learned" in out
    assert "It prints `1 rejection(s); 8000 tokens learned`" in page


def test_anthropic_page(tmp_path: Path) -> None:
    script = tmp_path / "anthropic_example.py"
    script.write_text(
        _complete_example("anthropic.md")
        + '\nprint("learned", session.budget().window, "stats", session.stats.to_dict()["reactive"])\n'
    )
    out = _run([str(script)])
    assert out.startswith("1 rejection(s);"), out
    assert "learned 8000 stats 1" in out


def test_agent_loop() -> None:
    page = (REPO / "docs" / "integrations" / "index.md").read_text(encoding="utf-8")
    out = _run([str(REPO / "examples" / "agent_loop.py")])
    for quoted in ("reactive retries 1", "1 rejected as too long", "window learned: 8000 tokens"):
        assert quoted in out, out
        assert f"`{quoted}`" in page
