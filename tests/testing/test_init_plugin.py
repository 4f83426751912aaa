"""`ctxpolicy init-plugin` writes a package skeleton that passes its own tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli import main
from ctxpolicy.cli.init_plugin import names_for


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["init-plugin", *args])
    return result.exit_code, result.output


def test_names() -> None:
    assert names_for("trim-old") == {
        "dist": "ctxpolicy-trim-old",
        "package": "ctxpolicy_trim_old",
        "plugin": "ctxpolicy_trim_old",
        "layer": "trim_old",
        "cls": "TrimOld",
    }
    assert names_for("ctxpolicy-Trim_Old")["dist"] == "ctxpolicy-trim-old"
    assert names_for("x", layer="keep_it")["layer"] == "keep_it"


def test_generated_package_passes_its_own_tests(tmp_path: Path) -> None:
    code, out = run("trim-old", "--dir", str(tmp_path))
    assert code == 0, out
    root = tmp_path / "ctxpolicy-trim-old"
    assert f"created {root}" in out
    for rel in (
        "pyproject.toml",
        "README.md",
        "ctxpolicy_trim_old/__init__.py",
        "ctxpolicy_trim_old/layer.py",
        "tests/test_layer.py",
    ):
        assert (root / rel).is_file(), rel
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "ctxpolicy-trim-old"
    assert meta["project"]["entry-points"]["ctxpolicy"] == {
        "ctxpolicy_trim_old": "ctxpolicy_trim_old"
    }
    assert 'conformance.layer_suite("trim_old")' in (root / "tests/test_layer.py").read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CTXPOLICY_PLUGINS")}
    env["PYTHONPATH"] = str(root)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
    compile_ok = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(root)], capture_output=True, text=True
    )
    assert compile_ok.returncode == 0


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    assert run("abc", "--dir", str(tmp_path))[0] == 0
    code, out = run("abc", "--dir", str(tmp_path))
    assert code == 1 and "--force" in out
    assert run("abc", "--dir", str(tmp_path), "--force")[0] == 0


@pytest.mark.parametrize("bad", ["9lives", "has space", "semi;colon"])
def test_bad_names_are_usage_errors(tmp_path: Path, bad: str) -> None:
    code, out = run(bad, "--dir", str(tmp_path))
    assert code == 2, out
    assert not any(tmp_path.iterdir())


def test_bad_layer_name(tmp_path: Path) -> None:
    code, _ = run("ok", "--dir", str(tmp_path), "--layer", "class")
    assert code == 2


def test_name_of_a_builtin_layer_gets_a_distinct_layer_name(tmp_path: Path) -> None:
    """`init-plugin summarize` must not generate a second `summarize` layer (a clash
    with the built-in that `ctxpolicy plugins` would report as a problem)."""
    from ctxpolicy.plugins import get_registry

    builtin = set(get_registry().names("layer"))
    assert "summarize" in builtin
    names = names_for("summarize")
    assert names["layer"] == "summarize_custom" and names["cls"] == "SummarizeCustom"
    assert names["dist"] == "ctxpolicy-summarize"
    for layer in builtin:
        assert names_for(layer)["layer"] not in builtin
    code, out = run("summarize", "--dir", str(tmp_path))
    assert code == 0, out
    assert "layer 'summarize_custom'" in out
    text = (tmp_path / "ctxpolicy-summarize" / "ctxpolicy_summarize" / "layer.py").read_text()
    assert 'name = "summarize_custom"' in text


def test_explicit_layer_name_that_clashes_is_refused(tmp_path: Path) -> None:
    code, out = run("x", "--layer", "drop_rounds", "--dir", str(tmp_path))
    assert code == 2
    assert "already registered" in out and not (tmp_path / "ctxpolicy-x").exists()


def test_generated_files_link_the_project_and_hold_no_local_path(tmp_path: Path) -> None:
    """The README linked a bare https://github.com/ and named the absolute path of the
    clone it was generated from; every generated file now points at the project only."""
    from ctxpolicy.cli.init_plugin import PROJECT_URL

    assert run("trim-old", "--dir", str(tmp_path))[0] == 0
    root = tmp_path / "ctxpolicy-trim-old"
    here = str(Path(__file__).resolve().parents[2])
    for path in root.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert here not in text and str(tmp_path) not in text, path
            assert "https://github.com/)" not in text, path
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert f"[ctxpolicy]({PROJECT_URL})" in readme
    assert f"pip install 'ctxpolicy @ git+{PROJECT_URL}'" in readme
    assert f"({PROJECT_URL}/blob/main/docs/plugins.md)" in readme
    assert "not on a package index yet" in readme
