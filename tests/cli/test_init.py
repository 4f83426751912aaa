"""``ctxpolicy init``: a starter policy that validates and runs, from package data,
anywhere; never overwriting without --force."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from ctxpolicy.cli import main
from ctxpolicy.cli.init import AGENTS, render_starter
from ctxpolicy.policy.catalogue import builtin_models
from ctxpolicy.policy.load import load_document
from ctxpolicy.resolve.load import load_policy, validate_file

from .conftest import ROOT


@pytest.mark.parametrize("kind", sorted(AGENTS))
def test_every_starter_validates_strictly_with_every_catalogue_model(
    kind: str, tmp_path: Path
) -> None:
    """No diagnostic at all (not even a warning) for any kind and any built-in model:
    the budget is written in shares of the window so it fits them all."""
    for model in builtin_models():
        path = tmp_path / f"{model}.yaml"
        path.write_text(render_starter(kind, model), encoding="utf-8")
        assert validate_file(path, env={}) == [], (kind, model)
        policy = load_policy(path, AGENTS[kind], env={})
        assert policy.model_name == model


def test_init_writes_policy_and_schema_that_validate(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(main, ["init", "--kind", "data", "--model", "claude-sonnet-4-5", "proj"])
    assert r.exit_code == 0, r.output
    assert "wrote proj/policies/agents.yaml (agents: default, data_analysis_agent;" in r.output
    assert "cd proj && ctxpolicy validate --strict policies/" in r.output
    policy = tmp_path / "proj" / "policies" / "agents.yaml"
    text = policy.read_text(encoding="utf-8")
    # the modeline points at the schema written beside it
    first = text.splitlines()[0]
    assert first == "# yaml-language-server: $schema=../schemas/ctxpolicy.schema.json"
    schema_path = (policy.parent / first.split("$schema=", 1)[1]).resolve()
    assert schema_path == (tmp_path / "proj" / "schemas" / "ctxpolicy.schema.json").resolve()
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    loaded, diags = load_document(str(policy))
    assert loaded is not None and not diags
    jsonschema.Draft7Validator(schema).validate(loaded.data)
    assert "model: claude-sonnet-4-5" in text
    v = runner.invoke(main, ["validate", "--strict", "proj/policies/"])
    assert v.exit_code == 0, v.output


def test_init_refuses_to_overwrite_without_force(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policies").mkdir()
    mine = tmp_path / "policies" / "agents.yaml"
    mine.write_text("my own policy\n")
    r = runner.invoke(main, ["init"])
    assert r.exit_code == 1
    assert "policies/agents.yaml already exist(s); nothing written" in r.output
    assert mine.read_text() == "my own policy\n"
    assert not (tmp_path / "schemas").exists()
    r = runner.invoke(main, ["init", "--force"])
    assert r.exit_code == 0, r.output
    assert "coding_agent" in mine.read_text()


def test_init_unknown_model_is_a_usage_error_with_a_suggestion(
    runner: CliRunner, tmp_path: Path
) -> None:
    r = runner.invoke(main, ["init", "--model", "gpt4o-mini", str(tmp_path)])
    assert r.exit_code == 2
    assert "did you mean 'gpt-4o-mini'?" in r.output
    assert not (tmp_path / "policies").exists()


def test_copied_agent_loop_runs_from_a_starter(tmp_path: Path) -> None:
    """examples/agent_loop.py copied out of the clone, next to a `ctxpolicy init`
    policy, runs against the scripted server (it used to fail with a 500 from the
    server: its scripted model listed the files of the clone it was no longer in)."""
    pytest.importorskip("openai")
    shutil.copy(ROOT / "examples" / "agent_loop.py", tmp_path / "agent_loop.py")
    bare = subprocess.run(
        [sys.executable, "agent_loop.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert bare.returncode == 2 and "run `ctxpolicy init` first" in bare.stdout
    init = subprocess.run(
        [sys.executable, "-m", "ctxpolicy.cli", "init"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert init.returncode == 0, init.stderr
    proc = subprocess.run(
        [sys.executable, "agent_loop.py", "--steps", "40"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "answer: I have read the files I needed. Done." in proc.stdout
    # no HTTP 500 from the server (a number such as "15009 tokens" is not one)
    assert not re.search(r"(?<!\d)500(?!\d)", proc.stdout + proc.stderr)
