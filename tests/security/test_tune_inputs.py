"""Issue 29 item 10: ``tune:`` entries that validated but crashed ``ctxpolicy tune``
(``thresholds.__class__``: ``getattr`` on any name; ``step: 1e-300``: 10^300 grid
points), and a ``mysql://`` storage without its driver (an internal ImportError).
Validation accepts only real tunable paths and sane ranges; a missing driver is a
clear error naming the package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctxpolicy.cli import main as cli
from tests.tune.conftest import WASTEFUL

BAD_SPACES = {
    "thresholds.__class__": "{low: 0.1, high: 0.9}",
    "thresholds.__dict__": "{low: 0.1, high: 0.9}",
    "budget.__init__": "{low: 0.1, high: 0.9}",
    "budget.model_config": "{low: 0.1, high: 0.9}",
    "pipeline[drop_rounds].__class__": "{low: 1, high: 4}",
    "tools[*]._private": "{low: 1, high: 4}",
    "thresholds.warning": "{low: 0.1, high: 0.9, step: 1e-300}",
    "budget.target": "{low: 0.0, high: .inf}",
    "thresholds.error": "{low: 0, high: 1, step: 1e-7}",
    "budget.safety_margin": "{low: -1e300, high: 1e300}",
}


def _policy(tmp_path: Path, path: str, rng: str) -> Path:
    pol = tmp_path / "p.yaml"
    pol.write_text(
        f"ctxpolicy: 1\ninclude: [{json.dumps(str(WASTEFUL))}]\npolicies:\n"
        f"  mine:\n    extends: wasteful\n    tune: {{space: {{'{path}': {rng}}}}}\n"
    )
    return pol


@pytest.mark.parametrize("path", sorted(BAD_SPACES))
def test_validate_rejects_bad_space_entries(tmp_path: Path, path: str) -> None:
    pol = _policy(tmp_path, path, BAD_SPACES[path])
    res = CliRunner().invoke(cli, ["validate", str(pol)])
    assert res.exit_code == 1, res.output
    assert f"{pol}:6:" in res.output
    assert "Traceback" not in res.output and "CTX000" not in res.output


def test_tune_rejects_them_before_running(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    pol = _policy(tmp_path, "thresholds.__class__", BAD_SPACES["thresholds.__class__"])
    res = CliRunner().invoke(cli, ["tune", "x.jsonl", "--policy", str(pol), "--agent", "mine"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output


def test_a_numeric_range_on_a_state_is_a_space_error(tmp_path: Path) -> None:
    from ctxpolicy.plugins import get_registry
    from ctxpolicy.resolve.load import load_policy
    from ctxpolicy.tune.space import SpaceError, build_space

    pol = _policy(tmp_path, "pipeline[drop_rounds].at", "{low: 1, high: 3}")
    policy = load_policy(str(pol), agent="mine")
    if not any(s.layer == "drop_rounds" for s in policy.pipeline):
        pytest.skip("wasteful has no drop_rounds step")
    with pytest.raises(SpaceError, match="choices"):
        build_space(policy, registry=get_registry())


@pytest.mark.parametrize(
    ("url", "package"),
    [
        ("mysql://u:hunter2@127.0.0.1/db", "mysqlclient"),
        ("mysql+pymysql://u:hunter2@127.0.0.1/db", "PyMySQL"),
        ("postgresql+psycopg2://u:hunter2@127.0.0.1/db", "psycopg2"),
    ],
)
def test_a_storage_without_its_driver_names_the_package(url: str, package: str) -> None:
    pytest.importorskip("optuna")
    from ctxpolicy.tune.runner import check_storage

    try:
        __import__({"mysqlclient": "MySQLdb", "PyMySQL": "pymysql"}.get(package, package))
        pytest.skip(f"{package} is installed here")
    except ImportError:
        pass
    with pytest.raises(RuntimeError) as info:
        check_storage(url)
    msg = str(info.value)
    assert f"pip install {package}" in msg or package in msg
    assert "hunter2" not in msg


def test_storage_errors_through_the_cli(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    from tests.shared_data import TRACES, require
    from tests.tune.conftest import SHORT

    trace = str(require(TRACES / SHORT[0]))
    for url in ("mysql://u:hunter2@127.0.0.1/db", "nosuchdb://x/y", "not a url"):
        res = CliRunner().invoke(
            cli,
            [
                "tune",
                trace,
                "--policy",
                str(WASTEFUL),
                "--agent",
                "wasteful",
                "--trials",
                "1",
                "--workers",
                "1",
                "--storage",
                url,
                "--out",
                str(tmp_path / "o"),
            ],
        )
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output and "hunter2" not in res.output
        assert "--storage" in res.output
