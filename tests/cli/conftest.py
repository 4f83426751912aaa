"""Shared fixtures of the CLI tests."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
BIN = Path(sys.executable).parent
CTXPOLICY = BIN / "ctxpolicy"


def needs(module: str) -> None:
    """Import a module these tests rely on (loader, compat): fail loudly, never skip."""
    importlib.import_module(module)


def default_policy(path: Path, body: str) -> Path:
    """Write a policy file at ``path`` whose one agent, ``default``, is ``body`` (YAML
    indented by four spaces)."""
    path.write_text("ctxpolicy: 1\npolicies:\n  default:\n" + body)
    return path


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)
    return ROOT


@pytest.fixture
def console_script() -> Path:
    if not CTXPOLICY.exists():
        pytest.skip(f"console script not installed at {CTXPOLICY}")
    return CTXPOLICY


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CTXPOLICY_PLUGINS", None)
    return env
