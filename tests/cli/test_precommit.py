"""The pre-commit setup documented in docs/cli.md works: ``pre-commit try-repo`` against
this repository (its uncommitted state included) in a fresh git repository, for both
hooks of ``.pre-commit-hooks.yaml``. A bad policy fails the commit with its diagnostic,
a good one passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PRE_COMMIT = shutil.which("pre-commit", path=str(BIN)) or shutil.which("pre-commit")

GOOD = "ctxpolicy: 1\npolicies:\n  default:\n    model: gpt-4o\n"
BAD = "ctxpolicy: 1\npolicies:\n  default:\n    model: gpt-4o\n    budgett: {}\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    (repo / "policies").mkdir(parents=True)
    (repo / "policies" / "good.yaml").write_text(GOOD)
    (repo / "policies" / "bad.yaml").write_text(BAD)
    (repo / "README.md").write_text("not a policy\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    return repo


def try_repo(
    project: Path, hook: str, *files: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    assert PRE_COMMIT, "pre-commit is part of the dev extra"
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        "PRE_COMMIT_HOME": str(project.parent / "pre-commit-home"),
    }
    if hook.endswith("-system"):  # the installed ctxpolicy runs this checkout's code
        env["PYTHONPATH"] = str(ROOT)
    else:
        env.pop("PYTHONPATH", None)
    return subprocess.run(
        [PRE_COMMIT, "try-repo", str(ROOT), hook, "--files", *files],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_system_hook_fails_on_a_bad_policy_and_passes_a_good_one(project: Path) -> None:
    bad = try_repo(
        project, "ctxpolicy-validate-system", "policies/good.yaml", "policies/bad.yaml", timeout=300
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "policies/bad.yaml:5:5: CTX101 unknown key 'budgett'" in bad.stdout
    good = try_repo(
        project, "ctxpolicy-validate-system", "policies/good.yaml", "README.md", timeout=300
    )
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout


def test_hooks_are_strict_a_warning_fails_the_commit(project: Path) -> None:
    """The hooks pass ``--strict`` (their default ``args``): a policy that does not do
    what it says (a tool rule an earlier glob shadows, CTX206, a warning) fails too."""
    (project / "policies" / "warn.yaml").write_text(
        GOOD + "    tools:\n      '*': {preprocess: head_tail}\n"
        "      read_file: {preprocess: head_tail}\n"
    )
    subprocess.run(["git", "add", "."], cwd=project, check=True)
    proc = try_repo(project, "ctxpolicy-validate-system", "policies/warn.yaml", timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "CTX206" in proc.stdout


@pytest.mark.slow
def test_python_hook_installs_from_the_repository(project: Path) -> None:
    """``language: python``: pre-commit builds its own environment from this repository
    (dependencies from PyPI, nothing else from the network)."""
    proc = try_repo(
        project, "ctxpolicy-validate", "policies/good.yaml", "policies/bad.yaml", timeout=900
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "policies/bad.yaml:5:5: CTX101 unknown key 'budgett'" in proc.stdout
