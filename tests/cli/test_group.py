"""The click group: lazy subcommands, missing modules, no tracebacks."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from ctxpolicy.cli import LAZY_COMMANDS, LazyGroup, main

from .conftest import ROOT, subprocess_env


def test_help_lists_available_commands(runner: CliRunner) -> None:
    out = runner.invoke(main, ["--help"])
    assert out.exit_code == 0
    for name in ("validate", "explain", "convert", "schema", "plugins"):
        assert name in out.output


def test_future_commands_are_registered() -> None:
    assert LAZY_COMMANDS["simulate"] == "ctxpolicy.cli.simulate:simulate"
    assert LAZY_COMMANDS["snapshots"] == "ctxpolicy.cli.snapshots:snapshots"
    assert LAZY_COMMANDS["init-plugin"] == "ctxpolicy.cli.init_plugin:init_plugin"


def _group(lazy: dict[str, str]) -> click.Group:
    @click.group(cls=LazyGroup, lazy_commands=lazy)
    def g() -> None:
        pass

    return g


def test_missing_module_is_absent_not_a_crash() -> None:
    g = _group({"ghost": "ctxpolicy.cli.no_such_module:cmd", "schema": LAZY_COMMANDS["schema"]})
    r = CliRunner().invoke(g, ["--help"])
    assert r.exit_code == 0 and "ghost" not in r.output and "schema" in r.output
    r = CliRunner().invoke(g, ["ghost"])
    assert r.exit_code == 2 and "No such command" in r.output


def test_broken_module_reports_in_one_line() -> None:
    g = _group({"bad": "ctxpolicy.cli.output:not_there"})
    r = CliRunner().invoke(g, ["bad"])
    assert r.exit_code == 2
    assert "cannot load command" in r.output


def test_internal_error_is_one_line_exit_2() -> None:
    @click.group(cls=LazyGroup)
    def g() -> None:
        pass

    @g.command()
    def boom() -> None:
        raise RuntimeError("kaput")

    r = CliRunner().invoke(g, ["boom"])
    assert r.exit_code == 2
    assert r.output.strip() == "ctxpolicy: internal error: RuntimeError: kaput"


def test_bad_flag_is_usage_error(runner: CliRunner) -> None:
    assert runner.invoke(main, ["validate", "--no-such-flag", "x"]).exit_code == 2
    assert runner.invoke(main, ["nope"]).exit_code == 2


def test_python_m_entry_point() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ctxpolicy.cli", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=60,
    )
    assert r.returncode == 0 and "ctxpolicy" in r.stdout


@pytest.mark.parametrize(
    "args",
    [["plugins"], ["schema"], ["explain", "policies/agents.yaml", "--agent", "coding_agent"]],
)
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    """``ctxpolicy plugins | head -1``: the reader closes the pipe after one line; the
    command ends with exit 0 and nothing on stderr (it was `internal error:
    BrokenPipeError`, exit 2)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxpolicy.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=subprocess_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == b""
