"""The install works as the docs write it: the wheel and sdist build, the wheel
installs with an extra into a fresh virtualenv and its ``ctxpolicy`` runs, and a
plugin made by ``ctxpolicy init-plugin`` installs beside that ctxpolicy.

Bounded (well under a minute): the fresh virtualenv gets no pip of its own (this
environment's pip installs into it with ``--python``) and finds the dependencies in
this environment's site-packages through a ``.pth`` line placed after its own
site-packages, so nothing is downloaded; the wheel itself is a real install into the
fresh environment, and everything imported from ``ctxpolicy`` comes from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            "--sdist",
            "--wheel",
            "--outdir",
            str(out),
        ],
        REPO,
    )
    return out


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> tuple[Path, dict[str, str]]:
    """A fresh virtualenv with the built wheel installed (extra ``openai``)."""
    root = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=False).create(root)
    py = root / "bin" / "python"
    site = Path(
        _run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root
        ).strip()
    )
    # the dependencies of this environment, after the fresh site-packages
    (site / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(dist.glob("ctxpolicy-*.whl"))
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            # the test's own environment (on the path through zz_deps.pth) may hold an
            # editable ctxpolicy: never taken as "already satisfied", never uninstalled
            "--ignore-installed",
            "--no-deps",
            "--no-index",
            f"{wheel}[openai]",
        ],
        root,
    )
    env = {**os.environ, "CTXPOLICY_PLUGINS": "", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    return root, env


def test_sdist_and_wheel_hold_the_package(dist: Path) -> None:
    wheel = next(dist.glob("ctxpolicy-*.whl"))
    sdist = next(dist.glob("ctxpolicy-*.tar.gz"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "ctxpolicy/__init__.py" in names
    assert any(n.startswith("ctxpolicy/data/") for n in names)  # the built-in catalogue
    for page in ("dashboard.html", "dashboard.js", "dashboard.css"):  # the dashboard's page
        assert f"ctxpolicy/observe/static/{page}" in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Provides-Extra: openai" in text
    assert sdist.stat().st_size > 10_000


def test_wheel_in_a_fresh_virtualenv_validates_and_runs(
    fresh: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, env = fresh
    py = str(root / "bin" / "python")
    where = _run([py, "-c", "import ctxpolicy, openai; print(ctxpolicy.__file__)"], tmp_path, env)
    assert where.startswith(str(root)), where  # the wheel's copy, not the clone
    out = _run([str(root / "bin" / "ctxpolicy"), "validate", str(REPO / "policies")], tmp_path, env)
    assert "valid" in out
    out = _run(
        [
            str(root / "bin" / "ctxpolicy"),
            "explain",
            str(REPO / "policies" / "agents.yaml"),
            "--agent",
            "coding_agent",
        ],
        tmp_path,
        env,
    )
    assert "trigger" in out
    # a missing extra's hint names what installs it here: the same wheel, not the index
    hint = _run(
        [py, "-c", "from ctxpolicy._install import extra_hint; print(extra_hint('otel'))"],
        tmp_path,
        env,
    )
    assert hint.strip().startswith("pip install '") and ".whl[otel]'" in hint, hint
    # an example of the docs, run by the installed package
    out = _run([py, str(REPO / "examples" / "agent_loop.py")], tmp_path, env)
    assert "rejected as too long" in out


def test_generated_plugin_installs_beside_the_local_ctxpolicy(
    fresh: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, env = fresh
    ctx = str(root / "bin" / "ctxpolicy")
    _run([ctx, "init-plugin", "trim-old", "--dir", str(tmp_path)], tmp_path, env)
    plugin = tmp_path / "ctxpolicy-trim-old"
    readme = (plugin / "README.md").read_text()
    assert "not on a package index yet" in readme
    # as its README says: ctxpolicy first (done: the wheel), then the plugin beside it
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(root / "bin" / "python"),
            "install",
            "--no-index",
            "--no-build-isolation",
            f"{plugin}[test]",
        ],
        tmp_path,
        env,
    )
    env = {**env, "CTXPOLICY_PLUGINS": "ctxpolicy_trim_old"}
    out = _run([ctx, "plugins"], tmp_path, env)
    assert "trim_old" in out
    _run(
        [
            str(root / "bin" / "python"),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(plugin / "tests"),
        ],
        plugin,
        env,
    )
