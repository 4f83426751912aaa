"""Issue 22 item 5: an unknown component that a plugin which failed to load could have
provided is not reported as a mere typo: every output format names the plugin and its
error. The plugin is a real distribution (dist-info + entry point) whose import fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

POLICY = """\
ctxpolicy: 1
policies:
  default:
    model: gpt-4o
    pipeline:
      - {layer: trim_old, at: warning}
"""


@pytest.fixture
def broken_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "ctxpolicy_trim_old.py").write_text("import httpx_not_installed_anywhere\n")
    info = tmp_path / "ctxpolicy_trim_old-0.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ctxpolicy-trim-old\nVersion: 0.2\n"
    )
    (info / "entry_points.txt").write_text("[ctxpolicy]\nctxpolicy_trim_old = ctxpolicy_trim_old\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def run(env: dict[str, str], policy: Path, fmt: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxpolicy.cli", "validate", "--format", fmt, str(policy)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_failed_plugin_is_named_in_every_format(
    broken_env: dict[str, str], tmp_path: Path, fmt: str
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    proc = run(broken_env, policy, fmt)
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    if fmt in ("json", "sarif"):
        doc = json.loads(out)
        out = json.dumps(doc)  # the words must be in the data, not only somewhere
    assert "CTX102" in out and "trim_old" in out
    assert "plugin 'ctxpolicy_trim_old' failed to import" in out
    assert "httpx_not_installed_anywhere" in out  # the error itself
    assert "may provide it" in out


def test_no_failed_plugin_no_mention(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    proc = run(dict(os.environ), policy, "text")
    assert proc.returncode == 1
    assert "CTX102 unknown layer 'trim_old'" in proc.stdout
    assert "failed to" not in proc.stdout
