"""The example plugin package, installed for real (``make test`` pip-installs
examples/ctxpolicy-plugin-example), seen through entry points by the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ctxpolicy-plugin-example"
PLUGIN = "ctxpolicy_plugin_example"
DIST = "ctxpolicy-plugin-example"


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    names = {ep.name for ep in metadata.entry_points(group="ctxpolicy")}
    if PLUGIN not in names:
        pytest.fail(
            f"the example plugin is not installed: pip install -e {EXAMPLE} (make test does it)",
            pytrace=False,
        )


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("ctxpolicy")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ctxpolicy.cli"]
    full_env = {k: v for k, v in os.environ.items() if k != "CTXPOLICY_PLUGINS"}
    full_env.update(env or {})
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120
    )


def plugins_json(env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    proc = cli("plugins", "--json", env=env)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in report["plugins"]}


def test_listed_by_ctxpolicy_plugins() -> None:
    rc, report = plugins_json()
    assert rc == 0, report["problems"]
    plugin = by_name(report)[PLUGIN]
    assert plugin["builtin"] is False
    assert plugin["distribution"] == DIST
    assert plugin["version"] == "0.1.0"
    assert plugin["module"] == PLUGIN
    layers = {c["name"]: c for c in plugin["components"]["layer"]}
    assert set(layers["keep_errors"]["options"]) == {
        "error_patterns",
        "case_sensitive",
        "keep_recent_rounds",
    }
    assert [c["name"] for c in plugin["components"]["preprocessor"]] == ["html_text"]
    assert "keep_errors" in report["components"]["layer"]


def test_allowlist_hides_and_shows() -> None:
    _, hidden = plugins_json({"CTXPOLICY_PLUGINS": ""})
    assert PLUGIN not in by_name(hidden)
    assert "keep_errors" not in hidden["components"]["layer"]
    assert "drop_rounds" in hidden["components"]["layer"]  # built-ins always load
    _, shown = plugins_json({"CTXPOLICY_PLUGINS": PLUGIN})
    assert PLUGIN in by_name(shown)
    _, other = plugins_json({"CTXPOLICY_PLUGINS": "some_other_plugin"})
    assert PLUGIN not in by_name(other)


def test_options_in_schema_with_plugins() -> None:
    proc = cli("schema", "--plugins")
    assert proc.returncode == 0, proc.stderr
    defs = json.loads(proc.stdout)["definitions"]
    layer = next(v for k, v in defs.items() if "keep_errors" in k)
    assert set(layer["properties"]) == {"error_patterns", "case_sensitive", "keep_recent_rounds"}
    assert layer["additionalProperties"] is False
    assert '"minimum": 0' in json.dumps(layer["properties"]["keep_recent_rounds"])
    pre = next(v for k, v in defs.items() if "html_text" in k)
    assert {"max_chars", "keep_links", "only_if_html"} <= set(pre["properties"])
    plain = cli("schema")
    assert "keep_errors" not in plain.stdout  # the committed schema is built-ins only


POLICY = """\
ctxpolicy: 1
policies:
  default:
    model: {context_window: 32000}
    pipeline:
      - layer: keep_errors
        at: warning
        options:
          keep_recent_rounds: 2
          error_patterns: ["Traceback", "FAILED"]
      - {layer: drop_rounds, at: error}
    tools:
      fetch_url: {preprocess: html_text, options: {max_chars: 2000}}
"""


def test_policy_using_the_layer_validates(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(POLICY)
    proc = cli("validate", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_option_typo_gets_line_col_diagnostic(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(POLICY.replace("keep_recent_rounds: 2", "keep_recnt_rounds: 2"))
    proc = cli("validate", "--format", "json", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [diag] = [d for f in json.loads(proc.stdout)["files"] for d in f["diagnostics"]]
    # line 9, column 11 is where `keep_recnt_rounds` starts
    assert (diag["line"], diag["col"], diag["code"]) == (9, 11, "CTX101")
    assert "keep_recnt_rounds" in diag["message"]
    assert "did you mean 'keep_recent_rounds'" in diag["message"]
    human = cli("validate", str(path))
    assert human.returncode == 1
    assert f"{path}:9:11: CTX101 unknown key 'keep_recnt_rounds'" in human.stdout


def test_broken_plugin_is_named_and_the_rest_keep_working(tmp_path: Path) -> None:
    """A real distribution (dist-info + entry_points.txt) whose module raises at import."""
    (tmp_path / "broken_ctx_plugin.py").write_text('raise RuntimeError("boom at import")\n')
    info = tmp_path / "broken_ctx_plugin-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-ctx-plugin\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[ctxpolicy]\nbroken_ctx_plugin = broken_ctx_plugin\n")
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    }
    rc, report = plugins_json(env)
    assert rc == 1  # a problem is reported with a failing exit code
    [problem] = [p for p in report["problems"] if p["plugin"] == "broken_ctx_plugin"]
    assert problem["distribution"] == "broken-ctx-plugin"
    assert "boom at import" in problem["message"]
    plugins = by_name(report)
    assert PLUGIN in plugins and "layers.drop_rounds" in plugins
    assert "keep_errors" in report["components"]["layer"]
    # The human listing names it on stderr too.
    proc = cli("plugins", env=env)
    assert "broken_ctx_plugin" in proc.stderr and "broken-ctx-plugin" in proc.stderr


def test_example_has_its_own_tests_using_the_suites() -> None:
    text = "\n".join(p.read_text() for p in (EXAMPLE / "tests").glob("test_*.py"))
    assert "conformance.layer_suite(" in text and "conformance.preprocessor_suite(" in text
    assert (
        textwrap.dedent(
            """\
        [project.entry-points.ctxpolicy]
        ctxpolicy_plugin_example = "ctxpolicy_plugin_example"
        """
        )
        in (EXAMPLE / "pyproject.toml").read_text()
    )


def test_the_example_passes_its_own_tests() -> None:
    """The example's own tests (what its author runs) pass against this ctxpolicy."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
