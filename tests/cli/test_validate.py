"""``ctxpolicy validate``: files, directories, formats, exit codes, cold start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli import main
from ctxpolicy.cli.validate import collect_files

from .conftest import DATA, ROOT, default_policy, needs, subprocess_env

pytestmark = pytest.mark.usefixtures("in_root")


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_collect_files_recurses_and_skips() -> None:
    files = [p.relative_to(DATA).as_posix() for p in collect_files([DATA / "tree"])]
    assert files == ["tree/a.yaml", "tree/sub/b.toml"]  # no .hidden, README, *.expected.*


def test_collect_files_explicit_file_and_dedupe() -> None:
    f = DATA / "valid.yaml"
    assert list(collect_files([f, f, DATA / "tree" / "README.md"])) == [f, DATA / "tree/README.md"]


def test_missing_path_is_usage_error(runner: CliRunner) -> None:
    r = runner.invoke(main, ["validate", "does/not/exist.yaml"])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_no_path_is_usage_error(runner: CliRunner) -> None:
    assert runner.invoke(main, ["validate"]).exit_code == 2


def test_bad_format_is_usage_error(runner: CliRunner) -> None:
    assert runner.invoke(main, ["validate", "--format", "xml", rel(DATA)]).exit_code == 2


def test_directory_without_policies_is_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("x")
    assert runner.invoke(main, ["validate", str(tmp_path)]).exit_code == 2


# The tests below need the loader (ctxpolicy.policy.load / resolve).


def test_valid_files_exit_0(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["validate", rel(DATA / "valid.yaml"), rel(DATA / "valid.toml")])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1] == "2 files valid"


def test_shipped_policies_directory_exit_0(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["validate", "policies/"])
    assert r.exit_code == 0, r.output
    shipped = len(list(collect_files([ROOT / "policies"])))  # every shipped policy file
    assert shipped >= 3 and r.output.strip() == f"{shipped} files valid"
    r = runner.invoke(main, ["validate", "--strict", "policies/"])
    assert r.exit_code == 0, r.output


def test_unknown_key_has_position_and_hint(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["validate", rel(DATA / "unknown_key.yaml")])
    assert r.exit_code == 1
    first = r.output.splitlines()[0]
    assert first.startswith(f"{rel(DATA / 'unknown_key.yaml')}:5:5: CTX")
    assert "budgett" in first
    assert "budget" in r.output.split("\n", 1)[1]  # did-you-mean hint
    assert "1 error" in r.output.splitlines()[-1]


def test_problem_reported_once(runner: CliRunner) -> None:
    """Loader and schema both see the typo; the user sees it once."""
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["validate", "--format", "json", rel(DATA / "unknown_key.yaml")])
    doc = json.loads(r.output)
    diags = doc["files"][0]["diagnostics"]
    at_5_5 = [d for d in diags if (d["line"], d["col"]) == (5, 5)]
    assert len(at_5_5) == 1, diags


def test_bad_component_option(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["validate", rel(DATA / "bad_option.yaml")])
    assert r.exit_code == 1
    assert ":7:" in r.output.splitlines()[0], r.output


@pytest.mark.parametrize("name", ["broken.yaml", "broken.toml"])
def test_syntax_errors_exit_1_no_traceback(runner: CliRunner, name: str) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["validate", rel(DATA / name)])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\xff\xfe garbage \x89PNG",
        b"ctxpolicy: 1\n" + b"x" * (2 * 1024 * 1024),
        b"- - - -",
    ],
    ids=["empty", "binary", "2MiB", "list"],
)
def test_odd_inputs_never_traceback(runner: CliRunner, tmp_path: Path, content: bytes) -> None:
    needs("ctxpolicy.resolve.load")
    f = tmp_path / "odd.yaml"
    f.write_bytes(content)
    r = runner.invoke(main, ["validate", str(f)])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_strict_makes_warnings_fail(runner: CliRunner, tmp_path: Path) -> None:
    needs("ctxpolicy.resolve.load")
    # an earlier "*" shadows a later glob: a warning, not an error
    f = default_policy(
        tmp_path / "warn.yaml",
        "    model: {context_window: 32000}\n"
        "    tools:\n      '*': {preprocess: head_tail}\n      read_file: {preprocess: head_tail}\n",
    )
    r = runner.invoke(main, ["validate", "--format", "json", str(f)])
    doc = json.loads(r.output)
    if not doc["summary"]["warnings"] or doc["summary"]["errors"]:
        pytest.skip("loader reports no pure warning for a shadowed glob")
    assert r.exit_code == 0
    assert runner.invoke(main, ["validate", "--strict", str(f)]).exit_code == 1


def test_agent_option(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["validate", "--agent", "code_review_agent", rel(DATA / "valid.yaml")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["validate", "--agent", "no_such_agent", rel(DATA / "valid.yaml")])
    assert r.exit_code == 1, r.output


# --------------------------------------------------------------------------- subprocesses


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(script), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=120,
    )


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_real_subprocess_per_format(console_script: Path, fmt: str) -> None:
    needs("ctxpolicy.resolve.load")
    ok = _run(console_script, "validate", "--format", fmt, "policies/")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = _run(
        console_script,
        "validate",
        "--format",
        fmt,
        rel(DATA / "unknown_key.yaml"),
        rel(DATA / "valid.yaml"),
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Traceback" not in bad.stderr
    out = bad.stdout
    name = rel(DATA / "unknown_key.yaml")
    if fmt == "text":
        assert out.startswith(f"{name}:5:5: CTX")
        assert "in 1 file (2 checked)" in out.splitlines()[-1]
    elif fmt == "json":
        doc = json.loads(out)
        assert doc["valid"] is False and doc["summary"]["files"] == 2
    elif fmt == "github":
        assert out.startswith(f"::error file={name},line=5,col=5,title=CTX")
    else:
        log = json.loads(out)
        assert log["version"] == "2.1.0"
        region = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] == 5 and region["startColumn"] == 5
        assert json.loads(ok.stdout)["runs"][0]["results"] == []


def test_subprocess_usage_error_exit_2(console_script: Path) -> None:
    r = _run(console_script, "validate", "missing.yaml")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def _modules_imported_by_validate(files: list[str], banned: str) -> str:
    """Run ``ctxpolicy validate FILES`` in a fresh interpreter; ``EXIT <code> BAD
    <modules>`` with the imported modules for which the expression ``banned`` (over
    ``m``, a module name) is true."""
    code = (
        "import sys\n"
        f"sys.argv = ['ctxpolicy', 'validate', *{files!r}]\n"
        "from ctxpolicy.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
        f"bad = sorted(m for m in sys.modules if {banned})\n"
        "print('EXIT', code, 'BAD', ','.join(bad))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=120,
    )
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr


def test_validate_does_not_import_engine_or_tiktoken() -> None:
    needs("ctxpolicy.resolve.load")
    banned = (
        "m == 'tiktoken' or m.startswith('tiktoken.') or m == 'ctxpolicy.engine'"
        " or m.startswith('ctxpolicy.integrations.')"
    )
    assert _modules_imported_by_validate(["policies/agents.yaml"], banned) == "EXIT 0 BAD"


def test_validate_of_valid_files_does_not_import_jsonschema() -> None:
    """A valid file is recognised by the compiled schema check; jsonschema (and its
    referencing/rpds/attrs stack) is imported only to explain a failing file."""
    needs("ctxpolicy.resolve.load")
    banned = (
        "m.split('.')[0] in ('jsonschema', 'referencing', 'tiktoken') or m == 'ctxpolicy.engine'"
    )
    files = ["policies/agents.yaml", "policies/agents.toml"]
    assert _modules_imported_by_validate(files, banned) == "EXIT 0 BAD"


def test_help_shows_paths_as_required() -> None:
    from click.testing import CliRunner

    from ctxpolicy.cli import main

    out = CliRunner().invoke(main, ["validate", "--help"]).output
    usage = out.splitlines()[0]
    assert usage.endswith("PATHS..."), usage
    assert "[PATHS]" not in out
    assert "design" not in out and "CompressionConfig" in out
    r = CliRunner().invoke(main, ["validate"])
    assert r.exit_code == 2 and "Missing argument 'PATHS...'" in r.output
